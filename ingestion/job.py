"""The bronze ingestion job: one Structured Streaming query per stream, Kafka -> Iceberg.

Each micro-batch is decoded once, then split: readable records append to the stream's
bronze table, the rest to bronze.dead_letters (DESIGN §6-8). ``build_query`` returns the
unstarted writer; ``main`` is the command line (`lakehouse ingest`).
"""

from __future__ import annotations

import argparse
import logging
import signal
import time
from datetime import UTC, datetime

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter

from ingestion import bronze, dead_letters
from ingestion.decode import decode_json, to_bronze
from ingestion.streams import STREAMS, StreamSpec, get_stream, json_contract
from lakehouse.config import Settings
from lakehouse.errors import LakehouseError
from lakehouse.kafka_admin import admin_client, topic_names

log = logging.getLogger("lakehouse.ingest")

BRONZE_EXTRA_COLUMNS = "_rescued string, _kafka_topic string, _kafka_partition int, _kafka_offset bigint, " \
    "_kafka_timestamp timestamp, _kafka_key string, _ingested_at timestamp, _batch_id bigint"


def query_name(spec: StreamSpec) -> str:
    return f"bronze_{spec.name}"


def checkpoint_location(settings: Settings, spec: StreamSpec) -> str:
    return str(settings.checkpoint_root / query_name(spec))


def ensure_tables(spark: SparkSession, spec: StreamSpec) -> None:
    from pyspark.sql.types import StructType, _parse_datatype_string

    contract = json_contract(spec)
    extra: StructType = _parse_datatype_string(BRONZE_EXTRA_COLUMNS)
    schema = StructType([*contract.schema.fields, *extra.fields])
    bronze.ensure_table(spark, spec.bronze_table, schema, (f"days({spec.event_time_column})",))
    bronze.ensure_table(spark, dead_letters.TABLE, dead_letters.SCHEMA, dead_letters.PARTITIONING)


def _current_query_id(spark: SparkSession, name: str) -> str:
    for query in spark.streams.active:
        if query.name == name:
            return query.id
    raise RuntimeError(f"streaming query {name} is not active")


def batch_writer(spark: SparkSession, spec: StreamSpec):
    """The foreachBatch function of a stream: decode once, write bronze and dead letters once.

    ``spark`` is the session that starts the query: the batch's own session is a clone whose
    query manager does not list the running query, and its id is needed for exactly-once.
    """
    contract = json_contract(spec)
    payload_columns = [f.name for f in contract.schema.fields]
    name = query_name(spec)

    def write(batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        query_id = _current_query_id(spark, name)
        # One timestamp for the whole batch, so a replay of it is written identically.
        ingested_at = F.lit(datetime.now(UTC)).cast("timestamp")
        decoded = decode_json(batch, contract, spec.event_time_column).persist()
        try:
            read = decoded.count()
            good = to_bronze(decoded, payload_columns, batch_id, ingested_at)
            bad = dead_letters.to_dead_letters(decoded, spec.name, batch_id, ingested_at)
            bad_count = bad.count()
            wrote_bronze = bronze.append_once(spark, spec.bronze_table, good, query_id, batch_id)
            wrote_dead = bad_count > 0 and bronze.append_once(
                spark, dead_letters.TABLE, bad, query_id, batch_id)
        finally:
            decoded.unpersist()
        seconds = time.monotonic() - started
        skipped = "" if wrote_bronze or wrote_dead or read == 0 else " (already committed: skipped)"
        log.info(
            "%s batch %d: read %d, bronze %d, dead letters %d, %.1fs, %.0f rows/s%s",
            spec.name, batch_id, read, read - bad_count, bad_count, seconds, read / max(seconds, 1e-9), skipped,
        )

    return write


def build_query(
    spark: SparkSession,
    settings: Settings,
    spec: StreamSpec,
    available_now: bool = False,
    trigger: str | None = None,
    max_offsets_per_trigger: int | None = None,
    starting_offsets: str = "earliest",
) -> DataStreamWriter:
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", settings.kafka_bootstrap_servers)
        .option("subscribe", spec.topic)
        .option("startingOffsets", starting_offsets)
        # Losing data silently is worse than stopping: offsets expired before they were read fail the query.
        .option("failOnDataLoss", "true")
    )
    for key, value in settings.kafka_options.items():
        reader = reader.option(f"kafka.{key}", value)
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    writer = (
        reader.load().writeStream.queryName(query_name(spec))
        .foreachBatch(batch_writer(spark, spec))
        .option("checkpointLocation", checkpoint_location(settings, spec))
    )
    if available_now:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=trigger or settings.trigger_interval)


def check_topic(settings: Settings, topic: str) -> None:
    if topic not in topic_names(admin_client(settings), settings):
        raise LakehouseError(f"topic {topic!r} does not exist on {settings.kafka_bootstrap_servers}: "
                             f"produce to it first (`lakehouse produce {topic}`)")


def run(
    spark: SparkSession,
    settings: Settings,
    stream_names: list[str],
    available_now: bool = False,
    trigger: str | None = None,
    max_offsets_per_trigger: int | None = None,
    starting_offsets: str = "earliest",
) -> None:
    """Start one query per stream in this Spark application and wait for them."""
    specs = [get_stream(name) for name in stream_names]
    for spec in specs:
        check_topic(settings, spec.topic)
        ensure_tables(spark, spec)
    queries = [
        build_query(spark, settings, spec, available_now, trigger, max_offsets_per_trigger, starting_offsets).start()
        for spec in specs
    ]
    stop = _StopOnSignal()
    try:
        # Wait in short slices so a stop request is seen within a second. One failed query
        # stops them all; its error is reported below.
        while not stop.requested and (
                all(query.isActive for query in queries)
                or (available_now and any(query.isActive for query in queries))):
            try:
                spark.streams.awaitAnyTermination(1)
            except StreamingQueryException:
                break
            finally:
                spark.streams.resetTerminated()
        if stop.requested:
            log.info("stop requested: finishing the running micro-batch (Ctrl-C again to stop at once)")
            for query in queries:
                while query.isActive and query.status["isTriggerActive"] and not stop.forced:
                    time.sleep(0.2)
            # A batch interrupted by a forced stop is not lost: it is replayed, exactly once, on restart.
            log.info("stopping %d queries", len(queries))
    finally:
        stop.restore()
        for query in queries:
            query.stop()
    for query in queries:
        if query.exception() is not None:
            raise LakehouseError(f"query {query.name} failed: {_first_line(query.exception())}")


class _StopOnSignal:
    """Ctrl-C and SIGTERM ask the wait loop to stop the queries; a second one forces it.

    Only flags: raising from the handler would interrupt a call into the JVM half-way.
    """

    def __init__(self):
        self.requested = self.forced = False
        self.previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)}

    def _handle(self, signum, frame):
        self.forced = self.requested
        self.requested = True

    def restore(self):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def _first_line(exc) -> str:
    text = str(getattr(exc, "desc", None) or exc)
    return text.strip().splitlines()[0][:500] if text.strip() else repr(exc)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("streams", nargs="+", metavar="STREAM",
                        help=f"streams to ingest, or 'all' ({', '.join(sorted(STREAMS))})")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--available-now", action="store_true",
                      help="read everything in the topic now, then stop (batch-like)")
    mode.add_argument("--trigger", metavar="INTERVAL",
                      help="processing-time trigger, e.g. '30 seconds' (default: LAKEHOUSE_TRIGGER_INTERVAL)")
    parser.add_argument("--max-offsets-per-trigger", type=int, metavar="N",
                        help="cap on records per micro-batch (all partitions together)")
    parser.add_argument("--starting-offsets", default="earliest", choices=["earliest", "latest"],
                        help="where a new query starts (a restarted one resumes from its checkpoint)")


def main(args: argparse.Namespace, settings: Settings) -> int:
    from lakehouse.spark import ensure_namespaces, get_spark

    names = sorted(STREAMS) if args.streams == ["all"] else args.streams
    for name in names:
        get_stream(name)  # validate before paying for a Spark start-up
    spark = get_spark(settings, app_name="lakehouse-ingest")
    ensure_namespaces(spark)
    run(spark, settings, names, args.available_now, args.trigger, args.max_offsets_per_trigger,
        args.starting_offsets)
    return 0
