"""CDC streams on a real broker: what a plain consumer reads back equals the source database.

The consumer here decodes with json alone, by the formats' public envelopes (Debezium: `op`,
`before`/`after`, `source.lsn`; DMS: `metadata.operation`, `commit-timestamp`, `stream-position`,
`transaction-record-id`, `data`, an update's `before-image`), and the simulator's database is the truth: nothing of the
producers' own codecs or reference semantics decides whether the producers are right.
"""

import json
import re
from datetime import UTC, datetime

import pytest

from producers.cdc.source import read_tables
from producers.cdc.stream import source_path
from producers.faults import FaultRates
from producers.run import produce
from tests.integration.kafka_read import read_topic

pytestmark = pytest.mark.integration

FAULTS = FaultRates(duplicate=0.1, out_of_order=0.2, corrupt=0.01, invalid=0.01)
KEYS = {"customers": "customer_id", "accounts": "account_id"}
DEBEZIUM_OPS = {"c": "I", "u": "U", "d": "D", "r": "R"}
DMS_OPS = {"insert": "I", "update": "U", "delete": "D", "load": "R"}


class Unreadable(Exception):
    """Not a change record of the stream's format."""


def read_debezium(table: str, key: bytes | None, value: bytes | None):
    """The (op, key, image, seq) change of a Debezium message, in a list; None for a tombstone."""
    if value is None:
        return None
    event = json.loads(value)
    try:
        op = DEBEZIUM_OPS[event["op"]]
        image = event["before"] if op == "D" else event["after"]
        seq = (int(event["source"]["lsn"]),)
        if event["source"]["table"] != table or not isinstance(image, dict):
            raise Unreadable
        row_key = image[KEYS[table]]
        if key is not None and json.loads(key)[KEYS[table]] != row_key:
            raise Unreadable
    except (KeyError, TypeError, ValueError):
        raise Unreadable from None
    return [(op, row_key, image, seq)]


def read_dms(table: str, key: bytes | None, value: bytes | None):
    """The (op, key, image, seq) changes of a DMS data record: an update whose before-image names
    another key (an update of the primary key) is also the delete of that key."""
    if value is None:
        raise Unreadable
    record = json.loads(value)
    try:
        metadata, image = record["metadata"], record["data"]
        if metadata["record-type"] != "data" or metadata["table-name"] != table or not isinstance(image, dict):
            raise Unreadable
        committed = datetime.fromisoformat(metadata["commit-timestamp"]).astimezone(UTC)
        commit_us = (committed - datetime(1970, 1, 1, tzinfo=UTC)) // datetime.resolution
        # the log position orders commits, not the commit time (the source's clock) nor the
        # transaction id (given at transaction start): a MySQL binlog position, file and offset,
        # the offset in decimal of any width
        file, offset = re.fullmatch(r"mysql-bin-changelog\.(\d{6}):(\d+)", metadata["stream-position"]).groups()
        seq = (int(file), int(offset), commit_us, int(metadata["transaction-record-id"]))
        op = DMS_OPS[metadata["operation"]]
        row_key = image[KEYS[table]]
        if key is not None and int(key.decode()) != row_key:
            raise Unreadable
        old_key = record["before-image"].get(KEYS[table], row_key) if op == "U" else row_key
    except (KeyError, TypeError, ValueError, AttributeError):
        raise Unreadable from None
    return [("D", old_key, {}, seq)] * (old_key != row_key) + [(op, row_key, image, seq)]


def live_state(changes) -> dict:
    """{key: image} after the change with the highest seq of each key; deleted keys gone."""
    latest = {}
    for op, key, image, seq in changes:
        if key not in latest or seq > latest[key][0]:
            latest[key] = (seq, op, image)
    return {key: image for key, (_, op, image) in latest.items() if op != "D"}


@pytest.mark.parametrize("stream, reader", [("customers", read_debezium), ("accounts", read_dms)])
def test_changes_read_back_rebuild_the_source_database(kafka, settings, stream, reader):
    # Other tests of the session may have written to the topic (from other source databases).
    before = {(m.partition(), m.offset()) for m in read_topic(kafka, stream, missing_ok=True)}
    first = produce(settings, stream, count=1500, faults=FAULTS, seed=3, progress=False)
    second = produce(settings, stream, count=500, faults=FAULTS, seed=4, progress=False)  # a later run
    assert first.failed == second.failed == 0
    manifest = first.merge(second).manifest()
    for kind in ("duplicate", "out_of_order"):
        assert manifest["faults"][kind] > 20, kind
    expected_dead = {(d["partition"], d["offset"]): d["error_code"] for d in manifest["dead_letters"]}
    assert expected_dead

    messages = [m for m in read_topic(kafka, stream) if (m.partition(), m.offset()) not in before]
    assert len(messages) == first.delivered + second.delivered
    changes, unreadable, tombstones = [], {}, 0
    for message in messages:
        try:
            change = reader(stream, message.key(), message.value())
        except (ValueError, UnicodeDecodeError):  # not JSON at all
            unreadable[(message.partition(), message.offset())] = "CORRUPT_PAYLOAD"
            continue
        except Unreadable:  # JSON, but no change record of this format
            unreadable[(message.partition(), message.offset())] = "INVALID_CDC_ENVELOPE"
            continue
        if change is None:
            tombstones += 1
        else:
            changes.extend(change)

    assert unreadable == expected_dead  # the manifest names exactly the poison messages
    assert {op for op, *_ in changes} == {"R", "I", "U", "D"}
    if stream == "customers":
        assert tombstones >= len({seq for op, _, _, seq in changes if op == "D"}) > 0  # one per delete, + re-sends
    source = read_tables(source_path(settings, stream))[stream]
    assert live_state(changes) == source  # duplicates and reordering converge to the source database
    if stream == "accounts":  # updates of the primary key were among them
        assert sum(1 for op, *_ in changes if op == "D") > sum(1 for m in messages if b'"operation":"delete"' in
                                                              (m.value() or b""))


def test_the_customers_connector_counts_every_transactions_changes_on_its_transaction_topic(kafka, settings):
    """Issue 58, item 3: as Debezium with provide.transaction.metadata=true, every streamed change
    names its transaction, and the transaction topic (one partition) holds a BEGIN and an END per
    transaction in commit order, END counting its changes: re-sends and reordering of the changes
    aside, the changes read back match every END's count, and every change's transaction has one."""
    topic = "lakehouse.transaction"
    before = {(m.partition(), m.offset()) for m in read_topic(kafka, "customers", missing_ok=True)}
    before_events = len(read_topic(kafka, topic, missing_ok=True))
    report = produce(settings, "customers", count=800, faults=FAULTS, seed=7, progress=False)
    assert report.failed == 0
    events = [json.loads(m.value()) for m in read_topic(kafka, topic)][before_events:]
    assert {m.partition() for m in read_topic(kafka, topic)} == {0}
    assert report.other_topics == {topic: len(events)} and events

    # transaction -> (lsn, total_order) of its changes; a PostgreSQL connector's ids are
    # `<xid>:<the event's LSN>`, so a transaction's events share the xid
    changes: dict[str, set[tuple[int, int]]] = {}
    for message in read_topic(kafka, "customers"):
        if (message.partition(), message.offset()) in before or message.value() is None:
            continue
        try:
            event = json.loads(message.value())
            block, lsn, op = event["transaction"], event["source"]["lsn"], event["op"]
        except (ValueError, UnicodeDecodeError, KeyError, TypeError):
            continue  # a poison message
        if op == "r":
            assert block is None  # a snapshot read has no transaction
            continue
        assert block["id"] == f"{event['source']['txId']}:{lsn}"
        changes.setdefault(block["id"].split(":")[0], set()).add((lsn, block["total_order"]))
    statuses = [(e["status"], e["id"].split(":")[0]) for e in events]
    ids = [identifier for status, identifier in statuses if status == "END"]
    assert statuses == [(status, identifier) for identifier in ids for status in ("BEGIN", "END")]
    assert set(ids) == set(changes) and len(ids) > 100
    ends = {e["id"].split(":")[0]: e for e in events if e["status"] == "END"}
    for identifier, seen in changes.items():
        count = ends[identifier]["event_count"]
        assert len(seen) == count and sorted(order for _, order in seen) == list(range(1, count + 1))
        assert ends[identifier]["data_collections"] == [{"data_collection": "public.customers", "event_count": count}]
