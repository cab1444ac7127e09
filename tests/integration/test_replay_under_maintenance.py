"""A replayed batch reads the dead letters its first attempt committed (ARCHITECTURE §8). A
maintenance pass with a short snapshot retention can compact that table and expire the snapshot
the read planned from while the read runs, which deletes the files it planned: the read must
plan again from the newest snapshot, not fail the job (seen in the chaos story's CI run: the
restarted job died with FileNotFoundException while `lakehouse maintain` ran).

The race is made exact here: a read is planned over the table's files, then the table is
compacted and its older snapshots expired (their files deleted), then the read runs.
The table is the test's own, so the session's dead letters keep their snapshots.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ingestion import dead_letters, job
from lakehouse.contracts.streams import get_stream

pytestmark = pytest.mark.integration

TABLE = "bronze.dead_letters_under_maintenance"
BATCH = 7


class MaintenanceDuringFirstRead:
    """A session whose first `table()` returns a read planned over the table's data files as they
    are (Spark lists them when the DataFrame is made), then compacts the table and expires every
    older snapshot, which deletes those files, before the caller runs the read."""

    def __init__(self, spark):
        self.spark, self.loads, self.removed = spark, 0, []

    def table(self, name: str):
        self.loads += 1
        if self.loads > 1:
            return self.spark.table(name)
        planned = [row.file_path for row in self.spark.sql(f"select file_path from {name}.files").collect()]
        frame = self.spark.read.schema(dead_letters.SCHEMA).parquet(*planned)
        self.spark.sql(f"call lake.system.rewrite_data_files(table => '{name}', "
                       "options => map('min-input-files', '2'))")
        now = datetime.now(UTC) + timedelta(seconds=1)
        self.spark.sql(f"call lake.system.expire_snapshots(table => '{name}', "
                       f"older_than => timestamp'{now:%Y-%m-%d %H:%M:%S}', retain_last => 1)")
        self.removed = [path for path in planned if not Path(path.removeprefix("file:")).exists()]
        return frame


def test_a_replay_reads_its_dead_letters_again_when_maintenance_removed_their_files(spark, monkeypatch):
    spark.sql(f"drop table if exists {TABLE}")
    spark.createDataFrame([], dead_letters.SCHEMA).writeTo(TABLE).using("iceberg").create()
    instant = datetime(2026, 11, 26, 16, 26, 31, 123456, tzinfo=UTC)
    expected = []
    for commit in range(3):  # three files: compaction has work
        rows = [("user_events", "user_events", commit, offset, None, None, b"x", "INVALID_JSON", None, None,
                 instant, BATCH, None, None, None) for offset in range(2)]
        expected += [(commit, offset) for offset in range(2)]
        spark.createDataFrame(rows, dead_letters.SCHEMA).writeTo(TABLE).append()
    monkeypatch.setattr(dead_letters, "TABLE", TABLE)
    session = MaintenanceDuringFirstRead(spark)

    rows, fixed = job._committed_dead_letters(session, get_stream("user_events"), BATCH)

    try:
        assert sorted(map(tuple, rows.select("partition", "offset").collect())) == expected
        assert fixed == instant
        assert session.removed, "maintenance removed none of the files the first read planned"
        assert session.loads == 2  # the first read lost its files; the second planned anew
    finally:
        rows.unpersist()
        spark.sql(f"drop table if exists {TABLE}")
