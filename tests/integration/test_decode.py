"""The JSON decoder and the bronze / dead-letter split, on small Kafka-shaped DataFrames."""

import json
from datetime import UTC, datetime

import pytest
from pyspark.sql import functions as F

from ingestion import dead_letters
from ingestion.formats.bronze_shape import to_bronze
from ingestion.formats.json_events import decode_json
from ingestion.json_udf import register_json_udf
from lakehouse.contracts.streams import get_stream, json_contract

pytestmark = pytest.mark.integration  # Spark in this process (tests/unit starts no JVM)

SPEC = get_stream("user_events")
CONTRACT = json_contract(SPEC)
GOOD = {
    "event_id": "e-1", "customer_id": 7, "session_id": "s-7-1", "event_type": "search",
    "event_timestamp": "2026-11-20T10:00:00.123Z", "page": "/search", "device": "web", "duration_ms": 40,
}


def kafka_rows(spark, values):
    rows = [
        (b"k", value, "user_events", 0, offset, datetime(2026, 11, 20, tzinfo=UTC))
        for offset, value in enumerate(values)
    ]
    return spark.createDataFrame(rows, "key binary, value binary, topic string, partition int, "
                                       "offset long, timestamp timestamp")


def decode(spark, *payloads):
    values = [p if isinstance(p, bytes) or p is None else json.dumps(p).encode() for p in payloads]
    register_json_udf(spark, "decode_user_events", CONTRACT.schema)
    return decode_json(kafka_rows(spark, values), "decode_user_events", CONTRACT, SPEC.event_time_column)


def test_valid_event_decodes_with_types_and_no_error(spark):
    row = decode(spark, GOOD).collect()[0]
    assert row._error_code is None
    assert row.event_id == "e-1" and row.customer_id == 7 and row.duration_ms == 40
    assert row.event_timestamp == datetime(2026, 11, 20, 10, 0, 0, 123000)
    assert row._rescued is None


def test_undeclared_fields_are_rescued_not_dropped(spark):
    row = decode(spark, {**GOOD, "campaign": "winter", "score": 3}).collect()[0]
    assert row._error_code is None
    assert json.loads(row._rescued) == {"campaign": "winter", "score": "3"}


@pytest.mark.parametrize("payload, code, detail", [
    (b'{"event_id": "e-1", "event_ty', "CORRUPT_PAYLOAD", "not a JSON object"),
    (b"\xff\xfe\x00garbage", "CORRUPT_PAYLOAD", "not a JSON object"),
    (b"[1, 2, 3]", "CORRUPT_PAYLOAD", "not a JSON object"),
    (None, "CORRUPT_PAYLOAD", "not a JSON object"),
    ({**GOOD, "customer_id": "seven"}, "SCHEMA_MISMATCH", "customer_id"),
    ({**GOOD, "event_timestamp": "yesterday"}, "SCHEMA_MISMATCH", "event_timestamp"),
    # Spark's reader would take these silently: a number as epoch seconds, any token as its text
    ({**GOOD, "event_timestamp": "2026-13-45T10:00:00Z"}, "SCHEMA_MISMATCH", "event_timestamp"),
    ({**GOOD, "event_timestamp": 1763632800}, "SCHEMA_MISMATCH", "event_timestamp"),
    ({**GOOD, "event_timestamp": 1763632800123456}, "SCHEMA_MISMATCH", "event_timestamp"),
    ({**GOOD, "page": 12}, "SCHEMA_MISMATCH", "page"),
    ({**GOOD, "event_id": True}, "SCHEMA_MISMATCH", "event_id"),
    ({**GOOD, "device": {"os": "ios"}}, "SCHEMA_MISMATCH", "device"),
    ({**GOOD, "session_id": ["s-1"]}, "SCHEMA_MISMATCH", "session_id"),
    ({k: v for k, v in GOOD.items() if k != "event_id"}, "MISSING_REQUIRED_FIELD", "event_id"),
    ({**GOOD, "event_type": None}, "MISSING_REQUIRED_FIELD", "event_type"),
    ({**GOOD, "event_timestamp": "1999-12-31T23:59:59Z"}, "EVENT_TIME_OUT_OF_RANGE", "1999-12-31"),
    ({**GOOD, "event_timestamp": "2999-01-01T00:00:00Z"}, "EVENT_TIME_OUT_OF_RANGE", "2999-01-01"),
])
def test_unreadable_records_get_the_right_reason(spark, payload, code, detail):
    row = decode(spark, payload).collect()[0]
    assert row._error_code == code
    assert detail in row._error_detail


def test_strings_and_nulls_of_string_and_timestamp_fields_stay_what_they_are(spark):
    row = decode(spark, {**GOOD, "page": "12", "session_id": None, "device": "",
                         "event_timestamp": "2026-11-20T11:00:00+01:00"}).collect()[0]
    assert row._error_code is None, row._error_detail
    assert (row.page, row.session_id, row.device) == ("12", None, "")
    assert row.event_timestamp == datetime(2026, 11, 20, 10, 0, 0)


def test_late_events_are_valid(spark):
    row = decode(spark, {**GOOD, "event_timestamp": "2020-01-01T00:00:00Z"}).collect()[0]
    assert row._error_code is None


def test_every_record_is_one_bronze_row_good_or_dead(spark):
    decoded = decode(spark, GOOD, b"{broken", {**GOOD, "event_id": "e-2"}, {**GOOD, "customer_id": "x"})
    ingested_at = F.lit(datetime(2026, 11, 21, tzinfo=UTC)).cast("timestamp")
    payload = [f.name for f in CONTRACT.schema.fields]
    rows = to_bronze(decoded, 5, ingested_at).collect()
    good = [r for r in rows if r._error_code is None]
    dead = [r for r in rows if r._error_code is not None]
    assert sorted(r._kafka_offset for r in good) == [0, 2]
    assert sorted(r._kafka_offset for r in dead) == [1, 3]
    assert {r._error_code for r in dead} == {"CORRUPT_PAYLOAD", "SCHEMA_MISMATCH"}
    assert {bytes(r._raw_value) for r in dead} == {b"{broken", json.dumps({**GOOD, "customer_id": "x"}).encode()}
    assert all(r._batch_id == 5 for r in rows)
    # a dead row: its bytes and when it was found dead, decoded columns null; a good row: no bytes
    assert all(all(r[name] is None for name in payload) and r._dead_at == r._ingested_at for r in dead)
    assert all(r._raw_value is None and r._raw_key is None and r._dead_at is None for r in good)
    assert set(rows[0].asDict()) == {*payload, "_rescued", "_kafka_topic", "_kafka_partition", "_kafka_offset",
                                     "_kafka_timestamp", "_kafka_key", "_ingested_at", "_batch_id", "_error_code",
                                     "_error_detail", "_raw_key", "_raw_value", "_raw_headers", "_dead_at",
                                     "_replay_attempts", "_last_replay_at", "_replayed_at", "_replayed_error_code"}


def test_error_codes_are_a_closed_documented_set(spark):
    decoded = decode(spark, b"x", {**GOOD, "customer_id": "x"}, {**GOOD, "event_id": None},
                     {**GOOD, "event_timestamp": "1990-01-01T00:00:00Z"})
    codes = {r._error_code for r in decoded.collect()}
    assert codes <= set(dead_letters.ERROR_CODES)
    assert len(codes) == 4
