"""A lost checkpoint never re-ingests in silence (ingestion/starting_offsets.py, ARCHITECTURE §8).

A real `lakehouse ingest` streams a topic into bronze and is stopped; its checkpoint is deleted;
more records arrive; the job started again on the new checkpoint follows on from the last offset
bronze holds per partition, with a warning line naming them: every offset of the topic once in
bronze, and the bronze suite's critical uniqueness check green. Then the checkpoint is deleted
again and `--starting-offsets earliest` (the job in this process) reads the whole topic again,
on purpose: a warning says so, every record lands a second time, and the same check goes red.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from expectations.runner import run_quality
from expectations.suites import bronze_suites
from ingestion import checkpoint as checkpoint_files
from ingestion import job
from ingestion.invariant import check_every_offset_once
from lakehouse.contracts.streams import get_stream
from lakehouse.core.kafka_admin import end_offsets
from producers import user_events
from producers.delivery import ensure_topic, producer_config

pytestmark = pytest.mark.integration

PARTITIONS = 2
UNIQUE = "expect_compound_columns_to_be_unique"


def write_pipeline(path: Path, stream: str) -> None:
    path.write_text(yaml.safe_dump({"schema_dir": str(user_events.SCHEMA_FILE.parent), "streams": {stream: {
        "format": "json", "schema": user_events.SCHEMA_FILE.name, "event_time": "event_timestamp",
        "identity": ["event_id"], "partitions": PARTITIONS}}}))


def produce(settings, topic: str, records: int, seed: int) -> None:
    """JSON events, one in twenty corrupt (a dead row: its offset counts the same)."""
    from confluent_kafka import Producer

    ensure_topic(settings, topic, partitions=PARTITIONS)
    rng, now = random.Random(seed), datetime.now(UTC)
    producer = Producer(producer_config(settings))
    for i in range(records):
        value = b'{"event_id": "cut' if i % 20 == 0 else user_events.encode(user_events.make_event(rng, now))
        producer.produce(topic, value, f"{seed}-{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def ingest(settings, pipeline: Path, log: Path, stream: str, *arguments: str) -> subprocess.Popen:
    """`lakehouse ingest` in a process of its own, its output in ``log``."""
    env = {**os.environ, "LAKEHOUSE_HOME": str(settings.home), "LAKEHOUSE_KAFKA_PORT": str(settings.kafka_port),
           "LAKEHOUSE_SHUFFLE_PARTITIONS": "2", "LAKEHOUSE_PIPELINE_FILE": str(pipeline)}
    env.pop("LAKEHOUSE_FAULT_POINT", None)
    with open(log, "wb") as out:
        return subprocess.Popen([str(Path(sys.executable).with_name("lakehouse")), "ingest", stream, *arguments],
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def finished(process: subprocess.Popen, log: Path) -> str:
    """What the job logged, once it ended well."""
    process.wait(timeout=600)
    output = log.read_text(errors="replace")
    assert process.returncode == 0, output[-3000:]
    return output


def uniqueness(spark, settings, spec) -> bool:
    """The bronze suite's critical check that each Kafka record is one row."""
    report = run_quality(spark, settings, suites=bronze_suites(spec)[:1], record=False)
    (found,) = [result for result in report.results if result.expectation == UNIQUE]
    assert found.message is None, found.message  # evaluated, not failed for want of a table or column
    return found.success


def test_a_deleted_checkpoint_follows_on_from_bronze_and_a_re_read_is_explicit(
        spark, settings, kafka, tmp_path, monkeypatch, caplog):
    stream = "lost_checkpoint"
    pipeline = tmp_path / "pipeline.yml"
    write_pipeline(pipeline, stream)
    monkeypatch.setenv("LAKEHOUSE_PIPELINE_FILE", str(pipeline))
    spec = get_stream(stream)
    location = settings.checkpoint_root / f"bronze_{stream}"
    produce(settings, stream, 240, seed=1)

    # a running stream, stopped once it read the topic (SIGTERM: it ends its batch first)
    log = tmp_path / "running.log"
    running = ingest(settings, pipeline, log, stream, "--trigger", "1s", "--max-offsets-per-trigger", "100")
    try:
        ends = end_offsets(settings, stream)
        deadline = time.monotonic() + 300
        while (commit := checkpoint_files.last_commit(location)) is None or commit.offsets.get(stream) != ends:
            assert running.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the job did not read the topic"
            time.sleep(0.5)
        running.send_signal(signal.SIGTERM)
        finished(running, log)
    finally:
        if running.poll() is None:
            os.killpg(running.pid, signal.SIGKILL)
            running.wait()
    assert spark.table(spec.bronze_table).count() == 240

    shutil.rmtree(location)  # the checkpoint is lost
    produce(settings, stream, 120, seed=2)
    log = tmp_path / "restarted.log"
    output = finished(ingest(settings, pipeline, log, stream, "--available-now"), log)
    ranges = {partition: (0, end) for partition, end in end_offsets(settings, stream).items()}
    check = check_every_offset_once(spark, spec, ranges, settings=settings)
    assert check.holds and check.expected == 360, check.describe()
    assert uniqueness(spark, settings, spec)
    assert (f"{stream}: new checkpoint at {location} and {spec.bronze_table} holds topic {stream} up to offsets "
            f"0: 119, 1: 119 (partition: offset): reading from the next ones, nothing is ingested twice; to read the "
            "whole topic again on purpose: --starting-offsets earliest") in output, output[-3000:]

    # reading the topic again is the operator's explicit choice, said as it is taken (the job run
    # in this process: its start-up is the cost of this part)
    shutil.rmtree(location)
    with caplog.at_level(logging.WARNING, logger="lakehouse.ingest"):
        job.run(spark, settings, [stream], available_now=True, starting_offsets="earliest")
    assert (f"{stream}: new checkpoint at {location}, --starting-offsets earliest: {spec.bronze_table} holds topic "
            f"{stream} up to offsets 0: 179, 1: 179 (partition: offset); the whole topic is read again"
            ) in caplog.text
    again = check_every_offset_once(spark, spec, ranges, settings=settings)
    assert again.duplicated == 360 and again.missing == 0, again.describe()
    assert not uniqueness(spark, settings, spec)
