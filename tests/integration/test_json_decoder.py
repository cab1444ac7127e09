"""The JVM JSON decoder (jvm/json-decoder) through ingestion.json_udf, in real Spark: the
token rules of every declared type, and the errors of a bad schema or a missing jar. The
user_events stream's own cases are in test_decode.py."""

import json
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from pyspark.sql import types as T

from ingestion import json_udf
from ingestion.formats.json_events import decode_json
from ingestion.json_udf import register_json_udf
from lakehouse.contracts.streams import JsonContract
from lakehouse.core.errors import LakehouseError
from tests.support.kafka_rows import kafka_rows

pytestmark = pytest.mark.integration  # Spark in this process (tests/unit starts no JVM)

SCHEMA = T.StructType([T.StructField("id", T.LongType()), T.StructField("at", T.TimestampType()),
                       T.StructField("ratio", T.DoubleType()), T.StructField("ok", T.BooleanType()),
                       T.StructField("day", T.DateType()), T.StructField("name", T.StringType()),
                       T.StructField("price", T.DecimalType(6, 2))])
CONTRACT = JsonContract(SCHEMA, ("id", "at"))
NOW = datetime(2026, 11, 20, 12, tzinfo=UTC)
BASE = {"id": 1, "at": "2026-11-20T10:00:00Z"}


OWN_TYPE = [
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
]
OTHER_TYPE = [
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
]
NOT_OBJECTS = [
    b"", b"   ", b"null", b'"text"', b"42", b'{"id": 1,}', b'{"id": NaN}', b'{"id": 1', b"[{}]",
    b'{"id": 1, "at": "2026-11-20T10:00:00Z", "name": "a\tb"}',  # a control character unescaped in a string
    b'\xef\xbb\xbf{"id": 1, "at": "2026-11-20T10:00:00Z"}',  # a byte order mark: Spark's reader refuses it too
]
EXPONENT = b'{"id": 1, "at": "2026-11-20T10:00:00Z", "price": 1.5e3}'
THREE_WRONG = {**BASE, "price": True, "name": 1, "ok": "yes"}
FIRST_WRONG = b'{"id": 1, "at": "2026-11-20T10:00:00Z", "name": 1, "name": "x"}'
LAST_WRONG = b'{"id": 1, "at": "2026-11-20T10:00:00Z", "name": "x", "name": 1}'
NOT_UTF8 = b'{"id": 1, "at": "2026-11-20T10:00:00Z", "name": "caf\xe9"}'
SINGLE_QUOTES = b"{'id': 1, 'at': '2026-11-20T10:00:00Z', 'name': 'x'}"
UNDECLARED = {**BASE, "extra": {"deep": [1, {"name": 5}]}, "n": None, "name": "kept"}


def encoded(payload: bytes | dict) -> bytes:
    return payload if isinstance(payload, bytes) else json.dumps(payload).encode()


@pytest.fixture(scope="module")
def decoded(spark) -> dict:
    """Every payload of this module, decoded in one Spark job: the decoded row per payload."""
    payloads = [*[{**BASE, field: token} for field, token, _ in OWN_TYPE],
                *[{**BASE, field: token} for field, token in OTHER_TYPE], *NOT_OBJECTS, EXPONENT,
                THREE_WRONG, FIRST_WRONG, LAST_WRONG, NOT_UTF8, SINGLE_QUOTES, UNDECLARED]
    values = list(dict.fromkeys(encoded(p) for p in payloads))
    register_json_udf(spark, "decode_typed", SCHEMA)
    rows = decode_json(kafka_rows(spark, [(b"k", v) for v in values]), "decode_typed", CONTRACT, "at", NOW)
    return {values[row.offset]: row for row in rows.collect()}


@pytest.mark.parametrize("field, token, value", OWN_TYPE)
def test_a_token_of_its_own_type_is_read_as_declared(decoded, field, token, value):
    row = decoded[encoded({**BASE, field: token})]
    assert row._error_code is None, row._error_detail
    assert row[field] == value


@pytest.mark.parametrize("field, token", OTHER_TYPE)
def test_a_token_of_another_type_is_a_schema_mismatch_of_that_field_alone(decoded, field, token):
    row = decoded[encoded({**BASE, field: token})]
    assert (row._error_code, row._error_detail) == ("SCHEMA_MISMATCH", f"wrong type for field(s): {field}")


def test_a_number_with_an_exponent_is_no_decimal(decoded):
    row = decoded[EXPONENT]
    assert (row._error_code, row._error_detail) == ("SCHEMA_MISMATCH", "wrong type for field(s): price")


def test_every_wrong_field_is_named_in_declared_order(decoded):
    assert decoded[encoded(THREE_WRONG)]._error_detail == "wrong type for field(s): ok, name, price"


def test_the_last_of_a_repeated_key_counts(decoded):
    first_wrong, last_wrong = decoded[FIRST_WRONG], decoded[LAST_WRONG]
    assert (first_wrong._error_code, first_wrong.name) == (None, "x")
    assert last_wrong._error_code == "SCHEMA_MISMATCH"


def test_bytes_that_are_not_utf8_inside_a_string_are_replaced_as_spark_reads_them(decoded):
    row = decoded[NOT_UTF8]
    assert (row._error_code, row.name) == (None, "caf\ufffd")


@pytest.mark.parametrize("payload", NOT_OBJECTS)
def test_anything_but_one_json_object_is_a_corrupt_payload(decoded, payload):
    row = decoded[payload]
    assert (row._error_code, row._error_detail) == ("CORRUPT_PAYLOAD", "payload is not a JSON object")


def test_single_quotes_are_read_as_spark_reads_them(decoded):
    row = decoded[SINGLE_QUOTES]
    assert (row._error_code, row.name) == (None, "x")


def test_undeclared_keys_of_any_type_are_rescued_and_nested_values_skipped(decoded):
    row = decoded[encoded(UNDECLARED)]
    assert (row._error_code, row.name) == (None, "kept")
    assert json.loads(row._rescued) == {"extra": '{"deep":[1,{"name":5}]}', "n": None}


def test_a_type_the_decoder_cannot_hold_is_one_clear_error(spark):
    with pytest.raises(LakehouseError, match=r"^cannot decode JSON with this schema: .*tags.*array<string>"):
        register_json_udf(spark, "decode_tags", T.StructType([T.StructField("tags", T.ArrayType(T.StringType()))]))


def test_a_missing_decoder_jar_is_one_clear_error(spark, monkeypatch):
    monkeypatch.setattr(json_udf, "UDF_CLASS", "io.github.lakehouse.json.NoSuchDecoder")
    with pytest.raises(LakehouseError, match=r"JSON decoder jar .* is missing from Spark.s classpath"):
        register_json_udf(spark, "decode_typed", SCHEMA)
