"""`lakehouse dbt loop`: its interval, its cadence, its records and its stop, with a stand-in for
dbt's programmatic runner (the real one, with Spark, is exercised by
tests/integration/test_incremental_models.py); and the touched-days predicates of the
quality reconciliations."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import date
from types import SimpleNamespace

import pytest

from expectations.suites import TouchedDays, day_predicates
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings
from lakehouse.operations import dbt as dbt_ops
from tests.conftest import REPO_ROOT


@pytest.mark.parametrize("text, seconds", [("30s", 30), ("5m", 300), ("1h", 3600), ("90", 90), ("500ms", 0.5),
                                           ("2 minutes", 120)])
def test_interval(text, seconds):
    assert dbt_ops.interval_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "0s", "-5s", "5 parsecs"])
def test_bad_interval_is_a_user_error(text):
    with pytest.raises(LakehouseError, match="invalid interval"):
        dbt_ops.interval_seconds(text)


def test_bad_interval_is_one_error_line(tmp_path):
    env = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "lakehouse.commands.cli", "dbt", "loop", "--every", "soon"],
                            capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == ["error: invalid interval 'soon': use e.g. 30s, 5m, 1h"]


class FakeRunner:
    """dbtRunner's shape: invoke(args) -> a result with success, exception, result.results."""

    invocations: list[list[str]] = []
    failing_runs: set[int] = set()

    def __init__(self, manifest=None, callbacks=None):
        self.manifest = manifest
        self.callbacks = callbacks or []

    def invoke(self, args):
        FakeRunner.invocations.append(args)
        if args[0] == "parse":
            return SimpleNamespace(success=True, exception=None, result="manifest")
        number = sum(1 for a in FakeRunner.invocations if a[0] != "parse")
        node = SimpleNamespace(resource_type="model", name="user_events")
        ok = number not in FakeRunner.failing_runs
        return SimpleNamespace(success=ok, exception=None if ok else RuntimeError("model user_events failed"),
                               result=SimpleNamespace(results=[SimpleNamespace(node=node, status="success",
                                                                               execution_time=1.234)]))


@pytest.fixture
def fake_dbt(monkeypatch, tmp_path):
    import dbt.cli.main

    FakeRunner.invocations, FakeRunner.failing_runs = [], set()
    monkeypatch.setattr(dbt.cli.main, "dbtRunner", FakeRunner)
    monkeypatch.setattr(dbt_ops, "_spark_application", lambda: "local-1")
    # the quality gate (lakehouse/operations/quality_gate.py) reads real tables: here it found
    # nothing held, unless a test says otherwise
    FakeRunner.gate = None
    monkeypatch.setattr(dbt_ops, "check_and_publish", lambda *args: FakeRunner.gate)
    saved = dict(os.environ)  # run_loop points this process's environment at the lakehouse
    yield Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)})
    os.environ.clear()
    os.environ.update(saved)


def test_loop_parses_once_runs_on_its_cadence_and_records_each_run(fake_dbt, tmp_path):
    record = tmp_path / "runs.jsonl"
    runs = dbt_ops.run_loop(fake_dbt, 0.01, ["run", "-s", "user_events"], runs=3, record=record,
                            stop=threading.Event())
    assert [a[0] for a in FakeRunner.invocations] == ["parse", "run", "run", "run"]
    assert all(a[:3] == ["run", "-s", "user_events"] and "--project-dir" in a for a in FakeRunner.invocations[1:])
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert lines == runs and [r["run"] for r in runs] == [1, 2, 3]
    assert runs[0]["models"] == {"user_events": {"status": "success", "seconds": 1.23}}
    assert all(r["success"] and r["spark_application"] == "local-1" for r in runs)
    assert (tmp_path / "locks" / "dbt-tables.lock").exists()  # each run took the dbt-tables lock


def test_a_run_the_quality_gate_kept_is_a_failed_run_with_its_line(fake_dbt, caplog):
    from lakehouse.operations.quality_gate import GateOutcome

    FakeRunner.gate = GateOutcome("audit_x", ("silver.user_events",), None, published=False,
                                  error="not published: 1 critical quality check(s) failed on the branch (...)")
    runs = dbt_ops.run_loop(fake_dbt, 0.01, ["run"], runs=2, stop=threading.Event())
    assert [r["success"] for r in runs] == [False, False]
    assert runs[0]["error"].startswith("not published: 1 critical quality check(s) failed")
    assert "dbt loop run 1: FAILED" in caplog.text and "not published: 1 critical" in caplog.text


def test_a_failed_run_is_reported_and_the_loop_goes_on_unless_fail_fast(fake_dbt, caplog):
    FakeRunner.failing_runs = {1}
    runs = dbt_ops.run_loop(fake_dbt, 0.01, ["run"], runs=2, stop=threading.Event())
    assert [r["success"] for r in runs] == [False, True]
    assert runs[0]["error"] == "model user_events failed"
    (failed,) = [r for r in caplog.records if r.getMessage().startswith("dbt loop run 1: FAILED")]
    # the run's figures ride on the line as fields (JSON logs)
    assert (failed.levelname, failed.run, failed.success, failed.error) == ("ERROR", 1, False, runs[0]["error"])
    assert failed.counts == {runs[0]["models"]["user_events"]["status"]: 1}

    FakeRunner.invocations, FakeRunner.failing_runs = [], {1}
    runs = dbt_ops.run_loop(fake_dbt, 0.01, ["run"], runs=5, fail_fast=True, stop=threading.Event())
    assert [r["success"] for r in runs] == [False]


def test_a_stop_lets_no_new_run_start(fake_dbt):
    stop = threading.Event()
    timer = threading.Timer(0.3, stop.set)
    timer.start()
    runs = dbt_ops.run_loop(fake_dbt, 60, ["run"], stop=stop)  # the second run would start a minute later
    timer.join()
    assert len(runs) == 1


def test_touched_days_become_day_ranges_and_a_date_list():
    scope = TouchedDays(source="silver.user_events", silver_column="event_at", gold_column="event_date")
    days = [date(2026, 11, 20), date(2026, 11, 21), date(2026, 11, 23), None]
    values = day_predicates(scope, days)
    assert values["silver_days"] == (
        "(event_at >= timestamp'2026-11-20 00:00:00' and event_at < timestamp'2026-11-22 00:00:00') or "
        "(event_at >= timestamp'2026-11-23 00:00:00' and event_at < timestamp'2026-11-24 00:00:00') or "
        "event_at is null")
    assert values["gold_days"] == ("event_date in (date'2026-11-20', date'2026-11-21', date'2026-11-23') or "
                                   "event_date is null")
    assert values["scope"] == "touched days 2026-11-20..2026-11-23 (3) and no date"
    assert day_predicates(scope, []) == {"gold_days": "false", "silver_days": "false", "scope": "no touched day"}
    assert day_predicates(scope, None) == {"gold_days": "true", "silver_days": "true", "scope": "all days"}


def test_the_loops_dbt_lines_are_the_projects_dated_log_lines(tmp_path):
    """Real dbt (a parse and an `ls`: no Spark) in the loop: its lines come through the project's
    logging, JSON here, dated, instead of dbt's `HH:MM:SS` console; standard output stays empty."""
    env = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path), "DBT_TARGET_PATH": str(tmp_path / "target")}
    result = subprocess.run([sys.executable, "-m", "lakehouse.commands.cli", "--log-format", "json", "dbt", "loop",
                             "--every", "1s", "--runs", "1", "ls", "--select", "user_events"],
                            capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=300)
    assert result.returncode == 0 and result.stdout == "", result.stdout + result.stderr
    lines = [json.loads(line) for line in result.stderr.splitlines()]
    assert all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    assert any(line["logger"] == "dbt" and line["message"].startswith("Running with dbt=") for line in lines)
    assert any(line["logger"] == "dbt" and line["message"] == "lakehouse.silver.user_events" for line in lines)
    (run,) = [line for line in lines if line["logger"] == "lakehouse.dbt"]
    assert run["message"].startswith("dbt loop run 1: success") and (run["run"], run["success"]) == (1, True)


def test_rows_written_are_main_s_commits_since_the_head_before_the_run_whatever_their_time(tmp_path, monkeypatch):
    """A model's rows written (the loop's metric) are what main's commits after the table's head
    before the run added, found by parent links. A commit from a host whose clock is 30 s behind
    carries a time before the run started: counted by commit time, its rows were not."""
    import time

    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse")
    catalog.create_namespace("gold")
    table = catalog.create_table("gold.mart", pa.schema([("n", pa.int64())]))
    table.append(pa.table({"n": list(range(10))}))
    before_run = table.current_snapshot().snapshot_id
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() - 30)  # the run's host: 30 s behind
    table.append(pa.table({"n": list(range(4))}))
    table.append(pa.table({"n": list(range(3))}))
    monkeypatch.undo()
    table = catalog.load_table("gold.mart")
    newest, previous = table.current_snapshot(), table.metadata.snapshot_by_id(before_run)
    assert newest.timestamp_ms < previous.timestamp_ms  # the run's commits look older
    assert dbt_ops.rows_added_since(table, before_run) == 7
    assert dbt_ops.rows_added_since(table, None) == 17  # a table the run created (or replaced)
