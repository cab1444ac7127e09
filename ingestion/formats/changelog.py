"""What both CDC formats share (ARCHITECTURE §6): the changelog columns and checks, the JSON
envelope, and the row fields the contract lacks (``RESCUED``, and their descriptions)."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    MapType,
    StringType,
    StructField,
    StructType,
    VariantType,
)

from ingestion.formats.checks import CORRUPT_COLUMN, any_of, names_where, with_errors
from lakehouse.contracts.bronze_columns import (
    IS_TOMBSTONE,
    RESCUED,
    SEQ,
    SOURCE_TS,
)


def lookup(mapping: dict[str, str], column: Column) -> Column:
    return F.element_at(F.create_map(*[F.lit(x) for pair in mapping.items() for x in pair]), column)


def schema_wrapper(content: StructType) -> StructType:
    """The fields Kafka's JsonConverter adds with ``schemas.enable=true``: the value becomes
    ``{"schema": <its Connect schema>, "payload": <the value>}``."""
    return StructType([StructField("schema", StringType()), StructField("payload", content)])


def unwrapped(parsed: Column, content: StructType, wrapper_fields: list[str] | None = None) -> Column:
    """``content``'s fields from ``parsed`` (read with ``schema_wrapper``'s fields added): from
    its payload when it has a schema and a payload, else from its top level. Only the fields in
    ``wrapper_fields`` (default: all) are in the payload; the others always come from the top."""
    wrapped = parsed["schema"].isNotNull() & parsed["payload"].isNotNull()
    inside = {f.name for f in content.fields} if wrapper_fields is None else set(wrapper_fields)
    return F.when(parsed.isNotNull(), F.struct(*[
        (F.when(wrapped, parsed["payload"][f.name]).otherwise(parsed[f.name]) if f.name in inside
         else parsed[f.name]).alias(f.name)
        for f in content.fields]))


def to_changelog(
    parsed: DataFrame,
    image_schema: StructType,
    identity: tuple[str, ...],
    op: Column,
    image: Column,
    source_ts: Column,
    seq: Column,
    tombstone: Column,
    message_key: Column,
    checks: list[tuple[Column, str, Column]],
    truncate: Column | None = None,
    extra: list[Column] | None = None,
    rescued_fields: Column | None = None,
) -> DataFrame:
    """The normalized changelog columns plus the checks every CDC format shares. A truncate
    (``truncate`` true) is a change of the whole table: no row, no key, its message key ignored.
    ``rescued_fields``: the row's fields the contract lacks (``RESCUED``); ``extra``: the
    format's own columns, after the shared ones."""
    row_change = ~truncate if truncate is not None else F.lit(True)
    key_present = F.col("key").isNotNull() & row_change
    mismatch = {name: key_present & ~message_key[name].eqNullSafe(image[name]) for name in identity}
    unreadable_key = key_present & any_of(message_key[name].isNull() for name in identity)
    columns = [
        F.when(~tombstone, op).alias("op"),
        # A tombstone carries only its key: its row is the key, every other column null.
        *[F.when(tombstone, message_key[f.name]).otherwise(image[f.name]).cast(f.dataType).alias(f.name)
          if f.name in identity else F.when(~tombstone, image[f.name]).alias(f.name)
          for f in image_schema.fields],
        F.when(~tombstone, source_ts).alias(SOURCE_TS),
        F.when(~tombstone, seq).alias(SEQ),
        tombstone.alias(IS_TOMBSTONE),
        *([F.when(~tombstone, rescued_fields).alias(RESCUED)] if rescued_fields is not None else []),
        *(extra or []),
    ]
    not_tombstone = ~tombstone
    return with_errors(parsed, columns, [
        (tombstone & unreadable_key, "INVALID_CDC_ENVELOPE", F.lit("tombstone without a readable key")),
        *[(not_tombstone & failed, code, detail) for failed, code, detail in checks],
        (not_tombstone & row_change & any_of(image[name].isNull() for name in identity), "MISSING_REQUIRED_FIELD",
         F.concat(F.lit("change without its key: "), names_where({n: image[n].isNull() for n in identity}))),
        (not_tombstone & unreadable_key, "INVALID_CDC_ENVELOPE",
         F.concat(F.lit("unreadable message key: "), F.col("key").cast("string"))),
        (not_tombstone & any_of(mismatch.values()), "INVALID_CDC_ENVELOPE",
         F.concat(F.lit("message key and row disagree on "), names_where(mismatch))),
    ])


def wrong_type_detail(text: str, wrong_type: dict[str, tuple[Column, Column | None]]) -> Column:
    """``text``, then the fields read by ``strict_fields`` whose token did not fit (a field of another
    type that did not convert is not named: Spark's corrupt-record column does not say), a decimal
    with why: ``amount (1.123456: 6 digits after the point, the contract's decimal(18,4) keeps 4)``."""
    names = F.concat_ws(", ", *[
        F.when(wrong, F.lit(name) if misfit is None else F.concat(
            F.lit(name), F.coalesce(F.concat(F.lit(" ("), misfit, F.lit(")")), F.lit(""))))
        for name, (wrong, misfit) in wrong_type.items()])
    return F.concat(F.lit(text), F.when(names != "", F.concat(F.lit(": "), names)).otherwise(F.lit("")))


def json_envelope(schema: StructType) -> tuple[Column, Column]:
    text = F.col("value").cast("string")
    loose = F.from_json(text, MapType(StringType(), StringType()))
    typed = F.from_json(text, StructType([*schema.fields, StructField(CORRUPT_COLUMN, StringType(), True)]),
                        {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_COLUMN})
    return loose, typed


# --- row fields the contract lacks (ARCHITECTURE §6, "Fields the contract lacks") -----------

TEXT_MAP = MapType(StringType(), StringType())


def _row_image_text(loose: Column, fmt: str) -> Column:
    """The JSON text of a change's row image, from its envelope read as a map of texts (``loose``):
    Debezium's ``after`` (``before`` for a delete), inside ``payload`` when schemas are enabled;
    DMS's ``data``."""
    if fmt == "dms":
        return loose["data"]
    event = F.when(loose["schema"].isNotNull() & loose["payload"].isNotNull(),
                   F.from_json(loose["payload"], TEXT_MAP)).otherwise(loose)
    return F.when(event["op"] == F.lit("d"), event["before"]).otherwise(event["after"])


def _unknown_fields(image_text: Column, declared: StructType) -> Column:
    """The image's fields that ``declared`` lacks, by name, each value as VARIANT (its JSON type kept)."""
    names = [f.name for f in declared.fields]
    return F.map_filter(F.from_json(image_text, MapType(StringType(), VariantType())), lambda k, _v: ~k.isin(*names))


def rescued(loose: Column, fmt: str, declared: StructType) -> Column:
    """``RESCUED``: the row image's fields the contract lacks, as a JSON object; null when none."""
    unknown = _unknown_fields(_row_image_text(loose, fmt), declared)
    return F.when(F.size(unknown) > 0, F.to_json(unknown))


# A Debezium value schema's fields as the description of an unknown field needs them
_FIELD_SCHEMA = StructType([StructField("field", StringType()), StructField("type", StringType()),
                            StructField("name", StringType()), StructField("parameters", TEXT_MAP)])
_FULL_CONNECT_SCHEMA = StructType([StructField("fields", ArrayType(StructType([
    StructField("field", StringType()), StructField("fields", ArrayType(_FIELD_SCHEMA))])))])


def unknown_field_descriptions(raw: DataFrame, fmt: str, declared: StructType) -> DataFrame:
    """What a batch's change events say of each row field ``declared`` lacks, one row per distinct
    description: ``name``, the Kafka Connect ``connect_type``, ``connect_name`` (semantic type)
    and ``parameters`` (JSON text) when schemas are enabled, and ``json_kind``, the value's
    JSON type (``schema_of_variant``). `lakehouse.contracts.streams.added_field` types it."""
    loose = F.from_json(F.col("value").cast("string"), TEXT_MAP)
    values = raw.select(loose.alias("_loose")).select(
        F.explode(_unknown_fields(_row_image_text(F.col("_loose"), fmt), declared)).alias("name", "value"),
        F.col("_loose")["schema"].alias("_schema"))
    image = "before" if fmt == "debezium" else "data"
    row_fields = F.try_element_at(F.filter(F.from_json("_schema", _FULL_CONNECT_SCHEMA)["fields"],
                                           lambda f: f["field"].isin("after", image)), F.lit(1))["fields"]
    described = F.try_element_at(F.filter(row_fields, lambda f: f["field"] == F.col("name")), F.lit(1))
    return values.select(
        "name", described["type"].alias("connect_type"), described["name"].alias("connect_name"),
        F.to_json(described["parameters"]).alias("parameters"),
        F.when(~F.is_variant_null("value"), F.schema_of_variant("value")).alias("json_kind"),
    ).distinct()
