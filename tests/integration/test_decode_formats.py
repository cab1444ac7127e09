"""Avro (Confluent framing) and CDC (Debezium, DMS) decoding in Spark, checked against the
producers' own Python decoders, which are the reference for what each message means."""

import json
import random
from datetime import UTC, datetime

import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from ingestion.formats.avro import decode_avro
from ingestion.formats.bronze_shape import HEADERS_TYPE, to_bronze
from ingestion.formats.changelog import unknown_field_descriptions
from ingestion.formats.checks import HEADERS_COLUMN
from ingestion.formats.debezium import decode_debezium
from ingestion.formats.dms import decode_dms
from lakehouse.contracts import wire
from lakehouse.contracts.streams import JsonContract, get_stream, json_contract
from producers import avro, purchases
from producers.cdc import debezium, dms, stream
from producers.cdc.simulator import CdcSimulator
from tests.support.kafka_rows import RECORD_TIME, kafka_rows

pytestmark = pytest.mark.integration  # Spark in this process (tests/unit starts no JVM)

NOW = RECORD_TIME  # the records' Kafka timestamp


# --- Avro ----------------------------------------------------------------------------------

V1, V2 = 11, 100_012  # registry ids; the second takes three of the header's four id bytes


@pytest.fixture(scope="module")
def avro_decoded(spark):
    """v1 and v2 purchases in one topic plus every unreadable kind, decoded."""
    schemas = {V1: purchases.SCHEMAS[1].text, V2: purchases.SCHEMAS[2].text}
    writer_types = {i: spark.range(0).select(_from_avro(text).alias("r")).schema["r"].dataType
                    for i, text in schemas.items()}
    columns = writer_types[V2]
    rng = random.Random(3)
    v1 = purchases.make_purchase(rng, NOW, 1)
    v2 = {**purchases.make_purchase(rng, NOW, 2), "payment_method": "card"}
    framed_v1 = avro.encode(v1, V1, purchases.SCHEMAS[1].parsed)
    messages = [
        framed_v1,
        avro.encode(v2, V2, purchases.SCHEMAS[2].parsed),
        wire.frame(999, wire.unframe(framed_v1)[1]),  # an id nobody registered
        framed_v1[:9],  # a truncated body
        b"\x07garbage-without-magic",
        b"\x00\x00",  # too short for a header
        None,
    ]
    raw = kafka_rows(spark, [(b"k", m) for m in messages])
    rows = decode_avro(raw, schemas, writer_types, columns, ("transaction_id", "transaction_time"),
                              "transaction_time").orderBy("offset").collect()
    return v1, v2, rows


def _from_avro(text):
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    return from_avro(F.lit(b""), text)


def test_avro_records_decode_with_their_writer_schema(avro_decoded):
    v1, v2, rows = avro_decoded
    first, second = rows[0], rows[1]
    assert first._error_code is None and second._error_code is None
    assert (first._schema_id, second._schema_id) == (V1, V2)
    for row, expected in ((first, v1), (second, v2)):
        assert row.transaction_id == expected["transaction_id"] and row.amount == expected["amount"]
        assert row.transaction_time == datetime.fromtimestamp(expected["transaction_time"] / 1000, UTC) \
            .replace(tzinfo=None)
    assert first.payment_method is None and second.payment_method == "card"  # v1 lacks the v2 field


@pytest.mark.parametrize("index, code", [
    (2, "UNKNOWN_SCHEMA_ID"), (3, "CORRUPT_PAYLOAD"), (4, "CORRUPT_PAYLOAD"), (5, "CORRUPT_PAYLOAD"),
    (6, "CORRUPT_PAYLOAD"),
])
def test_unreadable_avro_is_routed_with_a_reason(avro_decoded, index, code):
    row = avro_decoded[2][index]
    assert row._error_code == code
    assert row._error_detail


def test_unknown_schema_id_is_named_in_the_detail(avro_decoded):
    assert "999" in avro_decoded[2][2]._error_detail


# --- CDC -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def changes(tmp_path_factory):
    with CdcSimulator(tmp_path_factory.mktemp("cdc") / "s.db", seed=8, key_space=25, hot_keys=4,
                      op_weights=(0.3, 0.45, 0.25)) as sim:
        sim.run(60)
        result = [*sim.snapshot(), *sim.run(200)]
    return result


def _decode_cdc(spark, name, messages):
    spec = get_stream(name)
    normalize = decode_debezium if spec.format == "debezium" else decode_dms
    raw = kafka_rows(spark, messages, spec.topic)
    return normalize(raw, json_contract(spec), spec.identity_columns, spec.source_table) \
        .orderBy("offset").collect()


@pytest.mark.parametrize("name, codec", [("customers", debezium), ("accounts", dms)])
def test_change_records_normalize_like_the_reference_decoder(spark, changes, name, codec):
    messages = codec.encode_changes(changes, table=name)
    rows = _decode_cdc(spark, name, messages)
    assert len(rows) == len(messages)
    ops_seen = set()
    for (key, value), row in zip(messages, rows, strict=True):
        expected = codec.decode(key, value)
        if expected is None:  # a Debezium tombstone
            assert row._error_code is None and row._is_tombstone and row.op is None and row._seq is None
            assert row.customer_id == json.loads(key)["customer_id"]
            continue
        assert row._error_code is None, row._error_detail
        assert not row._is_tombstone
        assert row.op == expected.op
        # DMS: the reference gives its own order of the log position where bronze has the
        # position padded to sort as text (log_position), which the any-width test compares
        assert tuple(v for f, v in row._seq.asDict().items() if f != "log_position") == \
            tuple(v for i, v in enumerate(expected.seq) if codec is debezium or i != 0)
        assert row._source_ts == datetime.fromtimestamp(expected.source_ts_ms / 1000, UTC).replace(tzinfo=None) \
            or int(row._source_ts.replace(tzinfo=UTC).timestamp() * 1000) == expected.source_ts_ms
        image = {k: row[k] for k in expected.image}
        assert image == expected.image
        if name == "accounts":  # the key an update's before-image names
            assert (row._before_key and row._before_key.account_id) == expected.before_key
        ops_seen.add(row.op)
    assert ops_seen == {"I", "U", "D", "R"}


def test_a_debezium_changes_transaction_block_is_kept_in_bronze_never_dropped(spark, changes):
    """Issue 58, item 3: provide.transaction.metadata's block on each change (its transaction's id
    and the change's places in it) is what tells a whole transaction from half of one; before, the
    decoder read the envelope without it and bronze lost it in silence. A block without its id
    or with an order that is no number is refused, not kept as a transaction of nothing."""
    messages = debezium.encode_changes(changes, table="customers")
    rows = _decode_cdc(spark, "customers", messages)
    events = [json.loads(value) if value is not None else None for _, value in messages]
    kept = [(event["transaction"], row._transaction and row._transaction.asDict())
            for event, row in zip(events, rows, strict=True) if event is not None]
    assert all(row._error_code is None for row in rows)
    assert sum(block is not None for block, _ in kept) > 100
    assert all(block == bronze for block, bronze in kept)  # null where the change has none (a snapshot read)
    assert all(row._transaction is None for event, row in zip(events, rows, strict=True) if event is None)

    key, value = next((k, v) for (k, v), e in zip(messages, events, strict=True) if e and e["transaction"])
    event = json.loads(value)
    broken = [(key, json.dumps({**event, "transaction": {**event["transaction"], "id": None}}).encode()),
              (key, json.dumps({**event, "transaction": {**event["transaction"], "total_order": "one"}}).encode())]
    rows = _decode_cdc(spark, "customers", broken)
    assert [r._error_code for r in rows] == ["INVALID_CDC_ENVELOPE"] * 2, [r._error_detail for r in rows]
    assert all("transaction (id, total_order, data_collection_order)" in r._error_detail for r in rows)


@pytest.mark.parametrize("name, codec", [("customers", debezium), ("accounts", dms)])
@pytest.mark.parametrize("kind, code", [
    ("truncated", "CORRUPT_PAYLOAD"), ("garbled", "CORRUPT_PAYLOAD"), ("invalid_envelope", "INVALID_CDC_ENVELOPE"),
])
def test_poison_change_records_get_the_producers_reason(spark, changes, name, codec, kind, code):
    key, value = next(m for m in codec.encode_changes(changes, table=name) if m[1] is not None)
    row = _decode_cdc(spark, name, [(key, stream.poison(kind, key, value, random.Random(1)))])[0]
    assert row._error_code == code, row._error_detail


def test_debezium_envelope_problems_are_invalid(spark, changes):
    key, value = next(m for m in debezium.encode_changes(changes, table="customers") if m[1] is not None)
    event = json.loads(value)
    other_key = json.dumps({"customer_id": event["after"]["customer_id"] + 1000}).encode() \
        if event["after"] else b'{"customer_id": -1}'
    cases = [
        (key, json.dumps({**event, "source": {**event["source"], "lsn": "12"}}).encode()),  # not an integer
        (key, json.dumps({**event, "source": {**event["source"], "table": "orders"}}).encode()),
        (key, json.dumps({**event, "op": "x"}).encode()),
        (other_key, value),  # the message key names another row
        (b"not json", None),  # a tombstone whose key cannot be read
    ]
    rows = _decode_cdc(spark, "customers", cases)
    assert [r._error_code for r in rows] == ["INVALID_CDC_ENVELOPE"] * len(cases), [r._error_detail for r in rows]


def test_dms_without_value_or_of_a_control_record_is_invalid(spark, changes):
    key, value = dms.encode_changes(changes, table="accounts")[0]
    record = json.loads(value)
    control = {**record, "metadata": {**record["metadata"], "record-type": "control"}}
    rows = _decode_cdc(spark, "accounts", [(key, None), (key, json.dumps(control).encode())])
    assert [r._error_code for r in rows] == ["INVALID_CDC_ENVELOPE"] * 2
    assert "tombstone" in rows[0]._error_detail and "control" in rows[1]._error_detail


def test_dms_changes_are_ordered_by_log_position_which_they_require(spark, changes):
    """Two updates of one key committed in one microsecond: transaction 9 started first and
    committed second (the later log position). Its change sorts last; a record without a
    position cannot be placed: INVALID_CDC_ENVELOPE."""
    key, value = dms.encode_changes(changes, table="accounts")[0]
    record = json.loads(value)
    metadata = {**record["metadata"], "operation": "update"}
    earlier = {**record, "metadata": {**metadata, "transaction-id": 10, "stream-position": "00000002/7C007178"}}
    later = {**record, "metadata": {**metadata, "transaction-id": 9, "stream-position": "00000002/7C007328"}}
    without = {**record, "metadata": {k: v for k, v in metadata.items() if k != "stream-position"}}
    rows = _decode_cdc(spark, "accounts", [(key, json.dumps({**m, "before-image": {}}).encode())
                                           for m in (later, earlier, without)])
    assert [r._error_code for r in rows[:2]] == [None, None]
    assert max(rows[:2], key=lambda r: tuple(r._seq)) is rows[0]
    assert tuple(rows[0]._seq)[2:] == ("00000002/7C007328", 9, record["metadata"]["transaction-record-id"])
    assert (rows[2]._error_code, rows[2]._error_detail) == (
        "INVALID_CDC_ENVELOPE", "not a DMS data record, missing or invalid: stream-position")


# log positions as DMS writes them, each list in log order: MySQL binlog positions (file and
# offset, the offset in decimal of any width, as AWS's own example "mysql-bin-changelog.000024:373"),
# PostgreSQL's (fixed-width hex LSNs around a record counter in decimal) and a hex LSN alone
LOG_ORDERS = [
    ["mysql-bin-changelog.000022:9984", "mysql-bin-changelog.000022:10216",
     "mysql-bin-changelog.000022:65500", "mysql-bin-changelog.000023:4"],
    ["00000002/7C007178.9.00000002/7C007178", "00000002/7C007178.10.00000002/7C007178",
     "00000002/7C007328.2.00000002/7C007328"],
    ["00000002/7C007178", "00000002/7C007328", "00000010/00000000"],
]


@pytest.mark.parametrize("positions", LOG_ORDERS, ids=["mysql", "postgresql", "lsn"])
def test_dms_changes_of_one_microsecond_follow_the_log_position_of_any_width(spark, changes, positions):
    """Changes of one key in one transaction (one commit instant, one transaction id) whose
    positions differ in width: the later position sorts last in Spark, as the mirror compares
    `_seq`. Compared as text, "...:9984" came after "...:10216" and ".9." after ".10.", and the
    mirror kept the older row."""
    key, value = dms.encode_changes(changes, table="accounts")[0]
    record = json.loads(value)
    metadata = {**record["metadata"], "operation": "update", "transaction-id": 7}
    messages = [(key, json.dumps({**record, "before-image": {}, "metadata": {
        **metadata, "stream-position": position, "transaction-record-id": 0}}).encode())
        for position in reversed(positions)]
    spec = get_stream("accounts")
    decoded = decode_dms(kafka_rows(spark, messages, spec.topic), json_contract(spec),
                                 spec.identity_columns, spec.source_table)
    rows = decoded.orderBy("_seq").collect()
    assert [r._error_code for r in rows] == [None] * len(positions)
    assert [r._seq.stream_position for r in rows] == positions  # kept as DMS wrote it, in log order
    # the producers' reference decoder orders them the same way
    assert sorted((dms.decode(k, v).seq for k, v in messages)) == [dms.decode(k, v).seq for k, v in reversed(messages)]


def test_dms_changes_follow_the_log_position_when_the_source_clock_steps_back(spark, changes):
    """Two updates of one key; the source's clock stepped back between their commits, so the one
    later in the log is stamped 5 s earlier. It sorts last in Spark, as the mirror compares
    `_seq`: ordered by commit time first, the mirror kept the older row."""
    key, value = dms.encode_changes(changes, table="accounts")[0]
    record = json.loads(value)
    metadata = {**record["metadata"], "operation": "update"}
    earlier = {**record, "before-image": {}, "metadata": {
        **metadata, "transaction-id": 9, "stream-position": "mysql-bin-changelog.000022:9984",
        "commit-timestamp": "2026-11-01T00:00:05.000000Z"}}
    later = {**record, "before-image": {}, "metadata": {
        **metadata, "transaction-id": 10, "stream-position": "mysql-bin-changelog.000022:10216",
        "commit-timestamp": "2026-11-01T00:00:00.000000Z"}}
    rows = _decode_cdc(spark, "accounts", [(key, json.dumps(m).encode()) for m in (later, earlier)])
    assert [r._error_code for r in rows] == [None, None]
    assert rows[0]._source_ts < rows[1]._source_ts  # the later change, stamped earlier
    assert max(rows, key=lambda r: tuple(r._seq)) is rows[0]
    assert [f for f in rows[0]._seq.asDict()][:2] == ["log_position", "commit_us"]


def test_a_dms_update_carries_the_key_its_before_image_names_and_requires_one(spark, changes):
    key, value = dms.encode_changes(changes, table="accounts")[0]
    record = json.loads(value)
    update = {**record, "metadata": {**record["metadata"], "operation": "update"}}
    new_key = record["data"]["account_id"]
    cases = [{**update, "before-image": {"account_id": new_key + 1000}}, {**update, "before-image": {}}, update,
             {**update, "before-image": {"account_id": "7"}}]
    rows = _decode_cdc(spark, "accounts", [(key, json.dumps(c).encode()) for c in cases])
    assert [(r._error_code, r._before_key and r._before_key.account_id) for r in rows[:2]] == [
        (None, new_key + 1000), (None, None)]
    assert (rows[2]._error_code, rows[2]._error_detail) == (
        "INVALID_CDC_ENVELOPE", "update without its before-image object (BeforeImageSettings)")
    assert rows[3]._error_code == "SCHEMA_MISMATCH"


def test_wrongly_typed_image_field_is_a_schema_mismatch(spark, changes):
    key, value = dms.encode_changes(changes, table="accounts")[0]
    record = json.loads(value)
    record["data"]["customer_id"] = "seven"
    row = _decode_cdc(spark, "accounts", [(key, json.dumps(record).encode())])[0]
    assert row._error_code == "SCHEMA_MISMATCH"


def test_a_token_of_another_json_type_is_a_schema_mismatch_never_coerced(spark, changes):
    """Spark's reader would store a number declared date-time as epoch seconds (Debezium's
    microseconds became the year 195827) and any token declared string as its text."""
    contract = JsonContract(StructType([StructField("customer_id", LongType()), StructField("name", StringType()),
                                        StructField("updated_at", TimestampType())]), ("customer_id",))
    key = b'{"customer_id":1}'

    def event(after):
        return json.dumps({"before": None, "after": after, "op": "c", "ts_ms": 1,
                           "source": {"connector": "postgresql", "ts_ms": 1, "lsn": 10, "table": "customers"}}).encode()

    messages = [
        (key, event({"customer_id": 1, "name": "Ann", "updated_at": "2026-11-20T10:00:00.5Z"})),
        (key, event({"customer_id": 1, "name": "Ann", "updated_at": 1763632800000000})),
        (key, event({"customer_id": 1, "name": 7, "updated_at": None})),
        (key, event({"customer_id": 1, "name": {"first": "Ann"}, "updated_at": "2026-11-20T10:00:00Z"})),
    ]
    rows = decode_debezium(kafka_rows(spark, messages), contract, ("customer_id",), "customers") \
        .orderBy("offset").collect()
    assert rows[0]._error_code is None, rows[0]._error_detail
    assert (rows[0].name, rows[0].updated_at) == ("Ann", datetime(2026, 11, 20, 10, 0, 0, 500000))
    assert [(r._error_code, r._error_detail.rsplit(": ", 1)[-1]) for r in rows[1:]] == [
        ("SCHEMA_MISMATCH", "updated_at"), ("SCHEMA_MISMATCH", "name"), ("SCHEMA_MISMATCH", "name")]


def test_a_dms_string_field_holding_a_number_is_a_schema_mismatch(spark, changes):
    key, value = dms.encode_changes(changes, table="accounts")[0]
    record = json.loads(value)
    string_field = next(f.name for f in json_contract(get_stream("accounts")).schema.fields
                        if isinstance(f.dataType, StringType) and f.name in record["data"])
    record["data"][string_field] = 12
    row = _decode_cdc(spark, "accounts", [(key, json.dumps(record).encode())])[0]
    assert (row._error_code, row._error_detail.rsplit(": ", 1)[-1]) == ("SCHEMA_MISMATCH", string_field)


def _debezium_event(source: dict, op: str = "u", customer_id: int = 3, name: str = "x") -> bytes:
    image = {"customer_id": customer_id, "name": name}
    return json.dumps({"before": None, "after": image, "op": op, "ts_ms": 1,
                       "source": {"ts_ms": 1, "table": "customers", **source}}).encode()


def _order_of(spark, sources: list[tuple[dict, str]]) -> list[int]:
    """The indexes of ``sources`` (source block, op) in the order their ``_seq`` puts them."""
    contract = JsonContract(StructType([StructField("customer_id", LongType()), StructField("name", StringType())]),
                            ("customer_id",))
    messages = [(b'{"customer_id":3}', _debezium_event(source, op, name=str(n))) for n, (source, op) in
                enumerate(sources)]
    rows = decode_debezium(kafka_rows(spark, messages), contract, ("customer_id",), "customers").collect()
    assert [r._error_code for r in rows] == [None] * len(rows), [r._error_detail for r in rows]
    return [int(r.name) for r in sorted(rows, key=lambda r: tuple(r._seq))]


def test_a_postgres_change_in_flight_at_the_snapshot_point_is_ordered_after_the_snapshot_read(spark):
    """As Debezium sent them from PostgreSQL 15 (tests/integration/test_real_cdc.py, section c): the
    update committed after the snapshot, but was written before its point, so its LSN is lower."""
    pg = {"connector": "postgresql"}
    snapshot_read = ({**pg, "snapshot": "true", "lsn": 26373480, "sequence": '[null,"26373480"]'}, "r")
    in_flight = ({**pg, "snapshot": "false", "lsn": 26367640, "sequence": '[null,"26367640"]'}, "u")
    next_transaction = ({**pg, "snapshot": "false", "lsn": 26380128, "sequence": '["26379960","26380128"]'}, "u")
    # a transaction that wrote before the previous one and committed after it
    interleaved = ({**pg, "snapshot": "false", "lsn": 26380000, "sequence": '["26380400","26380000"]'}, "u")
    assert _order_of(spark, [interleaved, next_transaction, in_flight, snapshot_read]) == [3, 2, 1, 0]
    # Debezium before 1.6 sent no sequence: the LSN orders streamed changes of one key
    assert _order_of(spark, [({**pg, "snapshot": "false", "lsn": 30}, "u"),
                             ({**pg, "snapshot": "false", "lsn": 20}, "u")]) == [1, 0]


def test_an_incremental_snapshot_read_is_ordered_with_the_stream_by_its_sequence(spark):
    """`lakehouse cdc snapshot`'s reads, as Debezium Server 3.0.0.Final sent them from PostgreSQL
    15: `snapshot` incremental, no `lsn`, the stream's position in `sequence`. The change before
    the window orders before the read, the one after it after (issue 56, item 7)."""
    pg = {"connector": "postgresql"}
    before = ({**pg, "snapshot": None, "lsn": 26416112, "sequence": '["26385832","26416112"]'}, "c")
    read = ({**pg, "snapshot": "incremental", "lsn": None, "sequence": '["26417104","26417104"]'}, "r")
    after = ({**pg, "snapshot": None, "lsn": 26417400, "sequence": '["26417300","26417400"]'}, "u")
    assert _order_of(spark, [after, read, before]) == [2, 1, 0]


def test_mysql_and_mariadb_changes_are_ordered_by_binlog_file_position_and_row(spark):
    def binlog(file, pos, row=0, snapshot="false", connector="mariadb"):
        return {"connector": connector, "snapshot": snapshot, "file": file, "pos": pos, "row": row}
    order = _order_of(spark, [
        (binlog("binlog.000002", 400, 1), "u"),
        (binlog("binlog.000002", 400, 0), "c"),
        (binlog("binlog.000001", 900_000, connector="mysql"), "u"),  # an earlier file, a larger position
        (binlog("binlog.000001", 600, snapshot="last"), "r"),  # a snapshot read: at the snapshot's position
        (binlog("binlog.000010", 4), "u"),  # the tenth file: numbers, not text, are compared
    ])
    assert order == [3, 2, 1, 0, 4]


def test_a_debezium_change_without_its_source_position_or_of_another_connector_is_invalid(spark):
    contract = JsonContract(StructType([StructField("customer_id", LongType()), StructField("name", StringType())]),
                            ("customer_id",))
    key = b'{"customer_id":3}'
    messages = [(key, _debezium_event(source)) for source in (
        {"connector": "postgresql", "snapshot": "false", "sequence": '["9",null]'},  # no lsn, here or in sequence
        {"connector": "mariadb", "snapshot": "false", "file": "binlog.000001", "row": 0},  # no pos
        {"connector": "mariadb", "snapshot": "false", "file": "mysql-bin", "pos": 4, "row": 0},  # no file number
        {"connector": "sqlserver", "snapshot": "false", "lsn": 10},
        {"snapshot": "false", "lsn": 10},
    )]
    rows = decode_debezium(kafka_rows(spark, messages), contract, ("customer_id",), "customers") \
        .orderBy("offset").collect()
    assert [r._error_code for r in rows] == ["INVALID_CDC_ENVELOPE"] * len(messages)
    assert ["source position" in r._error_detail for r in rows] == [True, True, True, False, False]
    assert ["connector not supported" in r._error_detail for r in rows] == [False, False, False, True, True]


def test_a_truncate_is_a_change_without_key_or_row(spark):
    """Debezium's truncate event (PostgreSQL, skipped.operations=none) has no message key and no
    image: it changes the whole table. Before, it was a dead letter (INVALID_CDC_ENVELOPE)."""
    contract = JsonContract(StructType([StructField("customer_id", LongType()), StructField("name", StringType())]),
                            ("customer_id",))
    source = {"connector": "postgresql", "snapshot": "false", "ts_ms": 1, "table": "customers",
              "lsn": 26400000, "sequence": '["26399000","26400000"]'}
    truncate = {"before": None, "after": None, "op": "t", "ts_ms": 1, "source": source}
    messages = [(None, json.dumps(truncate).encode()),
                (None, json.dumps({**truncate, "source": {**source, "lsn": None,  # no position, nor in sequence
                                                          "sequence": '["26399000",null]'}}).encode())]
    rows = decode_debezium(kafka_rows(spark, messages), contract, ("customer_id",), "customers") \
        .orderBy("offset").collect()
    assert rows[0]._error_code is None, rows[0]._error_detail
    assert (rows[0].op, rows[0].customer_id, rows[0].name, rows[0]._is_tombstone) == ("T", None, None, False)
    assert tuple(rows[0]._seq) == (1, 26399000, 26400000)
    assert rows[1]._error_code == "INVALID_CDC_ENVELOPE" and "source position" in rows[1]._error_detail


def test_debezium_unavailable_value_placeholder_is_null_and_named_never_a_value(spark):
    """An unchanged TOASTed PostgreSQL column (REPLICA IDENTITY DEFAULT) arrives as Debezium's
    placeholder: as text (text, json), base64 or hex of its bytes (bytea). Before, bronze kept
    the placeholder as the column's value (issue 42, item 8)."""
    contract = JsonContract(StructType([StructField("customer_id", LongType()), StructField("name", StringType()),
                                        StructField("photo", StringType()), StructField("tier", StringType())]),
                            ("customer_id",))
    source = {"connector": "postgresql", "snapshot": "false", "ts_ms": 1, "table": "customers",
              "lsn": 26400000, "sequence": '["26399000","26400000"]'}
    placeholder = "__debezium_unavailable_value"  # Debezium's default unavailable.value.placeholder

    def update(name, photo, tier="gold"):
        image = {"customer_id": 3, "name": name, "photo": photo, "tier": tier}
        return (b'{"customer_id":3}', json.dumps({"before": None, "after": image, "op": "u", "ts_ms": 1,
                                                  "source": source}).encode())
    messages = [update(placeholder, "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="),
                update("Ana", placeholder.encode().hex()),
                update("Ana", "aGVsbG8=", tier=None),
                (b'{"customer_id":3}', None)]
    rows = decode_debezium(kafka_rows(spark, messages), contract, ("customer_id",), "customers") \
        .orderBy("offset").collect()
    assert [r._error_code for r in rows] == [None] * 4, [r._error_detail for r in rows]
    assert [(r.name, r.photo, r.tier) for r in rows] == [
        (None, None, "gold"), ("Ana", None, "gold"), ("Ana", "aGVsbG8=", None), (None, None, None)]
    assert [r._unavailable for r in rows] == [
        ["name", "photo"], ["photo"],
        None,  # a null is a value: not unavailable
        None,  # a tombstone
    ]


def test_a_connectors_own_unavailable_value_placeholder_is_null_and_named_too(spark):
    """A connector that sets unavailable.value.placeholder: the stream names it
    (`unavailable_placeholder`) and its text, base64 and hex are unavailable, as the default's
    are. Before, there was no such setting and the connector's placeholder was stored as the
    column's value. A stream left at the default keeps such a text as a value: it must say."""
    contract = JsonContract(StructType([StructField("customer_id", LongType()), StructField("name", StringType()),
                                        StructField("photo", StringType())]), ("customer_id",))
    source = {"connector": "postgresql", "snapshot": "false", "ts_ms": 1, "table": "customers",
              "lsn": 26400000, "sequence": '["26399000","26400000"]'}
    placeholder = "<toasted>"

    def update(name, photo):
        return (b'{"customer_id":3}', json.dumps({"before": None, "after": {"customer_id": 3, "name": name,
                                                                            "photo": photo},
                                                  "op": "u", "ts_ms": 1, "source": source}).encode())
    messages = [update(placeholder, "PHRvYXN0ZWQ+"), update("Ana", placeholder.encode().hex())]
    raw = kafka_rows(spark, messages)
    named = decode_debezium(raw, contract, ("customer_id",), "customers", unavailable_placeholder=placeholder) \
        .orderBy("offset").collect()
    assert [(r.name, r.photo, r._unavailable) for r in named] == [
        (None, None, ["name", "photo"]), ("Ana", None, ["photo"])]
    default = decode_debezium(raw, contract, ("customer_id",), "customers").orderBy("offset").collect()
    assert [(r.name, r._unavailable) for r in default] == [(placeholder, None), ("Ana", None)]


def test_debezium_with_schemas_enabled_decodes_like_without(spark, changes):
    """Kafka's JsonConverter with schemas.enable=true wraps key and value in {"schema", "payload"};
    before, those events were dead letters (no op, no source at the top level)."""
    messages = [m for m in debezium.encode_changes(changes, table="customers") if m[1] is not None][:40]

    def wrapped(document: bytes) -> bytes:  # the schema's content is not read: a stand-in of its shape
        return json.dumps({"schema": {"type": "struct", "fields": [], "optional": False, "name": "x.Envelope"},
                           "payload": json.loads(document)}).encode()

    plain = _decode_cdc(spark, "customers", messages)
    enabled = _decode_cdc(spark, "customers", [(wrapped(key), wrapped(value)) for key, value in messages])
    assert [r._error_code for r in enabled] == [None] * len(messages), [r._error_detail for r in enabled][:3]
    columns = [c for c in plain[0].asDict() if c not in ("key", "value")]
    assert [[r[c] for c in columns] for r in enabled] == [[r[c] for c in columns] for r in plain]


def _with_field(document: bytes, path: tuple[str, ...], name: str, value) -> bytes:
    """A change event with one more field in its row image at ``path``: a column the source added."""
    event = json.loads(document)
    image = event
    for step in path:
        image = image[step]
    image[name] = value
    return json.dumps(event).encode()


@pytest.mark.parametrize("name, codec, image", [("customers", debezium, "after"), ("accounts", dms, "data")])
def test_a_row_field_the_contract_lacks_is_kept_in_rescued_never_dropped(spark, changes, name, codec, image):
    messages = [m for m in codec.encode_changes(changes, table=name)
                if m[1] is not None and json.loads(m[1]).get(image) is not None][:6]
    added = [(key, _with_field(value, (image,), "loyalty", {"points": 7})) for key, value in messages[:3]]
    rows = _decode_cdc(spark, name, added + messages[3:])
    assert [r._error_code for r in rows] == [None] * 6
    rescued = [json.loads(r._rescued) if r._rescued else None for r in rows]
    assert rescued == [{"loyalty": {"points": 7}}] * 3 + [None] * 3


def test_a_deleted_rows_extra_field_is_rescued_from_its_before_image(spark, changes):
    key, value = next(m for m in debezium.encode_changes(changes, table="customers")
                      if m[1] is not None and json.loads(m[1])["op"] == "d")
    wrapped = json.dumps({"schema": {"type": "struct", "fields": []},
                          "payload": json.loads(_with_field(value, ("before",), "tier2", 3))}).encode()
    (row,) = _decode_cdc(spark, "customers", [(key, wrapped)])
    assert row._error_code is None and row.op == "D" and json.loads(row._rescued) == {"tier2": 3}


def test_unknown_fields_are_described_by_the_events_connect_schema_or_json_type(spark, changes):
    key, value = next(m for m in debezium.encode_changes(changes, table="customers")
                      if m[1] is not None and json.loads(m[1])["op"] == "c")
    plain = _with_field(_with_field(value, ("after",), "level", 4), ("after",), "joined", 19000)
    schema = {"type": "struct", "fields": [{"field": "after", "type": "struct", "fields": [
        {"field": "level", "type": "int32", "optional": True},
        {"field": "joined", "type": "int32", "name": "io.debezium.time.Date", "optional": True}]}]}
    wrapped = json.dumps({"schema": schema, "payload": json.loads(plain)}).encode()
    raw = kafka_rows(spark, [(key, plain), (key, wrapped)])
    declared = json_contract(get_stream("customers")).schema
    seen = {(r.name, r.connect_type, r.connect_name, r.json_kind)
            for r in unknown_field_descriptions(raw, "debezium", declared).collect()}
    assert seen == {("level", None, None, "BIGINT"), ("joined", None, None, "BIGINT"),
                    ("level", "int32", None, "BIGINT"), ("joined", "int32", "io.debezium.time.Date", "BIGINT")}


@pytest.mark.parametrize("name", ["customers", "accounts"])
def test_every_column_bronze_writes_beside_the_source_rows_is_named_bronzes_own(spark, name):
    """`is_bronze_own` is what keeps a source field of such a name out of the contract (ARCHITECTURE
    §6): every column `to_bronze` writes that is not the row image's must be in it, and no column
    of the row image may be."""
    from pyspark.sql import functions as F

    from lakehouse.contracts.streams import is_bronze_own

    spec = get_stream(name)
    contract = json_contract(spec)
    normalize = decode_debezium if spec.format == "debezium" else decode_dms
    decoded = normalize(kafka_rows(spark, []), contract, spec.identity_columns, spec.source_table)
    decoded = decoded.withColumn(HEADERS_COLUMN, F.lit(None).cast(HEADERS_TYPE))
    image = set(contract.schema.fieldNames())
    written = [c for c in to_bronze(decoded, 0, F.current_timestamp()).columns if c not in image]
    assert [c for c in written if not is_bronze_own(c)] == []
    assert [c for c in decoded.columns if c not in image and not is_bronze_own(c)] == []
    assert [c for c in image if is_bronze_own(c)] == []


@pytest.mark.parametrize("field", ["op", "_SEQ", "_error_code", "timestamp", "_kafka_note"])
def test_a_contract_declaring_a_name_bronze_uses_itself_is_refused_in_one_line(tmp_path, field):
    """Declared beside bronze's own column of that name, the decoded batch was ambiguous and the
    stream stopped with Spark's stack trace at its first batch."""
    from lakehouse.contracts.streams import StreamSpec
    from lakehouse.core.errors import LakehouseError

    contract = tmp_path / "wallets.schema.json"
    contract.write_text(json.dumps({"type": "object", "properties": {
        "wallet_id": {"type": "integer"}, field: {"type": "string"}}}))
    spec = StreamSpec(name="wallets", topic="wallets", format="debezium", schema_path=contract,
                      bronze_table="bronze.wallets", event_time_column="_source_ts", identity_columns=("wallet_id",),
                      required_columns=("wallet_id",), source_table="wallets")
    with pytest.raises(LakehouseError) as refused:
        json_contract(spec)
    (line,) = str(refused.value).splitlines()
    assert f"stream 'wallets' (source table wallets) declares {field}, a name bronze gives a column of its own" in line


def test_debezium_transaction_events_land_as_they_came_and_a_bad_one_is_a_dead_letter(spark):
    """A connector's transaction topic (ingestion/formats/debezium_transactions.py): BEGIN and END
    events, with or without schemas; a field the format lacks (a later Debezium's) is kept in
    `_rescued`, never dropped; an END whose per-table counts do not add up, or no event at all,
    is a dead letter, never a row that could complete a transaction."""
    from ingestion.formats.debezium_transactions import decode_debezium_transactions

    begin = {"status": "BEGIN", "id": "771:10", "ts_ms": 1_790_000_000_000, "event_count": None,
             "data_collections": None}
    end = {"status": "END", "id": "771:90", "ts_ms": 1_790_000_000_000, "event_count": 3,
           "data_collections": [{"data_collection": "public.customers", "event_count": 2},
                                {"data_collection": "public.accounts", "event_count": 1}]}
    messages = [
        (b'{"id":"771:10"}', json.dumps(begin).encode()),
        (b'{"id":"771:90"}', json.dumps({**end, "commit_lsn": 90}).encode()),  # a field this version lacks
        (b'{"id":"771:90"}', json.dumps({"schema": {"type": "struct"}, "payload": end}).encode()),
        (b'{"id":"771:90"}', json.dumps({**end, "event_count": 4}).encode()),  # counts that do not add up
        (b'{"id":"771:90"}', json.dumps({**end, "status": "COMMIT"}).encode()),
        (b'{"id":"771:90"}', b"not json"),
    ]
    rows = decode_debezium_transactions(kafka_rows(spark, messages, "lakehouse.transaction")) \
        .orderBy("offset").collect()
    assert [r._error_code for r in rows] == [None, None, None, "INVALID_CDC_ENVELOPE", "INVALID_CDC_ENVELOPE",
                                             "CORRUPT_PAYLOAD"], [r._error_detail for r in rows]
    first = rows[0]
    assert (first.status, first.id, first.event_count, first.data_collections) == ("BEGIN", "771:10", None, None)
    for row in rows[1:3]:
        assert (row.status, row.id, row.event_count) == ("END", "771:90", 3)
        assert [(c.data_collection, c.event_count) for c in row.data_collections] == [
            ("public.customers", 2), ("public.accounts", 1)]
    assert json.loads(rows[1]._rescued) == {"commit_lsn": "90"} and rows[2]._rescued is None
    assert rows[0]._rescued is None
    assert "END's event_count and data_collections" in rows[3]._error_detail
