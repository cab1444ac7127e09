"""The benchmarks append synthetic rows straight to bronze. A field the table does not have
must stop them: conforming the rows to the table's schema would make it null in silence (the
customers `_seq` of dbt_scaling and merge_scaling was once `struct<lsn>` against a table of
`struct<phase, commit_pos, change_pos>`, so every change had a null sequence)."""

from __future__ import annotations

from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from benchmarks._bronze_rows import fields_missing_from

SEQ = StructType([StructField("phase", IntegerType()), StructField("commit_pos", LongType()),
                  StructField("change_pos", LongType())])
TABLE = StructType([StructField("customer_id", LongType()), StructField("_seq", SEQ)])


def test_a_nested_field_the_table_lacks_is_named():
    rows = StructType([StructField("customer_id", LongType()),
                       StructField("_seq", StructType([StructField("lsn", LongType())]))])
    assert fields_missing_from(rows, TABLE) == ["_seq.lsn"]


def test_a_top_level_column_the_table_lacks_is_named():
    rows = StructType([*TABLE.fields, StructField("debug", StringType())])
    assert fields_missing_from(rows, TABLE) == ["debug"]


def test_rows_with_fewer_fields_or_other_types_pass():
    # fewer fields: the table's newer columns stay null; other types: conform_to_schema casts
    rows = StructType([StructField("customer_id", StringType()),
                       StructField("_seq", StructType([StructField("commit_pos", StringType())]))])
    assert fields_missing_from(rows, TABLE) == []
