"""Exactly once as a user breaks it: `kill -9` the ingestion driver at random moments.

`lakehouse ingest` runs as a separate process (Python driver and its JVM in one process
group) and is killed with SIGKILL while it streams, several times, then run to the end.
Afterwards, for every partition of the topic, bronze rows plus dead letters hold every
produced offset exactly once. The stream is one of its own (a pipeline file of the test),
so its checkpoint and tables start empty.

`make test-chaos` (marker chaos): a few hundred thousand messages and 4 kills; `-m slow`: a
million and 10. The default run has the short form of the chaos suite (tests/chaos/).
"""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from lakehouse.contracts.protobuf import SCHEMAS_DIR
from producers import employees
from producers.delivery import produce_to_topic
from producers.faults import FaultRates
from tests.support.exactly_once import assert_every_offset_once

pytestmark = pytest.mark.integration

FAULTS = FaultRates(duplicate=0.01, corrupt=0.005, invalid=0.005)


def lakehouse_command() -> str:
    return str(Path(sys.executable).with_name("lakehouse"))


def batches(folder: Path) -> int:
    return sum(1 for p in folder.glob("[0-9]*")) if folder.is_dir() else 0


def kill_and_restart(spark, settings, tmp_path, stream: str, messages: int, kills: int, seed: int) -> int:
    """``kills`` kill -9 of the job ingesting ``messages`` into ``stream``, at random moments of a
    batch, then a run to the end: every offset lands once. How many kills hit a running job."""
    pipeline = tmp_path / "pipeline.yml"
    pipeline.write_text(yaml.safe_dump({"schema_dir": str(SCHEMAS_DIR), "streams": {stream: {
        "format": "protobuf", "schema": "Employee.proto", "message": employees.MESSAGE_NAME,
        "event_time": "start_date", "identity": ["id", "start_date"]}}}))
    report = produce_to_topic(settings, stream, employees.messages(messages, FAULTS, seed), FAULTS,
                              total=messages, progress=False)
    assert report.failed == 0
    env = {**os.environ, "LAKEHOUSE_HOME": str(settings.home), "LAKEHOUSE_KAFKA_PORT": str(settings.kafka_port),
           "LAKEHOUSE_SHUFFLE_PARTITIONS": "2", "LAKEHOUSE_PIPELINE_FILE": str(pipeline)}
    command = [lakehouse_command(), "ingest", stream, "--available-now", "--max-offsets-per-trigger", "15000"]
    checkpoint = settings.checkpoint_root / f"bronze_{stream}"
    rng = random.Random(seed)
    log = open(tmp_path / "ingest.log", "ab")
    killed = 0
    for _ in range(kills):
        planned = batches(checkpoint / "offsets")
        process = subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)
        try:
            # Kill once the query is under way: after its next batch is planned, plus a random
            # moment (decoding, writing bronze or dead letters, committing the checkpoint).
            deadline = time.monotonic() + 180
            while batches(checkpoint / "offsets") <= planned and process.poll() is None:
                assert time.monotonic() < deadline, "the ingestion made no progress"
                time.sleep(0.1)
            time.sleep(rng.uniform(0.0, 4.0))
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                killed += 1
            process.wait()
    final = subprocess.run(command, env=env, stdout=log, stderr=log, timeout=900)
    assert final.returncode == 0, (tmp_path / "ingest.log").read_text()[-3000:]
    assert_every_offset_once(spark, settings, stream, report.delivered,
                             dead_letters=len(report.manifest()["dead_letters"]))
    return killed


@pytest.mark.chaos
def test_kill_9_the_driver_while_streaming_loses_and_doubles_nothing(spark, settings, kafka, tmp_path):
    killed = kill_and_restart(spark, settings, tmp_path, "killed_employees", 200_000, kills=4, seed=11)
    assert killed >= 3, f"only {killed} kills hit a running job: produce more messages"


@pytest.mark.slow
def test_kill_9_ten_times_over_a_million_messages(spark, settings, kafka, tmp_path):
    killed = kill_and_restart(spark, settings, tmp_path, "killed_employees_heavy", 1_000_000, kills=10, seed=12)
    assert killed >= 8, f"only {killed} kills hit a running job"
