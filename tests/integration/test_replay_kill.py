"""A `lakehouse dlq replay` killed half way leaves every offset once (ARCHITECTURE §7).

A stream of the test's own requires `device`, so records without it are dead rows. The contract
then drops the requirement and `lakehouse dlq replay` runs as a process of its own, killed with
SIGKILL the moment it writes the stream table's first new metadata file: a replay that wrote
bronze in one commit and its dead letters in another (the design before issue 43) is then cut
between the two, with records in bronze whose dead letters are still pending. One MERGE per
stream table leaves each record once, dead or replaced, whenever the kill lands; the next
replay finishes the rest.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ingestion import job
from ingestion.invariant import check_every_offset_once
from lakehouse.contracts.streams import get_stream
from lakehouse.core.kafka_admin import end_offsets
from lakehouse.operations.dead_letters.filters import parse_filters
from lakehouse.operations.dead_letters.replay import replay
from tests.integration.test_fault_points import KILLED, RECORDS, _end_group, produce, write_pipeline

pytestmark = pytest.mark.integration

STREAM = "replay_killed"


def _metadata_files(settings, stream: str) -> set[Path]:
    return set(Path(settings.home).glob(f"**/bronze/{stream}*/metadata/*.metadata.json"))


def test_a_replay_killed_half_way_leaves_every_offset_once(spark, settings, kafka, tmp_path, monkeypatch):
    pipeline = tmp_path / "pipeline.yml"
    write_pipeline(pipeline, STREAM, required=["event_id", "event_timestamp", "device"])
    produce(settings, STREAM, {3: "no_device", 7: "no_device"}, seed=91)
    monkeypatch.setenv("LAKEHOUSE_PIPELINE_FILE", str(pipeline))
    spec = get_stream(STREAM)
    job.run(spark, settings, [STREAM], available_now=True)
    ranges = {p: (0, end) for p, end in end_offsets(settings, STREAM).items()}
    before = check_every_offset_once(spark, spec, ranges)
    assert before.holds and before.dead_letters == RECORDS // 5, before

    write_pipeline(pipeline, STREAM)  # `device` no longer required: every dead record reads now
    env = {**os.environ, "LAKEHOUSE_HOME": str(settings.home), "LAKEHOUSE_KAFKA_PORT": str(settings.kafka_port),
           "LAKEHOUSE_SHUFFLE_PARTITIONS": "2", "LAKEHOUSE_PIPELINE_FILE": str(pipeline)}
    known = _metadata_files(settings, STREAM)
    log_path = tmp_path / "replay.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([str(Path(sys.executable).with_name("lakehouse")), "dlq", "replay", "--stream",
                                    STREAM], env=env, stdout=log, stderr=log, start_new_session=True)
        try:
            while process.poll() is None and not _metadata_files(settings, STREAM) - known:
                time.sleep(0.01)
            os.killpg(process.pid, signal.SIGKILL)
            code = process.wait(timeout=60)
        finally:
            _end_group(process.pid)
    assert code == KILLED, log_path.read_text(errors="replace")[-3000:]
    assert _metadata_files(settings, STREAM) - known, "killed before the replay wrote anything"

    spark.catalog.refreshTable(spec.bronze_table)
    killed = check_every_offset_once(spark, spec, ranges)
    assert killed.holds, f"after the kill: {killed.describe()}"

    finished = replay(spark, settings, parse_filters([STREAM]))
    assert finished.still_failing == 0
    after = check_every_offset_once(spark, spec, ranges)
    assert after.holds and (after.bronze, after.dead_letters) == (RECORDS, 0), after
