"""Reads of the view bronze.dead_letters (every stream's dead rows, ingestion/dead_letters.py) for
`lakehouse dlq stats`, `list` and `show`, and the records they return (the records and the
summary are plain values, for tests without Spark)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from ingestion import dead_letters
from lakehouse.core.spark import relation_exists
from lakehouse.operations.dead_letters import TABLE
from lakehouse.operations.dead_letters.filters import Filters
from lakehouse.operations.dead_letters.text import escape_bytes, format_time, iso

TIMESTAMP_COLUMNS = ("kafka_timestamp", "ingested_at", "replayed_at", "last_replay_at")
ORDER = ("ingested_at", "stream", "partition", "offset")


def from_micros(micros: int | None) -> datetime | None:
    """A timestamp read as epoch microseconds (not through PySpark, which uses the local zone)."""
    return None if micros is None else datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros)


# --- stats ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Count:
    """Dead letters of one stream and reason, pending or replayed, as one aggregate row."""

    stream: str
    reason: str
    replayed: bool
    count: int
    oldest: datetime | None
    newest: datetime | None


def _bucket(counts: list[Count]) -> dict:
    oldest = [c.oldest for c in counts if c.oldest is not None]
    newest = [c.newest for c in counts if c.newest is not None]
    return {"pending": sum(c.count for c in counts if not c.replayed),
            "replayed": sum(c.count for c in counts if c.replayed),
            "oldest_ingested_at": iso(min(oldest)) if oldest else None,
            "newest_ingested_at": iso(max(newest)) if newest else None}


def summarize(counts: Iterable[Count], filters: Filters | None = None) -> dict:
    """The stats as plain data (what `dlq stats --json` prints)."""
    counts = list(counts)
    streams = {}
    for stream in sorted({c.stream for c in counts}):
        mine = [c for c in counts if c.stream == stream]
        reasons = {reason: _bucket([c for c in mine if c.reason == reason])
                   for reason in sorted({c.reason for c in mine})}
        streams[stream] = {**_bucket(mine), "reasons": reasons}
    return {"filters": (filters or Filters()).to_dict(), "total": _bucket(counts), "streams": streams}


# --- one dead letter -----------------------------------------------------------------------------

@dataclass(frozen=True)
class DeadLetter:
    stream: str
    topic: str
    partition: int
    offset: int
    kafka_timestamp: datetime | None
    key: bytes | None
    value: bytes | None
    error_code: str
    error_detail: str | None
    schema_id: int | None
    ingested_at: datetime | None
    batch_id: int
    replayed_at: datetime | None = None
    replay_attempts: int | None = None
    last_replay_at: datetime | None = None

    @property
    def coordinates(self) -> str:
        return f"{self.stream}:{self.partition}:{self.offset}"

    def state(self) -> str:
        attempts = self.replay_attempts or 0
        tried = f"{attempts} attempt{'s' if attempts != 1 else ''}"
        if self.replayed_at is not None:
            return f"replayed {format_time(self.replayed_at)} ({tried})"
        if attempts:
            return f"pending ({tried}, last {format_time(self.last_replay_at)})"
        return "pending"

    def to_dict(self, with_bytes: bool = False) -> dict:
        data = {name: getattr(self, name) for name in (
            "stream", "topic", "partition", "offset", "error_code", "error_detail", "schema_id", "batch_id",
            "replay_attempts")}
        for name in ("kafka_timestamp", "ingested_at", "replayed_at", "last_replay_at"):
            data[name] = iso(getattr(self, name))
        data["state"] = "replayed" if self.replayed_at is not None else "pending"
        for name in ("key", "value"):
            raw = getattr(self, name)
            data[f"{name}_size"] = None if raw is None else len(raw)
            if with_bytes:
                data[f"{name}_hex"] = None if raw is None else raw.hex()
                data[f"{name}_text"] = None if raw is None else escape_bytes(raw)
        return data


# --- Spark reads ---------------------------------------------------------------------------------

def _selected(spark: SparkSession, filters: Filters) -> DataFrame | None:
    """The view's rows the filters select, with the columns a `DeadLetter` has; None when no
    stream table exists yet (so neither does the view)."""
    dead_letters.refuse_old_table(spark)
    if not relation_exists(spark, TABLE):
        return None
    return dead_letters.read_view(spark).where(filters.where_sql()).select(*DeadLetter.__dataclass_fields__)


def _timestamps_as_micros(frame: DataFrame) -> DataFrame:
    return frame.select(*[F.unix_micros(c).alias(c) if c in TIMESTAMP_COLUMNS else F.col(f"`{c}`")
                          for c in frame.columns])


def _dead_letter(row: Row) -> DeadLetter:
    values = row.asDict()
    for name in TIMESTAMP_COLUMNS:
        values[name] = from_micros(values[name])
    for name in ("key", "value"):
        values[name] = None if values[name] is None else bytes(values[name])
    return DeadLetter(**values)


def stats(spark: SparkSession, filters: Filters) -> dict:
    selected = _selected(spark, filters)
    if selected is None:
        return summarize([], filters)
    rows = (selected.groupBy("stream", F.col("error_code").alias("reason"),
                             F.col("replayed_at").isNotNull().alias("replayed"))
            .agg(F.count(F.lit(1)).alias("count"), F.unix_micros(F.min("ingested_at")).alias("oldest"),
                 F.unix_micros(F.max("ingested_at")).alias("newest"))
            .collect())
    return summarize([Count(r.stream, r.reason, bool(r.replayed), r["count"], from_micros(r.oldest),
                            from_micros(r.newest)) for r in rows], filters)


def list_dead_letters(spark: SparkSession, filters: Filters, limit: int) -> tuple[list[DeadLetter], int]:
    """The first ``limit`` (0: all) matching dead letters, oldest first, and how many match."""
    selected = _selected(spark, filters)
    if selected is None:
        return [], 0
    ordered = _timestamps_as_micros(selected.orderBy(*ORDER))
    rows = (ordered.limit(limit + 1) if limit else ordered).collect()
    letters = [_dead_letter(r) for r in rows[:limit or None]]
    total = len(rows) if len(rows) <= len(letters) else selected.count()
    return letters, total


def find_dead_letters(spark: SparkSession, stream: str, partition: int, offset: int,
                      filters: Filters) -> list[DeadLetter]:
    selected = _selected(spark, filters)
    if selected is None:
        return []
    rows = _timestamps_as_micros(
        selected.where((F.col("stream") == stream) & (F.col("partition") == partition) & (F.col("offset") == offset))
        .orderBy(*ORDER)).collect()
    return [_dead_letter(r) for r in rows]
