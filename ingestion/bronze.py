"""Bronze Iceberg tables: creation, schema evolution, and appends that name their batch.

Exactly once (ARCHITECTURE §8): each append carries the streaming query's id and the batch id as
snapshot properties. Batches of one query commit in order, so a batch is already in a table
when that table's latest snapshot from the same query has a batch id at least as high
(`last_committed_batch`; ingestion/job.py skips such a batch).
The query id lives in the checkpoint, so it survives restarts and changes when the
checkpoint is reset (then everything is, rightly, written again).

Snapshot expiry would erase that evidence, so before `lakehouse maintain` expires snapshots
it copies each query's last committed batch into a table property
(``lakehouse.committed.<query id>``, `record_committed_batches`); the check reads both.
A batch is one append, its good and dead rows together (ARCHITECTURE §8): nothing else to keep.
"""

from __future__ import annotations

import json

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StructType

from ingestion.formats.column_types import by_name, holds_exactly, is_widening, same_type
from lakehouse.contracts.bronze_columns import ERROR_CODE, KAFKA_OFFSET, KAFKA_PARTITION, KAFKA_TOPIC, SEQ
from lakehouse.core.errors import LakehouseError
from lakehouse.core.sql import quote, quote_table, sql_string

WRITER_PROPERTY = "lakehouse.query-id"
BATCH_PROPERTY = "lakehouse.batch-id"
# The writer lease the append was made under (ingestion/single_writer.py): the catalog commits it
# only over a base that holds that lease (jvm/catalog WriterFence, ARCHITECTURE §8).
LEASE_HOLDER_PROPERTY = "lakehouse.writer-lease-holder"
COMMITTED_PROPERTY_PREFIX = "lakehouse.committed."
# The partition field that keeps a stream's dead rows in files of their own (ARCHITECTURE §6):
# identity on the reason, null for good rows, so `GOOD` prunes every dead file.
DEAD_PARTITION = ERROR_CODE

# The fields an additive CDC stream took from its source, beyond its contract file (ARCHITECTURE
# §6, "Fields the contract lacks"): a JSON object of JSON Schema properties by name. Kept with
# the table whose columns they are, so a restart, a replay or `lakehouse dlq replay` reads them.
ADDED_FIELDS_PROPERTY = "lakehouse.added-fields"

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


def sql_type(data_type: DataType) -> str:
    """A column type as DDL, the names of nested fields quoted (``simpleString`` leaves them bare:
    a struct field named ``a b`` or ``x>y`` would not parse, or parse as something else)."""
    if isinstance(data_type, StructType):
        return "struct<" + ", ".join(f"{quote(f.name)}: {sql_type(f.dataType)}" for f in data_type.fields) + ">"
    if isinstance(data_type, ArrayType):
        return f"array<{sql_type(data_type.elementType)}>"
    if isinstance(data_type, MapType):
        return f"map<{sql_type(data_type.keyType)}, {sql_type(data_type.valueType)}>"
    return data_type.simpleString()


def create_table_ddl(table: str, schema: StructType, partitioning: tuple[str, ...],
                     properties: dict[str, str]) -> str:
    """``partitioning``: transforms whose column names are quoted already (`StreamSpec.partitioning`);
    none: an unpartitioned table."""
    columns = ",\n  ".join(f"{quote(f.name)} {sql_type(f.dataType)}" for f in schema.fields)
    props = ",\n  ".join(f"{sql_string(k)} = {sql_string(v)}" for k, v in properties.items())
    partitioned = f"partitioned by ({', '.join(partitioning)})\n" if partitioning else ""
    return (
        f"create table if not exists {quote_table(table)} (\n  {columns}\n) using iceberg\n{partitioned}"
        f"tblproperties (\n  {props}\n)"
    )


def ensure_table(spark: SparkSession, table: str, schema: StructType, partitioning: tuple[str, ...]) -> list[str]:
    """Create the table, or evolve it to hold ``schema`` (and, a bronze table made before dead rows
    lived in it, to keep them apart: `DEAD_PARTITION`); the changes made, for the log."""
    if not spark.catalog.tableExists(table):
        spark.sql(create_table_ddl(table, schema, partitioning, STREAMING_TABLE_PROPERTIES))
        return [f"created {table}"]
    changes = evolve_table(spark, table, schema)
    partitioned = set(partition_fields(spark, table)) if DEAD_PARTITION in partitioning else set()
    if DEAD_PARTITION in partitioning and not {DEAD_PARTITION, quote(DEAD_PARTITION)} & partitioned:
        # New files only: rows written before have no dead rows (they were in bronze.dead_letters).
        spark.sql(f"alter table {quote_table(table)} add partition field {quote(DEAD_PARTITION)}")
        changes.append(f"{table}: add partition field {DEAD_PARTITION}")
    return changes


def partition_fields(spark: SparkSession, table: str) -> list[str]:
    """The table's partition transforms as `describe table` names them (``days(ts)``, ``col``)."""
    rows = spark.sql(f"describe table {quote_table(table)}").collect()
    return [row.data_type for row in rows if row.col_name.startswith("Part ") and row.col_name[5:].isdigit()]


# A CDC changelog's order key (ARCHITECTURE §9): a struct compared field by field, so adding a
# field to it (null in older rows) would silently reorder every change; never evolved.
SEQUENCE_COLUMN = SEQ


def _field_names(data_type: DataType) -> str:
    return "{" + ", ".join(f.name for f in data_type.fields) + "}" if isinstance(data_type, StructType) \
        else data_type.simpleString()


def schema_changes(current: StructType, wanted: StructType, prefix: str = "") -> list[str]:
    """ALTER clauses that make ``current`` hold ``wanted``: columns added (nested too: in structs,
    in the structs of arrays and map values) and types widened (ingestion/formats/column_types.py
    `is_widening`). Columns ``wanted`` lacks stay (a record of an older schema has them null), and
    so does a type that already holds the wanted one exactly (`holds_exactly`: a bigint column
    where a decoder now says int); any other type change is refused rather than losing data."""
    clauses = []
    existing = {f.name: f.dataType for f in current.fields}
    for field in wanted.fields:
        path = f"{prefix}{quote(field.name)}"
        old = existing.get(field.name)
        if (not prefix and field.name == SEQUENCE_COLUMN and old is not None
                and old.simpleString() != field.dataType.simpleString()):  # nullability aside
            raise LakehouseError(
                f"{SEQUENCE_COLUMN} orders the changes of this table by {_field_names(old)}; this version "
                f"orders them by {_field_names(field.dataType)} (docs/ARCHITECTURE.md §9), and rows of the two "
                "cannot be compared: drop the table and the stream's checkpoint, then ingest the topic again")
        if old is None:
            clauses.append(f"add column {path} {sql_type(field.dataType)}")
        else:
            clauses.extend(_type_changes(path, old, field.dataType))
    return clauses


def _type_changes(path: str, old: DataType, new: DataType) -> list[str]:
    """ALTER clauses that make the column at ``path``, of type ``old``, hold ``new``. Iceberg names
    an array's element ``element`` and a map's value ``value`` in a column's path."""
    if isinstance(old, StructType) and isinstance(new, StructType):
        return schema_changes(old, new, f"{path}.")
    if isinstance(old, ArrayType) and isinstance(new, ArrayType):
        return _type_changes(f"{path}.element", old.elementType, new.elementType)
    if isinstance(old, MapType) and isinstance(new, MapType) and same_type(old.keyType, new.keyType):
        return _type_changes(f"{path}.value", old.valueType, new.valueType)
    if same_type(old, new) or holds_exactly(old, new):
        return []
    if is_widening(old, new):
        return [f"alter column {path} type {sql_type(new)}"]
    raise LakehouseError(
        f"column {path} changed type from {old.simpleString()} to {new.simpleString()}, "
        "which is not a lossless widening: add a new column instead")


def evolve_table(spark: SparkSession, table: str, schema: StructType) -> list[str]:
    try:
        clauses = schema_changes(spark.table(table).schema, schema)
    except LakehouseError as exc:
        raise LakehouseError(f"{table}: {exc}") from None
    for clause in clauses:
        spark.sql(f"alter table {quote_table(table)} {clause}")
    return [f"{table}: {clause}" for clause in clauses]


def _cast(column: Column, _source: DataType, target: DataType) -> Column:
    # `schema_changes` made every leaf of the table's type hold the rows' exactly
    return column.cast(target)


def conform_to_schema(rows: DataFrame, table_schema: StructType) -> DataFrame:
    """The rows in the table's column order and types; columns the rows lack are null."""
    have = {f.name: f.dataType for f in rows.schema.fields}
    return rows.select(*[
        (by_name(F.col(quote(f.name)), have[f.name], f.dataType, _cast) if f.name in have
         else F.lit(None).cast(f.dataType)).alias(f.name)
        for f in table_schema.fields])


def committed_batches_in_snapshots(spark: SparkSession, table: str) -> dict[str, int]:
    """Per writing query, the highest batch id among the table's (unexpired) snapshots."""
    rows = spark.sql(
        f"select summary['{WRITER_PROPERTY}'] as query_id, max(cast(summary['{BATCH_PROPERTY}'] as bigint)) as batch "
        f"from {quote_table(table)}.snapshots where summary['{WRITER_PROPERTY}'] is not null group by 1"
    ).collect()
    return {row.query_id: int(row.batch) for row in rows if row.batch is not None}


def committed_batches_in_properties(spark: SparkSession, table: str,
                                    properties: dict[str, str] | None = None) -> dict[str, int]:
    """The markers `record_committed_batches` left in the table's properties (read unless given)."""
    if properties is None:
        properties = _table_properties(spark, table)
    found = _markers(properties, COMMITTED_PROPERTY_PREFIX)
    return {query_id: int(value) for query_id, value in found.items() if value.isdigit()}


def _table_properties(spark: SparkSession, table: str) -> dict[str, str]:
    return {row.key: row.value for row in spark.sql(f"show tblproperties {quote_table(table)}").collect()}


def added_fields(spark: SparkSession, table: str) -> dict[str, dict]:
    """The fields recorded by `record_added_fields` (none when the table does not exist yet)."""
    if not spark.catalog.tableExists(table):
        return {}
    return json.loads(_table_properties(spark, table).get(ADDED_FIELDS_PROPERTY) or "{}")


def record_added_fields(spark: SparkSession, table: str, fields: dict[str, dict]) -> None:
    """Record every field the stream added so far (before the columns are added: a crash between
    the two leaves a record the restart completes, never a column without its type's record)."""
    value = json.dumps(fields, sort_keys=True)
    spark.sql(f"alter table {quote_table(table)} set tblproperties "
              f"({sql_string(ADDED_FIELDS_PROPERTY)} = {sql_string(value)})")


def _markers(properties: dict[str, str], prefix: str) -> dict[str, str]:
    """The properties whose key starts with ``prefix``, by the rest of the key."""
    return {key.removeprefix(prefix): value for key, value in properties.items() if key.startswith(prefix)}


def record_committed_batches(spark: SparkSession, table: str, live_query_ids: set[str] | None = None) -> dict[str, int]:
    """Copy each query's last committed batch from snapshot summaries into table properties.

    Called before snapshots expire, so the exactly-once check survives the expiry. Markers of
    queries that can no longer write (their checkpoint is gone: not in ``live_query_ids``) are
    dropped; ``None`` keeps them all. Returns the batch markers now in place.
    """
    properties = _table_properties(spark, table)
    marked = committed_batches_in_properties(spark, table, properties)
    wanted = dict(marked)
    for query_id, batch_id in committed_batches_in_snapshots(spark, table).items():
        wanted[query_id] = max(batch_id, marked.get(query_id, -1))
    if live_query_ids is not None:
        wanted = {q: b for q, b in wanted.items() if q in live_query_ids}
    changed = {COMMITTED_PROPERTY_PREFIX + q: str(int(b)) for q, b in wanted.items() if marked.get(q) != b}
    if changed:
        props = ", ".join(f"{sql_string(key)} = {sql_string(value)}" for key, value in sorted(changed.items()))
        spark.sql(f"alter table {quote_table(table)} set tblproperties ({props})")
    # Also the instants an older version kept beside them (lakehouse.committed-instant.*): unused now.
    stale = sorted([COMMITTED_PROPERTY_PREFIX + q for q in set(marked) - set(wanted)]
                   + [key for key in properties if key.startswith(_OLD_INSTANT_PREFIX)])
    if stale:
        keys = ", ".join(sql_string(key) for key in stale)
        spark.sql(f"alter table {quote_table(table)} unset tblproperties if exists ({keys})")
    return wanted


_OLD_INSTANT_PREFIX = "lakehouse.committed-instant."


def last_offsets(spark: SparkSession, table: str, topic: str) -> dict[int, int]:
    """Per partition of ``topic``, the last offset the table holds, good and dead rows both (a new
    checkpoint starts after them: ingestion/starting_offsets.py). Two columns read."""
    rows = spark.sql(f"select {KAFKA_PARTITION} as partition, max({KAFKA_OFFSET}) as offset "
                     f"from {quote_table(table)} where {KAFKA_TOPIC} = {sql_string(topic)} group by 1").collect()
    return {int(row.partition): int(row.offset) for row in rows}


def last_committed_batch(spark: SparkSession, table: str, query_id: str) -> int | None:
    """The last batch of ``query_id`` in the table: from its snapshots, or from the marker
    maintenance left when it expired them (whichever is higher; batches commit in order)."""
    found = _last_batch_in_lineage(spark, table, query_id)
    if found is _UNKNOWN:
        found = committed_batches_in_snapshots(spark, table).get(query_id)
    marked = committed_batches_in_properties(spark, table).get(query_id)
    known = [batch for batch in (found, marked) if batch is not None]
    return max(known) if known else None


_UNKNOWN = object()
LINEAGE_STEPS = 200  # snapshots looked at through the Iceberg API before asking SQL instead


def _last_batch_in_lineage(spark: SparkSession, table: str, query_id: str):
    """The batch id of the newest snapshot ``query_id`` wrote (the query's newest snapshot holds
    its highest batch). None if the table has no snapshot of it; ``_UNKNOWN`` when the walk is
    long (a table many other writers share) or the API is not reachable."""
    summary = _newest_summary(spark, table, query_id)
    if summary is None or summary is _UNKNOWN:
        return summary
    batch = summary.get(BATCH_PROPERTY)
    return int(batch) if batch is not None else _UNKNOWN


def _newest_summary(spark: SparkSession, table: str, query_id: str):
    """The summary of the newest snapshot ``query_id`` wrote, walking back from the table's
    current snapshot through Iceberg's Java API (no Spark job); None if the table has none of
    it, ``_UNKNOWN`` after LINEAGE_STEPS snapshots or when the API is not reachable."""
    from py4j.protocol import Py4JError

    # Qualified with the session's catalog: Iceberg would take "bronze" of "bronze.t" for one.
    qualified = table if table.count(".") >= 2 else f"{spark.catalog.currentCatalog()}.{table}"
    try:
        iceberg = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, qualified)
        snapshot = iceberg.currentSnapshot()
        for _ in range(LINEAGE_STEPS):
            if snapshot is None:
                return None
            summary = snapshot.summary()
            if summary.get(WRITER_PROPERTY) == query_id:
                return {BATCH_PROPERTY: summary.get(BATCH_PROPERTY)}
            parent = snapshot.parentId()
            snapshot = None if parent is None else iceberg.snapshot(parent)
    except Py4JError:
        pass
    return _UNKNOWN


def append(spark: SparkSession, table: str, rows: DataFrame, query_id: str, batch_id: int,
           table_schema: StructType | None = None, lease_holder: str | None = None) -> None:
    """Append the rows in one snapshot that names the query and batch it comes from.

    ``table_schema``: the table's schema when the caller knows it (else it is loaded).
    ``lease_holder``: the writer lease the job holds; the commit is then fenced by it."""
    writer = (conform_to_schema(rows, table_schema or spark.table(table).schema).writeTo(table)
              .option(f"snapshot-property.{WRITER_PROPERTY}", query_id)
              .option(f"snapshot-property.{BATCH_PROPERTY}", str(batch_id)))
    if lease_holder is not None:
        writer = writer.option(f"snapshot-property.{LEASE_HOLDER_PROPERTY}", lease_holder)
    writer.append()
