"""Debezium change events (JSON, with or without schemas) into the changelog shape: semantic
types, message keys, unavailable (TOAST) values and the order of changes (`debezium_seq`)."""

from __future__ import annotations

import base64

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
)

from ingestion.formats.changelog import (
    json_envelope,
    lookup,
    rescued,
    schema_wrapper,
    to_changelog,
    unwrapped,
    wrong_type_detail,
)
from ingestion.formats.checks import CORRUPT_COLUMN, any_of, kafka_columns, names_where
from ingestion.formats.strict_json import (
    iso_timestamp,
    json_decimal_text,
    json_integer,
    json_string,
    let,
    plain_value,
    strict_fields,
    strict_parse_schema,
    with_strict_image,
)
from lakehouse.contracts.bronze_columns import TRANSACTION, UNAVAILABLE
from lakehouse.contracts.streams import DEBEZIUM_UNAVAILABLE_PLACEHOLDER, JsonContract

# "t": a TRUNCATE of the whole table (PostgreSQL; Debezium sends it with skipped.operations=none)
DEBEZIUM_OPS = {"c": "I", "u": "U", "d": "D", "r": "R", "t": "T"}


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
        return let(F.lpad(digits, F.greatest(F.length(digits), places + 1), "0"), lambda padded: F.concat(
            F.when(number["unscaled"] < 0, F.lit("-")).otherwise(F.lit("")),
            F.substr(padded, F.lit(1), F.length(padded) - places),
            F.when(places > 0, F.concat(F.lit("."), F.substr(padded, F.length(padded) - places + 1, places)))
            .otherwise(F.lit(""))))
    return let(F.struct(unscaled.alias("unscaled"), scale.alias("scale")), written)


class SemanticType:
    """How Debezium wrote one field, per record: its semantic type (``name``, null for plain JSON)
    and, for a Decimal, its ``scale``. ``value`` reads the field (parsed as VARIANT) by it; a
    semantic type that cannot fill the declared type gives null, so the field does not fit."""

    def __init__(self, name: Column, scale: Column):
        self.name, self.scale = name, scale

    def value(self, parsed: Column, declared: DataType) -> Column:
        integer, text = json_integer(parsed), json_string(parsed)
        micros_of = {"io.debezium.time.Timestamp": integer * 1000, "org.apache.kafka.connect.data.Timestamp":
                     integer * 1000, "io.debezium.time.MicroTimestamp": integer,
                     "io.debezium.time.NanoTimestamp": _whole(integer, 1000)}
        if isinstance(declared, TimestampType):
            readers = {name: F.timestamp_micros(micros) for name, micros in micros_of.items()}
            readers["io.debezium.time.ZonedTimestamp"] = iso_timestamp(text)
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
        value = F.when(self.name.isNull(), plain_value(parsed, declared))
        for name, reader in readers.items():
            value = value.when(self.name == F.lit(name), reader)
        return value

    def decimal_text(self, parsed: Column) -> Column:
        """A decimal field's value written out as digits (for a dead letter's detail): with the
        scale the change carries (its schema's, a VariableScaleDecimal's own), else the contract's."""
        return (F.when(self.name.isNull(), json_decimal_text(parsed))
                .when(self.name == F.lit("org.apache.kafka.connect.data.Decimal"),
                      _decimal_text(_unscaled(json_string(parsed)), self.scale))
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
    fields = strict_fields(unwrapped(key, parse), declared,
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


# A change's `transaction` block (provide.transaction.metadata=true): its transaction's id, its place
# among the transaction's events (total_order) and among its events of this table
# (data_collection_order), both from 1; kept in bronze's TRANSACTION. The END event on the
# connector's transaction topic counts the events per table (ARCHITECTURE §9, "Transactions").
_TRANSACTION = StructType([StructField("id", StringType()), StructField("total_order", LongType()),
                           StructField("data_collection_order", LongType())])


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

    ``SEQ`` is ``debezium_seq``: the change's place in the source's commit order; ``TRANSACTION``
    the change's transaction block, as the connector sent it (null without one). Temporal and
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
        StructField("transaction", _TRANSACTION),
    ])
    # Debezium with schemas enabled wraps each event ({"schema": ..., "payload": <event>}); the
    # stream's contract declares the columns, the schema says how temporal and decimal values
    # are written (debezium_semantic_types)
    loose, typed = json_envelope(StructType([*envelope.fields, *schema_wrapper(envelope).fields]))
    parsed = raw.select(*kafka_columns(raw), loose.alias("_loose"), typed.alias("_typed"),
                        debezium_key_json(F.col("key").cast("string"), identity, row).alias("_key_json"))
    typed = F.col("_typed")
    event = unwrapped(typed, StructType([*envelope.fields, StructField(CORRUPT_COLUMN, StringType())]),
                       wrapper_fields=[f.name for f in envelope.fields])
    parsed = parsed.select(*kafka_columns(parsed), "_loose", "_key_json", event.alias("_env"),
                           F.when(typed["payload"].isNotNull(), typed["schema"]).alias("_value_schema"))
    env, source = F.col("_env"), F.col("_env.source")
    op = lookup(DEBEZIUM_OPS, env["op"])
    parsed, message_key = with_debezium_key(parsed, F.col("_key_json"), identity, row)
    parsed, image, wrong_type = with_strict_image(
        parsed, F.when(env["op"] == "d", env["before"]).otherwise(env["after"]), image_schema,
        debezium_semantic_types(row, F.col("_value_schema")), row.source_names)
    image, unavailable = without_unavailable_values(image, image_schema, identity, unavailable_placeholder)
    tombstone = F.col("value").isNull()
    truncate = F.coalesce(env["op"] == "t", F.lit(False))
    seq = debezium_seq(source, env["op"])
    transaction = env["transaction"]
    envelope_gaps = {
        "op": op.isNull(), "source": source.isNull(), "source.ts_ms": source["ts_ms"].isNull(),
        "before/after image": image.isNull() & ~truncate,
        "source position (lsn; or file and pos)": source["connector"].isin(*DEBEZIUM_CONNECTORS) & (
            seq["commit_pos"].isNull() | seq["change_pos"].isNull()),
        # a block without its id, or with orders that are not numbers, says nothing usable
        "transaction (id, total_order, data_collection_order)": transaction.isNotNull() & (
            transaction["id"].isNull() | transaction["total_order"].isNull()
            | transaction["data_collection_order"].isNull()),
    }
    return to_changelog(
        parsed, image_schema, identity, op, image,
        source_ts=F.timestamp_millis(source["ts_ms"]),
        seq=seq,
        tombstone=tombstone, message_key=message_key, truncate=truncate,
        extra=[F.when(~tombstone, unavailable).alias(UNAVAILABLE), F.when(~tombstone, transaction).alias(TRANSACTION)],
        rescued_fields=rescued(F.col("_loose"), "debezium", row.wire_schema),
        checks=[
            (F.col("_loose").isNull(), "CORRUPT_PAYLOAD", F.lit("payload is not a JSON object")),
            (any_of(envelope_gaps.values()), "INVALID_CDC_ENVELOPE",
             F.concat(F.lit("not a Debezium change event, missing or invalid: "), names_where(envelope_gaps))),
            (source.isNotNull() & ~F.coalesce(source["connector"].isin(*DEBEZIUM_CONNECTORS), F.lit(False)),
             "INVALID_CDC_ENVELOPE",
             F.concat(F.lit(f"Debezium connector not supported (only {', '.join(DEBEZIUM_CONNECTORS)}): "),
                      F.coalesce(source["connector"], F.lit("none")))),
            (~source["table"].eqNullSafe(F.lit(source_table)), "INVALID_CDC_ENVELOPE",
             F.concat(F.lit(f"change of another table (expected {source_table}): "),
                      F.coalesce(source["table"], F.lit("none")))),
            (env[CORRUPT_COLUMN].isNotNull() | any_of(wrong for wrong, _ in wrong_type.values()), "SCHEMA_MISMATCH",
             wrong_type_detail("a field of the change has a value of the wrong type", wrong_type)),
        ],
    )
