"""A crash between two commits, at the exact point, and the replay that follows (ARCHITECTURE §8).

`lakehouse ingest` runs as a separate process with ``LAKEHOUSE_FAULT_POINT`` set, so it kills
itself with SIGKILL at its first batch that reaches the point: after the bronze commit (the
dead letters not committed), or after the Iceberg commits (the checkpoint not committed). It is
then started again without it and must complete the replay (dead letters written, bronze not
duplicated) or skip it (nothing appended), leaving every offset of the topic exactly once in
bronze or dead letters. The last test changes the contract between the kill and the restart.

Each test has a stream of its own (a pipeline file of the test): JSON records whose Kafka key
names what the test made of them, so the expected side of each offset is read from the key,
not from the code under test.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
import pytest
import yaml
from pyspark.sql import functions as F

from ingestion import bronze, checkpoint, dead_letters, decoders, job
from lakehouse.contracts.streams import get_stream
from lakehouse.core.kafka_admin import end_offsets
from lakehouse.operations import maintenance
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


def bronze_rows(spark, stream: str) -> list:
    spark.catalog.refreshTable(f"bronze.{stream}")
    return spark.table(f"bronze.{stream}").selectExpr(
        "_kafka_partition as partition", "_kafka_offset as offset", "_kafka_key as key", "_batch_id as batch_id",
        "unix_micros(_ingested_at) as ingested_at").collect()


def dead_rows(spark, stream: str) -> list:
    spark.catalog.refreshTable("bronze.dead_letters")
    return spark.table("bronze.dead_letters").where(f"stream = '{stream}'").selectExpr(
        "partition", "offset", "cast(key as string) as key", "batch_id", "unix_micros(ingested_at) as ingested_at",
        "error_code", "error_detail", "replayed_at").collect()


def assert_exactly_once(spark, settings, stream: str) -> tuple[list, list]:
    """Every offset of the topic in bronze or pending in dead letters, never both, never neither."""
    good, dead = bronze_rows(spark, stream), dead_rows(spark, stream)
    in_bronze = [(r.partition, r.offset) for r in good]
    in_dead = [(r.partition, r.offset) for r in dead]
    assert len(in_bronze) == len(set(in_bronze)), "a record landed twice in bronze"
    assert len(in_dead) == len(set(in_dead)), "a record landed twice in dead letters"
    both = set(in_bronze) & set(in_dead)
    assert not both, f"{len(both)} records landed on both sides, e.g. {sorted(both)[:3]}"
    ends = end_offsets(settings, stream)
    assert sum(ends.values()) == RECORDS
    every = {(p, o) for p, end in ends.items() for o in range(end)}
    neither = every - set(in_bronze) - set(in_dead)
    assert not neither, f"{len(neither)} records landed nowhere, e.g. {sorted(neither)[:3]}"
    assert all(r.replayed_at is None for r in dead)
    return good, dead


def assert_one_instant_per_batch(good: list, dead: list) -> None:
    """A batch has one ``_ingested_at`` in both tables, a replayed batch too (ARCHITECTURE §6)."""
    instants: dict[int, set[int]] = {}
    for r in [*good, *dead]:
        instants.setdefault(r.batch_id, set()).add(r.ingested_at)
    assert instants and all(len(found) == 1 for found in instants.values()), instants


def query_id(settings, stream: str) -> str:
    return json.loads((settings.checkpoint_root / f"bronze_{stream}" / "metadata").read_text())["id"]


def writer_snapshots(spark, settings, stream: str, table: str, batch_id: int) -> int:
    """Appends of ``batch_id`` by the stream's query (the dead-letter table has other writers)."""
    return spark.sql(f"select count(*) from {table}.snapshots "
                     f"where summary['{bronze.WRITER_PROPERTY}'] = '{query_id(settings, stream)}' "
                     f"and summary['{bronze.BATCH_PROPERTY}'] = '{batch_id}'").first()[0]


def killed_after_bronze(settings, tmp_path: Path, stream: str, seed: int) -> tuple[Path, str]:
    """The stream's topic with corrupt records (every 5th), and the job killed at its first
    batch's `after-bronze` point; (its pipeline file, what it logged)."""
    pipeline = tmp_path / "pipeline.yml"
    write_pipeline(pipeline, stream)
    produce(settings, stream, {0: "corrupt", 5: "corrupt"}, seed=seed)
    code, log = run_job(settings, tmp_path, stream, pipeline, fault="after-bronze")
    assert code == KILLED, log[-3000:]
    return pipeline, log


def test_a_kill_after_the_bronze_commit_is_completed_on_restart(spark, settings, kafka, tmp_path, monkeypatch):
    stream = "faulted_after_bronze"
    pipeline, log = killed_after_bronze(settings, tmp_path, stream, seed=81)
    assert f"{stream} batch 0: fault point after-bronze" in log
    # What the crash left: batch 0's good records in bronze, its dead letters nowhere.
    first = bronze_rows(spark, stream)
    assert first and {r.batch_id for r in first} == {0}
    assert {r.key.split("-")[0] for r in first} == {"good"}
    assert dead_rows(spark, stream) == []
    # The instant the replay decodes with, stored in bronze's snapshot: found by the walk back
    # through the snapshots, and by the snapshots table when the walk is too long.
    table, query = f"bronze.{stream}", query_id(settings, stream)
    stored = [bronze.batch_instant(spark, table, query, 0)]
    monkeypatch.setattr(bronze, "LINEAGE_STEPS", 0)
    stored.append(bronze.batch_instant(spark, table, query, 0))
    assert {(t - bronze.EPOCH) // timedelta(microseconds=1) for t in stored} == {r.ingested_at for r in first}
    assert bronze.batch_instant(spark, table, query, 1) is None

    code, log = run_job(settings, tmp_path, stream, pipeline)
    assert code == 0, log[-3000:]
    good, dead = assert_exactly_once(spark, settings, stream)
    assert 0 in {r.batch_id for r in dead}, "the replay did not write batch 0's dead letters"
    assert writer_snapshots(spark, settings, stream, f"bronze.{stream}", 0) == 1, "bronze appended again"
    assert sorted((r.partition, r.offset) for r in good if r.batch_id == 0) == sorted(
        (r.partition, r.offset) for r in first)
    assert {r.key.split("-")[0] for r in dead} == {"corrupt"} and len(dead) == RECORDS // 5
    assert {r.key.split("-")[0] for r in good} == {"good"}
    assert_one_instant_per_batch(good, dead)


def test_a_kill_after_the_bronze_commit_is_completed_after_maintenance_expired_its_snapshot(
        spark, settings, kafka, tmp_path):
    """While the job is down after the crash, `lakehouse maintain` compacts bronze and expires
    every older snapshot, the one that stored the batch's instant too: its marker keeps the
    instant, so the restart still writes the batch's dead letters (ARCHITECTURE §8)."""
    stream = "faulted_then_maintained"
    pipeline, _ = killed_after_bronze(settings, tmp_path, stream, seed=85)
    first = bronze_rows(spark, stream)
    assert {r.batch_id for r in first} == {0} and dead_rows(spark, stream) == []

    policy = tmp_path / "maintenance.yml"
    policy.write_text(yaml.safe_dump({"defaults": {"quiet_minutes": 0, "min_input_files": 1,
                                                   "snapshot_retention_hours": 0, "snapshots_to_keep": 1}}))
    [result] = maintenance.maintain(spark, settings, [f"bronze.{stream}"], policies=maintenance.load_policies(policy))
    assert not result.problems and result.committed_markers == 1, maintenance.format_result(result)
    assert writer_snapshots(spark, settings, stream, f"bronze.{stream}", 0) == 0, "the batch's snapshot is still there"

    code, log = run_job(settings, tmp_path, stream, pipeline)
    assert code == 0, log[-3000:]
    assert "without its instant" not in log, log[-3000:]
    good, dead = assert_exactly_once(spark, settings, stream)
    assert {r.key.split("-")[0] for r in dead} == {"corrupt"} and len(dead) == RECORDS // 5
    assert 0 in {r.batch_id for r in dead}, "batch 0's dead letters are missing"
    assert sorted((r.partition, r.offset) for r in good if r.batch_id == 0) == sorted(
        (r.partition, r.offset) for r in first)
    assert_one_instant_per_batch(good, dead)


def test_a_batch_an_older_version_left_in_the_dead_letters_only_is_completed(
        spark, settings, kafka, tmp_path, monkeypatch):
    """Up to commit 488cb33 the job committed a batch's dead letters first and bronze second, so a
    crash between the two left the batch in the dead letters only; this version finishes such a
    batch per offset, with the dead letters' instant (ARCHITECTURE §8). The state is made as that
    version left it: the kill leaves batch 0 planned in the checkpoint; bronze is dropped (the
    restart creates it again) and batch 0's dead letters are appended as that version did, from
    the batch's offsets decoded by the stream's decoder, under the query's id."""
    stream = "left_in_dead_letters_only"
    pipeline, _ = killed_after_bronze(settings, tmp_path, stream, seed=86)
    spark.sql(f"drop table bronze.{stream} purge")

    monkeypatch.setenv("LAKEHOUSE_PIPELINE_FILE", str(pipeline))
    spec = get_stream(stream)
    ends = checkpoint.batch_offsets(job.checkpoint_location(settings, spec), 0)[spec.topic]
    batch = (spark.read.format("kafka").option("kafka.bootstrap.servers", settings.kafka_bootstrap_servers)
             .option("subscribe", spec.topic).option("startingOffsets", "earliest")
             .option("endingOffsets", json.dumps({spec.topic: {str(p): end for p, end in ends.items()}})).load())
    instant = datetime.now(UTC)
    decoded = decoders.decoder_for(spark, settings, spec).decode(batch, instant)
    failing = dead_letters.to_dead_letters(decoded, stream, 0, F.lit(instant).cast("timestamp"))
    bronze.append(spark, dead_letters.TABLE, failing, query_id(settings, stream), 0)
    left = dead_rows(spark, stream)
    assert len(left) == sum(ends.values()) // 5 and {r.key.split("-")[0] for r in left} == {"corrupt"}

    code, log = run_job(settings, tmp_path, stream, pipeline)
    assert code == 0, log[-3000:]
    good, dead = assert_exactly_once(spark, settings, stream)
    assert "batch 0: already committed: skipped" not in log, log[-3000:]
    assert sorted((r.partition, r.offset) for r in dead if r.batch_id == 0) == sorted(
        (r.partition, r.offset) for r in left), "batch 0's dead letters changed"
    assert len([r for r in good if r.batch_id == 0]) == sum(ends.values()) - len(left), "batch 0 not completed"
    assert writer_snapshots(spark, settings, stream, "bronze.dead_letters", 0) == 1  # nothing more to add
    assert {r.key.split("-")[0] for r in dead} == {"corrupt"} and len(dead) == RECORDS // 5
    assert_one_instant_per_batch(good, dead)
    assert {r.ingested_at for r in good if r.batch_id == 0} == {
        (instant - bronze.EPOCH) // timedelta(microseconds=1)}


def test_a_batch_too_big_to_bring_its_dead_letters_home_finds_them_by_a_second_pass(
        spark, settings, kafka, tmp_path, monkeypatch, caplog):
    """Up to COLLECT_RECORDS records, the bronze pass brings a batch's dead letters home (the
    tests above); a bigger batch finds them by a second pass, with the same instant."""
    stream = "dead_letters_by_second_pass"
    pipeline = tmp_path / "pipeline.yml"
    write_pipeline(pipeline, stream)
    produce(settings, stream, {0: "corrupt", 5: "corrupt"}, seed=84)
    monkeypatch.setenv("LAKEHOUSE_PIPELINE_FILE", str(pipeline))
    monkeypatch.setattr(job, "COLLECT_RECORDS", BATCH - 1)
    with caplog.at_level(logging.INFO, logger="lakehouse.ingest"):
        job.run(spark, settings, [stream], available_now=True, max_offsets_per_trigger=BATCH)
    assert f"{stream} batch 0: {BATCH} records, more than {BATCH - 1}: dead letters by a second pass" in caplog.text
    good, dead = assert_exactly_once(spark, settings, stream)
    assert {r.key.split("-")[0] for r in dead} == {"corrupt"} and len(dead) == RECORDS // 5
    assert {r.batch_id for r in dead} == {0, 1, 2}
    assert_one_instant_per_batch(good, dead)


def test_a_kill_after_the_iceberg_commits_is_skipped_on_restart(spark, settings, kafka, tmp_path):
    stream = "faulted_after_iceberg_commits"
    pipeline = tmp_path / "pipeline.yml"
    write_pipeline(pipeline, stream)
    produce(settings, stream, {0: "corrupt"}, seed=82)
    checkpoint = settings.checkpoint_root / f"bronze_{stream}"

    code, log = run_job(settings, tmp_path, stream, pipeline, fault="after-iceberg-commits")
    assert code == KILLED, log[-3000:]
    assert f"{stream} batch 0: fault point after-iceberg-commits" in log
    # What the crash left: batch 0 in both tables, planned in the checkpoint but not committed there.
    assert (checkpoint / "offsets" / "0").is_file() and not (checkpoint / "commits" / "0").exists()
    assert {r.batch_id for r in bronze_rows(spark, stream)} == {0}
    assert writer_snapshots(spark, settings, stream, f"bronze.{stream}", 0) == 1
    assert writer_snapshots(spark, settings, stream, "bronze.dead_letters", 0) == 1

    code, log = run_job(settings, tmp_path, stream, pipeline)
    assert code == 0, log[-3000:]
    assert f"{stream} batch 0: already committed: skipped" in log, log[-3000:]
    assert (checkpoint / "commits" / "0").is_file()
    assert writer_snapshots(spark, settings, stream, f"bronze.{stream}", 0) == 1, "the replay appended batch 0 again"
    assert writer_snapshots(spark, settings, stream, "bronze.dead_letters", 0) == 1
    good, dead = assert_exactly_once(spark, settings, stream)
    assert {r.key.split("-")[0] for r in dead} == {"corrupt"} and len(dead) == RECORDS // 10
    assert_one_instant_per_batch(good, dead)


def test_a_contract_changed_between_the_kill_and_the_restart_keeps_every_offset_once(
        spark, settings, kafka, tmp_path):
    """Under the first contract `device` is required, under the second `page` instead. In the
    replayed batch 0, a record without `page` was good before the crash and is in bronze: it
    stays there (never also a dead letter); a record without `device` failed before the crash,
    whose dead letter was never committed: it reads now and goes to bronze (never lost); one
    without both fails under the new contract, for `page`. Later batches know only the second
    contract."""
    stream = "faulted_contract_change"
    pipeline = tmp_path / "pipeline.yml"
    write_pipeline(pipeline, stream, required=["event_id", "event_timestamp", "device"])
    produce(settings, stream, {0: "corrupt", 3: "no_device", 6: "no_page", 9: "no_both"}, seed=83)

    code, log = run_job(settings, tmp_path, stream, pipeline, fault="after-bronze")
    assert code == KILLED, log[-3000:]
    first = bronze_rows(spark, stream)
    assert {r.key.split("-")[0] for r in first} == {"good", "no_page"}
    assert dead_rows(spark, stream) == []

    write_pipeline(pipeline, stream, required=["event_id", "event_timestamp", "page"])
    code, log = run_job(settings, tmp_path, stream, pipeline)
    assert code == 0, log[-3000:]
    good, dead = assert_exactly_once(spark, settings, stream)

    side = {r.key: ("bronze", r.batch_id) for r in good} | {r.key: ("dead", r.batch_id) for r in dead}
    wrong = []
    for key, (where, batch_id) in side.items():
        kind = key.split("-")[0]
        expected = "dead" if kind in ("corrupt", "no_both") or (kind == "no_page" and batch_id > 0) else "bronze"
        if where != expected:
            wrong.append((key, batch_id, where))
    assert not wrong, f"{len(wrong)} records on the wrong side: {wrong[:5]}"
    replayed_no_both = [r for r in dead if r.batch_id == 0 and r.key.startswith("no_both")]
    assert replayed_no_both and all(r.error_code == "MISSING_REQUIRED_FIELD" and "page" in r.error_detail
                                    for r in replayed_no_both)
    assert any(r.batch_id == 0 and r.key.startswith("no_device") for r in good)
    assert writer_snapshots(spark, settings, stream, f"bronze.{stream}", 0) == 2, "batch 0's readable rest"
    assert_one_instant_per_batch(good, dead)
    # The kinds really were in batch 0 and after it.
    assert {k.split("-")[0] for k, (_, b) in side.items() if b == 0} >= {"no_device", "no_page"}
    assert any(k.startswith("no_page") and b > 0 for k, (_, b) in side.items())
