"""JSON tokens read strictly: a value of the wrong JSON type is a SCHEMA_MISMATCH, never converted
in silence (the rules below); used by both CDC formats' row images and Debezium's message keys."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DataType,
    DateType,
    DecimalType,
    StringType,
    StructField,
    StructType,
    TimestampType,
    VariantType,
)

if TYPE_CHECKING:
    from ingestion.formats.debezium import SemanticType


# Spark's JSON reader converts two kinds of token silently: a number into a timestamp (read as
# epoch seconds: a Debezium microsecond timestamp became the year 195827) and any token into a
# string (a number, a boolean, an object become their JSON text). Both JSON paths refuse that,
# with one set of rules: a date-time must be a string that looks like an ISO 8601 date-time
# (then Spark's cast), a date a string that is an ISO date, a decimal a number or a string of
# digits that fits its precision and scale without rounding, a string a JSON string; a long,
# double or boolean takes only its own JSON type. A token of another type is a SCHEMA_MISMATCH
# like any other (ARCHITECTURE §7).
# - JSON events: the project's JVM decoder (jvm/json-decoder, ingestion/json_udf.py) applies
#   the rules in its one parse of the record.
# - CDC row images (inside a Debezium or DMS envelope, some fields by their semantic type):
#   `from_json` reads a string, date-time, date or decimal field as VARIANT, which keeps the
#   token's JSON type, and the functions below convert it; every other type already refuses a
#   token it cannot hold, through the corrupt-record column.
_VARIANT_READ = (StringType, TimestampType, DateType, DecimalType)
_ISO_DATE = "^[0-9]{4}-[0-9]{2}-[0-9]{2}"  # how every ISO 8601 date-time starts; no JSON number does
_DECIMAL_TEXT = r"^[+-]?[0-9]+(\.([0-9]*))?$"


def strict_parse_schema(declared: StructType, semantic: Collection[str] = ()) -> StructType:
    """The schema to parse ``declared`` with: string, date, decimal fields and those in ``semantic``
    as VARIANT; date-time fields as their text (no number passes for an ISO 8601 text, and a
    string is cheaper to read than a VARIANT)."""
    def parse_type(f: StructField) -> DataType:
        if isinstance(f.dataType, TimestampType) and f.name not in semantic:
            return StringType()
        return VariantType() if isinstance(f.dataType, _VARIANT_READ) else f.dataType
    return StructType([StructField(f.name, parse_type(f), True) for f in declared.fields])


def json_string(parsed: Column) -> Column:
    return F.when(F.schema_of_variant(parsed) == F.lit("STRING"), F.try_variant_get(parsed, "$", "string"))


def json_integer(parsed: Column) -> Column:
    return F.when(F.schema_of_variant(parsed) == F.lit("BIGINT"), F.try_variant_get(parsed, "$", "long"))


def iso_timestamp(text: Column) -> Column:
    # Spark's cast reads what from_json reads (its fallback parser is the cast's); try_cast:
    # under ANSI mode a cast of "2026-13-45" would fail the batch instead of giving null
    return F.when(text.rlike(_ISO_DATE), text.try_cast("timestamp"))


def _decimal_from_text(text: Column, declared: DecimalType) -> Column:
    """A decimal written as digits, only when it fits ``declared`` as it is: a digit beyond the
    scale that is not 0 would be rounded, so the value does not fit."""
    fraction = F.regexp_extract(text, _DECIMAL_TEXT, 2)
    exact = text.rlike(_DECIMAL_TEXT) & F.substr(fraction, F.lit(declared.scale + 1), F.lit(1 << 16)).rlike("^0*$")
    return F.when(exact, text.try_cast(declared))


def json_decimal_text(parsed: Column) -> Column:
    """The digits of a JSON number, or of a string (money is often sent as text, and Debezium's
    decimal.handling.mode=string writes each value so, with its column's scale)."""
    kind = F.schema_of_variant(parsed)
    return F.when(kind == F.lit("STRING"), F.try_variant_get(parsed, "$", "string")).when(
        kind.startswith("DECIMAL") | (kind == F.lit("BIGINT")), F.try_variant_get(parsed, "$", "string"))


def _json_decimal(parsed: Column, declared: DecimalType) -> Column:
    """A JSON number, or a string of digits, as ``declared``."""
    return _decimal_from_text(json_decimal_text(parsed), declared)


def let(value: Column, body: Callable[[Column], Column]) -> Column:
    """``body`` applied to ``value``, which it may use several times while it is computed once: a
    Column used twice is two copies of its tree (Spark has no names for shared subexpressions),
    and copies of copies made a decimal's dead-letter detail too big to plan (minutes of
    analysis). A one-element array's transform binds the value to the lambda's variable."""
    return F.element_at(F.transform(F.array(value), body), 1)


def _decimal_misfit(text: Column, declared: DecimalType) -> Column:
    """Why the decimal written ``text`` does not fit ``declared``, for a dead letter's detail: the
    digits after the point it has (a change carries its column's scale, so after an ALTER of
    the source column, its new scale) or before it; null when it is no number."""
    kept = f"the contract's decimal({declared.precision},{declared.scale})"

    def why(written: Column) -> Column:
        fraction = F.regexp_extract(written, _DECIMAL_TEXT, 2)
        whole = F.regexp_extract(written, r"^[+-]?0*([0-9]*)", 1)
        return F.when(written.rlike(_DECIMAL_TEXT), F.when(
            F.length(F.regexp_replace(fraction, "0+$", "")) > declared.scale,
            F.concat(written, F.lit(": "), F.length(fraction).cast("string"),
                     F.lit(f" digits after the point, {kept} keeps {declared.scale}"))).when(
            F.length(whole) > declared.precision - declared.scale,
            F.concat(written, F.lit(": "), F.length(whole).cast("string"),
                     F.lit(f" digits before the point, {kept} holds {declared.precision - declared.scale}"))))
    return let(text, why)


def plain_value(parsed: Column, declared: DataType) -> Column:
    """A field read as VARIANT (strict_parse_schema), as declared; null if its token does not fit."""
    if isinstance(declared, TimestampType):
        return iso_timestamp(json_string(parsed))
    if isinstance(declared, DateType):
        text = json_string(parsed)
        return F.when(text.rlike(_ISO_DATE + "$"), text.try_cast("date"))
    if isinstance(declared, DecimalType):
        return _json_decimal(parsed, declared)
    return json_string(parsed)


def _strict_field(parsed: Column, declared: DataType, semantic: SemanticType | None = None
                  ) -> tuple[Column, Column, Column | None]:
    """(the value as declared, does the token not fit?, why not: a decimal's digits, else None) of a
    field parsed by ``strict_parse_schema``; with ``semantic``, read as Debezium wrote it. A JSON
    null and an absent key are null, not wrong."""
    if not isinstance(declared, _VARIANT_READ):
        return parsed, F.lit(False), None
    if isinstance(declared, TimestampType) and semantic is None:  # read as text
        value = iso_timestamp(parsed)
        return value, parsed.isNotNull() & value.isNull(), None
    value = plain_value(parsed, declared) if semantic is None else semantic.value(parsed, declared)
    misfit = None
    if isinstance(declared, DecimalType):
        text = json_decimal_text(parsed) if semantic is None else semantic.decimal_text(parsed)
        misfit = _decimal_misfit(text, declared)
    return value, parsed.isNotNull() & ~F.is_variant_null(parsed) & value.isNull(), misfit


def strict_fields(parsed: Column, declared: StructType, semantic: dict[str, SemanticType] | None = None,
                  source_names: dict[str, str] | None = None) -> dict[str, tuple[Column, Column, Column | None]]:
    """Per field of ``declared``: (its value as declared, did its token not fit?, why not, when it
    can say), from the struct ``parsed`` by ``strict_parse_schema``; the fields in ``semantic``
    read by their semantic type, those in ``source_names`` from the field of that name."""
    semantic, source_names = semantic or {}, source_names or {}
    return {f.name: _strict_field(parsed[source_names.get(f.name, f.name)], f.dataType, semantic.get(f.name))
            for f in declared.fields}


def with_strict_image(parsed: DataFrame, image: Column, declared: StructType,
                      semantic: dict[str, SemanticType] | None = None, source_names: dict[str, str] | None = None,
                      ) -> tuple[DataFrame, Column, dict[str, tuple[Column, Column | None]]]:
    """``parsed`` plus the fields of ``image`` (parsed by ``strict_parse_schema``) as declared;
    the image as a struct of them (null if ``image`` is null), and per field whether its token
    had the wrong JSON type, with why (a decimal's digits: ``_decimal_misfit``; else None). Each
    value and check is a column of its own, computed once (see decode_json): the checks read
    them inside conditional branches; the reason is computed only for a token that does not fit.
    ``source_names``: the declared fields read from a field of another name of ``image``
    (strict_fields)."""
    fields = strict_fields(image, declared, semantic, source_names)
    value_columns = {name: f"_image_{number}" for number, name in enumerate(fields)}
    wrong_columns = {name: f"_image_wrong_type_{number}" for number, name in enumerate(fields)}
    parsed = parsed.select("*", image.isNotNull().alias("_image_present"),
                           *[value.alias(value_columns[name]) for name, (value, *_) in fields.items()],
                           *[wrong.alias(wrong_columns[name]) for name, (_, wrong, _) in fields.items()])
    struct = F.when(F.col("_image_present"),
                    F.struct(*[F.col(value_columns[name]).alias(name) for name in fields]))
    return parsed, struct, {name: (F.col(wrong_columns[name]), misfit) for name, (_, _, misfit) in fields.items()}
