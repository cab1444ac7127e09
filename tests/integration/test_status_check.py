"""An operator's view of a real job: its log lines in JSON, parsed line by line, and
`lakehouse status --check` as a health probe, passing while the job runs and failing once it
stopped (with the lag over its limit said too).

One `lakehouse ingest` of a stream of its own, on a lakehouse of its own (its broker, catalog
and an empty dbt target: no quality or dbt run to judge), with LAKEHOUSE_LOG_FORMAT=json.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from lakehouse.contracts.protobuf import SCHEMAS_DIR
from producers import user_events
from producers.delivery import produce_to_topic
from producers.faults import FaultRates
from tests.integration.own_lakehouse import cli_env, lakehouse_fixture
from tests.integration.processes import process_group, stop_cleanly, wait_until

pytestmark = pytest.mark.integration

STREAM = "watched_events"
MESSAGES = 2_000
FAULTS = FaultRates(corrupt=0.02)
LAKEHOUSE = str(Path(sys.executable).with_name("lakehouse"))
# The JVM's launcher prints this itself, before any logging exists (Spark adds the module to
# every JVM it starts): the one line of a run that is not a log line.
JVM_LAUNCHER_LINE = "WARNING: Using incubator modules: jdk.incubator.vector"


lake = lakehouse_fixture("status-check")


@pytest.fixture(scope="module")
def watched(lake, tmp_path_factory) -> dict:
    """A real job's run: its log, what it read, and `status --check` while it ran and after it stopped."""
    own, session, dbt_target = lake
    folder = tmp_path_factory.mktemp("watched")
    pipeline = folder / "pipeline.yml"
    pipeline.write_text(yaml.safe_dump({"schema_dir": str(SCHEMAS_DIR), "streams": {STREAM: {
        "format": "json", "schema": "user_events.schema.json", "event_time": "event_timestamp",
        "identity": ["event_id"]}}}))
    produced = produce_to_topic(own, STREAM, user_events.messages(MESSAGES, FAULTS, 5), FAULTS, total=MESSAGES,
                                progress=False)
    assert produced.failed == 0
    env = {**cli_env(own), "LAKEHOUSE_PIPELINE_FILE": str(pipeline), "DBT_TARGET_PATH": str(dbt_target),
           "LAKEHOUSE_LOG_FORMAT": "json"}

    def check(*args: str, **more: str) -> subprocess.CompletedProcess:
        return subprocess.run([LAKEHOUSE, "status", "--check", *args], env={**env, **more}, capture_output=True,
                              text=True, timeout=120)

    log = folder / "ingest.log"
    committed = own.checkpoint_root / f"bronze_{STREAM}" / "commits" / "0"
    with process_group([LAKEHOUSE, "ingest", STREAM, "--trigger", "1s"], env, log) as ingest:
        wait_until(committed.exists, "the first commit", log, 240, ingest)
        running = check(STREAM)
        stop_cleanly(ingest, log)
    more = produce_to_topic(own, STREAM, user_events.messages(100, FaultRates(), 6), FaultRates(), total=100,
                            progress=False)
    assert more.failed == 0
    stopped = check(LAKEHOUSE_STATUS_MAX_LAG="50")  # no stream named: one ingested before must run
    return {"log": log.read_text(), "produced": produced, "running": running, "stopped": stopped,
            "good": session.table(f"bronze.{STREAM}").where("_error_code is null").count()}


def test_every_line_of_a_real_job_is_a_dated_json_object(watched):
    lines = [line for line in watched["log"].splitlines() if line != JVM_LAUNCHER_LINE]
    records = []
    for line in lines:
        record = json.loads(line)  # every line, the JVM's log4j lines too
        assert {"time", "level", "logger", "message"} <= set(record), line
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)", record["time"]), line
        assert datetime.fromisoformat(record["time"]).tzinfo is not None
        records.append(record)
    loggers = {record["logger"] for record in records}
    assert "lakehouse.ingest" in loggers, loggers
    batches = [r for r in records if r["logger"] == "lakehouse.ingest" and "counts" in r]
    assert batches and all(r["stream"] == STREAM and isinstance(r["batch"], int) for r in batches)
    counts = [r["counts"] for r in batches]
    # the batch lines' counts add up to what the job read, and to what bronze holds
    assert sum(c["read"] for c in counts) == watched["produced"].delivered
    assert sum(c["good"] for c in counts) == watched["good"]
    assert sum(c["dead"] for c in counts) == len(watched["produced"].manifest()["dead_letters"]) > 0
    assert all(c["read"] == c["good"] + c["dead"] for c in counts)


def test_check_passes_while_the_job_runs(watched):
    result = watched["running"]
    assert result.returncode == 0, result.stdout + result.stderr
    (line,) = result.stdout.splitlines()
    assert line.startswith("ok: 1 stream(s) running, lag at most "), line
    assert line.endswith("no dbt run recorded; 1 table(s), no maintenance failed or overdue; no quality run "
                         "recorded"), line


def test_check_fails_once_the_job_stopped_one_line_per_problem(watched):
    result = watched["stopped"]
    assert result.returncode == 3, result.stdout + result.stderr
    stopped, lag = result.stdout.splitlines()
    assert re.fullmatch(rf"stream {STREAM}: stopped \(no ingestion job holds it; last batch #\d+ at .+\)", stopped)
    assert lag == f"stream {STREAM}: lag 100 records, over the limit of 50 (LAKEHOUSE_STATUS_MAX_LAG)"
