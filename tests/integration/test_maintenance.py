"""`lakehouse maintain` against the streaming writer's exactly-once check (ARCHITECTURE §8).

The check reads the query id and batch id that every bronze append leaves in its snapshot's
summary. Expiring snapshots erases those summaries, so maintenance first copies each query's
last committed batch into a table property. The test expires as hard as a policy can (no
retention, keep one snapshot), then makes Spark replay a batch that was committed to Iceberg
but not to the checkpoint (a crash between the two commits), and shows the replay is skipped.
Then it removes the copied marker and shows the same replay duplicates the batch: the marker,
not luck, is what keeps the check valid after expiry.
"""

import logging
import random
from datetime import UTC, datetime

import pytest
import yaml

from ingestion import bronze, job
from lakehouse.contracts.streams import get_stream
from lakehouse.operations import maintenance
from producers import user_events
from producers.delivery import ensure_topic, producer_config

pytestmark = pytest.mark.integration

STREAM = "maintained_events"
BATCH = 40
AGGRESSIVE = {"defaults": {"quiet_minutes": 0, "min_input_files": 2, "snapshot_retention_hours": 0,
                           "snapshots_to_keep": 1, "orphan_min_age_hours": 24}}


@pytest.fixture
def pipeline(tmp_path, monkeypatch):
    document = {"schema_dir": str(user_events.SCHEMA_FILE.parent), "streams": {STREAM: {
        "format": "json", "schema": user_events.SCHEMA_FILE.name, "event_time": "event_timestamp",
        "identity": ["event_id"]}}}
    path = tmp_path / "pipeline.yml"
    path.write_text(yaml.safe_dump(document))
    monkeypatch.setenv("LAKEHOUSE_PIPELINE_FILE", str(path))
    return path


def policies(tmp_path, document) -> maintenance.Policies:
    path = tmp_path / "maintenance.yml"
    path.write_text(yaml.safe_dump(document))
    return maintenance.load_policies(path)


def send_events(settings, n: int, seed: int) -> None:
    from confluent_kafka import Producer

    ensure_topic(settings, STREAM, partitions=1)  # one partition: batches of exactly BATCH records
    rng, now = random.Random(seed), datetime.now(UTC)
    producer = Producer(producer_config(settings))
    for _ in range(n):
        producer.produce(STREAM, user_events.encode(user_events.make_event(rng, now)), b"k")
    assert producer.flush(30) == 0


def ingest(spark, settings) -> None:
    job.run(spark, settings, [STREAM], available_now=True, max_offsets_per_trigger=BATCH)


def writer_snapshots(spark, table) -> int:
    return spark.sql(f"select count(*) from {table}.snapshots "
                     f"where summary['{bronze.WRITER_PROPERTY}'] is not null").first()[0]


def forget_last_checkpoint_commit(settings) -> int:
    """What a crash after the Iceberg commit and before the checkpoint commit leaves behind."""
    commits = settings.checkpoint_root / job.query_name(get_stream(STREAM)) / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    return last


def test_aggressive_expiry_keeps_a_replayed_batch_skipped(spark, settings, kafka, pipeline, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="lakehouse.ingest")
    table = get_stream(STREAM).bronze_table
    send_events(settings, 3 * BATCH, seed=71)
    ingest(spark, settings)
    assert spark.table(table).count() == 3 * BATCH
    files_before = spark.sql(f"select count(*) from {table}.data_files").first()[0]
    assert files_before >= 3

    # With a quiet period, today's partition is left alone: ingestion is still writing it.
    gentle = {"defaults": {"quiet_minutes": 60, "min_input_files": 2}}
    [gentle] = maintenance.maintain(spark, settings, [table], policies=policies(tmp_path, gentle))
    assert gentle.partitions_still_written == 1 and gentle.files_rewritten == 0, gentle
    assert spark.sql(f"select count(*) from {table}.data_files").first()[0] == files_before

    # A dry run says what the aggressive policy would do and commits nothing.
    snapshots = spark.sql(f"select count(*) from {table}.snapshots").first()[0]
    [dry] = maintenance.maintain(spark, settings, [table], dry_run=True, policies=policies(tmp_path, AGGRESSIVE))
    assert f"would compact 1 partition(s), {files_before} files" in dry.actions, dry.actions
    assert any(a.startswith("would expire about") for a in dry.actions) and dry.after is None
    assert spark.sql(f"select count(*) from {table}.snapshots").first()[0] == snapshots

    replayed = forget_last_checkpoint_commit(settings)
    [hard] = maintenance.maintain(spark, settings, [table], policies=policies(tmp_path, AGGRESSIVE))
    assert not hard.problems and not hard.failures, (hard.problems, hard.failures)
    assert hard.files_rewritten >= 3 and hard.after.data_files == 1, maintenance.format_result(hard)
    # every snapshot before the pass expired; the pass's own (compaction, manifests) stay
    assert hard.snapshots_expired >= 3 and hard.after.snapshots <= 2
    assert writer_snapshots(spark, table) == 0  # every summary the check used to read is gone
    assert hard.committed_markers == 1
    assert spark.table(table).count() == 3 * BATCH  # compaction kept every row

    caplog.clear()
    ingest(spark, settings)  # Spark replays the batch whose checkpoint commit was "lost"
    assert any(f"batch {replayed}:" in r.getMessage() and "already committed: skipped" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]
    rows = spark.table(table)
    assert rows.count() == 3 * BATCH
    assert rows.select("_kafka_partition", "_kafka_offset").distinct().count() == 3 * BATCH

    # Control: without the marker the same replay lands twice, so the marker is what held.
    replayed = forget_last_checkpoint_commit(settings)
    maintenance.maintain(spark, settings, [table], policies=policies(tmp_path, AGGRESSIVE))
    markers = [r.key for r in spark.sql(f"show tblproperties {table}").collect()
               if r.key.startswith(bronze.COMMITTED_PROPERTY_PREFIX)]
    assert len(markers) == 1
    spark.sql(f"alter table {table} unset tblproperties ('{markers[0]}')")
    assert writer_snapshots(spark, table) == 0
    ingest(spark, settings)
    assert spark.table(table).count() == 4 * BATCH  # the replayed batch, a second time


def test_a_bad_policy_file_is_one_line_before_spark_starts(tmp_path, monkeypatch):
    import subprocess
    import sys
    from pathlib import Path

    bad = tmp_path / "maintenance.yml"
    bad.write_text(yaml.safe_dump({"defaults": {"orphan_min_age_hours": 1}}))
    env = {**__import__("os").environ, "LAKEHOUSE_MAINTENANCE_FILE": str(bad), "LAKEHOUSE_HOME": str(tmp_path)}
    result = subprocess.run([str(Path(sys.executable).with_name("lakehouse")), "maintain", "--dry-run"],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "orphan_min_age_hours 1 is under 24" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
