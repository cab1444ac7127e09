"""Bronze Iceberg tables: creation, and appends that a replayed micro-batch cannot double.

Exactly once (DESIGN §8): each append carries the streaming query's id and the batch id as
snapshot properties. Batches of one query commit in order, so a batch is already in a table
when that table's latest snapshot from the same query has a batch id at least as high.
The query id lives in the checkpoint, so it survives restarts and changes when the
checkpoint is reset (then everything is, rightly, written again).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

WRITER_PROPERTY = "lakehouse.query-id"
BATCH_PROPERTY = "lakehouse.batch-id"

STREAMING_TABLE_PROPERTIES = {
    "format-version": "2",
    # Micro-batches arrive unsorted by partition: fanout avoids a sort per batch.
    "write.spark.fanout.enabled": "true",
    "write.distribution-mode": "none",
    # Several writers (jobs, dbt, maintenance) commit to one catalog: retry, don't fail.
    "commit.retry.num-retries": "20",
    "commit.retry.min-wait-ms": "100",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "100",
}


def create_table_ddl(table: str, schema: StructType, partitioning: tuple[str, ...],
                     properties: dict[str, str]) -> str:
    columns = ",\n  ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in schema.fields)
    props = ",\n  ".join(f"'{k}' = '{v}'" for k, v in properties.items())
    return (
        f"create table if not exists {table} (\n  {columns}\n) using iceberg\n"
        f"partitioned by ({', '.join(partitioning)})\n"
        f"tblproperties (\n  {props}\n)"
    )


def ensure_table(spark: SparkSession, table: str, schema: StructType, partitioning: tuple[str, ...]) -> None:
    spark.sql(create_table_ddl(table, schema, partitioning, STREAMING_TABLE_PROPERTIES))


def last_committed_batch(spark: SparkSession, table: str, query_id: str) -> int | None:
    rows = spark.sql(
        f"select summary['{BATCH_PROPERTY}'] as batch_id from {table}.snapshots "
        f"where summary['{WRITER_PROPERTY}'] = '{query_id}' order by committed_at desc limit 1"
    ).collect()
    return int(rows[0].batch_id) if rows else None


def append_once(spark: SparkSession, table: str, rows: DataFrame, query_id: str, batch_id: int) -> bool:
    """Append the rows unless this batch of this query is already committed. True if written."""
    last = last_committed_batch(spark, table, query_id)
    if last is not None and last >= batch_id:
        return False
    (rows.writeTo(table)
        .option(f"snapshot-property.{WRITER_PROPERTY}", query_id)
        .option(f"snapshot-property.{BATCH_PROPERTY}", str(batch_id))
        .append())
    return True
