"""Which producer types a bronze column takes, and the union of a stream's writer schemas; pure.

A value lands in a column only when the column holds it exactly (ARCHITECTURE §6, "Schema
evolution"): the same type; a type Iceberg widens the column to in place (`WIDENINGS`, a
decimal's precision at the same scale, `is_widening`); or a narrower type the column already
holds exactly (`holds_exactly`: an int in a bigint or a double column, a float in a double, an
integer or a decimal of fewer digits in a decimal). Structs match by field name at every
depth, never by position, and so do the structs inside arrays and maps.

Anything else (an int column and a writer's double, a string over a number, a decimal of
another scale) is a `Misfit` of that writer: the decoder never casts it; a record of that
writer with a value there is a dead row SCHEMA_MISMATCH (ingestion/formats/avro.py `decode_avro`).
A column's type is always one a schema declares (the stream's contract file or a writer
schema), never one the ingestion invents: a writer that only a wider type would hold waits
for the contract to declare that type (then the column widens and `lakehouse dlq replay`
lands its records).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DataType,
    DecimalType,
    IntegerType,
    LongType,
    MapType,
    StructField,
    StructType,
)

# Iceberg's type promotions (spec: "Schema Evolution"): lossless, so old files stay readable.
# Decimals widen too: their precision, at the same scale (`is_widening`).
WIDENINGS = {("int", "bigint"), ("float", "double")}

# (writer type, column type) pairs where the column holds every value of the writer's type as
# it is, beyond the widenings: every int is a double exactly (53 bits of mantissa); a long is
# not (nor an int a float: 24 bits).
_HELD = {("int", "double")}

# digits of the largest int and long: a decimal(p, s) holds them when p - s is at least this
_INTEGER_DIGITS = {IntegerType: 10, LongType: 19}


def is_widening(old: DataType, new: DataType) -> bool:
    """Whether Iceberg changes a column of type ``old`` to ``new`` in place (old files readable)."""
    if isinstance(old, DecimalType) and isinstance(new, DecimalType):
        return old.scale == new.scale and new.precision > old.precision
    return (old.simpleString(), new.simpleString()) in WIDENINGS


def same_type(a: DataType, b: DataType) -> bool:
    """The same type, nullability and metadata aside."""
    return _loose(a) == _loose(b)


def by_name(value: Column, source: DataType, target: DataType,
            leaf: Callable[[Column, DataType, DataType], Column]) -> Column:
    """``value``, of type ``source``, as type ``target``: struct fields matched by name at every
    depth, never by position (a field ``source`` lacks is null), through the elements of arrays
    and the values of maps; ``leaf(value, source, target)`` makes every other place (bronze's
    writes cast, the Avro decoder casts only what the column holds exactly). Decoding and
    writing bronze conform the same way, so a nested struct a writer reordered lands by name."""
    if same_type(source, target):
        return value
    if isinstance(source, StructType) and isinstance(target, StructType):
        have = {f.name: f.dataType for f in source.fields}
        return F.when(value.isNotNull(), F.struct(*[
            (by_name(value[f.name], have[f.name], f.dataType, leaf) if f.name in have
             else F.lit(None).cast(f.dataType)).alias(f.name)
            for f in target.fields]))
    if isinstance(source, ArrayType) and isinstance(target, ArrayType):
        return F.transform(value, lambda element: by_name(element, source.elementType, target.elementType, leaf))
    if isinstance(source, MapType) and isinstance(target, MapType) and same_type(source.keyType, target.keyType):
        return F.transform_values(value, lambda _key, item: by_name(item, source.valueType, target.valueType, leaf))
    return leaf(value, source, target)


def _loose(data_type: DataType) -> DataType:
    if isinstance(data_type, StructType):
        return StructType([StructField(f.name, _loose(f.dataType), True) for f in data_type.fields])
    if isinstance(data_type, ArrayType):
        return ArrayType(_loose(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(_loose(data_type.keyType), _loose(data_type.valueType), True)
    return data_type


def holds_exactly(column: DataType, writer: DataType) -> bool:
    """Whether every value of the leaf type ``writer`` is a value of ``column`` as it is (so a cast
    from one to the other changes nothing). Structs, arrays and maps: see `misfits`."""
    if same_type(column, writer) or is_widening(writer, column):
        return True
    if isinstance(column, DecimalType):
        if isinstance(writer, DecimalType):
            return writer.scale <= column.scale and writer.precision - writer.scale <= column.precision - column.scale
        digits = _INTEGER_DIGITS.get(type(writer))
        return digits is not None and column.precision - column.scale >= digits
    return (writer.simpleString(), column.simpleString()) in _HELD


def _is_container(data_type: DataType) -> bool:
    return isinstance(data_type, StructType | ArrayType | MapType)


def merged(column: DataType, writer: DataType) -> DataType:
    """The column's type once ``writer`` is among its writers: structs merged by name (a field the
    writer adds appended), arrays and maps by their elements and values, a leaf widened when
    Iceberg widens it to the writer's type; otherwise the column's type as it was (what it cannot
    hold stays a misfit of that writer)."""
    if isinstance(column, StructType) and isinstance(writer, StructType):
        return StructType(union(list(column.fields), writer))
    if isinstance(column, ArrayType) and isinstance(writer, ArrayType):
        return ArrayType(merged(column.elementType, writer.elementType), True)
    if isinstance(column, MapType) and isinstance(writer, MapType):
        if not same_type(column.keyType, writer.keyType):
            return column
        return MapType(column.keyType, merged(column.valueType, writer.valueType), True)
    if _is_container(column) or _is_container(writer) or holds_exactly(column, writer):
        return column
    return writer if is_widening(column, writer) else column


def union(columns: list[StructField], writer: StructType) -> list[StructField]:
    """``columns`` with ``writer``'s fields merged in, by name: a field they lack is appended."""
    fields = {f.name: f for f in columns}
    for field in writer.fields:
        known = fields.get(field.name)
        data_type = field.dataType if known is None else merged(known.dataType, field.dataType)
        fields[field.name] = StructField(field.name, data_type, True)
    return list(fields.values())


# A step from a value to one inside it: ("field", name), ("element",), ("key",) or ("value",).
Step = tuple[str, ...]


@dataclass(frozen=True)
class Misfit:
    """A place in a writer's records whose type the column there does not hold exactly."""

    steps: tuple[Step, ...]
    writer: DataType
    column: DataType

    @property
    def path(self) -> str:
        """The column's path as Iceberg's DDL names it (``shipping.zip``, ``items.element.price``)."""
        return ".".join(step[1] if step[0] == "field" else step[0] for step in self.steps)

    def describe(self) -> str:
        return f"{self.path} is {self.writer.simpleString()} in the writer, {self.column.simpleString()} in bronze"


def misfits(writer: DataType, column: DataType, steps: tuple[Step, ...] = ()) -> list[Misfit]:
    """Where the values of ``writer`` do not fit ``column`` exactly, at any depth (a writer field
    the column lacks is not a misfit: `union` adds it)."""
    if isinstance(writer, StructType) and isinstance(column, StructType):
        have = {f.name: f.dataType for f in column.fields}
        return [misfit for f in writer.fields if f.name in have
                for misfit in misfits(f.dataType, have[f.name], (*steps, ("field", f.name)))]
    if isinstance(writer, ArrayType) and isinstance(column, ArrayType):
        return misfits(writer.elementType, column.elementType, (*steps, ("element",)))
    if isinstance(writer, MapType) and isinstance(column, MapType):
        # keys as they are: a map is not rebuilt key by key
        keys = [] if same_type(writer.keyType, column.keyType) else [
            Misfit((*steps, ("key",)), writer.keyType, column.keyType)]
        return keys + misfits(writer.valueType, column.valueType, (*steps, ("value",)))
    if _is_container(writer) or _is_container(column) or not holds_exactly(column, writer):
        return [Misfit(steps, writer, column)]
    return []
