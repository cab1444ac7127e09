"""Protobuf employees and Confluent-framed Avro purchases through a real broker and back."""

import random
import time
import uuid
from datetime import UTC, datetime

import pytest

from lakehouse.contracts.registry import LocalSchemaRegistry, registry_path
from producers import employees, purchases
from producers.delivery import Outgoing, ensure_topic, send_all

pytestmark = pytest.mark.integration

COUNT = 3000


def consume_all(bootstrap: str, topic: str, expected: int, timeout_s: float = 60.0) -> list:
    """Every message of ``topic`` from the beginning: ``expected`` of them, then a quiet second."""
    from confluent_kafka import Consumer

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"test-{topic}-{uuid.uuid4()}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    consumer.subscribe([topic])
    messages = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            batch = consumer.consume(num_messages=1000, timeout=1.0)
            for message in batch:
                assert message.error() is None, message.error()
                messages.append(message)
            if len(messages) >= expected and not batch:  # all there, and nothing more comes
                break
    finally:
        consumer.close()
    return messages


def test_employees_round_trip_through_kafka(kafka, settings):
    topic = f"{employees.TOPIC}_binary_test"
    now = datetime.now(UTC)
    rng = random.Random(21)
    expected = [employees.make_employee(rng, now) for _ in range(COUNT)]
    ensure_topic(settings, topic)
    # Produced through the fast path, checked against the reference path with the same seed.
    messages = (Outgoing(k, v) for k, v in employees.payloads(random.Random(21), now, COUNT))
    report = send_all(settings, topic, messages, total=COUNT, progress=False)
    assert (report.delivered, report.failed) == (COUNT, 0), report.errors

    consumed = consume_all(kafka, topic, COUNT)
    assert len(consumed) == COUNT
    by_id = {e.id: e for e in expected}
    decoded = {}
    for message in consumed:
        employee = employees.decode(message.value())
        assert message.key() == str(employee.id).encode()
        decoded[employee.id] = employee
    assert decoded == by_id  # every field, the unset ages and the nested team included
    assert any(not e.HasField("employee_age") for e in decoded.values())


def test_purchases_of_both_versions_round_trip_through_kafka(kafka, settings):
    topic = f"{purchases.TOPIC}_binary_test"
    schema_ids = purchases.register_schemas(LocalSchemaRegistry(registry_path(settings)))
    now = datetime.now(UTC)
    rng = random.Random(22)
    produced = []
    for _ in range(COUNT):
        version = rng.choice(purchases.VERSIONS)
        produced.append((version, purchases.make_purchase(rng, now, version)))
    ensure_topic(settings, topic)
    messages = (
        Outgoing(purchases.key(p), purchases.encode(p, schema_ids[v], purchases.SCHEMAS[v].parsed))
        for v, p in produced
    )
    report = send_all(settings, topic, messages, total=COUNT, progress=False)
    assert (report.delivered, report.failed) == (COUNT, 0), report.errors

    consumed = consume_all(kafka, topic, COUNT)
    assert len(consumed) == COUNT
    # A fresh registry instance: the consumer knows the ids only from the registry file.
    reader = LocalSchemaRegistry(registry_path(settings))
    expected = {p["transaction_id"]: (schema_ids[v], p) for v, p in produced}
    seen_ids = set()
    for message in consumed:
        schema_id, purchase = purchases.decode(message.value(), reader)
        written = {**purchase, "transaction_time": int(purchase["transaction_time"].timestamp() * 1000)}
        assert message.key() == purchase["transaction_id"].encode()
        assert expected.pop(purchase["transaction_id"]) == (schema_id, written)
        seen_ids.add(schema_id)
    assert not expected
    assert seen_ids == {schema_ids[1], schema_ids[2]} and schema_ids[1] != schema_ids[2]
