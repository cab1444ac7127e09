"""Dead letters: the rows of a stream's bronze table whose record could not be read, and the
view `bronze.dead_letters` that lists every stream's (ARCHITECTURE §7).

A dead row is a row of its stream's bronze table (ingestion/formats/bronze_shape.py, `to_bronze`): its raw
key, value and headers, its reason (``ERROR_CODE``, a code of the closed set) and detail,
null decoded columns. Each offset of a topic is one row of its bronze table, good or dead.
The view is plain SQL over the tables, so any engine that reads Iceberg reads dead letters the
same way: the filter ``DEAD`` on a stream's bronze table.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from lakehouse.contracts import bronze_columns as own
from lakehouse.contracts import error_codes
from lakehouse.core.errors import LakehouseError
from lakehouse.core.sql import quote, quote_table, sql_string

VIEW = "bronze.dead_letters"
NAMESPACE = "bronze"

ERROR_CODES = error_codes.ERROR_CODES  # the closed set lives in a pyspark-free module

# A row of a bronze table is dead while its reason is set; a replay that reads it replaces it by
# its decoded row, which keeps ``REPLAYED_AT`` (ARCHITECTURE §7). Pruned by the partition field.
LISTED = f"({own.DEAD} or {own.REPLAYED_AT} is not null)"

# The view's columns (what `lakehouse dlq list/show` print), each from a bronze table's columns.
_FROM_BRONZE = {
    "topic": own.KAFKA_TOPIC,
    "partition": own.KAFKA_PARTITION,
    "offset": own.KAFKA_OFFSET,
    "kafka_timestamp": own.KAFKA_TIMESTAMP,
    "key": own.RAW_KEY,
    "value": own.RAW_VALUE,
    # a replayed row's reason is the one it had when it was dead
    "error_code": f"coalesce({own.ERROR_CODE}, {own.REPLAYED_ERROR_CODE})",
    "error_detail": own.ERROR_DETAIL,
    "schema_id": f"cast({own.SCHEMA_ID} as int)",
    "ingested_at": own.DEAD_AT,  # when it was found dead
    "batch_id": own.BATCH_ID,
    "replayed_at": own.REPLAYED_AT,
    "replay_attempts": own.REPLAY_ATTEMPTS,
    "last_replay_at": own.LAST_REPLAY_AT,
    "headers": own.RAW_HEADERS,
}


def bronze_tables(spark: SparkSession) -> dict[str, str]:
    """{stream: table} of every bronze table that holds dead rows (the `bronze` namespace's tables
    with the dead-row columns: a stream gone from the pipeline file keeps its dead letters)."""
    found = {}
    for row in spark.sql(f"show tables in {NAMESPACE}").collect():
        if row.isTemporary:
            continue
        table = f"{NAMESPACE}.{row.tableName}"
        if {own.ERROR_CODE, own.RAW_VALUE, own.REPLAYED_AT} <= set(spark.table(quote_table(table)).columns):
            found[row.tableName] = table
    return dict(sorted(found.items()))


def view_columns(stream: str, has_schema_id: bool) -> list[str]:
    """The view's columns as SQL expressions over one stream's bronze table."""
    return [f"{sql_string(stream)} as stream"] + [
        f"{'cast(null as int)' if name == 'schema_id' and not has_schema_id else source} as {quote(name)}"
        for name, source in _FROM_BRONZE.items()]


def view_sql(tables: dict[str, str], has_schema_id: set[str]) -> str:
    """The view's query: UNION ALL over ``tables`` ({stream: table}), dead and replayed rows."""
    return "\nunion all\n".join(
        f"select {', '.join(view_columns(stream, stream in has_schema_id))} from {quote_table(table)} where {LISTED}"
        for stream, table in tables.items())


# Jobs of other streams may create their tables, and so replace the view, at the same time.
VIEW_ATTEMPTS = 5


def ensure_view(spark: SparkSession) -> list[str]:
    """(Re)create `bronze.dead_letters` over the bronze tables there are now; the change, for the log.

    Checked after its commit: a job that created its table meanwhile may have replaced the view
    from a listing without this one's table (or been replaced by one without its own), so the
    view is made again until the tables listed before and after its commit agree."""
    refuse_old_table(spark)
    for attempt in range(1, VIEW_ATTEMPTS + 1):
        tables = bronze_tables(spark)
        if not tables:
            return []
        has_schema_id = {stream for stream, table in tables.items() if own.SCHEMA_ID in spark.table(table).columns}
        try:
            spark.sql(f"create or replace view {quote_table(VIEW)} as {view_sql(tables, has_schema_id)}")
        except Exception:  # a concurrent replace won the commit: list and replace again
            if attempt == VIEW_ATTEMPTS:
                raise
            continue
        if bronze_tables(spark) == tables:
            return [f"{VIEW}: a view over {', '.join(tables.values())}"]
    raise LakehouseError(f"{VIEW}: the bronze tables kept changing while the view was made; start the job again")


def read_view(spark: SparkSession):
    """The view as a DataFrame; recreated first when it no longer resolves (a stream table it
    names was dropped, say by hand, and none was created since)."""
    from pyspark.errors import AnalysisException

    try:
        return spark.table(VIEW)
    except AnalysisException:
        ensure_view(spark)
        return spark.table(VIEW)


def old_table_exists(spark: SparkSession) -> bool:
    """Whether `bronze.dead_letters` is still the table of a version before dead rows lived in
    bronze (`tableExists` is False for a view of the Iceberg catalog)."""
    return spark.catalog.tableExists(VIEW)


def refuse_old_table(spark: SparkSession) -> None:
    if old_table_exists(spark):
        raise LakehouseError(
            f"{VIEW} is a table of an older version (dead letters apart from bronze): run `lakehouse migrate` "
            "to move its rows into the streams' bronze tables (docs/operations.md)")
