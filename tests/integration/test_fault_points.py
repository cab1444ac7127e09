"""A crash between the Iceberg commit and the checkpoint's, at the exact point, and the replay
that follows (ARCHITECTURE §8).

`lakehouse ingest` runs as a separate process with ``LAKEHOUSE_FAULT_POINT`` set, so it kills
itself with SIGKILL at its first batch that reaches the point: after the batch's one commit to
bronze (good and dead rows together), the checkpoint not committed. It is then started again
without it and must skip the replay (nothing appended), leaving every offset of the topic
exactly once in bronze, a good row or a dead one. The last test changes the contract between
the kill and the restart.

Each test has a stream of its own (a pipeline file of the test): JSON records whose Kafka key
names what the test made of them, so the expected side of each offset is read from the key,
not from the code under test.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest
import yaml

from ingestion import bronze
from lakehouse.core.kafka_admin import end_offsets
from producers import user_events
from producers.delivery import ensure_topic, producer_config

pytestmark = pytest.mark.integration

RECORDS = 240
PARTITIONS = 2
BATCH = 80  # records per micro-batch: three batches, each with records of every kind
KILLED = -signal.SIGKILL  # a Popen's return code when SIGKILL ended it


def write_pipeline(path: Path, stream: str, required: list[str] | None = None) -> None:
    entry = {"format": "json", "schema": user_events.SCHEMA_FILE.name, "event_time": "event_timestamp",
             "identity": ["event_id"], "partitions": PARTITIONS}
    if required:
        entry["required"] = required
    path.write_text(yaml.safe_dump({"schema_dir": str(user_events.SCHEMA_FILE.parent),
                                    "streams": {stream: entry}}))


def record(i: int, rng: random.Random, now: datetime, kinds: dict[int, str]) -> tuple[bytes, bytes]:
    """(key, value) of the i-th record: its kind, by i % 10, is in the key."""
    kind = kinds.get(i % 10, "good")
    event = user_events.make_event(rng, now)
    if kind == "corrupt":
        value = b'{"event_id": "truncated'
    else:
        for field in {"no_device": ["device"], "no_page": ["page"], "no_both": ["device", "page"]}.get(kind, []):
            del event[field]
        value = user_events.encode(event)
    return f"{kind}-{i}".encode(), value


def produce(settings, topic: str, kinds: dict[int, str], seed: int) -> None:
    from confluent_kafka import Producer

    ensure_topic(settings, topic, partitions=PARTITIONS)
    rng, now = random.Random(seed), datetime.now(UTC)
    producer = Producer(producer_config(settings))
    for i in range(RECORDS):
        key, value = record(i, rng, now, kinds)
        producer.produce(topic, value, key, partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def run_job(settings, tmp_path: Path, stream: str, pipeline: Path, fault: str | None = None) -> tuple[int, str]:
    """Run the job to its end (or its fault point); (return code, what it logged)."""
    env = {**os.environ, "LAKEHOUSE_HOME": str(settings.home), "LAKEHOUSE_KAFKA_PORT": str(settings.kafka_port),
           "LAKEHOUSE_SHUFFLE_PARTITIONS": "2", "LAKEHOUSE_PIPELINE_FILE": str(pipeline)}
    env.pop("LAKEHOUSE_FAULT_POINT", None)
    if fault:
        env["LAKEHOUSE_FAULT_POINT"] = fault
    log_path = tmp_path / f"ingest-{fault or 'restart'}.log"
    command = [str(Path(sys.executable).with_name("lakehouse")), "ingest", stream, "--available-now",
               "--max-offsets-per-trigger", str(BATCH)]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)
        try:
            returncode = process.wait(timeout=600)
        finally:
            _end_group(process.pid)
    return returncode, log_path.read_text(errors="replace")


def _end_group(pgid: int) -> None:
    """The driver's JVM ends on its own once the driver is gone; make sure of it before a
    restart, as a machine crash would (the group is the job's own: start_new_session)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 30
    while _members(pgid):
        assert time.monotonic() < deadline, f"process group {pgid} outlived SIGKILL"
        time.sleep(0.1)


def _members(pgid: int) -> list:
    alive = []
    for process in psutil.process_iter(["status"]):
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(process.pid) == pgid and process.info["status"] != psutil.STATUS_ZOMBIE:
                alive.append(process)
    return alive


def _rows(spark, stream: str, where: str) -> list:
    spark.catalog.refreshTable(f"bronze.{stream}")
    return spark.table(f"bronze.{stream}").where(where).selectExpr(
        "_kafka_partition as partition", "_kafka_offset as offset", "_kafka_key as key", "_batch_id as batch_id",
        "unix_micros(_ingested_at) as ingested_at", "_error_code as error_code", "_error_detail as error_detail",
        "cast(_raw_key as string) as raw_key", "_raw_value is not null as has_value").collect()


def bronze_rows(spark, stream: str) -> list:
    """The stream's good rows."""
    return _rows(spark, stream, "_error_code is null")


def dead_rows(spark, stream: str) -> list:
    """The stream's dead rows, in the same table."""
    return _rows(spark, stream, "_error_code is not null")


def assert_exactly_once(spark, settings, stream: str) -> tuple[list, list]:
    """Every offset of the topic once in bronze, a good row or a dead one, never two, never none."""
    good, dead = bronze_rows(spark, stream), dead_rows(spark, stream)
    coordinates = [(r.partition, r.offset) for r in [*good, *dead]]
    twice = {c for c in coordinates if coordinates.count(c) > 1}
    assert not twice, f"{len(twice)} records landed twice, e.g. {sorted(twice)[:3]}"
    ends = end_offsets(settings, stream)
    assert sum(ends.values()) == RECORDS
    every = {(p, o) for p, end in ends.items() for o in range(end)}
    neither = every - set(coordinates)
    assert not neither, f"{len(neither)} records landed nowhere, e.g. {sorted(neither)[:3]}"
    assert all(r.raw_key == r.key and r.has_value for r in dead), "a dead row without its bytes"
    return good, dead


def assert_one_instant_per_batch(good: list, dead: list) -> None:
    """A batch has one ``_ingested_at``, good and dead rows alike (ARCHITECTURE §6)."""
    instants: dict[int, set[int]] = {}
    for r in [*good, *dead]:
        instants.setdefault(r.batch_id, set()).add(r.ingested_at)
    assert instants and all(len(found) == 1 for found in instants.values()), instants


def query_id(settings, stream: str) -> str:
    return json.loads((settings.checkpoint_root / f"bronze_{stream}" / "metadata").read_text())["id"]


def writer_snapshots(spark, settings, stream: str, table: str, batch_id: int) -> int:
    """Appends of ``batch_id`` by the stream's query."""
    return spark.sql(f"select count(*) from {table}.snapshots "
                     f"where summary['{bronze.WRITER_PROPERTY}'] = '{query_id(settings, stream)}' "
                     f"and summary['{bronze.BATCH_PROPERTY}'] = '{batch_id}'").first()[0]


def test_a_kill_after_the_iceberg_commit_is_skipped_on_restart(spark, settings, kafka, tmp_path):
    stream = "faulted_after_iceberg_commit"
    pipeline = tmp_path / "pipeline.yml"
    write_pipeline(pipeline, stream)
    produce(settings, stream, {0: "corrupt"}, seed=82)
    checkpoint = settings.checkpoint_root / f"bronze_{stream}"

    code, log = run_job(settings, tmp_path, stream, pipeline, fault="after-iceberg-commit")
    assert code == KILLED, log[-3000:]
    assert f"{stream} batch 0: fault point after-iceberg-commit" in log
    # What the crash left: batch 0 in bronze, good and dead rows in one snapshot, planned in the
    # checkpoint but not committed there.
    assert (checkpoint / "offsets" / "0").is_file() and not (checkpoint / "commits" / "0").exists()
    assert {r.batch_id for r in bronze_rows(spark, stream)} == {0} == {r.batch_id for r in dead_rows(spark, stream)}
    assert writer_snapshots(spark, settings, stream, f"bronze.{stream}", 0) == 1

    code, log = run_job(settings, tmp_path, stream, pipeline)
    assert code == 0, log[-3000:]
    assert f"{stream} batch 0: already committed: skipped" in log, log[-3000:]
    assert (checkpoint / "commits" / "0").is_file()
    assert writer_snapshots(spark, settings, stream, f"bronze.{stream}", 0) == 1, "the replay appended batch 0 again"
    good, dead = assert_exactly_once(spark, settings, stream)
    assert {r.key.split("-")[0] for r in dead} == {"corrupt"} and len(dead) == RECORDS // 10
    assert {r.error_code for r in dead} == {"CORRUPT_PAYLOAD"}
    assert_one_instant_per_batch(good, dead)


def test_a_contract_changed_between_the_kill_and_the_restart_keeps_every_offset_once(
        spark, settings, kafka, tmp_path):
    """Under the first contract `device` is required, under the second `page` instead. Batch 0
    committed under the first before the kill, so its replay is skipped: each of its records
    stays as the first contract read it, once. Later batches know only the second contract."""
    stream = "faulted_contract_change"
    pipeline = tmp_path / "pipeline.yml"
    write_pipeline(pipeline, stream, required=["event_id", "event_timestamp", "device"])
    produce(settings, stream, {0: "corrupt", 3: "no_device", 6: "no_page", 9: "no_both"}, seed=83)

    code, log = run_job(settings, tmp_path, stream, pipeline, fault="after-iceberg-commit")
    assert code == KILLED, log[-3000:]
    assert {r.key.split("-")[0] for r in bronze_rows(spark, stream)} == {"good", "no_page"}
    assert {r.key.split("-")[0] for r in dead_rows(spark, stream)} == {"corrupt", "no_device", "no_both"}

    write_pipeline(pipeline, stream, required=["event_id", "event_timestamp", "page"])
    code, log = run_job(settings, tmp_path, stream, pipeline)
    assert code == 0, log[-3000:]
    good, dead = assert_exactly_once(spark, settings, stream)

    side = {r.key: ("bronze", r.batch_id) for r in good} | {r.key: ("dead", r.batch_id) for r in dead}
    wrong = []
    for key, (where, batch_id) in side.items():
        kind = key.split("-")[0]
        dead_under = {"corrupt", "no_both", "no_device" if batch_id == 0 else "no_page"}
        if where != ("dead" if kind in dead_under else "bronze"):
            wrong.append((key, batch_id, where))
    assert not wrong, f"{len(wrong)} records on the wrong side: {wrong[:5]}"
    assert writer_snapshots(spark, settings, stream, f"bronze.{stream}", 0) == 1
    assert_one_instant_per_batch(good, dead)
    # The kinds really were in batch 0 and after it.
    assert {k.split("-")[0] for k, (_, b) in side.items() if b == 0} >= {"no_device", "no_page"}
    assert any(k.startswith("no_page") and b > 0 for k, (_, b) in side.items())
