"""The fault manifest names exactly the records a consumer cannot read, for every event stream.

A reference reader per format (written here, independent of the producers' encoders)
classifies each message read back from the real broker; the set of unreadable ones, with
their codes, must equal the manifest's dead letters record for record.
"""

import json

import pytest
from google.protobuf.message import DecodeError

from lakehouse.contracts import wire
from lakehouse.contracts.registry import SchemaNotFound, registry_for
from producers import employees
from producers.avro import decode_body, parsed
from producers.faults import FaultRates
from producers.run import produce
from producers.user_events import SCHEMA
from tests.integration.kafka_read import read_topic

pytestmark = pytest.mark.integration

COUNT = 3000
FAULTS = FaultRates(duplicate=0.03, late=0.03, out_of_order=0.03, corrupt=0.01, invalid=0.01,
                    unknown_schema_id=0.01, evolve_after=0.5)


def read_employee(value: bytes, settings) -> str | None:
    try:
        employee = employees.decode(value)
    except DecodeError:
        return "CORRUPT_PAYLOAD"
    return None if employee.HasField("start_date") else "MISSING_REQUIRED_FIELD"


def read_purchase(value: bytes, settings) -> str | None:
    try:
        schema_id, body = wire.unframe(value)
    except ValueError:
        return "CORRUPT_PAYLOAD"
    try:
        schema = registry_for(settings).get_schema(schema_id)
    except SchemaNotFound:
        return "UNKNOWN_SCHEMA_ID"
    try:
        decode_body(body, parsed(schema))
    except ValueError:
        return "CORRUPT_PAYLOAD"
    return None


def read_user_event(value: bytes, settings) -> str | None:
    try:
        event = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        return "CORRUPT_PAYLOAD"
    if not isinstance(event, dict):
        return "CORRUPT_PAYLOAD"
    if not isinstance(event.get("customer_id", 0), int):
        return "SCHEMA_MISMATCH"
    if any(event.get(field) is None for field in SCHEMA["required"]):
        return "MISSING_REQUIRED_FIELD"
    return None


@pytest.mark.parametrize("stream, reader, kept", [
    ("employees", read_employee, {"duplicate", "late", "out_of_order"}),
    ("purchases", read_purchase, {"duplicate", "late", "out_of_order", "evolved"}),
    ("user_events", read_user_event, {"duplicate", "late", "out_of_order", "evolved"}),
])
def test_manifest_matches_what_a_consumer_reads(kafka, settings, stream, reader, kept):
    # Other tests of the session may have written to the topic before.
    topic_before = {(m.partition(), m.offset()) for m in read_topic(kafka, stream, missing_ok=True)}
    report = produce(settings, stream, count=COUNT, faults=FAULTS, seed=21, progress=False)
    manifest = report.manifest()
    assert report.failed == 0
    assert kept <= set(manifest["faults"]), manifest["faults"]
    expected = {(d["partition"], d["offset"]): d["error_code"] for d in manifest["dead_letters"]}
    assert len(expected) > 20

    found = {}
    messages = [m for m in read_topic(kafka, stream) if (m.partition(), m.offset()) not in topic_before]
    assert len(messages) == report.delivered
    for message in messages:
        code = reader(message.value(), settings)
        if code:
            found[(message.partition(), message.offset())] = code
    assert found == expected
