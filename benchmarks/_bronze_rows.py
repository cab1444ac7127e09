"""Appending a benchmark's synthetic rows to a bronze table the ingestion created.

dbt_scaling.py and merge_scaling.py write bronze directly, in the table's own schema, so that
loading millions of rows takes seconds instead of a producer run. `ingestion.bronze
.conform_to_schema` fills what the rows lack with nulls (right for the ingestion, whose older
rows lack newer columns), so a synthetic field the table does not have would vanish in
silence: the benchmarks' customers `_seq` was once `struct<lsn>` after bronze had moved to
`struct<phase, commit_pos, change_pos>`, and every change landed with a null sequence. Here
a field the table lacks is an error.
"""

from __future__ import annotations

from pyspark.sql.types import DataType, StructType


def fields_missing_from(rows: DataType, table: DataType, path: str = "") -> list[str]:
    """The (nested) fields of ``rows`` that ``table`` does not have, as dotted paths."""
    if not (isinstance(rows, StructType) and isinstance(table, StructType)):
        return []
    have = {f.name: f.dataType for f in table.fields}
    missing = []
    for field in rows.fields:
        name = f"{path}{field.name}"
        if field.name not in have:
            missing.append(name)
        else:
            missing += fields_missing_from(field.dataType, have[field.name], name + ".")
    return missing


def append_rows(spark, table: str, rows) -> None:
    """Append ``rows`` to ``table`` in its schema; every field of the rows must be in it."""
    from ingestion.bronze import conform_to_schema

    schema = spark.table(table).schema
    missing = fields_missing_from(rows.schema, schema)
    if missing:
        raise ValueError(f"{table} has no field {', '.join(missing)}: the benchmark's rows are out of date "
                         f"with the table's schema")
    conform_to_schema(rows, schema).writeTo(table).append()
