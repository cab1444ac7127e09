"""CDC streams on a real broker: what a plain consumer reads back equals the source database."""

import json

import pytest

from producers.cdc import debezium, dms
from producers.cdc.oracle import InvalidChange, apply
from producers.cdc.source import read_tables
from producers.cdc.stream import source_path
from producers.faults import FaultRates
from producers.run import produce
from tests.integration.kafka_read import read_topic

pytestmark = pytest.mark.integration

FAULTS = FaultRates(duplicate=0.1, out_of_order=0.2, corrupt=0.01, invalid=0.01)


@pytest.mark.parametrize("stream, decoder", [("customers", debezium.decode), ("accounts", dms.decode)])
def test_changes_read_back_rebuild_the_source_database(kafka, settings, stream, decoder):
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
            change = decoder(message.key(), message.value())
        except (InvalidChange, ValueError, UnicodeDecodeError) as exc:
            try:
                json.loads(message.value())
                code = "INVALID_CDC_ENVELOPE"
            except (ValueError, UnicodeDecodeError):
                code = "CORRUPT_PAYLOAD"
            unreadable[(message.partition(), message.offset())] = code
            assert isinstance(exc, InvalidChange) or code == "CORRUPT_PAYLOAD"
            continue
        if change is None:
            tombstones += 1
        else:
            changes.append(change)

    assert unreadable == expected_dead  # the manifest names exactly the poison messages
    ops = {change.op for change in changes}
    assert ops == {"R", "I", "U", "D"}
    if stream == "customers":
        assert tombstones >= len({c.seq for c in changes if c.op == "D"}) > 0  # one per delete, + re-sends
    source = read_tables(source_path(settings, stream))[stream]
    assert apply(changes) == source  # the oracle: duplicates and reordering converge
