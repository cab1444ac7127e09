"""`lakehouse dlq replay`: decode pending dead letters again with each stream's current decoder;
what now reads replaces its dead row in the stream's bronze table (ARCHITECTURE §7).

Replay is atomic per stream table: one MERGE INTO the bronze table, on the record's Kafka
coordinates, replaces each fixed dead row by its decoded row and updates the bookkeeping of
those that still fail, in one commit. A record is never in both shapes or in neither, even if
the replay is killed half way: a stream whose MERGE committed is done, the others are as they
were, and the next replay takes them up. Replayed records keep their Kafka coordinates (and the
batch id that first read them), so silver's deduplication treats them like any record; their
``INGESTED_AT`` is the replay time, so the incremental silver models see them as new.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

from filelock import FileLock, Timeout
from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_incrementing

from ingestion import bronze, dead_letters, job
from ingestion.decoders import KAFKA_SOURCE_SCHEMA, StreamDecoder, decoder_for
from ingestion.formats.bronze_shape import to_bronze
from ingestion.formats.checks import HEADERS_COLUMN
from lakehouse.contracts.bronze_columns import (
    BATCH_ID,
    DEAD,
    DEAD_AT,
    ERROR_CODE,
    ERROR_DETAIL,
    KAFKA_COORDINATES,
    LAST_REPLAY_AT,
    RAW_HEADERS,
    RAW_KEY,
    RAW_VALUE,
    REPLAY_ATTEMPTS,
    REPLAYED_AT,
    REPLAYED_ERROR_CODE,
    SCHEMA_ID,
)
from lakehouse.contracts.streams import StreamSpec, get_stream
from lakehouse.core.console import progress
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings
from lakehouse.core.sql import quote, quote_table
from lakehouse.operations.dead_letters.filters import Filters
from lakehouse.operations.dead_letters.text import iso

log = logging.getLogger("lakehouse.dlq")

REPLAY_ID_PROPERTY = "lakehouse.replay-id"  # snapshot property of a replay's MERGE
MERGE_ATTEMPTS = 3
COORDINATES = ("topic", "partition", "offset")
BRONZE_COORDINATES = KAFKA_COORDINATES


# --- the report (pure) ---------------------------------------------------------------------------

@dataclass
class StreamReplay:
    stream: str
    bronze_table: str
    selected: int = 0
    replayed: int = 0  # decoded rows now, in place of their dead rows
    still_failing: dict[str, int] = field(default_factory=dict)
    schema_changes: list[str] = field(default_factory=list)


@dataclass
class ReplayReport:
    replay_id: str
    dry_run: bool
    started_at: datetime
    filters: Filters = field(default_factory=Filters)
    streams: list[StreamReplay] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # stream -> why not replayed
    marked: int = 0  # selected dead rows the MERGEs replaced or marked (attempted again)

    @property
    def selected(self) -> int:
        return sum(s.selected for s in self.streams)

    @property
    def replayed(self) -> int:
        return sum(s.replayed for s in self.streams)

    @property
    def still_failing(self) -> int:
        return sum(sum(s.still_failing.values()) for s in self.streams)

    def to_dict(self) -> dict:
        return {"replay_id": self.replay_id, "dry_run": self.dry_run, "started_at": iso(self.started_at),
                "filters": self.filters.to_dict(), "selected": self.selected, "replayed": self.replayed,
                "still_failing": self.still_failing, "marked": self.marked,
                "streams": [asdict(s) for s in self.streams], "skipped": self.skipped}


def _count_outcomes(result: StreamReplay, rows: Iterable[Row]) -> None:
    """Add one stream's outcome counts (rows of replayed, error_code, count) to its report."""
    for row in rows:
        result.selected += row["count"]
        if row.replayed:
            result.replayed += row["count"]
        else:
            result.still_failing[row.error_code] = result.still_failing.get(row.error_code, 0) + row["count"]


# --- the replay ----------------------------------------------------------------------------------

@contextmanager
def replay_lock(settings: Settings) -> Iterator[None]:
    """One replay at a time per lakehouse: two at once would conflict on the same dead rows.

    A second replay is refused at once, not queued. The lock is an flock (filelock on Unix),
    which the kernel releases when its holder dies: a killed replay never leaves it held.
    """
    path = settings.home / "locks" / "dlq-replay.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise LakehouseError(f"another `lakehouse dlq replay` is running on this lakehouse (lock {path}): "
                             "wait for it to finish") from None
    try:
        yield
    finally:
        lock.release()


def replay(spark: SparkSession, settings: Settings, filters: Filters, dry_run: bool = False,
           fault_point: str | None = None) -> ReplayReport:
    """Decode the selected pending dead letters again; what now reads replaces its dead row.
    ``fault_point``: tests only (`ingestion.job.read_fault_point`), where to kill the process."""
    filters = Filters(filters.streams, filters.reasons, filters.since, filters.until, include_replayed=False)
    report = ReplayReport(str(uuid.uuid4()), dry_run, datetime.now(UTC), filters)
    if dry_run:
        return _replay(spark, settings, report)
    with replay_lock(settings):
        return _replay(spark, settings, report, fault_point)


def _replay(spark: SparkSession, settings: Settings, report: ReplayReport,
            fault_point: str | None = None) -> ReplayReport:
    dead_letters.refuse_old_table(spark)
    tables = dead_letters.bronze_tables(spark)
    chosen = {stream: table for stream, table in tables.items()
              if not report.filters.streams or stream in report.filters.streams}
    if not chosen:
        log.info("no bronze table holds dead letters yet: nothing to replay")
        return report
    cached: list[DataFrame] = []
    try:
        with progress("replaying dead letters", total=len(chosen)) as advance:
            for name, table in chosen.items():
                advance(0, description=f"replaying {name}")
                marked = _replay_stream(spark, settings, report, name, table, cached)
                report.marked += marked
                advance()
                if marked:  # a stream table committed
                    job.crash_if(fault_point, job.AFTER_REPLAY_COMMIT, name)
    finally:
        for frame in cached:
            frame.unpersist()
    return report


def _current_snapshot(spark: SparkSession, table: str) -> int | None:
    rows = spark.sql(f"select snapshot_id from {quote_table(table)}.refs where name = 'main'").collect()
    return rows[0].snapshot_id if rows else None


def _pinned_selection(spark: SparkSession, stream: str, table: str, filters: Filters) -> DataFrame | None:
    """The stream's selected pending dead letters, in the view's shape, read at one snapshot: the
    ingestion may append more meanwhile; those wait for the next replay. None: no snapshot."""
    snapshot = _current_snapshot(spark, table)
    if snapshot is None:
        return None
    pinned = spark.sql(f"select * from {quote_table(table)} version as of {int(snapshot)}").where(DEAD)
    listed = pinned.selectExpr(*dead_letters.view_columns(stream, SCHEMA_ID in pinned.columns))
    return listed.where(filters.where_sql())


def _replay_stream(spark: SparkSession, settings: Settings, report: ReplayReport, name: str, table: str,
                   cached: list[DataFrame]) -> int:
    """Decode one stream's selected dead letters and MERGE the outcome into its bronze table in
    one commit; the dead rows it replaced or marked. Frames it persists go to ``cached``."""
    try:
        spec = get_stream(name)
    except LakehouseError as exc:
        report.skipped[name] = str(exc)
        log.warning("%s: skipped: %s", name, exc)
        return 0
    selected = _pinned_selection(spark, name, table, report.filters)
    if selected is None:
        return 0
    records = _distinct_records(selected).persist()
    cached.append(records)
    if records.isEmpty():
        return 0
    result = StreamReplay(name, spec.bronze_table)
    report.streams.append(result)
    decoder = _current_decoder(spark, settings, spec, result, report.dry_run)
    decoded = decoder.decode(_as_kafka_source(spark, records), report.started_at).persist()
    cached.append(decoded)
    _count_outcomes(result, decoded.groupBy(F.col(ERROR_CODE).isNull().alias("replayed"),
                                            F.col(ERROR_CODE).alias("error_code")).count().collect())
    log.info("%s: %d dead letter(s) selected: %d read now, %d still failing", name, result.selected,
             result.replayed, sum(result.still_failing.values()))
    if report.dry_run:
        return 0
    _merge(spark, spec, report, _replacements(spark, spec, report, records, decoded))
    return result.selected


def _current_decoder(spark: SparkSession, settings: Settings, spec: StreamSpec, result: StreamReplay,
                     dry_run: bool) -> StreamDecoder:
    """The stream's decoder with its schemas as they are now; a real replay also evolves the
    stream's bronze table to them, as the ingestion does."""
    decoder = decoder_for(spark, settings, spec)
    if dry_run:
        decoder.refresh()
    else:
        result.schema_changes = job.ensure_tables(spark, spec, decoder)
        for change in result.schema_changes:
            log.info("%s: %s", spec.name, change)
    return decoder


def _distinct_records(selected: DataFrame) -> DataFrame:
    """One row per Kafka record (a record read twice, by a reset checkpoint, has two dead rows,
    and a MERGE takes one source row per target), with what its dead row recorded."""
    return (selected.groupBy(*COORDINATES)
            .agg(F.min("batch_id").alias("batch_id"), F.first("key").alias("key"),
                 F.first("value").alias("value"), F.first("headers").alias("headers"),
                 F.first("kafka_timestamp").alias("kafka_timestamp"), F.min("ingested_at").alias("dead_at"),
                 F.first("error_code").alias("dead_code"), F.max("replay_attempts").alias("attempts")))


def _as_kafka_source(spark: SparkSession, records: DataFrame) -> DataFrame:
    """The records as the Kafka source gives them to a decoder (with their headers)."""
    raw = records.select(F.col("key"), F.col("value"), F.col("topic"), F.col("partition").cast("int"),
                         F.col("offset").cast("long"), F.col("kafka_timestamp").alias("timestamp"),
                         F.lit(0).alias("timestampType"), F.col("headers").alias(HEADERS_COLUMN))
    return raw.select(*[F.col(f.name).cast(f.dataType).alias(f.name)
                        for f in spark.createDataFrame([], KAFKA_SOURCE_SCHEMA).schema.fields], HEADERS_COLUMN)


def _replacements(spark: SparkSession, spec: StreamSpec, report: ReplayReport, records: DataFrame,
                  decoded: DataFrame) -> DataFrame:
    """Each record's row as the replay leaves it, in the bronze table's shape: decoded, with the
    batch id that first read it, the replay time as ``INGESTED_AT``, and its history (its bytes,
    when it was found dead, for which reason, how often replayed); or, still failing, its new
    reason."""
    now = F.lit(report.started_at).cast("timestamp")
    history = records.select(*_as_bronze_coordinates(), F.col("batch_id").alias("_first_batch"),
                             "dead_at", "dead_code", "attempts", F.col("key").alias("dead_key"),
                             F.col("value").alias("dead_value"), F.col("headers").alias("dead_headers"))
    # A fixed row keeps the bytes it was read from: `lakehouse dlq show` still shows them.
    rows = (to_bronze(decoded, 0, now).join(history, list(BRONZE_COORDINATES))
            .withColumn(BATCH_ID, F.col("_first_batch"))
            .withColumn(RAW_KEY, F.col("dead_key"))
            .withColumn(RAW_VALUE, F.col("dead_value"))
            .withColumn(RAW_HEADERS, F.col("dead_headers"))
            .withColumn(DEAD_AT, F.col("dead_at"))
            .withColumn(REPLAY_ATTEMPTS, (F.coalesce(F.col("attempts"), F.lit(0)) + 1).cast("int"))
            .withColumn(LAST_REPLAY_AT, now)
            .withColumn(REPLAYED_AT, F.when(F.col(ERROR_CODE).isNull(), now))
            .withColumn(REPLAYED_ERROR_CODE, F.when(F.col(ERROR_CODE).isNull(), F.col("dead_code"))))
    return bronze.conform_to_schema(rows, spark.table(spec.bronze_table).schema)


def _as_bronze_coordinates() -> list[Column]:
    return [F.col(c).alias(b) for c, b in zip(COORDINATES, BRONZE_COORDINATES, strict=True)]


# --- the one commit per stream table -------------------------------------------------------------

# What a replay changes on a dead row whose record still fails: the rest (its bytes, batch,
# ingestion time) stays as the ingestion wrote it. A schema id it lacks is filled from the header.
_STILL_FAILING = (ERROR_CODE, ERROR_DETAIL, REPLAY_ATTEMPTS, LAST_REPLAY_AT)


def _merge_statement(table: str, view: str, columns: list[str]) -> str:
    """Fixed dead rows replaced whole by their decoded rows; still-failing ones get their new
    reason and one more attempt. Only dead rows match (``DEAD``, which also
    prunes the good rows' partitions), so a good row is never touched."""
    on = " and ".join(f"t.{quote(c)} = s.{quote(c)}" for c in BRONZE_COORDINATES)
    fixed = ", ".join(f"t.{quote(c)} = s.{quote(c)}" for c in columns)
    failing = ", ".join(f"t.{quote(c)} = s.{quote(c)}" for c in _STILL_FAILING)
    if SCHEMA_ID in columns:
        failing += f", t.{quote(SCHEMA_ID)} = coalesce(t.{quote(SCHEMA_ID)}, s.{quote(SCHEMA_ID)})"
    return f"""
        merge into {quote_table(table)} t
        using {view} s
        on {on} and t.{quote(ERROR_CODE)} is not null
        when matched and s.{quote(ERROR_CODE)} is null then update set {fixed}
        when matched then update set {failing}
    """


def _merge(spark: SparkSession, spec: StreamSpec, report: ReplayReport, rows: DataFrame) -> None:
    view = f"lakehouse_dlq_replay_{report.replay_id.replace('-', '')}_{spec.name}"
    rows.createOrReplaceTempView(view)
    statement = _merge_statement(spec.bronze_table, view, rows.columns)
    log.info("%s: replacing or marking its dead rows in %s, in one commit", spec.name, spec.bronze_table)
    # A concurrent commit to the same partitions makes Iceberg refuse the MERGE; planned again
    # from the latest snapshot, it is safe to retry. Any other error is raised at once.
    merge = Retrying(
        stop=stop_after_attempt(MERGE_ATTEMPTS), wait=wait_incrementing(start=1, increment=1), reraise=True,
        retry=retry_if_exception(lambda exc: any(word in str(exc) for word in
                                                 ("ValidationException", "CommitFailedException", "conflicting"))),
        before_sleep=lambda state: log.warning(
            "the replay's MERGE conflicted with another commit (%s); retrying",
            str(state.outcome.exception()).strip().splitlines()[0][:200]),
    )
    spark.conf.set(f"spark.sql.iceberg.snapshot-property.{REPLAY_ID_PROPERTY}", report.replay_id)
    try:
        merge(spark.sql, statement)
    finally:
        spark.conf.unset(f"spark.sql.iceberg.snapshot-property.{REPLAY_ID_PROPERTY}")
        spark.catalog.dropTempView(view)
