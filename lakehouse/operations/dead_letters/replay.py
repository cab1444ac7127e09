"""`lakehouse dlq replay`: decode pending dead letters again with each stream's current
decoder and append the records that now read to the stream's bronze table (ARCHITECTURE §7).

Replay is idempotent and crash safe. Replayed records keep their Kafka coordinates (and the
batch id that first read them), so silver's deduplication treats them like any record; their
``_ingested_at`` is the replay time, so the incremental silver models see them as new. Before
appending, the records are anti-joined with the bronze rows already holding their
coordinates: a crash between the bronze append and the dead-letter update, or a second
replay, never lands a record twice. One MERGE then marks the selected dead letters.
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

from ingestion import bronze, job
from ingestion.dead_letters import PARTITIONING as DEAD_LETTER_PARTITIONING
from ingestion.dead_letters import SCHEMA as DEAD_LETTER_SCHEMA
from ingestion.dead_letters import schema_id
from ingestion.decoders import KAFKA_SOURCE_SCHEMA, StreamDecoder, decoder_for
from ingestion.formats import to_bronze
from lakehouse.contracts.streams import StreamSpec, get_stream
from lakehouse.core.console import progress
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings
from lakehouse.core.spark import relation_exists
from lakehouse.core.sql import quote_table, sql_string, timestamp_sql
from lakehouse.operations.dead_letters import REPLAY_COLUMNS, TABLE
from lakehouse.operations.dead_letters.filters import Filters
from lakehouse.operations.dead_letters.text import iso

log = logging.getLogger("lakehouse.dlq")

REPLAY_ID_PROPERTY = "lakehouse.replay-id"  # snapshot property of a replay's bronze append
MERGE_ATTEMPTS = 3
COORDINATES = ("topic", "partition", "offset")
BRONZE_COORDINATES = ("_kafka_topic", "_kafka_partition", "_kafka_offset")


# --- the report (pure) ---------------------------------------------------------------------------

@dataclass
class StreamReplay:
    stream: str
    bronze_table: str
    selected: int = 0
    replayed: int = 0  # in bronze now: appended by this replay, or found there already
    appended: int = 0
    already_in_bronze: int = 0  # a crash after the bronze append, before the dead letters were marked
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
    marked: int = 0  # selected dead letters the MERGE marked (replayed, or attempted again)

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
    """Add one stream's outcome counts (rows of replayed, in_bronze, error_code, count) to its report."""
    for row in rows:
        result.selected += row["count"]
        if row.in_bronze:
            result.already_in_bronze += row["count"]
            result.replayed += row["count"]
        elif row.replayed:
            result.appended += row["count"]
            result.replayed += row["count"]
        else:
            result.still_failing[row.error_code] = result.still_failing.get(row.error_code, 0) + row["count"]


# --- the replay ----------------------------------------------------------------------------------

@contextmanager
def replay_lock(settings: Settings) -> Iterator[None]:
    """One replay at a time per lakehouse: two at once could both find a record missing from bronze.

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


def replay(spark: SparkSession, settings: Settings, filters: Filters, dry_run: bool = False) -> ReplayReport:
    """Decode the selected pending dead letters again and put what now reads into bronze."""
    filters = Filters(filters.streams, filters.reasons, filters.since, filters.until, include_replayed=False)
    report = ReplayReport(str(uuid.uuid4()), dry_run, datetime.now(UTC), filters)
    if dry_run:
        return _replay(spark, settings, report)
    with replay_lock(settings):
        return _replay(spark, settings, report)


def _replay(spark: SparkSession, settings: Settings, report: ReplayReport) -> ReplayReport:
    if not relation_exists(spark, TABLE):
        log.info("%s does not exist yet: nothing to replay", TABLE)
        return report
    if not report.dry_run:
        for change in bronze.ensure_table(spark, TABLE, DEAD_LETTER_SCHEMA, DEAD_LETTER_PARTITIONING):
            log.info("%s", change)
    selected = _pinned_selection(spark, report.filters)
    if selected is None:
        return report
    spans = _spans_by_stream(selected)
    if not spans:
        log.info("no dead letters match (%s): nothing to replay", report.filters.describe())
        return report
    outcomes, cached = [], []
    try:
        with progress("replaying dead letters", total=len(spans)) as advance:
            for name in sorted(spans):
                advance(0, description=f"replaying {name}")
                outcome = _replay_stream(spark, settings, report, selected.where(F.col("stream") == name),
                                         spans[name], cached)
                if outcome is not None:
                    outcomes.append(outcome)
                advance()
        if outcomes and not report.dry_run:
            oldest = min(spans[s.stream].oldest for s in report.streams)
            newest = max(spans[s.stream].newest for s in report.streams)
            report.marked = _mark(spark, report, outcomes, oldest, newest)
    finally:
        for frame in cached:
            frame.unpersist()
    return report


def _current_snapshot(spark: SparkSession, table: str) -> int | None:
    rows = spark.sql(f"select snapshot_id from {quote_table(table)}.refs where name = 'main'").collect()
    return rows[0].snapshot_id if rows else None


def _pinned_selection(spark: SparkSession, filters: Filters) -> DataFrame | None:
    """The selected dead letters, read at one snapshot for the whole replay: the ingestion may
    append more meanwhile; those wait for the next replay. None: the table has no snapshot."""
    has_replay = set(REPLAY_COLUMNS) <= set(spark.table(TABLE).columns)
    snapshot = _current_snapshot(spark, TABLE)
    if snapshot is None:
        return None
    pinned = bronze.conform_to_schema(spark.sql(f"select * from {quote_table(TABLE)} version as of {int(snapshot)}"),
                                      DEAD_LETTER_SCHEMA)
    return pinned.where(filters.where_sql(has_replay))


def _spans_by_stream(selected: DataFrame) -> dict[str, Row]:
    """Per stream: how many dead letters, their ingestion times and offsets (first, last)."""
    return {r.stream: r for r in selected.groupBy("stream").agg(
        F.count(F.lit(1)).alias("n"),
        F.unix_micros(F.min("ingested_at")).alias("oldest"),
        F.unix_micros(F.max("ingested_at")).alias("newest"),
        F.min("offset").alias("first_offset"), F.max("offset").alias("last_offset")).collect()}


def _replay_stream(spark: SparkSession, settings: Settings, report: ReplayReport, selected: DataFrame,
                   span: Row, cached: list[DataFrame]) -> DataFrame | None:
    """Decode one stream's selected dead letters, append what now reads to its bronze table and
    return each record's outcome, for the MERGE; None when the stream is no longer configured.
    Frames it persists go to ``cached``."""
    name = span.stream
    try:
        spec = get_stream(name)
    except LakehouseError as exc:
        report.skipped[name] = str(exc)
        log.warning("%s: skipped: %s", name, exc)
        return None
    result = StreamReplay(name, spec.bronze_table)
    report.streams.append(result)
    log.info("%s: %d dead letter(s) selected; decoding with the current schemas", name, span.n)
    decoder = _current_decoder(spark, settings, spec, result, report.dry_run)
    records = _distinct_records(selected)
    decoded = decoder.decode(_as_kafka_source(spark, records)).persist()
    cached.append(decoded)
    outcome = _outcomes(name, decoded, _already_in_bronze(spark, spec, span, decoded)).persist()
    cached.append(outcome)
    _count_outcomes(result, outcome.groupBy("replayed", "in_bronze", "error_code").count().collect())
    if result.appended and not report.dry_run:
        _append_to_bronze(spark, spec, result, report, records, decoded, outcome)
    log.info("%s: %d replayed (%d appended, %d already in bronze), %d still failing", name,
             result.replayed, result.appended, result.already_in_bronze, sum(result.still_failing.values()))
    return outcome


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
    """One row per Kafka record: records first read twice (a reset checkpoint) have two dead
    letters, and are decoded once."""
    return (selected.groupBy(*COORDINATES)
            .agg(F.min("batch_id").alias("batch_id"), F.first("key").alias("key"),
                 F.first("value").alias("value"), F.first("kafka_timestamp").alias("kafka_timestamp")))


def _as_kafka_source(spark: SparkSession, records: DataFrame) -> DataFrame:
    """The records as the Kafka source gives them to a decoder."""
    raw = records.select(F.col("key"), F.col("value"), F.col("topic"), F.col("partition").cast("int"),
                         F.col("offset").cast("long"), F.col("kafka_timestamp").alias("timestamp"),
                         F.lit(0).alias("timestampType"))
    return raw.select(*[F.col(f.name).cast(f.dataType).alias(f.name)
                        for f in spark.createDataFrame([], KAFKA_SOURCE_SCHEMA).schema.fields])


def _already_in_bronze(spark: SparkSession, spec: StreamSpec, span: Row, decoded: DataFrame) -> DataFrame:
    """The coordinates of the decoded records that bronze holds already (``_in_bronze`` true)."""
    if not relation_exists(spark, spec.bronze_table):
        return spark.createDataFrame([], "topic string, partition int, offset long, _in_bronze boolean")
    # The offset range lets Iceberg skip most data files by their column bounds.
    return (spark.table(spec.bronze_table)
            .where(F.col("_kafka_offset").between(span.first_offset, span.last_offset))
            .select(*BRONZE_COORDINATES).toDF(*COORDINATES)
            .join(decoded.select(*COORDINATES), list(COORDINATES), "left_semi")
            .distinct().withColumn("_in_bronze", F.lit(True)))


def _outcomes(name: str, decoded: DataFrame, in_bronze: DataFrame) -> DataFrame:
    """Per record: replayed (it reads now, or bronze has it already), the reason it still fails,
    and the schema id its header names (null for formats without one)."""
    return (decoded.select(*COORDINATES, "_error_code", "_error_detail", schema_id(decoded).alias("schema_id"))
            .join(in_bronze, list(COORDINATES), "left")
            .select(F.lit(name).alias("stream"), *COORDINATES,
                    (F.col("_error_code").isNull() | F.col("_in_bronze").isNotNull()).alias("replayed"),
                    F.col("_in_bronze").isNotNull().alias("in_bronze"),
                    F.col("_error_code").alias("error_code"), F.col("_error_detail").alias("error_detail"),
                    F.col("schema_id")))


def _as_bronze_coordinates() -> list[Column]:
    return [F.col(c).alias(b) for c, b in zip(COORDINATES, BRONZE_COORDINATES, strict=True)]


def _append_to_bronze(spark: SparkSession, spec: StreamSpec, result: StreamReplay, report: ReplayReport,
                      records: DataFrame, decoded: DataFrame, outcome: DataFrame) -> None:
    """Append the records that read now and are not in bronze yet, with the batch id that first
    read them and the replay time as ``_ingested_at``; the snapshot names the replay."""
    batch_ids = records.select(*_as_bronze_coordinates(), F.col("batch_id").alias("_batch_id"))
    appended = outcome.where(F.col("replayed") & ~F.col("in_bronze")).select(*_as_bronze_coordinates())
    rows = (to_bronze(decoded, 0, F.lit(report.started_at).cast("timestamp")).drop("_batch_id")
            .join(appended, list(BRONZE_COORDINATES), "left_semi")
            .join(batch_ids, list(BRONZE_COORDINATES)))
    log.info("%s: appending %d record(s) to %s", result.stream, result.appended, spec.bronze_table)
    (bronze.conform_to_schema(rows, spark.table(spec.bronze_table).schema).writeTo(spec.bronze_table)
        .option(f"snapshot-property.{REPLAY_ID_PROPERTY}", report.replay_id)
        .append())


# --- marking the dead letters --------------------------------------------------------------------

def _mark_statement(report: ReplayReport, view: str, oldest: int, newest: int) -> str:
    """The MERGE of the outcomes in ``view`` into the dead letters: replayed ones get
    replayed_at; still-failing ones their new reason; both one more attempt. A schema id the
    dead letter lacks (written before the ingestion recorded it) is filled from the header;
    the bytes are the same, so an id already there is never changed."""
    now = timestamp_sql(report.started_at)
    streams = ", ".join(sql_string(s.stream) for s in report.streams)
    # The stream and ingestion-time bounds prune the partitions read, and keep dead letters
    # the ingestion appends meanwhile (later ingested_at) out of the commit's conflict check.
    return f"""
        merge into {TABLE} t
        using {view} s
        on t.stream = s.stream and t.topic = s.topic and t.`partition` = s.`partition` and t.`offset` = s.`offset`
            and t.stream in ({streams})
            and t.ingested_at between timestamp_micros({oldest}) and timestamp_micros({newest})
        when matched and t.replayed_at is null then update set
            replayed_at = case when s.replayed then {now} end,
            replay_attempts = coalesce(t.replay_attempts, 0) + 1,
            last_replay_at = {now},
            error_code = case when s.replayed then t.error_code else s.error_code end,
            error_detail = case when s.replayed then t.error_detail else s.error_detail end,
            schema_id = coalesce(t.schema_id, s.schema_id)
    """


def _mark(spark: SparkSession, report: ReplayReport, outcomes: list[DataFrame], oldest: int, newest: int) -> int:
    """One MERGE: replayed dead letters get replayed_at; still-failing ones their new reason."""
    source = outcomes[0]
    for outcome in outcomes[1:]:
        source = source.unionByName(outcome)
    view = f"lakehouse_dlq_replay_{report.replay_id.replace('-', '')}"
    source.createOrReplaceTempView(view)
    statement = _mark_statement(report, view, oldest, newest)
    total = sum(s.selected for s in report.streams)
    log.info("marking %d dead letter(s) in %s", total, TABLE)
    # A concurrent commit to the same partitions makes Iceberg refuse the MERGE; planned again
    # from the latest snapshot, it is safe to retry. Any other error is raised at once.
    merge = Retrying(
        stop=stop_after_attempt(MERGE_ATTEMPTS), wait=wait_incrementing(start=1, increment=1), reraise=True,
        retry=retry_if_exception(lambda exc: any(word in str(exc) for word in
                                                 ("ValidationException", "CommitFailedException", "conflicting"))),
        before_sleep=lambda state: log.warning(
            "marking the dead letters conflicted with another commit (%s); retrying",
            str(state.outcome.exception()).strip().splitlines()[0][:200]),
    )
    try:
        merge(spark.sql, statement)
    finally:
        spark.catalog.dropTempView(view)
    return total
