"""Debezium (`customers`) and AWS DMS (`accounts`) messages: encoding, decoding, round trips."""

import json
import re
from collections import Counter

import pytest

from producers.cdc import debezium, dms
from producers.cdc.oracle import InvalidChange, NormalizedChange, apply
from producers.cdc.simulator import CdcSimulator, Change

ISO_US = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")


@pytest.fixture(scope="module")
def changes(tmp_path_factory) -> list[Change]:
    """A snapshot of a non-empty database, then a run with every kind of change."""
    with CdcSimulator(tmp_path_factory.mktemp("cdc") / "s.db", seed=5, key_space=30, hot_keys=4,
                      op_weights=(0.3, 0.45, 0.25)) as sim:
        sim.run(150)
        result = [*sim.snapshot(), *sim.run(250)]
    assert {c.op for c in result} == {"R", "I", "U", "D"}
    return result


def of(changes: list[Change], table: str) -> list[Change]:
    return [c for c in changes if c.table == table]


# --- Debezium -----------------------------------------------------------------------------


def test_debezium_round_trip_gives_back_the_change(changes):
    customers = of(changes, "customers")
    assert len(customers) > 100
    for change in customers:
        key, value = debezium.encode_change(change)[0]
        decoded = debezium.decode(key, value)
        image = change.before if change.op == "D" else change.after
        # a snapshot read is ordered at its LSN before every streamed change (phase 0, then 1); the
        # simulator sends no source.sequence, so a streamed change has no last commit (-1)
        seq = (0, change.lsn, change.lsn) if change.op == "R" else (1, -1, change.lsn)
        assert decoded == NormalizedChange("customers", change.op, change.key, image, seq, change.commit_ts_ms)


def test_debezium_envelope_carries_the_source_coordinates(changes):
    change = next(c for c in of(changes, "customers") if c.op == "U")
    key, value = debezium.encode_change(change, emitted_ms=change.commit_ts_ms + 250)[0]
    assert key == f'{{"customer_id":{change.key}}}'.encode()
    event = json.loads(value)
    assert event == {
        "before": change.before,
        "after": change.after,
        "source": {
            "version": "2.7.0.Final", "connector": "postgresql", "name": "lakehouse",
            "ts_ms": change.commit_ts_ms, "snapshot": "false", "db": "shop", "schema": "public",
            "table": "customers", "txId": change.tx_id, "lsn": change.lsn,
        },
        "op": "u",
        "ts_ms": change.commit_ts_ms + 250,
        "transaction": None,  # encoded alone; encode_changes gives each streamed change its block
    }


def test_debezium_transaction_metadata_numbers_each_transactions_changes_and_counts_them_at_its_end(changes):
    customers = of(changes, "customers")
    messages = debezium.encode_changes(changes, table="customers")
    events = [json.loads(value) for _, value in messages if value is not None]
    assert [e["op"] for e in events] == [debezium.OP_CODES[c.op] for c in customers]
    # a snapshot's reads carry no transaction, as Debezium's do; every streamed change does
    assert all(e["transaction"] is None for e in events if e["op"] == "r")
    streamed = [(c, e["transaction"]) for c, e in zip(customers, events, strict=True) if c.op != "R"]
    assert streamed and all(block is not None for _, block in streamed)
    # as Debezium's PostgreSQL connector: `<xid>:<the event's LSN>`, so a transaction's events share
    # the xid, before the ':' (what the models match them by: macros/cdc_transactions.sql)
    assert all(block["id"] == f"{change.tx_id}:{change.lsn}" for change, block in streamed)
    by_xid: dict[str, list[tuple[Change, dict]]] = {}
    for change, block in streamed:
        by_xid.setdefault(block["id"].split(":")[0], []).append((change, block))
    assert len(by_xid) == len({c.tx_id for c, _ in streamed})
    assert any(len(group) > 1 for group in by_xid.values())
    for xid, group in by_xid.items():
        assert {c.tx_id for c, _ in group} == {int(xid)}
        assert [b["total_order"] for _, b in group] == list(range(1, len(group) + 1))
        assert [b["data_collection_order"] for _, b in group] == list(range(1, len(group) + 1))
    transaction_events = [(json.loads(key), json.loads(value))
                          for key, value in debezium.encode_transactions(changes, table="customers")]
    # BEGIN then END per transaction, in commit order, keyed by their id
    assert [(e["status"], e["id"].split(":")[0]) for _, e in transaction_events] == [
        (status, xid) for xid in by_xid for status in ("BEGIN", "END")]
    assert all(key == {"id": event["id"]} for key, event in transaction_events)
    for _, event in transaction_events:
        if event["status"] == "END":
            group = by_xid[event["id"].split(":")[0]]
            count = len(group)
            assert int(event["id"].split(":")[1]) > max(c.lsn for c, _ in group)  # its commit, after them
            assert event["event_count"] == count
            assert event["data_collections"] == [{"data_collection": "public.customers", "event_count": count}]
        else:
            assert event["event_count"] is None and event["data_collections"] is None


@pytest.mark.parametrize(("op", "code", "before", "after"), [
    ("I", "c", False, True), ("U", "u", True, True), ("D", "d", True, False), ("R", "r", False, True)])
def test_debezium_op_mapping_and_images(changes, op, code, before, after):
    change = next(c for c in of(changes, "customers") if c.op == op)
    event = json.loads(debezium.encode_change(change)[0][1])
    assert event["op"] == code
    assert (event["before"] is not None, event["after"] is not None) == (before, after)
    assert debezium.decode(None, json.dumps(event).encode()).op == op


def test_every_debezium_delete_is_followed_by_a_tombstone(changes):
    messages = debezium.encode_changes(changes)
    deletes = [i for i, (_k, v) in enumerate(messages) if v is not None and json.loads(v)["op"] == "d"]
    tombstones = [i for i, (_k, v) in enumerate(messages) if v is None]
    assert len(deletes) > 10
    assert tombstones == [i + 1 for i in deletes]
    for i in deletes:
        assert messages[i + 1][0] == messages[i][0]
        assert debezium.decode(*messages[i + 1]) is None
    assert len(messages) == len(of(changes, "customers")) + len(deletes)


def test_debezium_marks_the_end_of_the_snapshot(changes):
    messages = debezium.encode_changes(changes)
    markers = [json.loads(v)["source"]["snapshot"] for _k, v in messages if v is not None]
    reads = sum(1 for c in of(changes, "customers") if c.op == "R")
    assert reads > 5
    assert markers[:reads] == ["true"] * (reads - 1) + ["last"]
    assert set(markers[reads:]) == {"false"}


def test_debezium_keeps_non_ascii_text_intact(changes):
    change = next(c for c in of(changes, "customers")
                  if c.after and not (c.after["name"] + (c.after["city"] or "")).isascii())
    key, value = debezium.encode_change(change)[0]
    assert change.after["name"].encode() in value or change.after["city"].encode() in value
    assert debezium.decode(key, value).image == change.after


@pytest.mark.parametrize("value", [
    b"not json", b"\xff\xfe", b"[1, 2]", b"{}",
    b'{"before":null,"after":{"customer_id":1},"op":"x","source":{"connector":"postgresql","table":"customers","lsn":1,"ts_ms":1}}',
    b'{"before":null,"after":null,"op":"c","source":{"connector":"postgresql","table":"customers","lsn":1,"ts_ms":1}}',
    b'{"before":null,"after":{"customer_id":1},"op":"c","source":{"connector":"postgresql","table":"orders","lsn":1,"ts_ms":1}}',
    b'{"before":null,"after":{"customer_id":1},"op":"c","source":{"connector":"postgresql","table":"customers","lsn":"1","ts_ms":1}}',
    b'{"before":null,"after":{"customer_id":1},"op":"c","source":{"connector":"postgresql","table":"customers","ts_ms":1}}',
])
def test_debezium_decode_refuses_what_is_not_a_change_event(value):
    with pytest.raises(InvalidChange):
        debezium.decode(b'{"customer_id":1}', value)


def test_debezium_decode_refuses_a_key_that_contradicts_the_image():
    value = (b'{"before":null,"after":{"customer_id":1},"op":"c",'
             b'"source":{"connector":"postgresql","table":"customers","lsn":1,"ts_ms":1}}')
    assert debezium.decode(b'{"customer_id":1}', value).key == 1
    with pytest.raises(InvalidChange, match="customer_id=2"):
        debezium.decode(b'{"customer_id":2}', value)


# --- DMS ----------------------------------------------------------------------------------


def test_dms_round_trip_gives_back_the_change(changes):
    accounts = of(changes, "accounts")
    assert len(accounts) > 100
    for change in accounts:
        [(key, value)] = dms.encode_change(change)
        assert key == str(change.key).encode()
        image = change.before if change.op == "D" else change.after
        before_key = change.before["account_id"] if change.op == "U" else None
        assert dms.decode(key, value) == NormalizedChange(
            "accounts", change.op, change.key, image,
            (dms.log_order(dms.stream_position(change.lsn)), change.commit_ts_ms * 1000,
             dms.stream_position(change.lsn), change.tx_id, change.position),
            change.commit_ts_ms, before_key)
    assert sum(1 for c in accounts if c.op == "U" and c.before["account_id"] != c.key) >= 3  # key changes


@pytest.mark.parametrize(("op", "operation"), [("I", "insert"), ("U", "update"), ("D", "delete"), ("R", "load")])
def test_dms_operation_mapping_and_metadata(changes, op, operation):
    change = next(c for c in of(changes, "accounts") if c.op == op)
    record = json.loads(dms.encode_change(change)[0][1])
    metadata = record["metadata"]
    assert metadata["operation"] == operation
    assert metadata["record-type"] == "data" and metadata["partition-key-type"] == "primary-key"
    assert (metadata["schema-name"], metadata["table-name"]) == ("shop", "accounts")
    assert (metadata["transaction-id"], metadata["transaction-record-id"]) == (change.tx_id, change.position)
    assert metadata["stream-position"] == dms.stream_position(change.lsn)
    assert ISO_US.match(metadata["timestamp"]) and metadata["timestamp"] == metadata["commit-timestamp"]
    assert dms.epoch_us(metadata["commit-timestamp"]) == change.commit_ts_ms * 1000


def test_dms_delete_carries_the_before_image_and_no_tombstone(changes):
    deletes = [c for c in of(changes, "accounts") if c.op == "D"]
    assert len(deletes) > 10
    for change in deletes:
        messages = dms.encode_change(change)
        assert len(messages) == 1
        record = json.loads(messages[0][1])
        assert record["data"] == change.before and record["data"]["balance"] == change.before["balance"]
    assert None not in {v for _k, v in dms.encode_changes(changes)}


def test_dms_timestamps_are_exact_to_the_microsecond():
    assert dms.iso_us(1_793_491_233_352) == "2026-11-01T00:00:33.352000Z"
    assert dms.epoch_us("2026-11-01T00:00:33.352001Z") == 1_793_491_233_352_001
    assert dms.epoch_us("2026-11-01T01:00:33.352001+01:00") == 1_793_491_233_352_001
    with pytest.raises(ValueError):
        dms.epoch_us("2026-11-01T00:00:33.352001")  # no zone: ambiguous


GOOD_DMS = {
    "data": {"account_id": 4, "balance": "1.00"},
    "metadata": {"timestamp": "2026-11-01T00:00:00.000000Z", "record-type": "data", "operation": "insert",
                 "partition-key-type": "primary-key", "schema-name": "shop", "table-name": "accounts",
                 "stream-position": "00000002/7C007178", "transaction-id": 9, "transaction-record-id": 0,
                 "commit-timestamp": "2026-11-01T00:00:00.000000Z"},
}


def _dms_with(**metadata) -> bytes:
    return json.dumps({**GOOD_DMS, "metadata": {**GOOD_DMS["metadata"], **metadata}}).encode()


def test_dms_decode_of_a_hand_written_record():
    decoded = dms.decode(b"4", json.dumps(GOOD_DMS).encode())
    assert (decoded.table, decoded.op, decoded.key, decoded.image) == ("accounts", "I", 4, GOOD_DMS["data"])
    assert decoded.seq == (((1, "2"), (8, "7C007178")), 1_793_491_200_000_000, "00000002/7C007178", 9, 0)


@pytest.mark.parametrize("value", [
    None, b"not json", b"{}", json.dumps({"metadata": GOOD_DMS["metadata"]}).encode(),
    _dms_with(**{"record-type": "control"}), _dms_with(operation="truncate"), _dms_with(**{"table-name": "x"}),
    _dms_with(**{"commit-timestamp": "yesterday"}), _dms_with(**{"transaction-id": "9"}),
    # the log position orders the changes: without it (or as a number) the record is refused
    json.dumps({**GOOD_DMS, "metadata": {k: v for k, v in GOOD_DMS["metadata"].items()
                                         if k != "stream-position"}}).encode(),
    _dms_with(**{"stream-position": ""}), _dms_with(**{"stream-position": 5}),
    # an update must say which key the row had (BeforeImageSettings), or a key change is lost
    _dms_with(operation="update"),
    json.dumps({**GOOD_DMS, "before-image": {"account_id": "3"},
                "metadata": {**GOOD_DMS["metadata"], "operation": "update"}}).encode(),
])
def test_dms_decode_refuses_what_is_not_a_data_record(value):
    with pytest.raises(InvalidChange):
        dms.decode(b"4", value)


def test_dms_decode_refuses_a_key_that_contradicts_the_data():
    with pytest.raises(InvalidChange, match="account_id=5"):
        dms.decode(b"5", json.dumps(GOOD_DMS).encode())


def test_dms_update_of_the_primary_key_names_the_old_key_and_ends_it():
    moved = json.dumps({**GOOD_DMS, "before-image": {"account_id": 3},
                        "metadata": {**GOOD_DMS["metadata"], "operation": "update",
                                     "stream-position": "00000002/7C007328"}}).encode()
    inserted = _dms_with(**{"stream-position": "00000002/7C000000"}).replace(b'"account_id": 4', b'"account_id": 3')
    changes = [dms.decode(b"3", inserted), dms.decode(b"4", moved)]
    assert (changes[1].key, changes[1].before_key, changes[1].changes_key) == (4, 3, True)
    assert apply(changes) == {4: GOOD_DMS["data"]}  # key 3 is gone
    # the before-image of an update that keeps its key (or names no key) changes nothing
    same = json.dumps({**GOOD_DMS, "before-image": {}, "metadata": {**GOOD_DMS["metadata"], "operation": "update"}})
    assert not dms.decode(b"4", same.encode()).changes_key


def test_dms_positions_sort_in_log_order_not_as_text():
    """The simulator writes positions as DMS writes a MySQL source's: file and decimal offset, so
    their text order is not log order (an offset grows a digit, 9984 then 10216); log_order's is."""
    lsns = [0, 0x16B0000 + 9984, 0x16B0000 + 10216, 0x16B3748, 0x16BFFFF, 0x16C0004, 0xFFFFFFFF, 0x1_00000000]
    positions = [dms.stream_position(lsn) for lsn in lsns]
    assert sorted(reversed(positions), key=dms.log_order) == positions
    assert sorted(positions) != positions  # as text they would not be
    assert dms.stream_position(0x16C0004) == "mysql-bin-changelog.000364:4"
    # PostgreSQL's form (fixed-width hex LSNs around a decimal record counter) orders too
    assert sorted(["00000002/7C007178.10.00000002/7C007178", "00000002/7C007178.9.00000002/7C007178",
                   "0000000A/00000000.1.0000000A/00000000", "00000009/FFFFFFFF.1.00000009/FFFFFFFF"],
                  key=dms.log_order) == [
        "00000002/7C007178.9.00000002/7C007178", "00000002/7C007178.10.00000002/7C007178",
        "00000009/FFFFFFFF.1.00000009/FFFFFFFF", "0000000A/00000000.1.0000000A/00000000"]


def test_dms_two_commits_in_one_microsecond_are_ordered_by_log_position_not_transaction_id():
    """Transaction 9 started first, transaction 10 after it; 10 committed first, 9 after it, in the
    same microsecond: the row is 9's. Ordered by transaction id, 10's older update won."""
    first = json.dumps({**GOOD_DMS, "before-image": {"account_id": 4}, "metadata": {
        **GOOD_DMS["metadata"], "transaction-id": 10, "stream-position": "00000002/7C007178",
        "operation": "update"}}).encode()
    second = json.dumps({"before-image": {"account_id": 4}, "data": {**GOOD_DMS["data"], "balance": "2.00"},
                         "metadata": {**GOOD_DMS["metadata"], "transaction-id": 9,
                                      "stream-position": "00000002/7C007328", "operation": "update"}}).encode()
    changes = [dms.decode(b"4", value) for value in (first, second)]
    assert changes[0].source_ts_ms == changes[1].source_ts_ms
    assert apply(changes) == apply(reversed(changes)) == {4: {"account_id": 4, "balance": "2.00"}}


def test_dms_changes_follow_the_log_position_when_the_source_clock_steps_back():
    """The source host's clock stepped back 5 s between two commits: the second update, later in
    the log, carries the earlier commit timestamp. The row is the second's; ordered by commit
    time first, the first update's older balance won."""
    first = json.dumps({**GOOD_DMS, "before-image": {"account_id": 4}, "metadata": {
        **GOOD_DMS["metadata"], "operation": "update", "stream-position": "00000002/7C007178",
        "commit-timestamp": "2026-11-01T00:00:05.000000Z"}}).encode()
    second = json.dumps({"before-image": {"account_id": 4}, "data": {**GOOD_DMS["data"], "balance": "2.00"},
                         "metadata": {**GOOD_DMS["metadata"], "operation": "update", "transaction-id": 10,
                                      "stream-position": "00000002/7C007328",
                                      "commit-timestamp": "2026-11-01T00:00:00.000000Z"}}).encode()
    changes = [dms.decode(b"4", value) for value in (first, second)]
    assert changes[1].source_ts_ms < changes[0].source_ts_ms  # the clock went back
    assert apply(changes) == apply(reversed(changes)) == {4: {"account_id": 4, "balance": "2.00"}}


def test_formats_agree_on_the_change_they_carry(changes):
    """The same change through either format: same table, op, key, image and source time."""
    counted = Counter()
    for change in changes[:80]:
        via_debezium = debezium.decode(*debezium.encode_change(change)[0])
        via_dms = dms.decode(*dms.encode_change(change)[0])
        assert (via_debezium.table, via_debezium.op, via_debezium.key, via_debezium.image,
                via_debezium.source_ts_ms) == (via_dms.table, via_dms.op, via_dms.key, via_dms.image,
                                               via_dms.source_ts_ms)
        counted[change.table] += 1
    assert counted["customers"] and counted["accounts"]


def test_producing_a_transaction_topic_on_its_own_names_the_producer_that_writes_it(tmp_path):
    from lakehouse.core.errors import LakehouseError
    from lakehouse.core.settings import Settings
    from producers.run import produce

    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)})
    with pytest.raises(LakehouseError, match=r"^stream 'cdc_transactions' is a connector's transaction topic: the "
                                             r"customers producer writes it with the changes"):
        produce(settings, "cdc_transactions", 10)
    with pytest.raises(LakehouseError, match=r"^unknown stream 'clicks'; producible: accounts, customers"):
        produce(settings, "clicks", 10)
