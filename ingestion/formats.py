"""Per-format decoding and validation, pure: Kafka rows in, validated records out (DataFrames).

Input: the Kafka source's columns (key, value, topic, partition, offset, timestamp, ...).
Output of every ``decode_*``: the stream's bronze payload columns (and format extras such
as ``RESCUED``, ``SCHEMA_ID`` or the CDC changelog columns), the Kafka columns, and
``ERROR_CODE`` / ``ERROR_DETAIL``, null for a good record and naming the reason
(ARCHITECTURE §7) for one that must go to dead letters. A decode that "succeeds" into garbage
(an all-null Avro struct, a Protobuf message without its identity) is caught here too.
"""

from __future__ import annotations

import base64
import operator
from collections.abc import Callable, Collection
from datetime import UTC, datetime, timedelta
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DataType,
    DateType,
    DecimalType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
    VariantType,
)

from ingestion.column_types import misfits, same_type
from lakehouse.contracts import bronze_columns as bronze_columns_declared
from lakehouse.contracts import wire
from lakehouse.contracts.bronze_columns import (
    BATCH_ID,
    BEFORE_KEY,
    DEAD_AT,
    ERROR_CODE,
    ERROR_DETAIL,
    INGESTED_AT,
    IS_TOMBSTONE,
    KAFKA_KEY,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_TIMESTAMP,
    KAFKA_TOPIC,
    RAW_HEADERS,
    RAW_KEY,
    RAW_VALUE,
    RESCUED,
    SCHEMA_ID,
    SEQ,
    SOURCE_TS,
    UNAVAILABLE,
    type_of,
)
from lakehouse.contracts.streams import DEBEZIUM_UNAVAILABLE_PLACEHOLDER, JsonContract
from lakehouse.core.sql import quote

CORRUPT_COLUMN = "_corrupt_record"
KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp")
# The record's Kafka headers (the source's ``includeHeaders``): carried through the decoding
# when the source gives them, so a dead row keeps them with its bytes (ARCHITECTURE §7).
HEADERS_COLUMN = "headers"


def kafka_columns(frame: DataFrame) -> tuple[str, ...]:
    """The Kafka columns a decoder passes on: the headers too when ``frame`` has them."""
    return (*KAFKA_COLUMNS, HEADERS_COLUMN) if HEADERS_COLUMN in frame.columns else KAFKA_COLUMNS
ERROR_COLUMNS = (ERROR_CODE, ERROR_DETAIL)
EARLIEST_EVENT_TIME = "2000-01-01 00:00:00"
MAX_CLOCK_SKEW = "INTERVAL 1 DAY"


def _first_error(checks: list[tuple[Column, str, Column]]) -> tuple[Column, Column]:
    """(code, detail) of the first failing check, in order of precedence; nulls if none fails."""
    code, detail = F.lit(None).cast("string"), F.lit(None).cast("string")
    for failed, error_code, error_detail in reversed(checks):
        code = F.when(failed, F.lit(error_code)).otherwise(code)
        detail = F.when(failed, error_detail).otherwise(detail)
    return code, detail


def _names_where(conditions: dict[str, Column]) -> Column:
    """Comma-separated names whose condition holds (for error details)."""
    return F.concat_ws(", ", *[F.when(cond, F.lit(name)) for name, cond in conditions.items()])


def _any(conditions) -> Column:
    return reduce(operator.or_, conditions, F.lit(False))


def _missing_check(payload: Column, required: tuple[str, ...]) -> tuple[Column, str, Column]:
    return _missing_check_of({name: payload[name] for name in required}, required)


def _missing_check_of(values: dict[str, Column], required: tuple[str, ...]) -> tuple[Column, str, Column]:
    missing = {name: values[name].isNull() for name in required}
    return (_any(missing.values()), "MISSING_REQUIRED_FIELD",
            F.concat(F.lit("missing required field(s): "), _names_where(missing)))


def batch_constant(value: int) -> Column:
    """A number fixed for one micro-batch (its instant, its id) as a column of every record, kept
    out of the Java source Spark generates for the batch's plan.

    Spark writes a number literal into that source, so every batch of the job, planned afresh
    (foreachBatch) with its own instant and id, got a class of its own: compiled by Spark, then
    run by the JVM from cold (interpreted, then at a profiling tier, its optimised code last),
    every batch. Measured: with the same literals in every batch the job went from 0.65 to 0.82
    of the checked append (benchmarks/RESULTS.md, issue 43). An array literal is held by
    reference instead, outside the source; indexed by an expression Spark does not fold (the
    record's Kafka partition times zero, plus one) it stays an array read per record, so each
    batch's plan generates the same source and Spark's code cache hands back the class the JIT
    has compiled already. Correct either way: folded, the value would only be compiled in again.
    Needs the batch's ``partition`` column."""
    return F.element_at(F.array(F.lit(value).cast("long")), F.col("partition") * 0 + 1)


def batch_instant(now: datetime) -> Column:
    """``now``, a batch's instant, as a timestamp column out of the generated code (`batch_constant`)."""
    micros = (now - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    return F.timestamp_micros(batch_constant(micros))


def _event_time_check(event_time: Column, name: str, now: datetime | None) -> tuple[Column, str, Column]:
    """Event times before 2000 or more than a day ahead of ``now`` are out of range. ``now`` is the
    batch's instant (`batch_instant`), never the clock: the passes over one batch classify alike."""
    latest = batch_instant(now or datetime.now(UTC)) + F.expr(MAX_CLOCK_SKEW)
    return ((event_time < F.lit(EARLIEST_EVENT_TIME).cast("timestamp")) | (event_time > latest),
            "EVENT_TIME_OUT_OF_RANGE",
            F.concat(F.lit(f"{name}="), event_time.cast("string")))


def _with_errors(frame: DataFrame, columns: list[Column], checks: list[tuple[Column, str, Column]]) -> DataFrame:
    code, detail = _first_error(checks)
    return frame.select(*columns, *kafka_columns(frame), code.alias(ERROR_CODE), detail.alias(ERROR_DETAIL))


# --- JSON ----------------------------------------------------------------------------------

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


def _json_string(parsed: Column) -> Column:
    return F.when(F.schema_of_variant(parsed) == F.lit("STRING"), F.try_variant_get(parsed, "$", "string"))


def _json_integer(parsed: Column) -> Column:
    return F.when(F.schema_of_variant(parsed) == F.lit("BIGINT"), F.try_variant_get(parsed, "$", "long"))


def _iso_timestamp(text: Column) -> Column:
    # Spark's cast reads what from_json reads (its fallback parser is the cast's); try_cast:
    # under ANSI mode a cast of "2026-13-45" would fail the batch instead of giving null
    return F.when(text.rlike(_ISO_DATE), text.try_cast("timestamp"))


def _decimal_from_text(text: Column, declared: DecimalType) -> Column:
    """A decimal written as digits, only when it fits ``declared`` as it is: a digit beyond the
    scale that is not 0 would be rounded, so the value does not fit."""
    fraction = F.regexp_extract(text, _DECIMAL_TEXT, 2)
    exact = text.rlike(_DECIMAL_TEXT) & F.substr(fraction, F.lit(declared.scale + 1), F.lit(1 << 16)).rlike("^0*$")
    return F.when(exact, text.try_cast(declared))


def _json_decimal_text(parsed: Column) -> Column:
    """The digits of a JSON number, or of a string (money is often sent as text, and Debezium's
    decimal.handling.mode=string writes each value so, with its column's scale)."""
    kind = F.schema_of_variant(parsed)
    return F.when(kind == F.lit("STRING"), F.try_variant_get(parsed, "$", "string")).when(
        kind.startswith("DECIMAL") | (kind == F.lit("BIGINT")), F.try_variant_get(parsed, "$", "string"))


def _json_decimal(parsed: Column, declared: DecimalType) -> Column:
    """A JSON number, or a string of digits, as ``declared``."""
    return _decimal_from_text(_json_decimal_text(parsed), declared)


def _let(value: Column, body: Callable[[Column], Column]) -> Column:
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
    return _let(text, why)


def _plain_value(parsed: Column, declared: DataType) -> Column:
    """A field read as VARIANT (strict_parse_schema), as declared; null if its token does not fit."""
    if isinstance(declared, TimestampType):
        return _iso_timestamp(_json_string(parsed))
    if isinstance(declared, DateType):
        text = _json_string(parsed)
        return F.when(text.rlike(_ISO_DATE + "$"), text.try_cast("date"))
    if isinstance(declared, DecimalType):
        return _json_decimal(parsed, declared)
    return _json_string(parsed)


def _strict_field(parsed: Column, declared: DataType, semantic: SemanticType | None = None
                  ) -> tuple[Column, Column, Column | None]:
    """(the value as declared, does the token not fit?, why not: a decimal's digits, else None) of a
    field parsed by ``strict_parse_schema``; with ``semantic``, read as Debezium wrote it. A JSON
    null and an absent key are null, not wrong."""
    if not isinstance(declared, _VARIANT_READ):
        return parsed, F.lit(False), None
    if isinstance(declared, TimestampType) and semantic is None:  # read as text
        value = _iso_timestamp(parsed)
        return value, parsed.isNotNull() & value.isNull(), None
    value = _plain_value(parsed, declared) if semantic is None else semantic.value(parsed, declared)
    misfit = None
    if isinstance(declared, DecimalType):
        text = _json_decimal_text(parsed) if semantic is None else semantic.decimal_text(parsed)
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


def decode_json(raw: DataFrame, function: str, contract: JsonContract, event_time_column: str,
                now: datetime | None = None) -> DataFrame:
    """JSON objects through the registered function ``function`` (ingestion/json_udf.py), which
    reads each record once into its declared fields with the strict checks above. Only a record
    with an undeclared key is parsed again, into a map, for ``RESCUED``."""
    parsed = raw.select(*kafka_columns(raw), F.call_function(function, F.col("value")).alias("_decoded"))
    decoded = F.col("_decoded")
    payload = decoded["payload"]
    declared = [field.name for field in contract.schema.fields]
    text = F.col("value").cast("string")
    extra = F.map_filter(F.from_json(text, MapType(StringType(), StringType())), lambda k, _v: ~k.isin(*declared))
    rescued = F.when(decoded["undeclared"], F.to_json(extra))
    return _with_errors(parsed, [*[payload[name].alias(name) for name in declared], rescued.alias(RESCUED)], [
        (decoded["not_object"], "CORRUPT_PAYLOAD", F.lit("payload is not a JSON object")),
        (decoded["wrong_fields"].isNotNull(), "SCHEMA_MISMATCH",
         F.concat(F.lit("wrong type for field(s): "), decoded["wrong_fields"])),
        _missing_check(payload, contract.required),
        _event_time_check(payload[event_time_column], event_time_column, now),
    ])


# --- Debezium's semantic types -------------------------------------------------------------

def _whole(value: Column, divisor: int) -> Column:
    """``value`` // ``divisor``, exact for any long (a double would round nanoseconds)."""
    return F.floor(value.cast("decimal(20,0)") / F.lit(divisor)).cast("long")


def _time_of_day(micros: Column) -> Column:
    """Microseconds since midnight as PostgreSQL spells a time: HH:MM:SS, then the fraction of a
    second without its trailing zeros."""
    seconds, fraction = _whole(micros, 1_000_000), F.pmod(micros, F.lit(1_000_000))
    clock = F.format_string("%02d:%02d:%02d", _whole(seconds, 3600), F.pmod(_whole(seconds, 60), F.lit(60)),
                            F.pmod(seconds, F.lit(60)))
    return F.when(micros >= 0, F.concat(clock, F.when(fraction > 0, F.concat(
        F.lit("."), F.regexp_replace(F.lpad(fraction.cast("string"), 6, "0"), "0+$", ""))).otherwise(F.lit(""))))


def _unscaled(encoded: Column) -> Column:
    """The integer Kafka Connect's Decimal writes: base64 of big-endian two's-complement bytes;
    null if it is not base64 or has more than 38 digits."""
    digits = F.hex(F.try_to_binary(encoded, F.lit("base64")))
    count = (F.length(digits) / 2).cast("int")

    def byte(i: Column) -> Column:
        return F.conv(F.substr(digits, i * 2 + 1, F.lit(2)), 16, 10).cast("int")
    negative = byte(F.lit(0)) >= 128
    # a negative number is summed as its complement, so no step leaves decimal(38,0)
    magnitude = F.aggregate(F.sequence(F.lit(0), count - 1), F.lit(0).cast("decimal(38,0)"), lambda total, i: F.try_add(
        F.try_multiply(total, F.lit(256)), F.when(negative, 255 - byte(i)).otherwise(byte(i))).cast("decimal(38,0)"))
    return F.when(count > 0, F.when(negative, F.try_subtract(-magnitude, F.lit(1))).otherwise(magnitude))


def _decimal_from_unscaled(unscaled: Column, scale: Column, declared: DecimalType) -> Column:
    """``unscaled`` × 10^-``scale`` as ``declared``, only if no digit is lost: the digits beyond
    the declared scale must be zeros."""
    text = unscaled.cast("string")
    excess = scale - F.lit(declared.scale)
    exact = (excess <= 0) | F.right(text, excess).rlike("^0+$")
    return F.when(exact & scale.isNotNull(), F.concat(text, F.lit("E-"), scale.cast("string")).try_cast(declared))


def _decimal_text(unscaled: Column, scale: Column) -> Column:
    """``unscaled`` × 10^-``scale`` written out, ``scale`` digits after the point."""
    def written(number: Column) -> Column:
        digits, places = F.abs(number["unscaled"]).cast("string"), number["scale"]
        return _let(F.lpad(digits, F.greatest(F.length(digits), places + 1), "0"), lambda padded: F.concat(
            F.when(number["unscaled"] < 0, F.lit("-")).otherwise(F.lit("")),
            F.substr(padded, F.lit(1), F.length(padded) - places),
            F.when(places > 0, F.concat(F.lit("."), F.substr(padded, F.length(padded) - places + 1, places)))
            .otherwise(F.lit(""))))
    return _let(F.struct(unscaled.alias("unscaled"), scale.alias("scale")), written)


class SemanticType:
    """How Debezium wrote one field, per record: its semantic type (``name``, null for plain JSON)
    and, for a Decimal, its ``scale``. ``value`` reads the field (parsed as VARIANT) by it; a
    semantic type that cannot fill the declared type gives null, so the field does not fit."""

    def __init__(self, name: Column, scale: Column):
        self.name, self.scale = name, scale

    def value(self, parsed: Column, declared: DataType) -> Column:
        integer, text = _json_integer(parsed), _json_string(parsed)
        micros_of = {"io.debezium.time.Timestamp": integer * 1000, "org.apache.kafka.connect.data.Timestamp":
                     integer * 1000, "io.debezium.time.MicroTimestamp": integer,
                     "io.debezium.time.NanoTimestamp": _whole(integer, 1000)}
        if isinstance(declared, TimestampType):
            readers = {name: F.timestamp_micros(micros) for name, micros in micros_of.items()}
            readers["io.debezium.time.ZonedTimestamp"] = _iso_timestamp(text)
        elif isinstance(declared, DateType):
            readers = dict.fromkeys(("io.debezium.time.Date", "org.apache.kafka.connect.data.Date"),
                                    F.date_from_unix_date(integer.try_cast("int")))
        elif isinstance(declared, DecimalType):
            variable_scale = F.try_variant_get(parsed, "$.scale", "int")
            readers = {"org.apache.kafka.connect.data.Decimal": _decimal_from_unscaled(_unscaled(text), self.scale,
                                                                                       declared),
                       "io.debezium.data.VariableScaleDecimal": _decimal_from_unscaled(
                           _unscaled(F.try_variant_get(parsed, "$.value", "string")), variable_scale, declared)}
        else:  # a time of day, kept as text
            readers = {"io.debezium.time.Time": _time_of_day(integer * 1000),
                       "org.apache.kafka.connect.data.Time": _time_of_day(integer * 1000),
                       "io.debezium.time.MicroTime": _time_of_day(integer),
                       "io.debezium.time.NanoTime": _time_of_day(_whole(integer, 1000)),
                       "io.debezium.time.ZonedTime": text}
        value = F.when(self.name.isNull(), _plain_value(parsed, declared))
        for name, reader in readers.items():
            value = value.when(self.name == F.lit(name), reader)
        return value

    def decimal_text(self, parsed: Column) -> Column:
        """A decimal field's value written out as digits (for a dead letter's detail): with the
        scale the change carries (its schema's, a VariableScaleDecimal's own), else the contract's."""
        return (F.when(self.name.isNull(), _json_decimal_text(parsed))
                .when(self.name == F.lit("org.apache.kafka.connect.data.Decimal"),
                      _decimal_text(_unscaled(_json_string(parsed)), self.scale))
                .when(self.name == F.lit("io.debezium.data.VariableScaleDecimal"),
                      _decimal_text(_unscaled(F.try_variant_get(parsed, "$.value", "string")),
                                    F.try_variant_get(parsed, "$.scale", "int"))))


# A Debezium value schema (schemas enabled): per field of the row, its semantic type and parameters
_FIELDS_SCHEMA = ArrayType(StructType([
    StructField("field", StringType()), StructField("name", StringType()),
    StructField("parameters", MapType(StringType(), StringType()))]))
_CONNECT_SCHEMA = StructType([StructField("fields", ArrayType(StructType([
    StructField("field", StringType()), StructField("fields", _FIELDS_SCHEMA)])))])
# A Debezium key schema: the key's fields at its top level
_KEY_CONNECT_SCHEMA = StructType([StructField("fields", _FIELDS_SCHEMA)])


def debezium_semantic_types(contract: JsonContract, schema_text: Column) -> dict[str, SemanticType]:
    """The semantic type of each field the contract reads by one: from the event's own schema
    (``schema_text``, null when schemas are disabled), else as the contract declares it."""
    if not contract.semantic_fields:
        return {}
    row_fields = F.try_element_at(F.filter(F.from_json(schema_text, _CONNECT_SCHEMA)["fields"],
                                           lambda f: f["field"] == F.lit("after")), F.lit(1))["fields"]
    return _semantic_types(contract, contract.semantic_fields, schema_text, row_fields)


def debezium_key_semantic_types(contract: JsonContract, identity: tuple[str, ...],
                                key_fields: Column) -> dict[str, SemanticType]:
    """The semantic type of each key column the contract reads by one, by the same rules as the
    row's (debezium_semantic_types): from the message key's own schema (``key_fields``, its
    fields; null when schemas are disabled), else as the contract declares it."""
    names = {name: contract.semantic_fields[name] for name in identity if name in contract.semantic_fields}
    return _semantic_types(contract, names, key_fields, key_fields) if names else {}


def _semantic_types(contract: JsonContract, names: dict[str, tuple[str, str | None]], schema: Column,
                    described_fields: Column) -> dict[str, SemanticType]:
    """``names``' semantic types: by the Connect schema's ``described_fields`` where the event has
    a ``schema`` (not null), else as the contract declares them."""
    def described(name: str) -> Column:  # (not a default argument: Spark passes a 2-argument lambda the index)
        return F.try_element_at(F.filter(described_fields, lambda f: f["field"] == F.lit(name)), F.lit(1))
    types = {}
    for name, (_kind, declared_name) in names.items():
        field = described(contract.source_name(name))
        declared = contract.schema[name].dataType
        declared_scale = F.lit(declared.scale if isinstance(declared, DecimalType) else None).cast("int")
        types[name] = SemanticType(
            F.when(schema.isNotNull(), field["name"]).otherwise(F.lit(declared_name)),
            F.when(schema.isNotNull(), F.try_element_at(field["parameters"], F.lit("scale")).try_cast("int"))
            .otherwise(declared_scale))
    return types


# --- Avro, Confluent wire format -----------------------------------------------------------

HEADER_SIZE = wire.HEADER_SIZE  # magic byte 0 + 4-byte big-endian schema id


def confluent_schema_id(value: Column, known_ids: Collection[int] = ()) -> Column:
    """The schema id of a framed message; null when the value has no wire-format header.

    The header of an id in ``known_ids`` (the registered writer schemas) is matched as bytes,
    against that id's own 5 bytes. Only other headers have their id read as a number: Spark has
    no bytes-to-int function, and hex-then-base-conversion is a string round trip per record (9%
    of the task samples of purchases' ingestion when every record took it, benchmarks/RESULTS.md
    "Avro schema ids matched as bytes")."""
    framed = (F.length(value) >= HEADER_SIZE) & (F.substring(value, 1, 1) == F.lit(bytearray(b"\x00")))
    schema_id = F.when(framed, F.conv(F.hex(F.substring(value, 2, 4)), 16, 10).cast("long"))
    header = F.substring(value, 1, HEADER_SIZE)
    for known in sorted(set(known_ids), reverse=True):
        schema_id = F.when(header == F.lit(bytearray(wire.header(known))), F.lit(known).cast("long")) \
            .otherwise(schema_id)
    return schema_id


def decode_avro(
    raw: DataFrame,
    writer_schemas: dict[int, str],
    writer_types: dict[int, StructType],
    columns: StructType,
    required: tuple[str, ...],
    event_time_column: str,
    now: datetime | None = None,
) -> DataFrame:
    """Avro records, each read with the writer schema its header names, as ``columns``.

    ``writer_types`` is the Spark type each writer schema decodes to; ``columns`` is their union
    (bronze's payload columns, ingestion/column_types.py `union`): a field a writer lacks is null
    in its records. Each writer's record is fitted to ``columns`` by name at every depth
    (`conformed`), never by position, and never cast where the column does not hold the writer's
    type exactly: a record with a value in such a place (`misfits`) is SCHEMA_MISMATCH, naming
    the writer schema id, the field's path and both types.
    """
    from pyspark.sql.avro.functions import from_avro

    schema_id = confluent_schema_id(F.col("value"), writer_schemas)
    body = F.expr(f"substring(value, {HEADER_SIZE + 1})")
    # Each body is decoded once, by its own writer schema, into a column of that writer's
    # shape; only then are the fields picked (a field per from_avro call would decode the
    # record once per field). PERMISSIVE: a body that does not decode gives null (or an
    # all-null struct), caught below.
    by_writer = {writer_id: f"_writer_{writer_id}" for writer_id in writer_schemas}
    framed = raw.select(*kafka_columns(raw), schema_id.alias(SCHEMA_ID), *[
        F.when(schema_id == writer_id, from_avro(body, writer_schema, {"mode": "PERMISSIVE"}))
        .alias(by_writer[writer_id])
        for writer_id, writer_schema in writer_schemas.items()])
    payload = F.lit(None).cast(columns)
    undecoded = F.lit(True)
    mismatch, mismatch_detail = F.lit(False), F.lit(None).cast("string")
    for writer_id in writer_schemas:
        decoded, writer = F.col(by_writer[writer_id]), writer_types[writer_id]
        this_writer = F.col(SCHEMA_ID) == writer_id
        payload = F.when(this_writer, conformed(decoded, writer, columns)).otherwise(payload)
        # what PERMISSIVE gives for a body that does not decode: null, or a struct of nulls
        undecoded = F.when(this_writer, decoded.isNull() | reduce(
            operator.and_, [decoded[f.name].isNull() for f in writer.fields], F.lit(True))).otherwise(undecoded)
        wrong = misfits(writer, columns)
        if wrong:
            present = {misfit.describe(): _present(decoded, misfit.steps) for misfit in wrong}
            mismatch = mismatch | (this_writer & _any(present.values()))
            mismatch_detail = F.when(this_writer, F.concat(
                F.lit(f"writer schema id {writer_id}: "),
                F.concat_ws("; ", *[F.when(value_there, F.lit(text)) for text, value_there in present.items()]),
                F.lit(": not held exactly, never cast"))).otherwise(mismatch_detail)
    parsed = framed.select(*kafka_columns(framed), SCHEMA_ID, payload.alias("_payload"),
                           undecoded.alias("_undecoded"), mismatch.alias("_mismatch"),
                           mismatch_detail.alias("_mismatch_detail"))
    payload_col, id_col = F.col("_payload"), F.col(SCHEMA_ID)
    known_ids = list(writer_schemas) or [-1]
    return _with_errors(parsed, [*[payload_col[f.name].alias(f.name) for f in columns.fields],
                                 id_col.cast("int").alias(SCHEMA_ID)], [
        (id_col.isNull(), "CORRUPT_PAYLOAD",
         F.lit("no Confluent wire-format header (magic byte 0 and a 4-byte schema id)")),
        (~id_col.isin(*known_ids), "UNKNOWN_SCHEMA_ID",
         F.concat(F.lit("schema id "), id_col.cast("string"), F.lit(" is not registered for this stream"))),
        (F.col("_undecoded"), "CORRUPT_PAYLOAD",
         F.concat(F.lit("body does not decode with writer schema "), id_col.cast("string"))),
        (F.col("_mismatch"), "SCHEMA_MISMATCH", F.col("_mismatch_detail")),
        _missing_check(payload_col, required),
        _event_time_check(payload_col[event_time_column], event_time_column, now),
    ])


def conformed(value: Column, writer: DataType, column: DataType) -> Column:
    """``value``, of the writer's type, as ``column``'s type: struct fields by name at every depth
    (a field the writer lacks null; inside arrays and maps through transform and
    transform_values), a leaf cast only where the column holds it exactly (`holds_exactly`; so
    the cast changes nothing), null where it does not (the record is then SCHEMA_MISMATCH, or
    its value there was null)."""
    if same_type(writer, column):
        return value
    if isinstance(writer, StructType) and isinstance(column, StructType):
        have = {f.name: f.dataType for f in writer.fields}
        return F.when(value.isNotNull(), F.struct(*[
            (conformed(value[f.name], have[f.name], f.dataType) if f.name in have
             else F.lit(None).cast(f.dataType)).alias(f.name)
            for f in column.fields]))
    if isinstance(writer, ArrayType) and isinstance(column, ArrayType):
        return F.transform(value, lambda element: conformed(element, writer.elementType, column.elementType))
    if isinstance(writer, MapType) and isinstance(column, MapType) and same_type(writer.keyType, column.keyType):
        return F.transform_values(value, lambda _key, item: conformed(item, writer.valueType, column.valueType))
    if not misfits(writer, column):
        return value.cast(column)
    return F.lit(None).cast(column)


def _present(value: Column, steps: tuple[tuple[str, ...], ...]) -> Column:
    """Whether ``value`` has a non-null value at ``steps`` (a `Misfit`'s place): in any element of
    an array, any key or value of a map."""
    if not steps:
        return value.isNotNull()
    step, rest = steps[0], steps[1:]
    if step[0] == "field":
        return _present(value[step[1]], rest)
    inside = value if step[0] == "element" else F.map_keys(value) if step[0] == "key" else F.map_values(value)
    return F.coalesce(F.exists(inside, lambda item: _present(item, rest)), F.lit(False))


# --- Protobuf ------------------------------------------------------------------------------

def decode_protobuf(raw: DataFrame, function: str, columns: StructType, required: tuple[str, ...],
                    event_time_column: str, now: datetime | None = None) -> DataFrame:
    """Protobuf records through the registered function ``function`` (see
    ingestion/protobuf_udf.py), which returns (payload, error_code, error_detail): CORRUPT_PAYLOAD
    for bytes that are no message, SCHEMA_MISMATCH for a field sent with a wire type its declared
    type cannot take (the detail names its path and both wire types)."""
    parsed = raw.select(*kafka_columns(raw), F.call_function(function, F.col("value")).alias("_decoded"))
    decoded = F.col("_decoded")
    payload, code = decoded["payload"], decoded["error_code"]
    return _with_errors(parsed, [payload[f.name].alias(f.name) for f in columns.fields], [
        (code == F.lit("CORRUPT_PAYLOAD"), "CORRUPT_PAYLOAD", decoded["error_detail"]),
        (code == F.lit("SCHEMA_MISMATCH"), "SCHEMA_MISMATCH",
         F.concat(F.lit("wrong wire type for field "), decoded["error_detail"])),
        _missing_check(payload, required),
        _event_time_check(payload[event_time_column], event_time_column, now),
    ])


# --- CDC: Debezium and DMS into one changelog shape (ARCHITECTURE §6) ----------------------------

# "t": a TRUNCATE of the whole table (PostgreSQL; Debezium sends it with skipped.operations=none)
DEBEZIUM_OPS = {"c": "I", "u": "U", "d": "D", "r": "R", "t": "T"}
DMS_OPS = {"insert": "I", "update": "U", "delete": "D", "load": "R"}
# BeforeImageSettings.FieldName a DMS stream is expected to use (producers/cdc/dms.py)
BEFORE_IMAGE = "before-image"


def _lookup(mapping: dict[str, str], column: Column) -> Column:
    return F.element_at(F.create_map(*[F.lit(x) for pair in mapping.items() for x in pair]), column)


def _schema_wrapper(content: StructType) -> StructType:
    """The fields Kafka's JsonConverter adds with ``schemas.enable=true``: the value becomes
    ``{"schema": <its Connect schema>, "payload": <the value>}``."""
    return StructType([StructField("schema", StringType()), StructField("payload", content)])


def _unwrapped(parsed: Column, content: StructType, wrapper_fields: list[str] | None = None) -> Column:
    """``content``'s fields from ``parsed`` (read with ``_schema_wrapper``'s fields added): from
    its payload when it has a schema and a payload, else from its top level. Only the fields in
    ``wrapper_fields`` (default: all) are in the payload; the others always come from the top."""
    wrapped = parsed["schema"].isNotNull() & parsed["payload"].isNotNull()
    inside = {f.name for f in content.fields} if wrapper_fields is None else set(wrapper_fields)
    return F.when(parsed.isNotNull(), F.struct(*[
        (F.when(wrapped, parsed["payload"][f.name]).otherwise(parsed[f.name]) if f.name in inside
         else parsed[f.name]).alias(f.name)
        for f in content.fields]))


def _dms_key(key_text: Column, identity: tuple[str, ...], image: StructType) -> Column:
    """The primary key a DMS message key carries: the bare value of a one-column key."""
    (name,) = identity
    return F.struct(key_text.cast(image[name].dataType).alias(name))


def debezium_key_json(key_text: Column, identity: tuple[str, ...], contract: JsonContract) -> Column:
    """A Debezium message key parsed (a JSON object of the key columns; with schemas enabled
    {"schema": <its Connect schema>, "payload": <the object>}), for :func:`with_debezium_key`: the
    key columns as the row image parses them (strict_parse_schema), the schema's fields typed."""
    parse = strict_parse_schema(_key_schema(identity, contract, wire=True), _wire_semantic(contract))
    return F.from_json(key_text, StructType([*parse.fields, StructField("schema", _KEY_CONNECT_SCHEMA),
                                             StructField("payload", parse)]))


def with_debezium_key(parsed: DataFrame, key: Column, identity: tuple[str, ...],
                      contract: JsonContract) -> tuple[DataFrame, Column]:
    """``parsed`` plus the primary key of its message key ``key`` (parsed by
    :func:`debezium_key_json`, a column), each key column read as the row image reads it:
    strictly, temporal and decimal columns by their semantic type (a date as epoch days, a
    numeric as base64 bytes, ...); and the key as a struct of them. A column whose token does
    not fit is null: an unreadable key. Each value is a column of its own, computed once (as
    with_strict_image's): the checks read them several times."""
    declared = _key_schema(identity, contract)
    parse = strict_parse_schema(_key_schema(identity, contract, wire=True), _wire_semantic(contract))
    wrapped = key["schema"].isNotNull() & key["payload"].isNotNull()
    fields = strict_fields(_unwrapped(key, parse), declared,
                           debezium_key_semantic_types(contract, identity, F.when(wrapped, key["schema"]["fields"])),
                           contract.source_names)
    columns = {name: f"_key_{number}" for number, name in enumerate(fields)}
    parsed = parsed.select("*", *[value.alias(columns[name]) for name, (value, *_) in fields.items()])
    return parsed, F.when(key.isNotNull(), F.struct(*[F.col(column).alias(name) for name, column in columns.items()]))


def _key_schema(identity: tuple[str, ...], contract: JsonContract, wire: bool = False) -> StructType:
    """The key columns' schema; ``wire``: under the names the change events give them."""
    return StructType([StructField(contract.source_name(name) if wire else name, contract.schema[name].dataType, True)
                       for name in identity])


def _wire_semantic(contract: JsonContract) -> list[str]:
    """The change events' names of the fields read by their semantic type."""
    return [contract.source_name(name) for name in contract.semantic_fields]


def _changelog(
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
    unreadable_key = key_present & _any(message_key[name].isNull() for name in identity)
    columns = [
        F.when(~tombstone, op).alias("op"),
        # A tombstone carries only its key: its row is the key, every other column null.
        *[F.when(tombstone, message_key[f.name]).otherwise(image[f.name]).cast(f.dataType).alias(f.name)
          if f.name in identity else F.when(~tombstone, image[f.name]).alias(f.name)
          for f in image_schema.fields],
        F.when(~tombstone, source_ts).alias(SOURCE_TS),
        F.when(~tombstone, seq).alias(SEQ),
        tombstone.alias(IS_TOMBSTONE),
        *([F.when(~tombstone, rescued_fields).alias(RESCUED_COLUMN)] if rescued_fields is not None else []),
        *(extra or []),
    ]
    not_tombstone = ~tombstone
    return _with_errors(parsed, columns, [
        (tombstone & unreadable_key, "INVALID_CDC_ENVELOPE", F.lit("tombstone without a readable key")),
        *[(not_tombstone & failed, code, detail) for failed, code, detail in checks],
        (not_tombstone & row_change & _any(image[name].isNull() for name in identity), "MISSING_REQUIRED_FIELD",
         F.concat(F.lit("change without its key: "), _names_where({n: image[n].isNull() for n in identity}))),
        (not_tombstone & unreadable_key, "INVALID_CDC_ENVELOPE",
         F.concat(F.lit("unreadable message key: "), F.col("key").cast("string"))),
        (not_tombstone & _any(mismatch.values()), "INVALID_CDC_ENVELOPE",
         F.concat(F.lit("message key and row disagree on "), _names_where(mismatch))),
    ])


def _wrong_type_detail(text: str, wrong_type: dict[str, tuple[Column, Column | None]]) -> Column:
    """``text``, then the fields read by ``strict_fields`` whose token did not fit (a field of another
    type that did not convert is not named: Spark's corrupt-record column does not say), a decimal
    with why: ``amount (1.123456: 6 digits after the point, the contract's decimal(18,4) keeps 4)``."""
    names = F.concat_ws(", ", *[
        F.when(wrong, F.lit(name) if misfit is None else F.concat(
            F.lit(name), F.coalesce(F.concat(F.lit(" ("), misfit, F.lit(")")), F.lit(""))))
        for name, (wrong, misfit) in wrong_type.items()])
    return F.concat(F.lit(text), F.when(names != "", F.concat(F.lit(": "), names)).otherwise(F.lit("")))


def _json_envelope(schema: StructType) -> tuple[Column, Column]:
    text = F.col("value").cast("string")
    loose = F.from_json(text, MapType(StringType(), StringType()))
    typed = F.from_json(text, StructType([*schema.fields, StructField(CORRUPT_COLUMN, StringType(), True)]),
                        {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_COLUMN})
    return loose, typed


# --- row fields the contract lacks (ARCHITECTURE §6, "Fields the contract lacks") -----------

RESCUED_COLUMN = RESCUED
_TEXT_MAP = MapType(StringType(), StringType())


def _row_image_text(loose: Column, fmt: str) -> Column:
    """The JSON text of a change's row image, from its envelope read as a map of texts (``loose``):
    Debezium's ``after`` (``before`` for a delete), inside ``payload`` when schemas are enabled;
    DMS's ``data``."""
    if fmt == "dms":
        return loose["data"]
    event = F.when(loose["schema"].isNotNull() & loose["payload"].isNotNull(),
                   F.from_json(loose["payload"], _TEXT_MAP)).otherwise(loose)
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
                            StructField("name", StringType()), StructField("parameters", _TEXT_MAP)])
_FULL_CONNECT_SCHEMA = StructType([StructField("fields", ArrayType(StructType([
    StructField("field", StringType()), StructField("fields", ArrayType(_FIELD_SCHEMA))])))])


def unknown_field_descriptions(raw: DataFrame, fmt: str, declared: StructType) -> DataFrame:
    """What a batch's change events say of each row field ``declared`` lacks, one row per distinct
    description: ``name``, the Kafka Connect ``connect_type``, ``connect_name`` (semantic type)
    and ``parameters`` (JSON text) when schemas are enabled, and ``json_kind``, the value's
    JSON type (``schema_of_variant``). `lakehouse.contracts.streams.added_field` types it."""
    loose = F.from_json(F.col("value").cast("string"), _TEXT_MAP)
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


DEBEZIUM_CONNECTORS = ("postgresql", "mysql", "mariadb")
# Debezium's stand-in for a value it does not have (`unavailable.value.placeholder`: the stream's
# `unavailable_placeholder`, Debezium's default unless set): a PostgreSQL column stored out of
# line (TOAST) that an UPDATE left unchanged is not in the change pgoutput sends (REPLICA
# IDENTITY DEFAULT). Text-like columns (text, varchar, json, jsonb, xml) carry the text; bytea the
# bytes of it: base64 in JSON (binary.handling.mode bytes, base64 or base64-url-safe) or hex.
# Taken as a value it would overwrite the real one downstream.


def unavailable_spellings(placeholder: str) -> tuple[str, ...]:
    """The placeholder as a text column carries it, and a bytea column's base64 and hex of it."""
    raw = placeholder.encode()
    return tuple(dict.fromkeys((placeholder, base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode(),
                                raw.hex())))


def without_unavailable_values(image: Column, schema: StructType, identity: tuple[str, ...],
                               placeholder: str = DEBEZIUM_UNAVAILABLE_PLACEHOLDER) -> tuple[Column, Column]:
    """(``image`` with every placeholder value (``unavailable_spellings``) made null, the names of
    those columns: ``UNAVAILABLE``, null when none). Only text columns can hold one (the contract
    declares text, JSON and binary columns as strings); a key is never left out (replica identity)."""
    candidates = [f.name for f in schema.fields if isinstance(f.dataType, StringType) and f.name not in identity]
    if not candidates:
        return image, F.lit(None).cast("array<string>")
    spellings = unavailable_spellings(placeholder)
    missing = {name: F.coalesce(image[name].isin(*spellings), F.lit(False)) for name in candidates}
    names = F.filter(F.array(*[F.when(flag, F.lit(name)) for name, flag in missing.items()]), lambda n: n.isNotNull())
    cleaned = F.when(image.isNotNull(), F.struct(*[
        (F.when(~missing[f.name], image[f.name]) if f.name in missing else image[f.name]).alias(f.name)
        for f in schema.fields]))
    return cleaned, F.when(F.size(names) > 0, names)


# Snapshot reads of PostgreSQL's initial snapshot (an incremental snapshot's reads are ordered
# with the stream: they carry its position).
_SNAPSHOT_READS = ("true", "first", "last", "first_in_data_collection", "last_in_data_collection")


def debezium_seq(source: Column, op: Column) -> Column:
    """Where a Debezium change sits in its source's commit order: ``(phase, commit_pos, change_pos)``,
    compared field by field (ARCHITECTURE §9, "Ordering").

    - PostgreSQL streams transactions in commit order, but a change's own LSN is where it was
      written, not where its transaction committed: a transaction in flight at the snapshot point
      commits after it with LSNs below the snapshot's. So snapshot reads come first (phase 0, at
      the snapshot's LSN) and every streamed change after them (phase 1), ordered by
      ``source.sequence`` = [LSN of the last commit before the change's transaction, the change's
      LSN]; the first transaction after a snapshot has no last commit (-1). Without
      ``sequence`` (Debezium before 1.6) the LSN alone orders the streamed changes of one key:
      the row lock a change holds until its commit keeps two transactions from interleaving
      changes of one row. An incremental snapshot's read carries the stream's position in its
      ``sequence`` and, from Debezium 3.0.0 at least, no ``lsn``: the change's LSN is the
      sequence's second element (for every other change the two are equal).
    - MySQL and MariaDB write a transaction to the binlog when it commits, in commit order, and
      a snapshot carries the binlog position it was taken at: (file number, position) then the
      row inside the event order every change, snapshot reads included.
    """
    connector = source["connector"]
    mysql = connector.isin("mysql", "mariadb")
    sequence = F.from_json(source["sequence"], ArrayType(StringType()))
    last_commit = F.try_element_at(sequence, F.lit(1))
    lsn = F.coalesce(source["lsn"], F.try_element_at(sequence, F.lit(2)).try_cast("long"))
    snapshot_read = F.coalesce((op == "r") & source["snapshot"].isin(*_SNAPSHOT_READS), F.lit(False))
    file_number = F.regexp_extract(source["file"], r"\.([0-9]+)$", 1).try_cast("long")
    binlog = F.shiftleft(file_number, 32) + source["pos"]  # a binlog file stays far below 4 GiB
    postgres_commit = F.when(snapshot_read, lsn).when(
        source["sequence"].isNull(), F.lit(-1).cast("long")).otherwise(
        F.coalesce(last_commit.try_cast("long"), F.lit(-1).cast("long")))
    return F.struct(
        F.when(mysql | ~snapshot_read, F.lit(1)).otherwise(F.lit(0)).alias("phase"),
        F.when(mysql, binlog).otherwise(postgres_commit).alias("commit_pos"),
        F.when(mysql, F.coalesce(source["row"], F.lit(0).cast("long"))).otherwise(lsn).alias("change_pos"),
    )


def decode_debezium(raw: DataFrame, row: JsonContract, identity: tuple[str, ...], source_table: str,
                    unavailable_placeholder: str = DEBEZIUM_UNAVAILABLE_PLACEHOLDER) -> DataFrame:
    """Debezium change events (JSON, with or without schemas) -> changelog; a null value is a tombstone.

    ``SEQ`` is ``debezium_seq``: the change's place in the source's commit order. Temporal and
    decimal fields are read by their semantic type (debezium_semantic_types). A text column
    holding ``unavailable_placeholder`` (the connector's unavailable.value.placeholder) is null
    and named in ``UNAVAILABLE``.
    """
    image_schema = row.schema
    # the row image as the change events name its fields (a renamed column under its source's name)
    image_parsed = strict_parse_schema(row.wire_schema, _wire_semantic(row))
    envelope = StructType([
        StructField("before", image_parsed), StructField("after", image_parsed),
        StructField("source", StructType([
            StructField("ts_ms", LongType()), StructField("lsn", LongType()), StructField("txId", LongType()),
            StructField("snapshot", StringType()), StructField("table", StringType()),
            StructField("connector", StringType()), StructField("sequence", StringType()),
            StructField("file", StringType()), StructField("pos", LongType()), StructField("row", LongType())])),
        StructField("op", StringType()), StructField("ts_ms", LongType()),
    ])
    # Debezium with schemas enabled wraps each event ({"schema": ..., "payload": <event>}); the
    # stream's contract declares the columns, the schema says how temporal and decimal values
    # are written (debezium_semantic_types)
    loose, typed = _json_envelope(StructType([*envelope.fields, *_schema_wrapper(envelope).fields]))
    parsed = raw.select(*kafka_columns(raw), loose.alias("_loose"), typed.alias("_typed"),
                        debezium_key_json(F.col("key").cast("string"), identity, row).alias("_key_json"))
    typed = F.col("_typed")
    event = _unwrapped(typed, StructType([*envelope.fields, StructField(CORRUPT_COLUMN, StringType())]),
                       wrapper_fields=[f.name for f in envelope.fields])
    parsed = parsed.select(*kafka_columns(parsed), "_loose", "_key_json", event.alias("_env"),
                           F.when(typed["payload"].isNotNull(), typed["schema"]).alias("_value_schema"))
    env, source = F.col("_env"), F.col("_env.source")
    op = _lookup(DEBEZIUM_OPS, env["op"])
    parsed, message_key = with_debezium_key(parsed, F.col("_key_json"), identity, row)
    parsed, image, wrong_type = with_strict_image(
        parsed, F.when(env["op"] == "d", env["before"]).otherwise(env["after"]), image_schema,
        debezium_semantic_types(row, F.col("_value_schema")), row.source_names)
    image, unavailable = without_unavailable_values(image, image_schema, identity, unavailable_placeholder)
    tombstone = F.col("value").isNull()
    truncate = F.coalesce(env["op"] == "t", F.lit(False))
    seq = debezium_seq(source, env["op"])
    envelope_gaps = {
        "op": op.isNull(), "source": source.isNull(), "source.ts_ms": source["ts_ms"].isNull(),
        "before/after image": image.isNull() & ~truncate,
        "source position (lsn; or file and pos)": source["connector"].isin(*DEBEZIUM_CONNECTORS) & (
            seq["commit_pos"].isNull() | seq["change_pos"].isNull()),
    }
    return _changelog(
        parsed, image_schema, identity, op, image,
        source_ts=F.timestamp_millis(source["ts_ms"]),
        seq=seq,
        tombstone=tombstone, message_key=message_key, truncate=truncate,
        extra=[F.when(~tombstone, unavailable).alias(UNAVAILABLE)],
        rescued_fields=rescued(F.col("_loose"), "debezium", row.wire_schema),
        checks=[
            (F.col("_loose").isNull(), "CORRUPT_PAYLOAD", F.lit("payload is not a JSON object")),
            (_any(envelope_gaps.values()), "INVALID_CDC_ENVELOPE",
             F.concat(F.lit("not a Debezium change event, missing or invalid: "), _names_where(envelope_gaps))),
            (source.isNotNull() & ~F.coalesce(source["connector"].isin(*DEBEZIUM_CONNECTORS), F.lit(False)),
             "INVALID_CDC_ENVELOPE",
             F.concat(F.lit(f"Debezium connector not supported (only {', '.join(DEBEZIUM_CONNECTORS)}): "),
                      F.coalesce(source["connector"], F.lit("none")))),
            (~source["table"].eqNullSafe(F.lit(source_table)), "INVALID_CDC_ENVELOPE",
             F.concat(F.lit(f"change of another table (expected {source_table}): "),
                      F.coalesce(source["table"], F.lit("none")))),
            (env[CORRUPT_COLUMN].isNotNull() | _any(wrong for wrong, _ in wrong_type.values()), "SCHEMA_MISMATCH",
             _wrong_type_detail("a field of the change has a value of the wrong type", wrong_type)),
        ],
    )


# a number in a log position left-padded to this width sorts as text in numeric order; wider
# than any offset, LSN half or counter a database writes (2^64 has 20 digits)
LOG_POSITION_WIDTH = 20


def log_position_key(position: Column) -> Column:
    """A DMS ``stream-position`` in a form whose text order is log order.

    AWS documents what the position is (the source's log position), not its text, and the text
    differs by engine: MySQL's binlog file and offset (``mysql-bin-changelog.000024:373``, the
    offset in decimal of any width), PostgreSQL's fixed-width hex LSNs around a record counter in
    decimal (``00000002/7C007178.3.00000002/7C007178``). Compared as text, ``...:9984`` sorts
    after ``...:10216``. Every part between separators (characters that are no letter or digit)
    that is a number, decimal or hex, is left-padded with zeros to LOG_POSITION_WIDTH: decimals
    then compare as numbers, and fixed-width hex keeps its order (padding equal widths equally
    changes nothing; a hex part of digits only, 70000000, is padded as 7C000000 is). Names
    (``mysql-bin-changelog``) and separators stay as they were.
    """
    parts = F.split(position, r"(?<=[^0-9A-Za-z])|(?=[^0-9A-Za-z])")  # parts and separators apart
    return F.array_join(F.transform(parts, lambda part: F.when(
        part.rlike("^[0-9A-Fa-f]+$") & (F.length(part) < LOG_POSITION_WIDTH),
        F.lpad(part, LOG_POSITION_WIDTH, "0")).otherwise(part)), "")


def decode_dms(raw: DataFrame, row: JsonContract, identity: tuple[str, ...], source_table: str) -> DataFrame:
    """AWS DMS JSON records -> changelog. DMS sends no tombstones: a null value is invalid.

    ``SEQ`` is (log position, commit time in µs, stream position, transaction id, record
    position in the transaction): the source's log position orders the changes, as the source
    committed them (one server writes its log in commit order); the commit time, the source
    host's clock, which can step back, only breaks a tie of positions; never the transaction id,
    which a database assigns at transaction start (ARCHITECTURE §9; producers/cdc/oracle.py).
    ``log_position`` is ``stream-position`` in a form
    that sorts as text in log order (``log_position_key``); ``stream_position`` keeps it as DMS
    wrote it. A record without a position is INVALID_CDC_ENVELOPE, like one without its
    transaction id: the endpoint setting that gives one (``IncludeTransactionDetails``) gives the
    other.

    ``BEFORE_KEY`` is the key an update's ``before-image`` names (BeforeImageSettings; null for
    other ops, or a key field the image leaves out): silver's changelog turns an update of the
    primary key into a delete of the old key and the new key's row. An update without a
    before-image is INVALID_CDC_ENVELOPE.
    """
    image_schema = row.schema
    key_schema = StructType([StructField(name, image_schema[name].dataType) for name in identity])
    envelope = StructType([
        StructField("data", strict_parse_schema(image_schema)),
        StructField(BEFORE_IMAGE, key_schema),
        StructField("metadata", StructType([
            StructField(name, LongType() if name.startswith("transaction") else StringType())
            for name in ("timestamp", "record-type", "operation", "schema-name", "table-name",
                         "stream-position", "transaction-id", "transaction-record-id", "commit-timestamp")])),
    ])
    loose, typed = _json_envelope(envelope)
    parsed = raw.select(*kafka_columns(raw), loose.alias("_loose"), typed.alias("_env"),
                        _dms_key(F.col("key").cast("string"), identity, image_schema).alias("_key"))
    env, metadata = F.col("_env"), F.col("_env.metadata")
    op = _lookup(DMS_OPS, metadata["operation"])
    committed = metadata["commit-timestamp"].cast("timestamp")
    parsed, image, wrong_type = with_strict_image(parsed, env["data"], image_schema)
    envelope_gaps = {
        "metadata": metadata.isNull(), "data": image.isNull(), "operation": op.isNull(),
        "commit-timestamp": committed.isNull(),
        "stream-position": F.coalesce(metadata["stream-position"] == "", F.lit(True)),
        "transaction-id": metadata["transaction-id"].isNull(),
        "transaction-record-id": metadata["transaction-record-id"].isNull(),
    }
    return _changelog(
        parsed, image_schema, identity, op, image,
        source_ts=committed,
        seq=F.struct(log_position_key(metadata["stream-position"]).alias("log_position"),
                     F.unix_micros(committed).alias("commit_us"),
                     metadata["stream-position"].alias("stream_position"),
                     metadata["transaction-id"].alias("transaction_id"),
                     metadata["transaction-record-id"].alias("record_id")),
        tombstone=F.lit(False), message_key=F.col("_key"),
        # the key an update's before-image names: the changelog view ends it when it differs
        extra=[F.when(op == "U", env[BEFORE_IMAGE]).alias(BEFORE_KEY)],
        rescued_fields=rescued(F.col("_loose"), "dms", image_schema),
        checks=[
            (F.col("value").isNull(), "INVALID_CDC_ENVELOPE", F.lit("no value (DMS sends no tombstones)")),
            (F.col("_loose").isNull(), "CORRUPT_PAYLOAD", F.lit("payload is not a JSON object")),
            (~metadata["record-type"].eqNullSafe(F.lit("data")), "INVALID_CDC_ENVELOPE",
             F.concat(F.lit("not a DMS data record: record-type "),
                      F.coalesce(metadata["record-type"], F.lit("missing")))),
            (_any(envelope_gaps.values()), "INVALID_CDC_ENVELOPE",
             F.concat(F.lit("not a DMS data record, missing or invalid: "), _names_where(envelope_gaps))),
            # without it an update of the primary key cannot be told from another, and the
            # old key would stay live in silence
            ((op == "U") & env[BEFORE_IMAGE].isNull() & env[CORRUPT_COLUMN].isNull(), "INVALID_CDC_ENVELOPE",
             F.lit(f"update without its {BEFORE_IMAGE} object (BeforeImageSettings)")),
            (~metadata["table-name"].eqNullSafe(F.lit(source_table)), "INVALID_CDC_ENVELOPE",
             F.concat(F.lit(f"record of another table (expected {source_table}): "),
                      F.coalesce(metadata["table-name"], F.lit("none")))),
            (env[CORRUPT_COLUMN].isNotNull() | _any(wrong for wrong, _ in wrong_type.values()), "SCHEMA_MISMATCH",
             _wrong_type_detail("a field of the record has a value of the wrong type", wrong_type)),
        ],
    )


# --- the bronze side of a decoded batch ----------------------------------------------------

def bronze_columns(decoded: DataFrame) -> list[str]:
    """The payload and format columns of a decoded frame: what bronze keeps besides metadata."""
    internal = {*KAFKA_COLUMNS, HEADERS_COLUMN, *ERROR_COLUMNS}
    return [name for name in decoded.columns if name not in internal]


def to_bronze(decoded: DataFrame, batch_id: int, ingested_at: Column) -> DataFrame:
    """Bronze rows of a decoded batch, every record once (ARCHITECTURE §6): a good record's decoded
    columns; a failing record's raw key, value and headers, its reason, and null decoded columns
    (``SCHEMA_ID`` kept: it tells which writer schema failed); both with their Kafka metadata."""
    dead = F.col(ERROR_CODE).isNotNull()
    headers = F.col(HEADERS_COLUMN) if HEADERS_COLUMN in decoded.columns else F.lit(None).cast(HEADERS_TYPE)
    return decoded.select(
        # quoted: a field name may hold `.`
        *[(F.col(quote(name)) if name in KEPT_ON_DEAD_ROWS else F.when(~dead, F.col(quote(name)))).alias(name)
          for name in bronze_columns(decoded)],
        F.col("topic").alias(KAFKA_TOPIC),
        F.col("partition").cast("int").alias(KAFKA_PARTITION),
        F.col("offset").cast("long").alias(KAFKA_OFFSET),
        F.col("timestamp").alias(KAFKA_TIMESTAMP),
        F.col("key").cast("string").alias(KAFKA_KEY),
        ingested_at.alias(INGESTED_AT),
        batch_constant(batch_id).alias(BATCH_ID),
        F.col(ERROR_CODE).cast("string").alias(ERROR_CODE),
        F.col(ERROR_DETAIL).cast("string").alias(ERROR_DETAIL),
        F.when(dead, F.col("key")).alias(RAW_KEY),
        F.when(dead, F.col("value")).alias(RAW_VALUE),
        F.when(dead, headers.cast(HEADERS_TYPE)).alias(RAW_HEADERS),
        F.when(dead, ingested_at).alias(DEAD_AT),
        *[F.lit(None).cast(data_type).alias(name) for name, data_type in REPLAY_COLUMNS],
    )


# A dead row's columns beside the decoded ones (ARCHITECTURE §6, §7); null on a good row that was
# never dead. ``ERROR_CODE`` is also a partition field: a reader of good rows prunes dead rows.
HEADERS_TYPE = type_of(RAW_HEADERS)
DEAD_COLUMNS = bronze_columns_declared.DEAD_COLUMNS
# Replay bookkeeping (`lakehouse dlq replay`): attempts and the last one on a row still dead; on a
# row a replay fixed, also when (``REPLAYED_AT``) and the reason it had (``REPLAYED_ERROR_CODE``).
REPLAY_COLUMNS = tuple((name, type_of(name)) for name in bronze_columns_declared.REPLAY_COLUMNS)
KEPT_ON_DEAD_ROWS = frozenset({SCHEMA_ID})
