"""Debezium's semantic types (issue 24, item 5): temporal values as epoch numbers, decimals as
base64 of their unscaled bytes, read from the contract's `x-debezium-type` or, with schemas
enabled, from each event's own schema. A value that does not fit its declaration is a
SCHEMA_MISMATCH, never a silent coercion.

The expected values are computed here independently of the decoder: Python's datetime and
Decimal, and bytes written with int.to_bytes.
"""

import base64
import json
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from pyspark.sql.types import DateType, DecimalType, LongType, StringType, StructField, StructType, TimestampType

from ingestion.formats.debezium import decode_debezium
from ingestion.formats.json_events import decode_json
from ingestion.json_udf import register_json_udf
from lakehouse.contracts.streams import JsonContract
from tests.support.kafka_rows import kafka_rows

pytestmark = pytest.mark.integration  # Spark in this process (tests/unit starts no JVM)

EPOCH = datetime(1970, 1, 1)
SCHEMA = StructType([
    StructField("id", LongType()), StructField("amount", DecimalType(12, 2)), StructField("ratio", DecimalType(20, 3)),
    StructField("born", DateType()), StructField("at_local", TimestampType()), StructField("at_ms", TimestampType()),
    StructField("at_nano", TimestampType()), StructField("at_zone", TimestampType()), StructField("wake", StringType()),
    StructField("wake_ms", StringType()),
])
SEMANTIC = {
    "amount": ("decimal", "org.apache.kafka.connect.data.Decimal"),
    "ratio": ("decimal", "io.debezium.data.VariableScaleDecimal"),
    "born": ("date", "io.debezium.time.Date"),
    "at_local": ("timestamp", "io.debezium.time.MicroTimestamp"),
    "at_ms": ("timestamp", "io.debezium.time.Timestamp"),
    "at_nano": ("timestamp", "io.debezium.time.NanoTimestamp"),
    "at_zone": ("timestamp", "io.debezium.time.ZonedTimestamp"),
    "wake": ("time", "io.debezium.time.MicroTime"),
    "wake_ms": ("time", "io.debezium.time.Time"),
}
DECLARED = JsonContract(SCHEMA, ("id",), SEMANTIC)
UNDECLARED = JsonContract(SCHEMA, ("id",), {name: (kind, None) for name, (kind, _) in SEMANTIC.items()})


def unscaled(number: int) -> str:
    """Kafka Connect's Decimal: big-endian two's complement in the fewest bytes, base64."""
    size = max(1, (number.bit_length() + 8) // 8)
    return base64.b64encode(number.to_bytes(size, "big", signed=True)).decode()


AT = datetime(2026, 11, 20, 10, 15, 30, 123456)
AT_MICROS = (AT - EPOCH) // timedelta(microseconds=1)
GOOD = {
    "id": 1,
    "amount": unscaled(123456),  # 1234.56
    "ratio": {"scale": 3, "value": unscaled(-12345)},  # -12.345
    "born": (date(1990, 5, 17) - date(1970, 1, 1)).days,
    "at_local": AT_MICROS,
    "at_ms": AT_MICROS // 1000,
    "at_nano": AT_MICROS * 1000 + 789,
    "at_zone": "2026-11-20T10:15:30.123456Z",
    "wake": (7 * 3600 + 5 * 60 + 9) * 1_000_000 + 500_000,
    "wake_ms": (23 * 3600 + 59 * 60 + 59) * 1000,
}
EXPECTED = {
    "amount": Decimal("1234.56"), "ratio": Decimal("-12.345"), "born": date(1990, 5, 17), "at_local": AT,
    "at_ms": AT.replace(microsecond=123000), "at_nano": AT, "at_zone": AT, "wake": "07:05:09.5", "wake_ms": "23:59:59",
}


def connect_schema(row_fields: dict[str, tuple[str, str | None, dict]]) -> dict:
    """A value schema as Kafka's JsonConverter writes it with schemas.enable=true."""
    value = {"type": "struct", "optional": True, "name": "shop.public.typed.Value", "fields": [
        {"type": kind, "optional": True, "field": name, **({"name": semantic} if semantic else {}),
         **({"parameters": parameters} if parameters else {})}
        for name, (kind, semantic, parameters) in row_fields.items()]}
    return {"type": "struct", "name": "shop.public.typed.Envelope", "optional": False, "fields": [
        {**value, "field": "before"}, {**value, "field": "after"},
        {"type": "struct", "optional": False, "field": "source", "fields": []},
        {"type": "string", "optional": False, "field": "op"}]}


ENVELOPE_SCHEMA = connect_schema({
    "id": ("int64", None, {}),
    "amount": ("bytes", "org.apache.kafka.connect.data.Decimal", {"scale": "2", "connect.decimal.precision": "12"}),
    "ratio": ("struct", "io.debezium.data.VariableScaleDecimal", {}),
    "born": ("int32", "io.debezium.time.Date", {}),
    "at_local": ("int64", "io.debezium.time.MicroTimestamp", {}),
    "at_ms": ("int64", "io.debezium.time.Timestamp", {}),
    "at_nano": ("int64", "io.debezium.time.NanoTimestamp", {}),
    "at_zone": ("string", "io.debezium.time.ZonedTimestamp", {}),
    "wake": ("int64", "io.debezium.time.MicroTime", {}),
    "wake_ms": ("int32", "io.debezium.time.Time", {}),
})


def event(after: dict, schema: dict | None = None) -> tuple[bytes, bytes]:
    body = {"before": None, "after": after, "op": "c", "ts_ms": 1,
            "source": {"connector": "postgresql", "ts_ms": 1, "lsn": 10 + after["id"], "table": "typed"}}
    key = {"id": after["id"]}
    if schema is not None:
        body = {"schema": schema, "payload": body}
        key = {"schema": {"type": "struct", "fields": [{"type": "int64", "field": "id"}]}, "payload": key}
    return json.dumps(key).encode(), json.dumps(body).encode()


def decode(spark, contract, messages):
    return decode_debezium(kafka_rows(spark, messages), contract, ("id",), "typed").orderBy("offset").collect()


def values(row) -> dict:
    return {name: row[name] for name in EXPECTED}


def test_each_semantic_type_declared_in_the_contract_reads_as_its_value(spark):
    (row,) = decode(spark, DECLARED, [event(GOOD)])
    assert row._error_code is None, row._error_detail
    assert values(row) == EXPECTED


def test_with_schemas_enabled_the_event_schema_says_how_each_value_is_written(spark):
    """The contract names no semantic type: the envelope's schema does, event by event."""
    plain = {**GOOD, "id": 2, "amount": 1234.56, "ratio": "-12.345", "born": "1990-05-17",
             "at_local": "2026-11-20T10:15:30.123456Z", "wake": "07:05:09.5"}
    plain_schema = connect_schema({"id": ("int64", None, {}), "amount": ("double", None, {}),
                                   "ratio": ("string", None, {}), "born": ("string", None, {}),
                                   "at_local": ("string", None, {}), "wake": ("string", None, {})})
    rows = decode(spark, UNDECLARED, [event(GOOD, ENVELOPE_SCHEMA), event({k: plain[k] for k in (
        "id", "amount", "ratio", "born", "at_local", "wake")}, plain_schema)])
    assert [r._error_code for r in rows] == [None, None], [r._error_detail for r in rows]
    assert values(rows[0]) == EXPECTED
    assert {k: rows[1][k] for k in ("amount", "ratio", "born", "at_local", "wake")} == {
        k: EXPECTED[k] for k in ("amount", "ratio", "born", "at_local", "wake")}
    # without a schema, the contract's plain JSON: an epoch number declared date-time is no instant
    (row,) = decode(spark, UNDECLARED, [event({"id": 3, "at_local": AT_MICROS})])
    assert (row._error_code, row._error_detail.rsplit(": ", 1)[-1]) == ("SCHEMA_MISMATCH", "at_local")


MISFITS = [
    ("amount", 1234.56),  # a number where the contract declares Connect's bytes
    ("amount", "not base64!"),
    ("amount", unscaled(10 ** 13)),  # 14 digits: beyond decimal(12,2)
    ("ratio", {"scale": 4, "value": unscaled(123456)}),  # 12.3456: a digit beyond the declared scale of 3
    ("ratio", {"scale": 1, "value": unscaled(10 ** 40)}),  # beyond 38 digits
    ("born", "1990-05-17"),  # a string where days since the epoch are declared
    ("at_local", "2026-11-20T10:15:30Z"),
    ("at_local", 1.5),
    ("at_ms", True),
    ("wake", "07:05:09"),
]


def misfit_field(detail: str) -> str:
    """The field a SCHEMA_MISMATCH detail names (a decimal's reason in brackets after it left out)."""
    return detail.split("wrong type: ", 1)[1].split(" (", 1)[0]


def test_a_value_that_does_not_fit_its_semantic_type_is_a_schema_mismatch(spark):
    rows = decode(spark, DECLARED, [event({"id": n, field: value}) for n, (field, value) in enumerate(MISFITS)])
    assert [(r._error_code, misfit_field(r._error_detail)) for r in rows] == [
        ("SCHEMA_MISMATCH", field) for field, _ in MISFITS]
    # a decimal's detail says why, with the scale the change carried (the contract's, schemaless)
    assert [r._error_detail.split("wrong type: ", 1)[1] for r in rows[2:5]] == [
        "amount (100000000000.00: 12 digits before the point, the contract's decimal(12,2) holds 10)",
        "ratio (12.3456: 4 digits after the point, the contract's decimal(20,3) keeps 3)",
        "ratio"]  # 41 digits: not read at all


def test_digits_beyond_the_declared_scale_are_kept_only_when_they_are_zeros(spark):
    rows = decode(spark, DECLARED, [event({"id": 5, "ratio": {"scale": 5, "value": unscaled(1234500)}}),
                                    event({"id": 6, "ratio": {"scale": 0, "value": unscaled(-7)}}),
                                    event({"id": 7, "amount": unscaled(-1)})])
    assert [r._error_code for r in rows] == [None] * 3, [r._error_detail for r in rows]
    assert [rows[0].ratio, rows[1].ratio, rows[2].amount] == [Decimal("12.345"), Decimal("-7"), Decimal("-0.01")]


def test_an_envelope_type_that_cannot_fill_the_declared_type_is_a_schema_mismatch(spark):
    schema = connect_schema({"id": ("int64", None, {}), "born": ("int64", "io.debezium.time.MicroTimestamp", {})})
    (row,) = decode(spark, UNDECLARED, [event({"id": 8, "born": AT_MICROS}, schema)])
    assert (row._error_code, row._error_detail.rsplit(": ", 1)[-1]) == ("SCHEMA_MISMATCH", "born")


def test_json_decimals_are_numbers_or_digits_that_fit_without_rounding(spark):
    contract = JsonContract(StructType([StructField("id", LongType()), StructField("at", TimestampType()),
                                        StructField("price", DecimalType(6, 2))]), ("id", "at"))
    now = datetime(2026, 11, 20, 12, tzinfo=UTC)
    prices = [12.5, "12.50", 7, "-0.10", 12.505, "12,5", True, 12345.6]
    messages = [(b"k", json.dumps({"id": n, "at": "2026-11-20T10:00:00Z", "price": p}).encode())
                for n, p in enumerate(prices)]
    register_json_udf(spark, "decode_priced", contract.schema)
    decoded = decode_json(kafka_rows(spark, messages), "decode_priced", contract, "at", now)
    rows = decoded.orderBy("offset").collect()
    assert [(r.price, r._error_code) for r in rows] == [
        (Decimal("12.50"), None), (Decimal("12.50"), None), (Decimal("7.00"), None), (Decimal("-0.10"), None),
        (None, "SCHEMA_MISMATCH"), (None, "SCHEMA_MISMATCH"), (None, "SCHEMA_MISMATCH"), (None, "SCHEMA_MISMATCH")]


# --- the message key: every column type the row image takes may be a key column (issue 56) ----

# A composite key of every semantic type, and an integer: a table partitioned by date has its
# date in its primary key, a ledger its numeric
KEY_COLUMNS = ("amount", "ratio", "born", "at_local", "at_ms", "at_nano", "at_zone", "wake", "wake_ms", "id")


def keyed(after: dict, schema: dict | None = None, tombstone: bool = False) -> tuple[bytes, bytes | None]:
    """A change whose message key is ``after``'s KEY_COLUMNS, as Debezium writes it (with
    ``schema``, the envelope's: the key's own Connect schema is made of the same fields)."""
    key_value, value = event(after, schema)
    key = {name: after[name] for name in KEY_COLUMNS}
    if schema is not None:
        (row,) = [f for f in schema["fields"] if f["field"] == "after"]
        key = {"schema": {"type": "struct", "optional": False, "name": "shop.public.typed.Key",
                          "fields": [f for f in row["fields"] if f["field"] in KEY_COLUMNS]}, "payload": key}
    return json.dumps(key).encode(), None if tombstone else value


def decode_keyed(spark, contract, messages):
    return decode_debezium(kafka_rows(spark, messages), contract, KEY_COLUMNS, "typed").orderBy(
        "offset").collect()


def test_a_key_of_every_semantic_type_is_read_from_the_message_key_as_the_row_is(spark):
    """Before, the key was read with the declared types alone: a date key (epoch days), a numeric
    (base64 bytes), a timestamp (epoch microseconds) did not read, and every change of such a
    table was a dead letter ("unreadable message key"). Schemaless by the contract's
    `x-debezium-type`, with schemas by the key's own schema; a tombstone's row is its key."""
    rows = decode_keyed(spark, DECLARED, [keyed(GOOD), keyed(GOOD, tombstone=True)])
    rows += decode_keyed(spark, UNDECLARED, [keyed(GOOD, ENVELOPE_SCHEMA), keyed(GOOD, ENVELOPE_SCHEMA, True)])
    assert [r._error_code for r in rows] == [None] * 4, [r._error_detail for r in rows]
    assert [r._is_tombstone for r in rows] == [False, True, False, True]
    for row in rows:
        assert {name: row[name] for name in KEY_COLUMNS if name != "id"} == {
            name: EXPECTED[name] for name in KEY_COLUMNS if name != "id"}


def test_a_key_that_does_not_fit_its_declared_type_is_still_an_unreadable_key(spark):
    """Read by its semantic type, a key token of another kind is no key, never a coerced one."""
    key, value = keyed(GOOD)
    wrong = [json.dumps({**json.loads(key), "born": "1990-05-17"}).encode(),  # text where epoch days are declared
             json.dumps({**json.loads(key), "amount": 12.5}).encode()]  # a number where base64 bytes are
    rows = decode_keyed(spark, DECLARED, [(wrong[0], value), (wrong[1], None)])
    assert [(r._error_code, r._error_detail.split(":")[0]) for r in rows] == [
        ("INVALID_CDC_ENVELOPE", "unreadable message key"),
        ("INVALID_CDC_ENVELOPE", "tombstone without a readable key")]


# --- a column the stream names otherwise than its table (`cdc add --rename-columns`, issue 56) ------

RENAMED = JsonContract(
    StructType([StructField("reading_id", LongType()), StructField("reading", DecimalType(12, 2)),
                StructField("read_at", TimestampType())]), ("reading_id",),
    {"reading": ("decimal", "org.apache.kafka.connect.data.Decimal"),
     "read_at": ("timestamp", "io.debezium.time.MicroTimestamp")},
    {"reading_id": "key", "reading": "value", "read_at": "timestamp"})


def test_a_renamed_column_is_read_from_its_source_field_key_included(spark):
    """A table with columns `key`, `value` and `timestamp` (bronze's own names): the contract calls
    them reading_id, reading and read_at and reads each from its field, the message key's too,
    by its semantic type, with or without schemas. A field named like a renamed column (a later
    source column `reading`) is no column: it stays in _rescued, the column keeps its field's value."""
    after = {"key": 5, "value": unscaled(123456), "timestamp": AT_MICROS}
    schema = connect_schema({"key": ("int64", None, {}),
                             "value": ("bytes", "org.apache.kafka.connect.data.Decimal", {"scale": "2"}),
                             "timestamp": ("int64", "io.debezium.time.MicroTimestamp", {})})
    body = {"before": None, "after": after, "op": "c", "ts_ms": 1,
            "source": {"connector": "postgresql", "ts_ms": 1, "lsn": 10, "table": "typed"}}
    later = {**body, "after": {**after, "key": 6, "reading": "x"}}
    key_with_schema = {"schema": {"type": "struct", "fields": [{"type": "int64", "field": "key"}]},
                       "payload": {"key": 5}}
    messages = [(b'{"key": 5}', json.dumps(body).encode()), (b'{"key": 6}', json.dumps(later).encode()),
                (json.dumps(key_with_schema).encode(), json.dumps({"schema": schema, "payload": body}).encode()),
                (b'{"key": 6}', None)]
    undeclared = JsonContract(RENAMED.schema, RENAMED.required, {k: (kind, None) for k, (kind, _) in
                                                                 RENAMED.semantic_fields.items()}, RENAMED.source_names)
    rows = decode_debezium(kafka_rows(spark, messages[:2] + messages[3:]), RENAMED, ("reading_id",),
                                   "typed").orderBy("offset").collect()
    rows += decode_debezium(kafka_rows(spark, messages[2:3]), undeclared, ("reading_id",), "typed").collect()
    assert [r._error_code for r in rows] == [None] * 4, [r._error_detail for r in rows]
    assert [(r.reading_id, r.reading, r.read_at, r._rescued) for r in rows] == [
        (5, Decimal("1234.56"), AT, None), (6, Decimal("1234.56"), AT, '{"reading":"x"}'), (6, None, None, None),
        (5, Decimal("1234.56"), AT, None)]
    assert rows[2]._is_tombstone


# --- issue 56, item 7: a numeric column whose scale an ALTER raised (numeric(18,4) -> numeric(20,6)) --

LEDGER = JsonContract(StructType([StructField("id", LongType()), StructField("amount", DecimalType(18, 4))]),
                      ("id",), {"amount": ("decimal", None)})  # as `lakehouse cdc add` declares it now


def test_decimals_as_text_carry_their_scale_and_land_exactly_after_the_source_s_scale_grew(spark):
    """decimal.handling.mode=string (the printed properties): Debezium writes each value with its
    column's scale. After the ALTER, a value whose new digits are zeros lands exactly; one that needs
    them is a dead letter naming the scale it came with, never a value off by a power of ten."""
    sent = {1: "5302757.9045", 2: "5302757.904500", 3: "-0.000100", 4: "1.123456", 5: "123456789012345.000000",
            6: "NaN", 7: "12345678901234.9999"}
    rows = decode(spark, LEDGER, [event({"id": n, "amount": text}) for n, text in sent.items()])
    assert [(r.amount, r._error_code) for r in rows] == [
        (Decimal("5302757.9045"), None), (Decimal("5302757.9045"), None), (Decimal("-0.0001"), None),
        (None, "SCHEMA_MISMATCH"), (None, "SCHEMA_MISMATCH"), (None, "SCHEMA_MISMATCH"),
        (Decimal("12345678901234.9999"), None)]
    assert [r._error_detail for r in rows[3:6]] == [
        "a field of the change has a value of the wrong type: amount (1.123456: 6 digits after the point, the "
        "contract's decimal(18,4) keeps 4)",
        "a field of the change has a value of the wrong type: amount (123456789012345.000000: 15 digits before the "
        "point, the contract's decimal(18,4) holds 14)",
        "a field of the change has a value of the wrong type: amount"]


def test_with_schemas_enabled_a_decimal_is_read_at_the_scale_its_event_names(spark):
    """Precise mode with schemas: the scale comes with each event, so the ALTER changes nothing."""
    def schema(scale: int, precision: int) -> dict:
        return connect_schema({"id": ("int64", None, {}), "amount": (
            "bytes", "org.apache.kafka.connect.data.Decimal",
            {"scale": str(scale), "connect.decimal.precision": str(precision)})})
    rows = decode(spark, LEDGER, [event({"id": 1, "amount": unscaled(53027579045)}, schema(4, 18)),
                                  event({"id": 2, "amount": unscaled(5302757904500)}, schema(6, 20)),
                                  event({"id": 3, "amount": unscaled(1123456)}, schema(6, 20))])
    assert [(r.amount, r._error_code) for r in rows] == [
        (Decimal("5302757.9045"), None), (Decimal("5302757.9045"), None), (None, "SCHEMA_MISMATCH")]
    assert rows[2]._error_detail.endswith(
        "amount (1.123456: 6 digits after the point, the contract's decimal(18,4) keeps 4)")


def test_a_contract_that_reads_decimals_at_its_own_scale_is_warned_of_when_loaded(caplog):
    """A contract of before (x-debezium-type Decimal, base64 without schemas) is read as before: the
    change carries no scale, so the warning names the fields and what to do."""
    from ingestion.decoders import _warn_of_unscaled_decimals
    from lakehouse.contracts.streams import StreamSpec

    spec = StreamSpec("typed", "typed", "debezium", None, "bronze.typed", "_source_ts", ("id",), ("id",))
    with caplog.at_level("WARNING", logger="lakehouse.ingest"):
        _warn_of_unscaled_decimals(spec, DECLARED, {})
        _warn_of_unscaled_decimals(spec, LEDGER, {})
        _warn_of_unscaled_decimals(spec, DECLARED, {"amount": {}})  # added from events with schemas
    assert [r.getMessage() for r in caplog.records] == [
        "typed: amount read as Debezium's Decimal at the contract's scale (x-debezium-type): in JSON without "
        "schemas a change carries no scale, so an ALTER of the column's scale at the source would multiply its "
        "values in silence; set the connector's decimal.handling.mode=string and take x-debezium-type out of "
        "these fields (docs/connect-a-database.md, \"Decimals\")"]
