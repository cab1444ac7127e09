"""Which producer types a bronze column takes (ingestion/formats/column_types.py), and the union of writer
schemas; pure, no Spark session."""

from pyspark.sql.types import (
    ArrayType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from ingestion.formats.column_types import holds_exactly, is_widening, misfits, union


def struct(**fields) -> StructType:
    return StructType([StructField(name, kind) for name, kind in fields.items()])


def test_iceberg_widens_int_float_and_a_decimals_precision_at_its_scale_only():
    assert is_widening(IntegerType(), LongType()) and is_widening(FloatType(), DoubleType())
    assert is_widening(DecimalType(5, 2), DecimalType(9, 2))
    assert not is_widening(DecimalType(9, 2), DecimalType(5, 2))
    assert not is_widening(DecimalType(5, 2), DecimalType(9, 3))  # a scale never changes in place
    assert not is_widening(IntegerType(), DoubleType()) and not is_widening(LongType(), IntegerType())


def test_a_column_holds_a_writer_type_exactly_only_when_every_value_is_its_own():
    held = [(LongType(), IntegerType()), (DoubleType(), IntegerType()), (DoubleType(), FloatType()),
            (DecimalType(12, 2), IntegerType()), (DecimalType(21, 2), LongType()),
            (DecimalType(9, 2), DecimalType(5, 2)), (DecimalType(8, 2), DecimalType(7, 1)),
            (StringType(), StringType())]
    not_held = [(IntegerType(), DoubleType()), (IntegerType(), LongType()), (LongType(), StringType()),
                (StringType(), LongType()), (DoubleType(), LongType()),  # 2^53 + 1 is no double
                (FloatType(), IntegerType()), (DecimalType(9, 2), IntegerType()),  # 7 digits before the point
                (DecimalType(20, 2), LongType()), (DecimalType(9, 2), DecimalType(9, 3)),
                (DecimalType(7, 2), DecimalType(7, 1)), (IntegerType(), DecimalType(5, 0))]
    assert [pair for pair in held if not holds_exactly(*pair)] == []
    assert [pair for pair in not_held if holds_exactly(*pair)] == []


def test_the_union_widens_in_place_and_keeps_the_column_where_the_writer_does_not_fit():
    base = [StructField("quantity", IntegerType()), StructField("price", DoubleType())]
    # a writer's int where the column is a double: held as it is, the column stays
    assert union(base, struct(quantity=LongType(), price=IntegerType())) == [
        StructField("quantity", LongType()), StructField("price", DoubleType())]
    # int -> double is no widening Iceberg makes: the column stays int, the writer's field a misfit
    assert union(base, struct(quantity=DoubleType())) == base
    assert union([StructField("discount", DecimalType(5, 2))], struct(discount=DecimalType(9, 2))) == [
        StructField("discount", DecimalType(9, 2))]
    # never a type nobody declared: decimal(8,2) would hold both, neither schema says it
    assert union([StructField("discount", DecimalType(5, 2))], struct(discount=DecimalType(7, 1))) == [
        StructField("discount", DecimalType(5, 2))]


def test_the_union_merges_nested_structs_by_name_at_every_depth():
    ship = struct(city=StringType(), zip=StringType())
    item = struct(sku=StringType(), n=IntegerType())
    base = [StructField("ship", ship), StructField("items", ArrayType(item)),
            StructField("prices", MapType(StringType(), struct(amount=DecimalType(5, 2))))]
    writer = struct(ship=struct(zip=StringType(), country=StringType(), city=StringType()),
                    items=ArrayType(struct(n=LongType(), sku=StringType(), color=StringType())),
                    prices=MapType(StringType(), struct(currency=StringType(), amount=DecimalType(7, 2))))
    assert StructType(union(base, writer)) == StructType([
        StructField("ship", struct(city=StringType(), zip=StringType(), country=StringType())),
        StructField("items", ArrayType(struct(sku=StringType(), n=LongType(), color=StringType()))),
        StructField("prices", MapType(StringType(), struct(amount=DecimalType(7, 2), currency=StringType()))),
    ])


def test_misfits_name_the_path_and_both_types_at_any_depth():
    columns = struct(quantity=IntegerType(), ship=struct(zip=LongType()),
                     items=ArrayType(struct(n=IntegerType())),
                     prices=MapType(StringType(), struct(amount=DecimalType(5, 2))))
    writer = struct(quantity=DoubleType(), ship=struct(zip=StringType()), items=ArrayType(struct(n=IntegerType())),
                    prices=MapType(StringType(), struct(amount=DecimalType(5, 3))))
    assert [m.describe() for m in misfits(writer, columns)] == [
        "quantity is double in the writer, int in bronze",
        "ship.zip is string in the writer, bigint in bronze",
        "prices.value.amount is decimal(5,3) in the writer, decimal(5,2) in bronze",
    ]
    found = misfits(struct(items=ArrayType(struct(n=StringType()))), columns)
    assert [(m.path, m.steps) for m in found] == [("items.element.n", (("field", "items"), ("element",),
                                                                      ("field", "n")))]
    # a struct where the column is a leaf, and the other way round
    assert [m.path for m in misfits(struct(quantity=struct(n=IntegerType()), ship=StringType()), columns)] == [
        "quantity", "ship"]
    assert misfits(columns, columns) == []
    assert misfits(struct(quantity=IntegerType(), extra=StringType()), columns) == []  # a new field: added
