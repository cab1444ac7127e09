"""Appending synthetic rows to a bronze table the ingestion created.

benchmarks/dbt_scaling.py, benchmarks/merge_scaling.py and the tests that build a history with
tests/support/bronze_history.py write bronze directly, in the table's own schema, so that
loading millions of rows takes seconds instead of a producer run. `ingestion.bronze
.conform_to_schema` fills what the rows lack with nulls (right for the ingestion, whose older
rows lack newer columns), so a synthetic field the table does not have would vanish in
silence: the benchmarks' customers `_seq` was once `struct<lsn>` after bronze had moved to
`struct<phase, commit_pos, change_pos>`, and every change landed with a null sequence.

So the rows must fit the table as the ingestion itself would judge them: the schema evolution
it would need (`ingestion.bronze.schema_changes`: a column to add, a type to widen, a changed
`_seq` or a narrowing it refuses) is an error here, since a benchmark or test must not change
the table it measures.
"""

from __future__ import annotations

from pyspark.sql.types import StructType

from lakehouse.core.errors import LakehouseError


def schema_mismatch(rows: StructType, table: StructType) -> str | None:
    """Why ``rows`` do not fit ``table`` without evolving it, or None when they do."""
    from ingestion.bronze import schema_changes

    try:
        clauses = schema_changes(table, rows)
    except LakehouseError as exc:
        return str(exc)
    return "; ".join(clauses) or None


def append_rows(spark, table: str, rows) -> None:
    """Append ``rows`` to ``table`` in its schema; the rows must fit it without evolution."""
    from ingestion.bronze import conform_to_schema

    schema = spark.table(table).schema
    mismatch = schema_mismatch(rows.schema, schema)
    if mismatch:
        raise ValueError(f"{table} would need {mismatch}: the synthetic rows are out of date with the "
                         f"table's schema")
    conform_to_schema(rows, schema).writeTo(table).append()
