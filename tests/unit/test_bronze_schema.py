"""How bronze evolves to a decoder's new schema (ingestion.bronze.schema_changes), and its DDL; no Spark session."""

import pytest
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from ingestion.bronze import create_table_ddl, schema_changes
from lakehouse.core.errors import LakehouseError


def struct(**fields) -> StructType:
    return StructType([StructField(name, kind) for name, kind in fields.items()])


def test_new_columns_nested_ones_too_and_widenings_are_altered():
    current = struct(id=IntegerType(), address=struct(city=StringType()))
    wanted = struct(id=LongType(), address=struct(city=StringType(), zip=StringType()), tier=StringType())
    assert schema_changes(current, wanted) == [
        "alter column `id` type bigint", "add column `address`.`zip` string", "add column `tier` string"]


def test_a_type_change_that_is_not_a_widening_is_refused():
    with pytest.raises(LakehouseError, match="not a lossless widening"):
        schema_changes(struct(id=StringType()), struct(id=LongType()))


def test_a_changelog_order_key_of_other_fields_is_refused_not_evolved():
    """Evolved, _seq would become {lsn, phase, ...}, new rows with a null lsn, ordered before every
    older change: the mirror would silently keep old values."""
    current = struct(customer_id=LongType(), _seq=struct(lsn=LongType()))
    wanted = struct(customer_id=LongType(), _seq=struct(phase=IntegerType(), commit_pos=LongType(),
                                                         change_pos=LongType()))
    with pytest.raises(LakehouseError, match=r"by \{lsn\}; this version orders them by \{phase, commit_pos, "
                                             r"change_pos\}.*ingest the topic again"):
        schema_changes(current, wanted)
    assert schema_changes(wanted, wanted) == []
    # a table's struct fields may be nullable where the decoder's are not: the same key
    stored = StructType([StructField("customer_id", LongType()), StructField("_seq", StructType(
        [StructField(f.name, f.dataType, nullable=True) for f in wanted["_seq"].dataType.fields]))])
    decoded = StructType([StructField("customer_id", LongType()), StructField("_seq", StructType(
        [StructField(f.name, f.dataType, nullable=False) for f in wanted["_seq"].dataType.fields]))])
    assert schema_changes(stored, decoded) == []


def test_a_changelog_order_key_of_the_same_fields_in_another_order_is_refused():
    """DMS's `_seq` put the commit time first, then the log position; now the log position comes
    first. The same fields in another order are another order: a table of the old one stops the job."""
    old = struct(account_id=LongType(), _seq=struct(commit_us=LongType(), log_position=StringType(),
                                                    stream_position=StringType(), transaction_id=LongType(),
                                                    record_id=LongType()))
    new = struct(account_id=LongType(), _seq=struct(log_position=StringType(), commit_us=LongType(),
                                                    stream_position=StringType(), transaction_id=LongType(),
                                                    record_id=LongType()))
    with pytest.raises(LakehouseError, match=r"by \{commit_us, log_position, stream_position, transaction_id, "
                                             r"record_id\}; this version orders them by \{log_position, commit_us, "
                                             r"stream_position, transaction_id, record_id\}"):
        schema_changes(old, new)


def test_a_table_without_partitioning_gets_no_partition_clause():
    """Spark refuses ``partitioned by ()``: an unpartitioned table has no clause at all."""
    columns = struct(id=LongType(), ts=StringType())
    unpartitioned = create_table_ddl("bronze.t", columns, (), {"format-version": "2"})
    partitioned = create_table_ddl("bronze.t", columns, ("days(`ts`)",), {"format-version": "2"})
    assert "partitioned by" not in unpartitioned
    assert "using iceberg\ntblproperties (" in unpartitioned
    assert "using iceberg\npartitioned by (days(`ts`))\ntblproperties (" in partitioned


def test_a_decimals_precision_widens_in_place_and_its_scale_is_refused():
    from pyspark.sql.types import DecimalType

    assert schema_changes(struct(d=DecimalType(5, 2)), struct(d=DecimalType(9, 2))) == [
        "alter column `d` type decimal(9,2)"]
    with pytest.raises(LakehouseError, match=r"`d` changed type from decimal\(5,2\) to decimal\(6,3\)"):
        schema_changes(struct(d=DecimalType(5, 2)), struct(d=DecimalType(6, 3)))


def test_a_type_the_column_already_holds_exactly_changes_nothing():
    from pyspark.sql.types import DecimalType, DoubleType

    stored = struct(q=LongType(), p=DoubleType(), d=DecimalType(12, 2))
    assert schema_changes(stored, struct(q=IntegerType(), p=IntegerType(), d=IntegerType())) == []


def test_fields_added_inside_arrays_and_maps_of_structs_are_nested_columns():
    from pyspark.sql.types import ArrayType, MapType

    current = struct(items=ArrayType(struct(sku=StringType(), n=IntegerType())),
                     prices=MapType(StringType(), struct(amount=IntegerType())))
    wanted = struct(items=ArrayType(struct(n=LongType(), sku=StringType(), color=StringType())),
                    prices=MapType(StringType(), struct(amount=IntegerType(), currency=StringType())))
    assert schema_changes(current, wanted) == [
        "alter column `items`.element.`n` type bigint", "add column `items`.element.`color` string",
        "add column `prices`.value.`currency` string"]
