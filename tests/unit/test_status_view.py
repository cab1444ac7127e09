"""`lakehouse status`: the pure summaries and formatting, and a lakehouse with nothing in it yet."""

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from ingestion import checkpoint as c
from lakehouse.core import maintenance_log
from lakehouse.core.local_kafka import free_port
from lakehouse.core.settings import Settings
from lakehouse.operations import status as s


def test_batch_records_and_rate():
    assert c.batch_records({0: 150, 1: 80}, {0: 100}) == 130  # a partition new to this batch started at 0
    assert c.batch_records({0: 150}, None) is None  # the previous offsets file was purged
    assert s.batch_rate(100, 10.0, 12.0) == (2.0, 50.0)
    assert s.batch_rate(100, 12.0, 10.0) == (None, None)  # a clock step is no duration
    assert s.batch_rate(None, 0.0, 4.0) == (4.0, None)


def test_initial_offsets_file_is_read_past_its_version_line():
    text = 'v1\n\0{"purchases":{"0":5,"2":7}}'
    assert c.parse_initial_offsets(text) == {"purchases": {0: 5, 2: 7}}
    assert c.parse_initial_offsets("v1\nnot json") == {}


def test_dead_letters_pending_by_reason_and_replayed_by_stream():
    pending, replayed = s.dead_letter_counts(
        ["a", "a", "a", "b"], ["CORRUPT_PAYLOAD", "UNKNOWN_SCHEMA_ID", "CORRUPT_PAYLOAD", "X"],
        [False, True, False, True])
    assert pending == {"a": {"CORRUPT_PAYLOAD": 2}} and replayed == {"a": 1, "b": 1}


def test_table_figures_from_a_snapshot_summary():
    figures = s.table_figures({"total-records": "1000", "total-data-files": "3", "total-delete-files": "1",
                               "total-files-size": "4096"})
    assert figures == {"rows": 1000, "data_files": 3, "delete_files": 1, "total_bytes": 4096,
                       "average_file_bytes": 1024}
    assert s.table_figures({})["average_file_bytes"] is None


def test_the_last_real_maintenance_per_table_wins():
    lines = [json.dumps({"table": "bronze.a", "finished_at": "1", "dry_run": False}), "garbage",
             json.dumps({"table": "bronze.a", "finished_at": "2", "dry_run": False}),
             json.dumps({"table": "bronze.a", "finished_at": "3", "dry_run": True})]
    assert s.last_maintenance_by_table(lines)["bronze.a"]["finished_at"] == "2"


def test_dbt_run_results_summary(tmp_path):
    path = tmp_path / "run_results.json"
    path.write_text(json.dumps({
        "metadata": {"generated_at": "2026-11-23T10:00:00Z", "dbt_version": "1.11.0"},
        "args": {"which": "run"}, "elapsed_time": 42.25,
        "results": [{"unique_id": "model.x.a", "status": "success"}, {"unique_id": "model.x.b", "status": "error"}],
    }))
    dbt = s.dbt_status(path)
    assert dbt["command"] == "dbt run" and dbt["counts"] == {"error": 1, "success": 1}
    assert dbt["failed"] == ["model.x.b"] and dbt["elapsed_seconds"] == 42.2
    text = s.format_dbt(dbt)
    assert "dbt run at 2026-11-23 10:00:00Z" in text and "failed:   model.x.b" in text
    assert s.dbt_status(tmp_path / "missing.json") is None


def test_the_latest_quality_run_decides_the_verdict():
    early, late = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
    rows = [{"run_id": "r1", "run_at": early, "severity": "critical", "success": False, "suite": "x",
             "expectation": "e", "column_name": None},
            {"run_id": "r2", "run_at": late, "severity": "critical", "success": True, "suite": "x",
             "expectation": "e", "column_name": None},
            {"run_id": "r2", "run_at": late, "severity": "warning", "success": False, "suite": "y",
             "expectation": "w", "column_name": "c"}]
    verdict = s.quality_verdict(rows)
    assert verdict["run_id"] == "r2" and verdict["verdict"] == "PASSED" and verdict["warnings_failed"] == 1
    assert s.quality_verdict(rows[:1])["critical_failures"] == ["x: e"]
    assert s.quality_verdict([]) is None


def test_the_report_has_every_part_with_aligned_numbers():
    report = s.StatusReport(
        streams=[s.StreamStatus("purchases", "purchases", "bronze.purchases", last_batch=7,
                                last_batch_at="2026-11-23T10:00:00+00:00", last_batch_records=1200,
                                last_batch_rate=600.0, lag=0, bronze_rows=123456,
                                dead_letters={"UNKNOWN_SCHEMA_ID": 4}, dead_letters_replayed=2)],
        tables=[s.TableStatus("bronze.purchases", rows=123456, data_files=4, delete_files=0,
                              average_file_bytes=3 * 1024 * 1024, snapshots=9,
                              last_maintenance={"finished_at": "2026-11-23T11:00:00+00:00", "data_files_before": 40,
                                                "data_files_after": 4, "snapshots_expired": 30}),
                s.TableStatus("silver.customers", kind="view")],
        dbt=None, quality=None, problems={"dbt": "cannot read run_results.json"})
    text = s.format_report(report)
    for expected in ("Streams", "Tables", "dbt", "Quality", "#7", "1,200", "600/s", "123,456",
                     "UNKNOWN_SCHEMA_ID 4; 2 replayed", "3.0 MB", "40 -> 4 files, 30 snapshots expired",
                     "note: cannot read run_results.json", "no quality run recorded"):
        assert expected in text, expected
    assert json.loads(json.dumps(report.to_dict()))["streams"][0]["dead_letters_replayed"] == 2


def test_a_dbt_run_not_published_is_a_note_under_each_table_it_wrote():
    """macros/audit_publish.sql keeps a failed run's audit branch: status says how to read it."""
    tables = [s.TableStatus("silver.purchases", rows=10, held_back=["audit_1a2b"]), s.TableStatus("gold.x", rows=1)]
    text = s.format_tables(tables)
    assert "note: not published: dbt run audit_1a2b (failed, or running now); its rows: " \
           "select * from silver.purchases version as of 'audit_1a2b'" in text
    assert text.count("not published") == 1


def test_status_of_an_empty_lakehouse_says_what_is_missing_without_starting_anything(tmp_path):
    """Nothing ingested, no broker: every part says why it is empty; exit status 0, no traceback."""
    env = {"LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_KAFKA_PORT": str(free_port()),
           "DBT_TARGET_PATH": str(tmp_path / "target"), "PATH": "/usr/bin:/bin"}
    report = s.collect_status(Settings.from_env(env))
    assert report.problems["tables"] == "no catalog yet (nothing ingested)"
    assert report.tables == [] and report.quality is None
    assert all("no batch committed yet" in st.problems for st in report.streams)
    assert all(any("cannot reach Kafka" in p for p in st.problems) for st in report.streams)
    lakehouse = str(Path(sys.executable).with_name("lakehouse"))
    out = subprocess.run([lakehouse, "status", "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert {st["stream"] for st in json.loads(out.stdout)["streams"]} >= {"purchases", "customers"}
    assert not (tmp_path / "catalog").exists() or not any((tmp_path / "catalog").iterdir())


def test_fields_the_contract_lacks_are_noted_under_their_stream():
    assert s.added_field_kinds('{"level": {"type": "integer"}, "joined": {"type": "string", "format": "date"}}') \
        == {"level": "integer", "joined": "date"}
    assert s.rescued_field_names(['{"b": 1}', '{"a": null, "b": 2}']) == ["a", "b"]
    stream = s.StreamStatus("wallets", "wallets", "bronze.wallets", added_fields={"tier": "string"},
                            rescued_rows=1313, rescued_fields=["loyalty"])
    text = s.format_streams([stream])
    assert "note: fields the source added, now columns: tier (string)" in text
    assert "note: 1,313 bronze rows keep fields the contract lacks in _rescued: loyalty" in text
    assert s.field_notes(s.StreamStatus("quiet", "quiet", "bronze.quiet")) == []


NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def checked(streams, dbt=None, quality=None, problems=None, named=False, **env):
    settings = Settings.from_env({"LAKEHOUSE_HOME": "/nonexistent", **env})
    report = s.StatusReport(streams=streams, tables=[], dbt=dbt, quality=quality, problems=problems or {})
    return s.check_problems(report, settings, NOW, named=named), s.check_ok_line(report, settings)


def stream(name, **fields):
    return s.StreamStatus(name, name, f"bronze.{name}", **fields)


def dbt_models(**models):
    return s.summarize_run_results({"metadata": {"generated_at": "2026-11-23T11:59:00Z"}, "results": [
        {"unique_id": f"model.lakehouse.{name}", "status": status,
         "timing": [{"name": "execute", "completed_at": at}]} for name, (status, at) in models.items()]})


def test_check_is_ok_when_streams_run_within_their_lag_and_models_are_fresh():
    problems, ok = checked(
        [stream("purchases", last_batch=7, running=True, lag=120), stream("accounts")],  # accounts: never ingested
        dbt=dbt_models(purchases=("success", "2026-11-23T11:30:00.5Z")),
        quality={"verdict": "PASSED", "critical_failures": [], "critical_failed": 0, "run_at": "2026-11-23T11:00:00"},
        problems={"tables": s.NO_CATALOG})
    assert problems == []
    assert ok == "ok: 1 stream(s) running, lag at most 120 records (limit 100,000); 1 dbt model(s) fresh; " \
                 "quality PASSED"


def test_check_names_each_problem_on_its_own_line():
    problems, _ = checked(
        [stream("purchases", last_batch=7, last_batch_at="2026-11-23T10:00:00+00:00", lag=0),  # stopped
         stream("orders", running=True, lag=501),  # over the limit
         stream("accounts", problems=["cannot reach Kafka at x:1: is it running?"]),  # named: must run
         ],
        dbt=dbt_models(purchases=("success", "2026-11-23T10:59:00Z"), orders=("error", "2026-11-23T11:59:00Z"),
                       accounts=("success", "2026-11-23T11:59:00Z")),
        quality={"verdict": "FAILED", "critical_failures": ["silver: unique (id)"], "critical_failed": 1,
                 "run_at": "2026-11-23T11:00:00+00:00"},
        problems={"dbt": "cannot read run_results.json"}, named=True, LAKEHOUSE_STATUS_MAX_LAG="500")
    assert problems == [
        "dbt: cannot read run_results.json",
        "stream purchases: stopped (no ingestion job holds it; last batch #7 at 2026-11-23 10:00:00Z)",
        "stream orders: lag 501 records, over the limit of 500 (LAKEHOUSE_STATUS_MAX_LAG)",
        "stream accounts: stopped (no ingestion job holds it; no batch committed yet)",
        "stream accounts: lag unknown: cannot reach Kafka at x:1: is it running?",
        "quality: the last run (2026-11-23 11:00:00Z) failed 1 critical check(s): silver: unique (id)",
        "dbt: model orders: error in the last run (2026-11-23 11:59:00Z)",
        "dbt: model purchases: stale, last success 2026-11-23 10:59:00Z, more than 60 minutes ago "
        "(LAKEHOUSE_STATUS_MAX_MODEL_AGE_MINUTES)",
    ]
    # the limits are settings: a longer model age makes purchases fresh again
    problems, _ = checked([], dbt=dbt_models(purchases=("success", "2026-11-23T10:59:00Z")),
                          LAKEHOUSE_STATUS_MAX_MODEL_AGE_MINUTES="90")
    assert problems == []


def maintained(table="silver.t", last=None, success=None, oldest="2026-11-20T00:00:00+00:00"):
    return s.TableStatus(table, last_maintenance=last, last_maintenance_success=success, oldest_snapshot_at=oldest)


def test_a_failed_maintenance_pass_and_overdue_maintenance_are_each_a_check_line():
    failed = {"table": "silver.a", "finished_at": "2026-11-23T11:00:00+00:00", "failures": ["compact failed: x"],
              "skipped": None}
    tables = [
        # the last pass failed, the one before succeeded a day ago: one line
        maintained("silver.a", failed, "2026-11-22T12:00:00+00:00"),
        # succeeded 3 days ago: overdue (48 h)
        maintained("silver.b", {"table": "silver.b", "finished_at": "2026-11-20T11:00:00+00:00", "failures": []},
                   "2026-11-20T11:00:00+00:00"),
        # never maintained, its oldest snapshot 3 days old: overdue; a young one is not
        maintained("silver.c"), maintained("silver.d", oldest="2026-11-23T00:00:00+00:00"),
        # never written: nothing to maintain; a view has no files
        maintained("silver.e", oldest=None), s.TableStatus("silver.f", kind="view"),
    ]
    settings = Settings.from_env({"LAKEHOUSE_HOME": "/nonexistent"})
    report = s.StatusReport(streams=[], tables=tables, dbt=None, quality=None, problems={})
    assert s.check_problems(report, settings, NOW) == [
        "table silver.a: the last maintenance pass (2026-11-23 11:00:00Z) failed: compact failed: x",
        "table silver.b: maintenance overdue: last successful maintenance pass 2026-11-20 11:00:00Z, more than "
        "48 hours ago (LAKEHOUSE_STATUS_MAX_MAINTENANCE_AGE_HOURS; `lakehouse maintain`)",
        "table silver.c: maintenance overdue: never maintained successfully, oldest snapshot 2026-11-20 00:00:00Z, "
        "more than 48 hours ago (LAKEHOUSE_STATUS_MAX_MAINTENANCE_AGE_HOURS; `lakehouse maintain`)",
    ]
    longer = Settings.from_env({"LAKEHOUSE_HOME": "/nonexistent", "LAKEHOUSE_STATUS_MAX_MAINTENANCE_AGE_HOURS": "96"})
    assert [line.split(":")[0] for line in s.check_problems(report, longer, NOW)] == ["table silver.a"]
    text = s.format_report(report, settings, NOW)
    assert "1 step(s) FAILED" in text and "note: maintenance overdue: never maintained" in text
    healthy = s.StatusReport(streams=[], tables=[tables[3], tables[5]], dbt=None, quality=None, problems={})
    assert s.check_problems(healthy, settings, NOW) == []
    assert s.check_ok_line(healthy, settings) == "ok: 0 stream(s) running; no dbt run recorded; 1 table(s), no " \
                                                 "maintenance failed or overdue; no quality run recorded"


def test_the_log_tells_each_tables_last_pass_and_last_success_older_entries_included():
    lines = [
        json.dumps({"table": "bronze.a", "finished_at": "1", "problems": []}),  # before `failures` existed: a success
        json.dumps({"table": "bronze.a", "finished_at": "2", "problems": ["compact failed: gone"]}),  # ...a failure
        json.dumps({"table": "silver.b", "finished_at": "3", "failures": [], "skipped": "a dbt run held the lock"}),
        json.dumps({"table": "silver.b", "finished_at": "4", "failures": [], "skipped": None, "dry_run": True}),
        "not json",
    ]
    passes = maintenance_log.passes_by_table(lines)
    assert passes["bronze.a"].last["finished_at"] == "2" and passes["bronze.a"].last_success["finished_at"] == "1"
    assert maintenance_log.failures(passes["bronze.a"].last) == ["compact failed: gone"]
    assert passes["silver.b"].last["finished_at"] == "3" and passes["silver.b"].last_success is None


def test_a_source_transaction_waiting_longer_than_a_model_may_be_stale_is_a_check_line_and_shown():
    """Issue 58, item 3: a transaction whose END or a change never arrives holds back every later
    one of its stream (ARCHITECTURE §9, "Transactions"): status names it, and `--check` flags it
    once it has waited longer than a model may be stale."""
    waiting = {"table": "silver.cdc_transactions", "published": 120, "waiting": 2, "oldest_waiting_id": "771:2400",
               "oldest_waiting_landed_at": "2026-11-23T10:30:00+00:00"}
    settings = Settings.from_env({"LAKEHOUSE_HOME": "/nonexistent"})
    report = s.StatusReport(streams=[], tables=[], dbt=None, quality=None, transactions=[waiting])
    assert s.check_problems(report, settings, NOW) == [
        "transactions silver.cdc_transactions: 2 waiting to be published, the oldest (771:2400) landed "
        "2026-11-23 10:30:00Z, more than 60 minutes ago (LAKEHOUSE_STATUS_MAX_MODEL_AGE_MINUTES): its END or a "
        "change has not arrived"]
    assert "silver.cdc_transactions: 120 published, 2 waiting for their END or a change, the oldest 771:2400 " \
           "(landed 2026-11-23 10:30:00Z)" in s.format_report(report, settings, NOW)
    recent = s.StatusReport(streams=[], tables=[], dbt=None, quality=None,
                            transactions=[{**waiting, "oldest_waiting_landed_at": "2026-11-23T11:30:00+00:00"}])
    assert s.check_problems(recent, settings, NOW) == []
    assert json.loads(json.dumps(report.to_dict()))["transactions"] == [waiting]
