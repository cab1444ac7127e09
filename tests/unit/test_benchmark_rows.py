"""The benchmarks and tests/support/bronze_history.py append synthetic rows straight to bronze
(tests/support/bronze_rows.py). Rows that do not fit the table must stop them: conforming the
rows to the table's schema would make a field the table lacks null in silence (the customers
`_seq` of dbt_scaling and merge_scaling was once `struct<lsn>` against a table of
`struct<phase, commit_pos, change_pos>`, so every change had a null sequence)."""

from __future__ import annotations

from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType, TimestampType

from tests.support.bronze_rows import schema_mismatch

SEQ = StructType([StructField("phase", IntegerType()), StructField("commit_pos", LongType()),
                  StructField("change_pos", LongType())])
TABLE = StructType([StructField("customer_id", LongType()), StructField("_seq", SEQ),
                    StructField("after", StructType([StructField("name", StringType())]))])


def test_a_changed_sequence_shape_is_refused():
    rows = StructType([StructField("customer_id", LongType()),
                       StructField("_seq", StructType([StructField("lsn", LongType())]))])
    mismatch = schema_mismatch(rows, TABLE)
    assert mismatch is not None and "{lsn}" in mismatch and "{phase, commit_pos, change_pos}" in mismatch


def test_a_nested_field_the_table_lacks_is_named():
    rows = StructType([StructField("after", StructType([StructField("name", StringType()),
                                                        StructField("tier", StringType())]))])
    assert schema_mismatch(rows, TABLE) == "add column `after`.`tier` string"


def test_a_top_level_column_the_table_lacks_is_named():
    rows = StructType([*TABLE.fields, StructField("debug", StringType())])
    assert schema_mismatch(rows, TABLE) == "add column `debug` string"


def test_a_type_the_table_cannot_hold_is_refused():
    rows = StructType([StructField("customer_id", TimestampType())])
    assert "`customer_id` changed type" in schema_mismatch(rows, TABLE)


def test_rows_with_fewer_fields_or_narrower_types_pass():
    # fewer fields: the table's other columns stay null; a narrower type: conform_to_schema widens it
    rows = StructType([StructField("customer_id", IntegerType()),
                       StructField("_seq", SEQ)])
    assert schema_mismatch(rows, TABLE) is None
