"""The bronze ingestion job: one Structured Streaming query per stream, Kafka -> Iceberg.

One generic runner for every stream of the pipeline configuration (lakehouse/contracts/pipeline.yml):
each micro-batch is decoded once by the stream's decoder and appended to the stream's bronze
table in one commit, at most once: the readable records decoded, the unreadable ones as dead
rows beside them (ARCHITECTURE §6-8), with no cache of the batch.
``build_query`` returns the unstarted writer; ``main`` is the command line (`lakehouse ingest`).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import logging
import os
import re
import signal
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamReader, DataStreamWriter
from pyspark.sql.types import StructType

from ingestion import bronze, checkpoint, dead_letters, single_writer
from ingestion.decoders import StreamDecoder, decoder_for
from ingestion.formats.bronze_shape import to_bronze
from ingestion.formats.checks import batch_instant
from ingestion.starting_offsets import AFTER_BRONZE, MODES, resolve_starting_offsets
from lakehouse.contracts.bronze_columns import ERROR_CODE, RESCUED
from lakehouse.contracts.streams import StreamSpec, get_stream, resolve_streams, stream_names
from lakehouse.core import metrics
from lakehouse.core.console import progress
from lakehouse.core.errors import LakehouseError
from lakehouse.core.kafka_admin import admin_client, topic_names
from lakehouse.core.settings import Settings
from lakehouse.core.spark import ensure_namespaces, get_spark

log = logging.getLogger("lakehouse.ingest")


def query_name(spec: StreamSpec) -> str:
    return f"bronze_{spec.name}"


def checkpoint_location(settings: Settings, spec: StreamSpec) -> str:
    return str(settings.checkpoint_root / query_name(spec))


def ensure_tables(spark: SparkSession, spec: StreamSpec, decoder: StreamDecoder) -> list[str]:
    """Create (or evolve) the stream's bronze table, and the dead-letter view over every stream's
    bronze table when this one is new; the changes made."""
    decoder.refresh()
    changes = bronze.ensure_table(spark, spec.bronze_table, decoder.bronze_schema(), spec.partitioning)
    if changes[:1] == [f"created {spec.bronze_table}"]:
        changes += dead_letters.ensure_view(spark)
    return changes


def _current_query_id(spark: SparkSession, name: str) -> str:
    for query in spark.streams.active:
        if query.name == name:
            return query.id
    raise RuntimeError(f"streaming query {name} is not active")


def batch_writer(spark: SparkSession, settings: Settings, spec: StreamSpec, decoder: StreamDecoder | None = None,
                 fault_point: str | None = None, leases: single_writer.CatalogLeases | None = None):
    """The foreachBatch function of a stream: each batch one append to bronze, at most once.

    Nothing of the batch is cached or brought to the driver: the one pass that appends the batch,
    good and dead rows together, also counts it with ``DataFrame.observe``.

    ``spark`` is the session that starts the query: the batch's own session is a clone whose
    query manager does not list the running query, and its id is needed for exactly-once.
    ``fault_point``: tests only (`read_fault_point`), where to kill the process.
    ``leases``: the job's writer leases (`run`); a batch commits only while the stream's is its own.
    """
    decoder = decoder or decoder_for(spark, settings, spec)
    name = query_name(spec)
    tables = _BatchAppender(spark, leases.holder if leases is not None else None)
    query_id: str | None = None

    def write(batch: DataFrame, batch_id: int) -> None:
        nonlocal query_id
        started = time.monotonic()
        query_id = query_id or _current_query_id(spark, name)  # fixed while the query runs
        if leases is not None:
            leases.confirm(spec)  # before anything of the batch is written
        if spec.is_cdc and spec.adds_fields:
            _add_source_fields(spark, spec, decoder, batch, batch_id)
        changes = decoder.refresh()
        if changes:
            # foreachBatch plans every batch afresh: the new schema applies from this batch on.
            log.info("%s: schema changed (%s); evolving bronze, no query restart needed", spec.name, "; ".join(changes))
            for change in bronze.evolve_table(spark, spec.bronze_table, decoder.bronze_schema()):
                log.info("%s: %s", spec.name, change)
            tables.forget_schema(spec.bronze_table)
        before_append = None
        if fault_point == STOP_INSIDE_APPEND_COMMIT and settings.catalog_type == "rest":
            # the commit runs in the server, not in this JVM: stop right before the append instead
            def before_append():
                _stop_driver_once(spark, f"{spec.name} batch {batch_id}")
        try:
            counts = _write_once(spark, spec, decoder, batch, batch_id, query_id, tables, before_append)
        except Exception as exc:
            # The catalog's fence (ARCHITECTURE §8): another job holds the stream's lease now.
            if leases is not None and single_writer.FENCE_REFUSED in str(exc):
                raise leases.refused(spec, batch_id) from None
            raise
        seconds = time.monotonic() - started
        if counts is None:
            log.info("%s batch %d: already committed: skipped", spec.name, batch_id,
                     extra={"stream": spec.name, "batch": batch_id})
            return
        read, dead, reasons, rescued, rescued_fields = counts
        if rescued:
            log.warning("%s batch %d: %s record(s) with field(s) the contract lacks, kept in bronze's %s: %s",
                        spec.name, batch_id, f"{rescued:,}", RESCUED, rescued_fields,
                        extra={"stream": spec.name, "batch": batch_id, "counts": {"rescued": rescued}})
        # the values of the line as fields too (lakehouse/core/logs.py): JSON logs, and a metrics hook
        log.info("%s batch %d: read %s, good %s, dead %s, %.1fs, %s rows/s", spec.name, batch_id,
                 f"{read:,}", f"{read - dead:,}", f"{dead:,}", seconds, f"{read / max(seconds, 1e-9):,.0f}",
                 extra={"stream": spec.name, "batch": batch_id, "seconds": round(seconds, 3),
                        "counts": {"read": read, "good": read - dead, "dead": dead, "rescued": rescued}})
        if metrics.serving():
            metrics.batch_committed(spec.name, read - dead, reasons, time.time())
        # Spark commits the checkpoint once this function returns.
        _crash_if(fault_point, AFTER_ICEBERG_COMMIT, spec, batch_id)

    return write


def _add_source_fields(spark: SparkSession, spec: StreamSpec, decoder: StreamDecoder, batch: DataFrame,
                       batch_id: int) -> None:
    """An additive CDC stream (ARCHITECTURE §6, "Fields the contract lacks"): the row fields of the
    batch that its contract lacks become contract fields, typed from the change events, recorded
    with the bronze table, before the batch is decoded: the refresh that follows adds their
    columns and this batch fills them. A pass over the batch of its own, on CDC streams only."""
    found, untyped, own = decoder.discover(batch)
    if own:
        log.warning("%s batch %d: field(s) of the source table %s named like bronze's own columns (or a column "
                    "the contract renames a source column to), which keep their own values: %s; kept in %s "
                    "(ARCHITECTURE §6)", spec.name, batch_id, spec.source_table,
                    ", ".join(own), RESCUED)
    if untyped:
        log.warning("%s batch %d: field(s) the contract lacks that no column type holds as they are (nested, "
                    "bytes, only nulls so far, or several JSON types): %s; kept in %s", spec.name, batch_id,
                    ", ".join(untyped), RESCUED)
    if not found:
        return
    # a change event carries a row only when the row changes: after ADD COLUMN ... DEFAULT the rows
    # not changed since hold the default at the source and null here until they change
    again = (f"`lakehouse cdc snapshot {spec.name}` reads the table again" if spec.format == "debezium"
             else "reload the table from the DMS task")
    log.warning("%s batch %d: the source added field(s) %s: added to the stream's columns (contract: additive); "
                "rows the source has not changed since are null in them (a DEFAULT the ALTER filled in sends no "
                "change): %s to bring those in", spec.name, batch_id,
                ", ".join(f"{name} {json.dumps(prop)}" for name, prop in found.items()), again)
    bronze.record_added_fields(spark, spec.bronze_table, {**decoder.added, **found})
    decoder.add_fields(found)


class _BatchAppender:
    """Appends a batch to a table once (ARCHITECTURE §8), knowing each table's last committed
    batch and schema without asking the catalog on every batch.

    The last committed batch is read from the table's snapshots at the first batch after a
    start; from then on this process is the query's only writer and its batches commit in
    order, so it keeps count itself. The schema is read once and again only after this job
    evolved the table, or when an append is refused because another writer evolved it.
    """

    def __init__(self, spark: SparkSession, lease_holder: str | None = None):
        self.spark = spark
        self.lease_holder = lease_holder  # every append names it: the catalog fences it (ARCHITECTURE §8)
        self.last: dict[tuple[str, str], int | None] = {}
        self.schemas: dict[str, StructType] = {}

    def includes(self, table: str, query_id: str, batch_id: int) -> bool:
        if (table, query_id) not in self.last:
            self.last[(table, query_id)] = bronze.last_committed_batch(self.spark, table, query_id)
        last = self.last[(table, query_id)]
        return last is not None and last >= batch_id

    def forget_schema(self, table: str) -> None:
        self.schemas.pop(table, None)

    def append(self, table: str, rows: DataFrame, query_id: str, batch_id: int) -> None:
        known = table in self.schemas
        schema = self.schemas.get(table) or self.spark.table(table).schema
        try:
            bronze.append(self.spark, table, rows, query_id, batch_id, schema, self.lease_holder)
        except AnalysisException:
            if not known:
                raise
            # Refused before anything was written: evolved by someone else meanwhile.
            schema = self.spark.table(table).schema
            bronze.append(self.spark, table, rows, query_id, batch_id, schema, self.lease_holder)
        self.schemas[table] = schema
        self.last[(table, query_id)] = batch_id


def _write_once(spark, spec, decoder: StreamDecoder, batch: DataFrame, batch_id, query_id,
                tables: _BatchAppender, before_append=None) -> tuple[int, int, dict[str, int], int, str] | None:
    """The batch in one append to bronze, good and dead rows together (ARCHITECTURE §8): (records
    read, of which dead, dead by reason, records in bronze with fields the contract lacks in
    ``RESCUED``, those fields' names), or None when an earlier attempt committed it already.
    ``before_append``: tests only (a fault point)."""
    if tables.includes(spec.bronze_table, query_id, batch_id):
        return None
    rows, observation = bronze_rows(decoder, batch, batch_id, datetime.now(UTC))
    if before_append is not None:
        before_append()
    tables.append(spec.bronze_table, rows, query_id, batch_id)
    metrics = observation.get
    reasons = {code: metrics[f"dead {code}"] for code in dead_letters.ERROR_CODES if metrics[f"dead {code}"]}
    rescued = (metrics["rescued"], metrics["rescued_fields"]) if "rescued" in metrics else (0, "")
    return metrics["read"], metrics["dead"], reasons, *rescued


def bronze_rows(decoder: StreamDecoder, batch: DataFrame, batch_id: int,
                now: datetime) -> tuple[DataFrame, Observation]:
    """The batch as bronze rows, counted as they are written (`_observed`). ``now``: the one
    instant of the whole batch (its ``INGESTED_AT`` and the checks' "now"). The batch's instant
    and id are kept out of the code Spark generates (formats.batch_constant): every batch's plan
    compiles to the same classes, which the JVM keeps compiled from one batch to the next."""
    counted, observation = _observed(decoder.decode(batch, now))
    return to_bronze(counted, batch_id, batch_instant(now)), observation


def _observed(decoded: DataFrame) -> tuple[DataFrame, Observation]:
    """The decoded batch, counted (records, dead rows and their reasons) as the append goes over it.

    The counts come with the one pass that writes the batch: nothing of it is cached or brought to
    the driver, and the append reads it once (an additive CDC stream's discovery pass,
    `_add_source_fields`, reads it once more before). The observation also keeps the decoding whole under the projection
    that `to_bronze` puts on it (the checks are computed once per record, not once per column).
    """
    observation = Observation()
    metrics = [F.count(F.lit(1)).alias("read"), F.count(ERROR_CODE).alias("dead"),
               *[F.count_if(F.col(ERROR_CODE) == code).alias(f"dead {code}") for code in dead_letters.ERROR_CODES],
               *_rescued_metrics(decoded)]
    return decoded.observe(observation, *metrics), observation


def _rescued_metrics(decoded: DataFrame) -> list:
    """Of the records bound for bronze: how many keep fields the contract lacks in ``RESCUED``,
    and those fields' names (comma-separated); none for a format without the column."""
    if RESCUED not in decoded.columns:
        return []
    kept = F.when(F.col(ERROR_CODE).isNull(), F.col(RESCUED))
    names = F.array_sort(F.array_distinct(F.flatten(F.collect_set(F.json_object_keys(kept)))))
    return [F.count(kept).alias("rescued"), F.concat_ws(", ", names).alias("rescued_fields")]


# Fault points (ARCHITECTURE §8), for tests only: the job kills itself with SIGKILL there, as a
# crash would, so a test can restart it on the exact state a crash there leaves.
FAULT_POINT_VARIABLE = "LAKEHOUSE_FAULT_POINT"
AFTER_ICEBERG_COMMIT = "after-iceberg-commit"  # the batch committed to bronze, the checkpoint not
# `lakehouse dlq replay`: its first stream table's MERGE committed, the other streams' not
AFTER_REPLAY_COMMIT = "after-replay-commit"
# Not a kill: the first batch's append stops the driver (its JVM and this process) with SIGSTOP
# inside the catalog's commit, its data files written, the commit's base read (jvm/catalog
# WriterFence): a driver stalled mid-append, for the test of the writer fence to SIGCONT later.
# On a REST catalog, whose commits run in its server, right before the append instead.
STOP_INSIDE_APPEND_COMMIT = "stop-inside-append-commit"
FAULT_POINTS = (AFTER_ICEBERG_COMMIT, AFTER_REPLAY_COMMIT, STOP_INSIDE_APPEND_COMMIT)
JVM_FAULT_POINT_PROPERTY = "lakehouse.fault-point"  # the JVM system property WriterFence reads


def read_fault_point(environ=os.environ) -> str | None:
    """The fault point a test set (``LAKEHOUSE_FAULT_POINT``), or None; read once, at job start."""
    value = environ.get(FAULT_POINT_VARIABLE, "").strip()
    if not value:
        return None
    if value not in FAULT_POINTS:
        raise LakehouseError(f"{FAULT_POINT_VARIABLE}={value!r} is not a fault point; known: {', '.join(FAULT_POINTS)}")
    return value


_stopped_once: list[bool] = []


def _stop_driver_once(spark: SparkSession, where: str) -> None:
    """STOP_INSIDE_APPEND_COMMIT on a REST catalog, whose commits (and fence) run in its server,
    not in this driver's JVM: the driver (its JVM, then this process) stops with SIGSTOP right
    before the append, the first time only."""
    if _stopped_once:
        return
    _stopped_once.append(True)
    jvm_pid = spark.sparkContext._gateway.proc.pid
    log.warning("%s: fault point %s: stopping this process and its JVM (%d) with SIGSTOP before the append "
                "(%s is set, tests only)", where, STOP_INSIDE_APPEND_COMMIT, jvm_pid, FAULT_POINT_VARIABLE)
    os.kill(jvm_pid, signal.SIGSTOP)
    os.kill(os.getpid(), signal.SIGSTOP)


def _crash_if(fault: str | None, point: str, spec: StreamSpec, batch_id: int) -> None:
    crash_if(fault, point, f"{spec.name} batch {batch_id}")


def crash_if(fault: str | None, point: str, where: str) -> None:
    """Kill this process with SIGKILL, as a crash would, when ``fault`` is ``point``."""
    if fault == point:
        log.warning("%s: fault point %s: killing the process (%s is set, tests only)", where, point,
                    FAULT_POINT_VARIABLE)
        os.kill(os.getpid(), signal.SIGKILL)


def progress_lag(query_progress: dict) -> int | None:
    """Records the topic held beyond what a batch read, when that batch was planned: per
    partition, the source's ``latestOffset`` minus its ``endOffset``, from the query's own
    progress (no call to Kafka). None when the progress lacks them."""
    total = 0
    for source in query_progress.get("sources") or []:
        latest, end = (_offsets(source.get(key)) for key in ("latestOffset", "endOffset"))
        if latest is None or end is None:
            return None
        for topic, partitions in latest.items():
            total += checkpoint.lag(partitions, end.get(topic, {}))
    return total if query_progress.get("sources") else None


def _offsets(value) -> dict[str, dict[int, int]] | None:
    """A source's offsets from a progress report: JSON text, or (PySpark 4.1's progress objects)
    the text of a Python dict, single quotes and all."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            try:
                value = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                return None
    if not isinstance(value, dict):
        return None
    try:
        return {topic: {int(p): int(o) for p, o in partitions.items()} for topic, partitions in value.items()}
    except (AttributeError, TypeError, ValueError):
        return None


# Read tasks per core: 2 (six tasks on two cores) read 7% faster than 1 (benchmarks/RESULTS.md, "minPartitions=6").
READ_TASKS_PER_CORE = 2
# Records per micro-batch and stream unless --max-offsets-per-trigger says otherwise: a backlog
# (an availableNow run, a restart after downtime) is read in batches of this size. A batch
# costs a pass planned and a commit besides its records.
BATCH_RECORDS = 1_000_000


ISOLATION_LEVEL, READ_COMMITTED = "isolation.level", "read_committed"


def read_tasks(spark: SparkSession) -> int:
    """Kafka read tasks per batch (the source's ``minPartitions``): a multiple of the cores."""
    return READ_TASKS_PER_CORE * max(1, spark.sparkContext.defaultParallelism)


def kafka_read_options(settings: Settings) -> dict[str, str]:
    """The Java client options the job reads with; an isolation level other than
    read_committed is refused with one line rather than overridden in silence."""
    options = settings.java_kafka_options()
    if options.get(ISOLATION_LEVEL, READ_COMMITTED) != READ_COMMITTED:
        raise LakehouseError(f"Kafka option {ISOLATION_LEVEL}={options[ISOLATION_LEVEL]} not supported: the job "
                             f"reads {READ_COMMITTED} only (an aborted transaction's records must never land)")
    return options


def kafka_source(
    spark: SparkSession,
    settings: Settings,
    spec: StreamSpec,
    max_offsets_per_trigger: int | None = None,
    starting_offsets: str = "earliest",
) -> DataStreamReader:
    """The stream's Kafka source, as the job reads it (benchmarks/ingest_throughput.py reads the
    same for its raw ceiling)."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", settings.kafka_bootstrap_servers)
        .option("subscribe", spec.topic)
        .option("startingOffsets", starting_offsets)
        # Losing data silently is worse than stopping: offsets expired before they were read fail the query.
        .option("failOnDataLoss", "true")
        # A topic has fewer partitions than the cluster has cores more often than not: split the
        # partitions' offset ranges so every core gets read (and decode, and write) tasks.
        .option("minPartitions", str(read_tasks(spark)))
        # A dead row keeps the record's headers with its bytes (ARCHITECTURE §7).
        .option("includeHeaders", "true")
    )
    for key, value in kafka_read_options(settings).items():
        reader = reader.option(f"kafka.{key}", value)
    # The Java client reads read_uncommitted by default: the records of a transactional
    # producer's aborted transaction would land in bronze. read_committed skips them (and the
    # transaction markers): those offsets hold no record (ARCHITECTURE §7).
    reader = reader.option(f"kafka.{ISOLATION_LEVEL}", READ_COMMITTED)
    return reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger or BATCH_RECORDS))


def build_query(
    spark: SparkSession,
    settings: Settings,
    spec: StreamSpec,
    available_now: bool = False,
    trigger: str | None = None,
    max_offsets_per_trigger: int | None = None,
    starting_offsets: str = "earliest",
    decoder: StreamDecoder | None = None,
    fault_point: str | None = None,
    leases: single_writer.CatalogLeases | None = None,
) -> DataStreamWriter:
    writer = (
        kafka_source(spark, settings, spec, max_offsets_per_trigger, starting_offsets)
        .load().writeStream.queryName(query_name(spec))
        .foreachBatch(batch_writer(spark, settings, spec, decoder, fault_point, leases))
        .option("checkpointLocation", checkpoint_location(settings, spec))
    )
    if available_now:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=trigger or settings.trigger_interval)


def with_transaction_streams(settings: Settings, names: list[str]) -> list[str]:
    """The streams to ingest for ``names`` (``["all"]``: every stream): with each Debezium stream's
    transaction stream (`transactions`), whose models apply a transaction only once its END is in
    bronze (ARCHITECTURE §9, "Transactions"). A transaction stream not named whose topic does not
    exist yet (no transaction written to it yet) is left out, with a warning: the changes that
    name a transaction wait for it, those that name none (a snapshot's reads) do not."""
    chosen = stream_names() if names == ["all"] else list(names)
    named = set() if names == ["all"] else set(chosen)
    specs = resolve_streams(chosen)
    wanted = dict.fromkeys([spec.transactions for spec in specs if spec.transactions]
                           + [spec.name for spec in specs if spec.is_transactions])
    existing = None
    for name in (name for name in wanted if name not in named):
        existing = topic_names(admin_client(settings), settings) if existing is None else existing
        topic = get_stream(name).topic
        if topic in existing:
            chosen += [] if name in chosen else [name]
        else:
            chosen = [other for other in chosen if other != name]
            log.warning("%s: the transaction topic %s does not exist yet: not ingested; changes that name a "
                        "transaction wait for it (ARCHITECTURE §9, \"Transactions\")", name, topic)
    return list(dict.fromkeys(chosen))


def check_topic(settings: Settings, topic: str) -> None:
    if topic not in topic_names(admin_client(settings), settings):
        raise LakehouseError(f"topic {topic!r} does not exist on {settings.kafka_bootstrap_servers}: "
                             f"produce to it first (`lakehouse produce {topic}`)")


def run(
    spark: SparkSession,
    settings: Settings,
    names: list[str],
    available_now: bool = False,
    trigger: str | None = None,
    max_offsets_per_trigger: int | None = None,
    starting_offsets: str = AFTER_BRONZE,
    fault_point: str | None = None,
) -> None:
    """Start one query per stream in this Spark application and wait for them. ``starting_offsets``:
    where a new checkpoint starts (ingestion/starting_offsets.py). ``fault_point``: tests only,
    where the job kills itself (`read_fault_point`; only `main` reads it)."""
    specs = resolve_streams(with_transaction_streams(settings, names))
    with single_writer.local_locks(settings, specs):
        for spec in specs:
            check_topic(settings, spec.topic)
        if metrics.serve(settings):
            for spec in specs:
                if (commit := checkpoint.last_commit(checkpoint_location(settings, spec))) is not None:
                    metrics.last_commit(spec.name, commit.committed_at.timestamp())
        dead_letters.refuse_old_table(spark)  # before anything is written in the old shape
        decoders = {spec.name: decoder_for(spark, settings, spec) for spec in specs}
        # A table is created before its lease is taken (the lease is one of its properties),
        # and evolved after: a job refused must not have changed the running one's table.
        created = {spec.name for spec in specs if not spark.catalog.tableExists(spec.bronze_table)}
        for spec in specs:
            if spec.name in created:
                for change in ensure_tables(spark, spec, decoders[spec.name]):
                    log.info("%s: %s", spec.name, change)
        if fault_point == STOP_INSIDE_APPEND_COMMIT:  # set in this job's own JVM only
            spark.sparkContext._jvm.java.lang.System.setProperty(JVM_FAULT_POINT_PROPERTY, fault_point)
        leases = single_writer.CatalogLeases(spark, settings, specs)
        leases.acquire()
        try:
            for spec in specs:
                if spec.name not in created:
                    for change in ensure_tables(spark, spec, decoders[spec.name]):
                        log.info("%s: %s", spec.name, change)
            _run_queries(spark, settings, specs, decoders, leases, available_now, trigger, max_offsets_per_trigger,
                         starting_offsets, fault_point)
        finally:
            leases.release()


def _run_queries(spark: SparkSession, settings: Settings, specs: list[StreamSpec],
                 decoders: dict[str, StreamDecoder], leases: single_writer.CatalogLeases, available_now: bool,
                 trigger: str | None, max_offsets_per_trigger: int | None, start_mode: str,
                 fault_point: str | None) -> None:
    # Read with the leases held: no other job writes bronze between this and the query's start.
    # The session's "a query terminated" record may hold another query's failure (an earlier
    # run in this process): cleared, else the first wait below would end this run at once.
    spark.streams.resetTerminated()
    starts = {spec.name: resolve_starting_offsets(spark, settings, spec, checkpoint_location(settings, spec),
                                                  start_mode) for spec in specs}
    queries = [
        build_query(spark, settings, spec, available_now, trigger, max_offsets_per_trigger, starts[spec.name],
                    decoders[spec.name], fault_point, leases).start()
        for spec in specs
    ]
    log.info("ingesting %s (%s)", ", ".join(spec.name for spec in specs),
             "available now" if available_now else f"every {trigger or settings.trigger_interval}")
    stop = _StopOnSignal()
    catch_up = contextlib.ExitStack()  # a bar of records read, on a terminal, for --available-now
    advance = catch_up.enter_context(progress("catch-up: records read", show=available_now))
    counted: dict[str, int] = {}
    lags = _LagLog(specs, queries)
    lost: single_writer.LeaseLost | None = None  # found by a renewal
    try:
        # Wait in short slices so a stop request is seen within a second. One failed query
        # stops them all; its error is reported below.
        while not stop.requested and (
                all(query.isActive for query in queries)
                or (available_now and any(query.isActive for query in queries))):
            try:
                spark.streams.awaitAnyTermination(1)
            except StreamingQueryException:
                # Only a failure of one of these queries stops them: the session is shared
                # (tests, `lakehouse demo`), and another query's failure is not this run's.
                if any(query.exception() is not None for query in queries):
                    break
            finally:
                spark.streams.resetTerminated()
            if available_now:
                advance(_records_of_new_batches(queries, counted))
            lags.log_changes()
            _observe(specs, queries)
            try:
                leases.renew_if_due()
            except single_writer.LeaseLost as exc:
                lost = exc  # another job took the stream over: stop below
                break
        if lost is not None and settings.catalog_type == "jdbc":
            # On the project's JDBC catalog a batch still running ends first (for the lease time
            # at most): the catalog refuses its commit (the fence), and its error, which names the
            # batch, is the one reported below. A REST catalog's server may not fence: stopping the
            # queries at once cancels the batch's write (ARCHITECTURE §8).
            deadline = time.monotonic() + settings.writer_lease_seconds
            for query in queries:
                while query.isActive and query.status["isTriggerActive"] and time.monotonic() < deadline:
                    time.sleep(0.2)
        if stop.requested:
            log.info("stop requested: finishing the running micro-batch (Ctrl-C again to stop at once)")
            for query in queries:
                while query.isActive and query.status["isTriggerActive"] and not stop.forced:
                    time.sleep(0.2)
            # A batch interrupted by a forced stop is not lost: it is replayed, exactly once, on restart.
            log.info("stopping %d queries", len(queries))
    finally:
        catch_up.close()
        stop.restore()
        for query in queries:
            query.stop()
        _observe(specs, queries)  # the last batches' progress, and the queries' states
    for spec, query in zip(specs, queries, strict=True):
        if query.exception() is not None:
            if single_writer.LeaseLost.__name__ in str(query.exception()):
                raise LakehouseError(f"query {query.name} stopped: {_raised_in_batch(query.exception())}")
            if lost is not None:
                continue  # stopped because the lease is lost: what the stop interrupted is no news
            if CONCURRENT_LOG_UPDATE in str(query.exception()):
                # Another job wrote the batch's checkpoint entry: it took the stream over while this
                # one stalled (the batch itself was in bronze already, so this job skipped it).
                raise LakehouseError(f"query {query.name} stopped: stream {spec.name}: another job wrote its "
                                     f"checkpoint meanwhile, {leases.holder_text(spec)}: this job stops")
            location = checkpoint_location(settings, spec)
            problem = checkpoint_problem(location) or _checkpoint_write_error(query.exception(), location)
            if problem:
                raise LakehouseError(_unwritable(location, problem, f" (query {query.name} stopped)"))
            raise LakehouseError(f"query {query.name} failed: {_raised_in_batch(query.exception())}")
    if lost is not None:
        raise lost


CONCURRENT_LOG_UPDATE = "CONCURRENT_STREAM_LOG_UPDATE"  # Spark's error class: another writer of the checkpoint


def _observe(specs: list[StreamSpec], queries) -> None:
    """Hand the queries' progress to the metrics endpoint, when there is one."""
    if metrics.serving():
        for spec, query in zip(specs, queries, strict=True):
            metrics.observe_query(spec.name, query, progress_lag)


def _raised_in_batch(exc) -> str:
    """The line of the project's own error (LeaseLost, LakehouseError: a schema refused at a
    batch...) out of the Python traceback a query's exception carries, whose first line is only
    Spark's "error in the user provided function"; else that first line."""
    text = str(getattr(exc, "desc", None) or exc)
    for name in (single_writer.LeaseLost.__name__, LakehouseError.__name__):
        lines = [line for line in text.splitlines() if f"{name}: " in line]
        if lines:
            return lines[-1].split(f"{name}: ", 1)[1].strip()
    return _first_line(exc)


def _records_of_new_batches(queries, counted: dict[str, int]) -> int:
    """Records read by the batches finished since the last call (``counted``: last batch id per query)."""
    records = 0
    for query in queries:
        for batch in query.recentProgress:  # the latest batches only, at most 100: a call per second keeps up
            if batch["batchId"] > counted.get(query.id, -1):
                counted[query.id] = batch["batchId"]
                records += batch["numInputRows"]
    return records


def checkpoint_problem(location: str) -> str | None:
    """Why a local checkpoint folder cannot be written (the OS error: disk full, read-only,
    permissions), or None. Spark's own error for it is a deep stack; this names the cause."""
    if "://" in location:
        return None  # remote checkpoints: Spark's error is all there is
    try:
        Path(location).mkdir(parents=True, exist_ok=True)
        # Some room, synced: a full disk still takes an empty file, and takes back the few
        # blocks of the temporary file Spark removed when its write failed.
        with tempfile.NamedTemporaryFile(dir=location, prefix=".write-probe-") as probe:
            probe.write(b"\0" * 262144)
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


_DISK_ERRORS = ("No space left on device", "Read-only file system", "Permission denied", "Disk quota exceeded")


def _checkpoint_write_error(exc, location: str) -> str | None:
    """The OS error of a failed checkpoint write in a query's exception (and JVM stack), if
    that is why the query stopped."""
    text = f"{exc}\n{getattr(exc, '_stackTrace', '') or ''}"
    if not any(where in text for where in ("HDFSMetadataLog", "CheckpointFileManager", location)):
        return None
    return next((error for error in _DISK_ERRORS if error in text), None)


def _unwritable(location: str, problem: str, context: str = "") -> str:
    return (f"cannot write the streaming checkpoint at {location}: {problem}{context}. Free space on that "
            "disk or make it writable, then start the job again: it resumes after its last committed batch, "
            "nothing lost and nothing written twice")


class _LagLog:
    """Logs a stream's lag (`progress_lag`) when a new batch's progress shows a different one:
    read from the queries' progress between batches, never inside one."""

    def __init__(self, specs: list[StreamSpec], queries):
        self.streams = list(zip(specs, queries, strict=True))
        self.logged: dict[str, int | None] = {}

    def log_changes(self) -> None:
        for spec, query in self.streams:
            query_progress = query.lastProgress
            if not query_progress or not query_progress.get("numInputRows"):
                continue
            lag = progress_lag(query_progress)
            if lag is not None and lag != self.logged.get(spec.name):
                self.logged[spec.name] = lag
                log.info("%s: lag %s after batch %d (records in Kafka it had not read when it started)",
                         spec.name, f"{lag:,}", query_progress["batchId"])


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
                        help="streams to ingest (from the pipeline file), or 'all'")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--available-now", action="store_true",
                      help="read everything in the topics now, then stop (batch-like)")
    mode.add_argument("--trigger", metavar="INTERVAL",
                      help="processing-time trigger, e.g. '30s' or '1 minute' (default: LAKEHOUSE_TRIGGER_INTERVAL)")
    parser.add_argument("--max-offsets-per-trigger", type=int, metavar="N",
                        help=f"cap on records per micro-batch and stream, all partitions together (default: "
                             f"{BATCH_RECORDS:,})")
    parser.add_argument(
        "--starting-offsets", default=AFTER_BRONZE, choices=MODES,
        help="where a stream with a new checkpoint (none yet, or lost) starts reading its topic; a checkpoint that "
             "started resumes where it stopped. after-bronze (default): after the last offset its bronze table "
             "holds per partition (the earliest offset when bronze holds none), so nothing is ingested twice; "
             "earliest: the whole topic again, on purpose (records bronze holds land twice); latest: only "
             "records produced from now on")


_TRIGGER = re.compile(r"^(\d+)\s*(ms|milliseconds?|s|seconds?|m|minutes?|h|hours?)$")
_UNITS = {"ms": "milliseconds", "s": "seconds", "m": "minutes", "h": "hours"}


def normalize_trigger(text: str | None) -> str | None:
    """'30s' -> '30 seconds', '2 minutes' -> '2 minutes'; anything else is a clear error."""
    if text is None:
        return None
    match = _TRIGGER.match(text.strip().lower())
    if not match:
        raise LakehouseError(f"invalid trigger interval {text!r}: use e.g. 30s, 500ms, 2m, '1 minute'")
    number, unit = match.groups()
    unit = _UNITS.get(unit, unit if unit.endswith("s") else unit + "s")
    return f"{number} {unit}"


def main(args: argparse.Namespace, settings: Settings) -> int:

    # Everything the configuration can get wrong is checked before paying for a Spark start-up.
    names = with_transaction_streams(settings, args.streams)
    specs = [get_stream(name) for name in names]
    if args.max_offsets_per_trigger is not None and args.max_offsets_per_trigger < 1:
        raise LakehouseError("--max-offsets-per-trigger must be at least 1")
    trigger = normalize_trigger(args.trigger or (None if args.available_now else settings.trigger_interval))
    fault = read_fault_point()  # read here only: a job run inside a test process never kills it
    kafka_read_options(settings)
    metrics.serve(settings)  # a port in use is refused before Spark starts
    for spec in specs:
        check_topic(settings, spec.topic)
        location = checkpoint_location(settings, spec)
        if problem := checkpoint_problem(location):
            raise LakehouseError(_unwritable(location, problem))
    # A second job on a stream of this state folder is refused before Spark starts (`run` takes
    # the same locks again, and the catalog's leases, for jobs of other state folders).
    with single_writer.local_locks(settings, resolve_streams(names)):
        spark = get_spark(settings, app_name="lakehouse-ingest")
        ensure_namespaces(spark)
        try:
            run(spark, settings, names, args.available_now, trigger, args.max_offsets_per_trigger,
                args.starting_offsets, fault)
        except LakehouseError:
            # Stopped queries' tasks are cancelled asynchronously and Spark logs each one; stopping
            # the session first lets them finish, so the error line is the last thing printed.
            spark.stop()
            raise
    return 0
