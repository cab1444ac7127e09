"""Where a stream's new checkpoint starts reading its topic (ARCHITECTURE §8, "A new checkpoint").

Spark's Kafka source takes its ``startingOffsets`` only when the checkpoint is new: it records
the offsets it started from in ``sources/0/0`` and a restart resumes from the checkpoint. A
checkpoint lost, deleted or moved away while bronze holds the topic would read the whole topic
again, every record a second time in bronze. So a new checkpoint starts, by default
(``after-bronze``), right after the last offset bronze holds per partition of the topic (good
and dead rows both), saying so in a warning line that names those offsets; a partition bronze
has none of starts at its earliest offset. A partition whose end is below what bronze holds
(the topic recreated or truncated) or whose first offset is past bronze's next one (records
gone with retention before bronze had them) is refused with one line, as ``failOnDataLoss``
would stop a running query. ``earliest`` and ``latest`` are the operator's explicit choice,
taken with a warning when bronze holds the topic (every record again; the records since
bronze's last offsets skipped).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from pyspark.sql import SparkSession

from ingestion import bronze
from lakehouse.contracts.streams import StreamSpec
from lakehouse.core.errors import LakehouseError
from lakehouse.core.kafka_admin import watermarks
from lakehouse.core.settings import Settings

log = logging.getLogger("lakehouse.ingest")

AFTER_BRONZE, EARLIEST, LATEST = "after-bronze", "earliest", "latest"
MODES = (AFTER_BRONZE, EARLIEST, LATEST)
EARLIEST_OFFSET = -2  # Spark's startingOffsets JSON: -2 is a partition's earliest offset
REREAD_FLAG = "--starting-offsets earliest"


@dataclass(frozen=True)
class Start:
    option: str  # the Kafka source's startingOffsets: earliest, latest, or JSON offsets per partition
    warning: str | None = None


def checkpoint_started(spark: SparkSession, location: str) -> bool:
    """Whether the query at ``location`` started before: its Kafka source recorded where it began
    (``sources/0/0``), so Spark ignores ``startingOffsets``. Read through Spark's file systems:
    a checkpoint on object storage too."""
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(f"{location.rstrip('/')}/sources/0/0")
    return bool(path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).exists(path))


def _offsets_text(offsets: dict[int, int]) -> str:
    return ", ".join(f"{partition}: {offset:,}" for partition, offset in sorted(offsets.items()))


def plan(spec: StreamSpec, location: str, mode: str, bronze_last: dict[int, int],
         marks: dict[int, tuple[int, int]]) -> Start:
    """Where a new checkpoint at ``location`` starts. ``bronze_last``: per partition of the
    stream's topic, the last offset its bronze table holds; ``marks``: per partition of the
    topic, (its first offset still held, its next offset). Pure."""
    table, topic = spec.bronze_table, spec.topic
    held = f"{table} holds topic {topic} up to offsets {_offsets_text(bronze_last)} (partition: offset)"
    if mode == EARLIEST:
        return Start(EARLIEST, bronze_last and (
            f"{spec.name}: new checkpoint at {location}, {REREAD_FLAG}: {held}; the whole topic is read again "
            f"and every record still in it that bronze holds lands there a second time (silver deduplicates; "
            f"the bronze suite's uniqueness check fails on them)") or None)
    if mode == LATEST:
        return Start(LATEST, bronze_last and (
            f"{spec.name}: new checkpoint at {location}, --starting-offsets latest: {held}; the records produced "
            f"after those and before now are skipped") or None)
    if mode != AFTER_BRONZE:
        raise LakehouseError(f"--starting-offsets {mode!r}: choose one of {', '.join(MODES)}")
    if not bronze_last:
        return Start(EARLIEST)
    refuse = (f"stream {spec.name}: its checkpoint at {location} is new and {held}, but")
    for partition, last in sorted(bronze_last.items()):
        if partition not in marks:
            raise LakehouseError(f"{refuse} the topic has no partition {partition} now: it was recreated with "
                                 f"fewer partitions. Nothing is read (failOnDataLoss); to read it as it is now, from "
                                 f"its start: {REREAD_FLAG} (its offsets are not the old ones that bronze holds)")
        first, end = marks[partition]
        if last + 1 > end:
            raise LakehouseError(f"{refuse} partition {partition} ends at offset {end:,}: the topic was recreated "
                                 f"or truncated. Nothing is read (failOnDataLoss); to read it as it is now, from its "
                                 f"start: {REREAD_FLAG} (its offsets are not the old ones that bronze holds)")
        if last + 1 < first:
            raise LakehouseError(f"{refuse} partition {partition} starts at offset {first:,} now: offsets "
                                 f"{last + 1:,} to {first - 1:,} left the topic (retention) before bronze had them. "
                                 "Nothing is read (failOnDataLoss); to go on without them: --starting-offsets latest")
    offsets = {partition: bronze_last[partition] + 1 if partition in bronze_last else EARLIEST_OFFSET
               for partition in marks}
    unseen = sorted(set(marks) - set(bronze_last))
    return Start(json.dumps({topic: {str(p): o for p, o in sorted(offsets.items())}}), (
        f"{spec.name}: new checkpoint at {location} and {held}: reading from the next ones"
        + (f" (partitions {', '.join(map(str, unseen))}, which bronze has none of: from their earliest offset)"
           if unseen else "")
        + f", nothing is ingested twice; to read the whole topic again on purpose: {REREAD_FLAG}"))


def resolve_starting_offsets(spark: SparkSession, settings: Settings, spec: StreamSpec, location: str,
                             mode: str) -> str:
    """The stream's ``startingOffsets`` for its query (a started checkpoint ignores it: ``mode`` as
    is), its warning logged (`plan`)."""
    if checkpoint_started(spark, location):
        return mode if mode != AFTER_BRONZE else EARLIEST
    bronze_last = bronze.last_offsets(spark, spec.bronze_table, spec.topic)
    start = plan(spec, location, mode, bronze_last, watermarks(settings, spec.topic) if bronze_last else {})
    if start.warning:
        log.warning("%s", start.warning, extra={"stream": spec.name})
    return start.option
