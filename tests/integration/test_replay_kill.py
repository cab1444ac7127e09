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
import yaml

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


def write_two_stream_pipeline(path: Path, streams: list[str], required: list[str] | None = None) -> None:
    """The pipeline file of test_fault_points.write_pipeline, with several streams."""
    one = path.with_suffix(".one.yml")
    entries = {}
    for stream in streams:
        write_pipeline(one, stream, required)
        entries.update(yaml.safe_load(one.read_text())["streams"])
    document = yaml.safe_load(one.read_text())
    path.write_text(yaml.safe_dump({**document, "streams": entries}))


def test_a_replay_killed_between_two_stream_tables_leaves_each_table_whole(spark, settings, kafka, tmp_path,
                                                                            monkeypatch):
    """The fault point after-replay-commit kills `lakehouse dlq replay` after its first stream
    table's commit: that stream's dead rows are all replaced, the other's all still dead, every
    offset of both once; the next replay replaces the rest."""
    streams = ["replay_cut_a", "replay_cut_b"]  # replayed in this order
    pipeline = tmp_path / "pipeline.yml"
    write_two_stream_pipeline(pipeline, streams, required=["event_id", "event_timestamp", "device"])
    for n, stream in enumerate(streams):
        produce(settings, stream, {3: "no_device", 7: "no_device"}, seed=92 + n)
    monkeypatch.setenv("LAKEHOUSE_PIPELINE_FILE", str(pipeline))
    specs = [get_stream(stream) for stream in streams]
    job.run(spark, settings, streams, available_now=True)
    ranges = {spec.name: {p: (0, end) for p, end in end_offsets(settings, spec.topic).items()} for spec in specs}

    write_two_stream_pipeline(pipeline, streams)  # `device` no longer required
    env = {**os.environ, "LAKEHOUSE_HOME": str(settings.home), "LAKEHOUSE_KAFKA_PORT": str(settings.kafka_port),
           "LAKEHOUSE_SHUFFLE_PARTITIONS": "2", "LAKEHOUSE_PIPELINE_FILE": str(pipeline),
           "LAKEHOUSE_FAULT_POINT": job.AFTER_REPLAY_COMMIT}
    result = subprocess.run([str(Path(sys.executable).with_name("lakehouse")), "dlq", "replay",
                             *[f"--stream={stream}" for stream in streams]], env=env,
                            capture_output=True, text=True, timeout=600, start_new_session=True)
    assert result.returncode == KILLED, result.stdout[-2000:] + result.stderr[-3000:]
    assert f"replay_cut_a: fault point {job.AFTER_REPLAY_COMMIT}" in result.stdout + result.stderr

    checks = {}
    for spec in specs:
        spark.catalog.refreshTable(spec.bronze_table)
        checks[spec.name] = check_every_offset_once(spark, spec, ranges[spec.name])
        assert checks[spec.name].holds, f"{spec.name} after the kill: {checks[spec.name].describe()}"
    assert (checks["replay_cut_a"].dead_letters, checks["replay_cut_b"].dead_letters) == (0, RECORDS // 5)

    finished = replay(spark, settings, parse_filters(streams))
    assert (finished.selected, finished.replayed) == (RECORDS // 5, RECORDS // 5)  # only b's were left
    for spec in specs:
        after = check_every_offset_once(spark, spec, ranges[spec.name])
        assert after.holds and (after.bronze, after.dead_letters) == (RECORDS, 0), after
