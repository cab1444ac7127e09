"""The exactly-once invariant read back from the stream's bronze table (ARCHITECTURE §7, §8):
each offset of a topic is one row of it, good or dead, never two, never none.

A count (bronze rows = records produced) cannot see it: a record lost and another landed twice
cancel out. So this compares coordinates: within the offset ranges a caller names (per
partition, first offset to end offset, end excluded), every (partition, offset) must be there
exactly once, as a good row or a dead one (a dead row a replay fixed is a good row now,
`lakehouse dlq replay`). The demo checks the ranges it produced; the chaos tests whole topics.

Not every offset holds a record: a transactional producer's commit and abort markers take an
offset each, and an aborted transaction's records are never read (the job reads
``read_committed``, ARCHITECTURE §7). Given the settings to reach Kafka, offsets not in bronze
are looked up in the topic as ``read_committed`` reads it, and
those that hold no committed record are counted apart (``no_record``), not as missing.

The counting runs in Spark (a group-by over the coordinates); only the totals and a few
examples of each failure come back to the driver.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakehouse.contracts.bronze_columns import ERROR_CODE, KAFKA_OFFSET, KAFKA_PARTITION, KAFKA_TOPIC
from lakehouse.contracts.streams import StreamSpec
from lakehouse.core.settings import Settings
from lakehouse.core.spark import relation_exists

EXAMPLES = 5  # coordinates shown per kind of failure

Coordinate = tuple[int, int]  # (partition, offset)


@dataclass(frozen=True)
class OffsetCheck:
    """Where the offsets of the ranges landed; `holds` when each is there exactly once."""

    stream: str
    expected: int  # offsets in the ranges that hold a record
    bronze: int  # good bronze rows at those offsets
    dead_letters: int  # dead bronze rows at those offsets
    missing: int  # offsets without a row
    duplicated: int  # offsets with more than one row (good or dead)
    missing_examples: tuple[Coordinate, ...] = ()  # the first few, in offset order
    duplicated_examples: tuple[tuple[int, int, int, int], ...] = ()  # (partition, offset, bronze, dead)
    no_record: int = 0  # offsets of transaction markers and aborted records: nothing to land

    @property
    def holds(self) -> bool:
        return self.missing == 0 and self.duplicated == 0

    def describe(self) -> str:
        """The failures in one line, with examples ('' when the invariant holds)."""
        parts = []
        if self.missing:
            parts.append(f"{self.missing:,} missing (e.g. {', '.join(f'{p}:{o}' for p, o in self.missing_examples)})")
        if self.duplicated:
            shown = ", ".join(f"{p}:{o} {b}x bronze {d}x dead" for p, o, b, d in self.duplicated_examples)
            parts.append(f"{self.duplicated:,} duplicated (e.g. {shown})")
        return "; ".join(parts)


def offset_ranges(start: Mapping[int, int], end: Mapping[int, int]) -> dict[int, tuple[int, int]]:
    """{partition: (first, end)} between two readings of a topic's end offsets; a partition
    missing from `start` (the topic or the partition did not exist yet) starts at 0."""
    return {partition: (start.get(partition, 0), stop) for partition, stop in sorted(end.items())}


def check_every_offset_once(spark, spec: StreamSpec, ranges: Mapping[int, tuple[int, int]],
                            examples: int = EXAMPLES, settings: Settings | None = None) -> OffsetCheck:
    """Counts each (partition, offset) of `ranges` in spec's bronze table, good rows and dead.

    With ``settings``, an offset without a row is looked up in the topic: one that holds no
    committed record (a transaction marker, an aborted record) is ``no_record``, not missing.
    Without them (no broker at hand) every offset counts as a record.
    """
    ranges = {p: (first, end) for p, (first, end) in ranges.items() if end > first}
    expected = sum(end - first for first, end in ranges.values())
    landed = _coordinates(spark, spec).where(_within(ranges))
    counted = (landed.groupBy("partition", "offset")
               .agg(F.sum("in_bronze").alias("bronze"), F.sum("in_dead").alias("dead"))
               .withColumn("n", F.col("bronze") + F.col("dead"))).cache()
    try:
        totals = counted.agg(F.count(F.lit(1)).alias("present"), F.count_if(F.col("n") > 1).alias("duplicated"),
                             F.coalesce(F.sum("bronze"), F.lit(0)).alias("bronze"),
                             F.coalesce(F.sum("dead"), F.lit(0)).alias("dead")).first()
        missing, no_record = expected - totals.present, 0
        duplicates = () if not totals.duplicated else tuple(
            (r.partition, r.offset, r.bronze, r.dead) for r in
            counted.where("n > 1").orderBy("partition", "offset").limit(examples).collect())
        absent = _expected(spark, ranges).join(counted, ["partition", "offset"], "left_anti")
        if missing and settings is not None:  # only then: a topic without transactions has no gaps
            absent = absent.join(_committed_records(spark, settings, spec.topic, ranges),
                                 ["partition", "offset"], "left_semi")
            lost = absent.count()
            missing, no_record = lost, missing - lost
        absent_examples = _first(absent, examples) if missing else ()
    finally:
        counted.unpersist()
    return OffsetCheck(spec.name, expected - no_record, int(totals.bronze), int(totals.dead), missing,
                       int(totals.duplicated), absent_examples, duplicates, no_record)


def _first(coordinates: DataFrame, examples: int) -> tuple[Coordinate, ...]:
    return tuple((r.partition, r.offset) for r in coordinates.orderBy("partition", "offset").limit(examples).collect())


def _committed_records(spark, settings: Settings, topic: str, ranges: Mapping[int, tuple[int, int]]) -> DataFrame:
    """(partition, offset) of every record of the ranges a read_committed consumer reads: the
    offsets of transaction markers and of aborted transactions' records are not among them."""
    reader = (spark.read.format("kafka")
              .option("kafka.bootstrap.servers", settings.kafka_bootstrap_servers)
              .option("assign", json.dumps({topic: sorted(ranges)}))
              .option("startingOffsets", json.dumps({topic: {str(p): first for p, (first, _) in ranges.items()}}))
              .option("endingOffsets", json.dumps({topic: {str(p): end for p, (_, end) in ranges.items()}}))
              # an offset expired before it was read must not pass as "no record"
              .option("failOnDataLoss", "true"))
    for key, value in settings.java_kafka_options().items():
        reader = reader.option(f"kafka.{key}", value)
    return (reader.option("kafka.isolation.level", "read_committed").load()
            .select(F.col("partition").cast("int"), F.col("offset").cast("long")))


def _coordinates(spark, spec: StreamSpec) -> DataFrame:
    """(partition, offset, in_bronze, in_dead) of every row of the stream's bronze table: a good
    row counts in bronze, a dead one in dead letters."""
    if not relation_exists(spark, spec.bronze_table):
        return spark.createDataFrame([], "partition int, offset long, in_bronze int, in_dead int")
    table = spark.table(spec.bronze_table)
    dead = F.col(ERROR_CODE).isNotNull() if ERROR_CODE in table.columns else F.lit(False)
    return table.where(F.col(KAFKA_TOPIC) == spec.topic).select(
        F.col(KAFKA_PARTITION).cast("int").alias("partition"),
        F.col(KAFKA_OFFSET).cast("long").alias("offset"),
        F.when(dead, 0).otherwise(1).alias("in_bronze"), F.when(dead, 1).otherwise(0).alias("in_dead"))


def _within(ranges: Mapping[int, tuple[int, int]]):
    condition = F.lit(False)
    for partition, (first, end) in ranges.items():
        condition = condition | ((F.col("partition") == partition) & (F.col("offset") >= first)
                                 & (F.col("offset") < end))
    return condition


def _expected(spark, ranges: Mapping[int, tuple[int, int]]) -> DataFrame:
    """Every coordinate of the ranges, generated in Spark (a topic may hold millions)."""
    frames = [spark.range(first, end).select(F.lit(partition).cast("int").alias("partition"),
                                              F.col("id").alias("offset"))
              for partition, (first, end) in ranges.items()]
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result
