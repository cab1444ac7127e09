"""`lakehouse migrate`: a lakehouse of a version whose dead letters were a table of their own,
`bronze.dead_letters`, moved to the shape of issue 43 (ARCHITECTURE §7): each dead letter a
row of its stream's bronze table, and `bronze.dead_letters` the view over them.

Per stream, one MERGE into its bronze table (one commit), on the record's Kafka coordinates:
- a pending dead letter becomes a dead row (its bytes, reason, replay state);
- a replayed one, whose record the old replay appended to bronze, marks that good row with its
  replay state (when, how often, the reason it had) and keeps its bytes;
- a pending one whose record is in bronze already (an old replay cut off before it marked its
  dead letters) marks the good row as replayed too: that record is read.
A dead letter whose coordinates bronze holds in any other row is left as it is, so a migration
cut off half way is run again without landing anything twice. Then the old table is dropped
(from the catalog; its files stay) and the view created. The ingestion job refuses to start on
a lakehouse that still has the table, naming this command.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from datetime import UTC, datetime

from lakehouse.contracts import bronze_columns as own
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings

log = logging.getLogger("lakehouse.migrate")

OLD_TABLE = "bronze.dead_letters"


@dataclass
class StreamMigration:
    stream: str
    bronze_table: str
    dead_letters: int  # rows of the old table for this stream (distinct coordinates)


def unfinished_batches(settings: Settings, specs) -> list[str]:
    """Streams whose checkpoint has a batch planned and not committed: an old job stopped between
    its commits, whose restart (by the old version) would finish the batch's dead letters."""
    from ingestion import checkpoint, job

    found = []
    for spec in specs:
        location = job.checkpoint_location(settings, spec)
        planned = checkpoint.last_planned_batch(location)
        commit = checkpoint.last_commit(location)
        if planned is not None and (commit is None or commit.batch_id < planned):
            found.append(f"{spec.name} (batch {planned})")
    return found


def _merge_statement(table: str, source: str, columns: list[str], now: str) -> str:
    from lakehouse.core.sql import quote, quote_table

    on = (f"t.{own.KAFKA_TOPIC} = s.topic and t.{own.KAFKA_PARTITION} = s.`partition` "
          f"and t.{own.KAFKA_OFFSET} = s.`offset`")
    values = {
        own.KAFKA_TOPIC: "s.topic", own.KAFKA_PARTITION: "s.`partition`", own.KAFKA_OFFSET: "s.`offset`",
        own.KAFKA_TIMESTAMP: "s.kafka_timestamp", own.KAFKA_KEY: "cast(s.key as string)",
        own.INGESTED_AT: "s.ingested_at", own.BATCH_ID: "s.batch_id",
        own.ERROR_CODE: "s.error_code", own.ERROR_DETAIL: "s.error_detail",
        own.RAW_KEY: "s.key", own.RAW_VALUE: "s.value", own.DEAD_AT: "s.ingested_at",
        own.REPLAY_ATTEMPTS: "s.replay_attempts", own.LAST_REPLAY_AT: "s.last_replay_at",
        own.SCHEMA_ID: "s.schema_id",
    }
    inserted = [c for c in columns if c in values]
    return f"""
        merge into {quote_table(table)} t
        using {source} s
        on {on}
        when matched and t.{own.ERROR_CODE} is null and t.{own.REPLAYED_AT} is null
                     and t.{own.DEAD_AT} is null then update set
            t.{own.REPLAYED_AT} = coalesce(s.replayed_at, {now}),
            t.{own.REPLAYED_ERROR_CODE} = s.error_code,
            t.{own.DEAD_AT} = s.ingested_at,
            t.{own.REPLAY_ATTEMPTS} = s.replay_attempts,
            t.{own.LAST_REPLAY_AT} = s.last_replay_at,
            t.{own.RAW_KEY} = s.key,
            t.{own.RAW_VALUE} = s.value
        when not matched then insert ({', '.join(quote(c) for c in inserted)})
            values ({', '.join(values[c] for c in inserted)})
    """


def migrate(spark, settings: Settings) -> list[StreamMigration]:
    """Move the old table's rows into the stream tables, drop it, create the view; what moved."""
    from ingestion import bronze, dead_letters
    from ingestion.decoders import decoder_for
    from lakehouse.contracts.streams import get_stream, stream_names
    from lakehouse.core.sql import sql_string, timestamp_sql

    if not dead_letters.old_table_exists(spark):
        changes = dead_letters.ensure_view(spark)
        log.info("%s is not a table: nothing to migrate%s", OLD_TABLE, f" ({changes[0]})" if changes else "")
        return []
    old = spark.table(OLD_TABLE)
    # A table from before replay existed: every row pending.
    missing = "" if "replayed_at" in old.columns else (
        ", cast(null as timestamp) as replayed_at, cast(null as int) as replay_attempts, "
        "cast(null as timestamp) as last_replay_at")
    streams = sorted(r.stream for r in old.select("stream").distinct().collect())
    configured = set(stream_names())
    unknown = [s for s in streams if s not in configured]
    if unknown:
        raise LakehouseError(f"{OLD_TABLE} holds dead letters of stream(s) the pipeline file lacks: "
                             f"{', '.join(unknown)}; add them back to the pipeline file, then run `lakehouse "
                             "migrate` again")
    specs = [get_stream(s) for s in streams]
    unfinished = unfinished_batches(settings, [get_stream(s) for s in sorted(configured)])
    if unfinished:
        raise LakehouseError(f"a batch an older job began is not finished: {', '.join(unfinished)}; run the "
                             "older version's `lakehouse ingest` until it stops cleanly (it completes the batch's "
                             "dead letters), then `lakehouse migrate`")
    now = timestamp_sql(datetime.now(UTC))
    moved = []
    for spec in specs:
        decoder = decoder_for(spark, settings, spec)
        decoder.refresh()
        for change in bronze.ensure_table(spark, spec.bronze_table, decoder.bronze_schema(), spec.partitioning):
            log.info("%s: %s", spec.name, change)
        # One row per record: a reset checkpoint could dead-letter a record twice; a MERGE takes
        # one source row per target row. The source is SQL over the table, not a temporary view
        # of a DataFrame: Spark 4.1 keeps such a view's table as a TableReference, which Iceberg's
        # MERGE planning cannot plan ("No plan for TableReference", an internal error).
        rows = f"""(select * from (
                      select *{missing}, row_number() over (partition by topic, `partition`, `offset`
                                                       order by ingested_at desc) as _n
                      from {OLD_TABLE} where stream = {sql_string(spec.name)}) where _n = 1)"""
        count = spark.sql(f"select count(*) from {rows}").first()[0]
        log.info("%s: moving %d dead letter(s) into %s, in one commit", spec.name, count, spec.bronze_table)
        spark.sql(_merge_statement(spec.bronze_table, rows, spark.table(spec.bronze_table).columns, now))
        moved.append(StreamMigration(spec.name, spec.bronze_table, count))
    spark.sql(f"drop table {OLD_TABLE}")
    for change in dead_letters.ensure_view(spark):
        log.info("%s", change)
    return moved


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.set_defaults()


def main(args: argparse.Namespace, settings: Settings) -> int:
    from lakehouse.core.spark import ensure_namespaces, get_spark

    spark = get_spark(settings, app_name="lakehouse-migrate")
    ensure_namespaces(spark)
    moved = migrate(spark, settings)
    if not moved:
        print(f"nothing to migrate: {OLD_TABLE} is not a table (already migrated, or a new lakehouse)")
    for m in moved:
        print(f"{m.stream}: {m.dead_letters:,} dead letter(s) moved into {m.bronze_table} (one commit)")
    if moved:
        print(f"{OLD_TABLE}: the old table dropped from the catalog (its files stay); now a view over the "
              "bronze tables' dead rows")
    return 0
