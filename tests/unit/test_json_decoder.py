"""The JVM JSON decoder (jvm/json-decoder) through ingestion.json_udf, in real Spark: the
token rules of every declared type, and the errors of a bad schema or a missing jar. The
user_events stream's own cases are in test_decode.py."""

import json
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ingestion import formats, json_udf
from ingestion.json_udf import register_json_udf
from lakehouse.contracts.streams import JsonContract
from lakehouse.core.errors import LakehouseError
from tests.unit.test_decode_formats import kafka_rows

SCHEMA = StructType([StructField("id", LongType()), StructField("at", TimestampType()),
                     StructField("ratio", DoubleType()), StructField("ok", BooleanType()),
                     StructField("day", DateType()), StructField("name", StringType()),
                     StructField("price", DecimalType(6, 2))])
CONTRACT = JsonContract(SCHEMA, ("id", "at"))
NOW = datetime(2026, 11, 20, 12, tzinfo=UTC)
BASE = {"id": 1, "at": "2026-11-20T10:00:00Z"}


def decode(spark, *payloads: bytes | dict):
    register_json_udf(spark, "decode_typed", SCHEMA)
    values = [p if isinstance(p, bytes) else json.dumps(p).encode() for p in payloads]
    rows = formats.decode_json(kafka_rows(spark, [(b"k", v) for v in values]), "decode_typed", CONTRACT, "at", NOW)
    return rows.orderBy("offset").collect()


@pytest.mark.parametrize("field, token, value", [
    ("id", 9007199254740993, 9007199254740993),  # beyond a double's exact integers
    ("ok", None, None),
    ("ratio", 2, 2.0),
    ("ratio", 0.25, 0.25),
    ("ratio", "Infinity", float("inf")),
    ("ok", False, False),
    ("day", "2026-02-28", date(2026, 2, 28)),
    ("name", "", ""),
    ("name", None, None),
    ("at", "2026-11-20 11:30:00+01:00", datetime(2026, 11, 20, 10, 30)),
    ("price", "1234.5", Decimal("1234.50")),
])
def test_a_token_of_its_own_type_is_read_as_declared(spark, field, token, value):
    (row,) = decode(spark, {**BASE, field: token})
    assert row._error_code is None, row._error_detail
    assert row[field] == value


@pytest.mark.parametrize("field, token", [
    ("id", 92233720368547758070),  # does not fit a long
    ("id", 1.5),
    ("id", "1"),
    ("ratio", "0.25"),
    ("ratio", True),
    ("ok", "true"),
    ("ok", 1),
    ("day", "2026-02-30"),
    ("day", "2026-02-28T00:00:00Z"),
    ("day", 20260228),
    ("name", 3),
    ("name", {"first": "Ada"}),
    ("at", "20:00"),
    ("at", [2026, 11, 20]),
    ("price", 12345.6),  # five digits before the point, four allowed
    ("price", "1.005"),
])
def test_a_token_of_another_type_is_a_schema_mismatch_of_that_field_alone(spark, field, token):
    (row,) = decode(spark, {**BASE, field: token})
    assert (row._error_code, row._error_detail) == ("SCHEMA_MISMATCH", f"wrong type for field(s): {field}")


def test_a_number_with_an_exponent_is_no_decimal(spark):
    (row,) = decode(spark, b'{"id": 1, "at": "2026-11-20T10:00:00Z", "price": 1.5e3}')
    assert (row._error_code, row._error_detail) == ("SCHEMA_MISMATCH", "wrong type for field(s): price")


def test_every_wrong_field_is_named_in_declared_order(spark):
    (row,) = decode(spark, {**BASE, "price": True, "name": 1, "ok": "yes"})
    assert row._error_detail == "wrong type for field(s): ok, name, price"


def test_the_last_of_a_repeated_key_counts(spark):
    first_wrong, last_wrong = decode(spark, b'{"id": 1, "at": "2026-11-20T10:00:00Z", "name": 1, "name": "x"}',
                                     b'{"id": 1, "at": "2026-11-20T10:00:00Z", "name": "x", "name": 1}')
    assert (first_wrong._error_code, first_wrong.name) == (None, "x")
    assert last_wrong._error_code == "SCHEMA_MISMATCH"


def test_bytes_that_are_not_utf8_inside_a_string_are_replaced_as_spark_reads_them(spark):
    (row,) = decode(spark, b'{"id": 1, "at": "2026-11-20T10:00:00Z", "name": "caf\xe9"}')
    assert (row._error_code, row.name) == (None, "caf\ufffd")


@pytest.mark.parametrize("payload", [
    b"", b"   ", b"null", b'"text"', b"42", b'{"id": 1,}', b'{"id": NaN}', b'{"id": 1', b"[{}]",
    b'{"id": 1, "at": "2026-11-20T10:00:00Z", "name": "a\tb"}',  # a control character unescaped in a string
    b'\xef\xbb\xbf{"id": 1, "at": "2026-11-20T10:00:00Z"}',  # a byte order mark: Spark's reader refuses it too
])
def test_anything_but_one_json_object_is_a_corrupt_payload(spark, payload):
    (row,) = decode(spark, payload)
    assert (row._error_code, row._error_detail) == ("CORRUPT_PAYLOAD", "payload is not a JSON object")


def test_single_quotes_are_read_as_spark_reads_them(spark):
    (row,) = decode(spark, b"{'id': 1, 'at': '2026-11-20T10:00:00Z', 'name': 'x'}")
    assert (row._error_code, row.name) == (None, "x")


def test_undeclared_keys_of_any_type_are_rescued_and_nested_values_skipped(spark):
    (row,) = decode(spark, {**BASE, "extra": {"deep": [1, {"name": 5}]}, "n": None, "name": "kept"})
    assert (row._error_code, row.name) == (None, "kept")
    assert json.loads(row._rescued) == {"extra": '{"deep":[1,{"name":5}]}', "n": None}


def test_a_type_the_decoder_cannot_hold_is_one_clear_error(spark):
    with pytest.raises(LakehouseError, match=r"^cannot decode JSON with this schema: .*tags.*array<string>"):
        register_json_udf(spark, "decode_tags", StructType([StructField("tags", ArrayType(StringType()))]))


def test_a_missing_decoder_jar_is_one_clear_error(spark, monkeypatch):
    monkeypatch.setattr(json_udf, "UDF_CLASS", "io.github.lakehouse.json.NoSuchDecoder")
    with pytest.raises(LakehouseError, match=r"JSON decoder jar .* is missing from Spark.s classpath"):
        register_json_udf(spark, "decode_typed", SCHEMA)
