"""The `user_events` stream: JSON objects described by schemas/user_events.schema.json.

Generation is pure (a seeded random source in, dicts and bytes out); producing is done by
producers.delivery. Faults are opt-in rates; each injected fault is recorded with the
Kafka coordinates it landed at and the dead-letter code the ingestion must give it.
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from lakehouse.config import Settings
from producers.delivery import DeliveryReport, ensure_topic, send_all

TOPIC = "user_events"
SCHEMA_FILE = Path(__file__).parent / "schemas" / "user_events.schema.json"
SCHEMA = json.loads(SCHEMA_FILE.read_text())
EVENT_TYPES = SCHEMA["properties"]["event_type"]["enum"]
EVENT_TYPE_WEIGHTS = [50, 15, 15, 5, 10, 5]
DEVICES = SCHEMA["properties"]["device"]["enum"]
PAGES = ["/", "/search", "/product/{}", "/cart", "/checkout", "/account"]

# Fault kind -> dead-letter code the ingestion must route it with (DESIGN §7).
FAULT_CODES = {
    "truncated": "CORRUPT_PAYLOAD",
    "garbled": "CORRUPT_PAYLOAD",
    "missing_field": "MISSING_REQUIRED_FIELD",
    "wrong_type": "SCHEMA_MISMATCH",
}


def make_event(rng: random.Random, now: datetime) -> dict:
    customer_id = rng.randint(1, 1000)
    event_type = rng.choices(EVENT_TYPES, EVENT_TYPE_WEIGHTS)[0]
    page = rng.choice(PAGES).format(rng.randint(1, 500))
    occurred = now - timedelta(milliseconds=rng.randint(0, 5_000))
    return {
        "event_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "customer_id": customer_id,
        "session_id": f"s-{customer_id}-{rng.randint(1, 20)}",
        "event_type": event_type,
        "event_timestamp": occurred.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "page": page,
        "device": rng.choice(DEVICES),
        "duration_ms": rng.randint(5, 120_000),
    }


def encode(event: dict) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode()


def inject_fault(kind: str, event: dict, rng: random.Random) -> bytes:
    """The bytes of a faulty message of the given kind, derived from a valid event."""
    payload = encode(event)
    if kind == "truncated":  # any proper prefix of a JSON object is invalid JSON
        return payload[: rng.randint(1, len(payload) - 1)]
    if kind == "garbled":  # not UTF-8, not JSON
        return b"\xff\xfe\x00" + rng.randbytes(rng.randint(8, 48))
    if kind == "missing_field":
        broken = dict(event)
        del broken[rng.choice(SCHEMA["required"])]
        return encode(broken)
    if kind == "wrong_type":
        return encode({**event, "customer_id": "not-a-number"})
    raise ValueError(f"unknown fault kind {kind!r}; known: {', '.join(FAULT_CODES)}")


@dataclass
class FaultRecord:
    kind: str
    expected_code: str
    partition: int = -1
    offset: int = -1


@dataclass
class ProduceResult:
    delivery: DeliveryReport
    faults: list[FaultRecord] = field(default_factory=list)

    def manifest(self) -> dict:
        counts: dict[str, int] = {}
        for fault in self.faults:
            counts[fault.kind] = counts.get(fault.kind, 0) + 1
        return {
            "topic": self.delivery.topic,
            "produced": self.delivery.delivered,
            "failed": self.delivery.failed,
            "faults": counts,
            "dead_letters": [
                {"partition": f.partition, "offset": f.offset, "kind": f.kind, "error_code": f.expected_code}
                for f in self.faults
            ],
        }


def produce(
    settings: Settings,
    count: int,
    corrupt_rate: float = 0.0,
    seed: int | None = None,
    progress: bool = True,
) -> ProduceResult:
    """Produce ``count`` messages; a ``corrupt_rate`` share of them faulty (kinds in turn)."""
    if count < 0 or not 0.0 <= corrupt_rate <= 1.0:
        raise ValueError("count must be >= 0 and corrupt_rate within [0, 1]")
    # Two streams of randomness: the events depend on the seed alone, so the same seed
    # re-sends the same event ids whatever the fault rate (duplicates on demand).
    rng = random.Random(seed)
    fault_rng = random.Random(None if seed is None else f"faults-{seed}")
    ensure_topic(settings, TOPIC)
    faults: list[FaultRecord] = []
    kinds = list(FAULT_CODES)

    def messages():
        now = datetime.now(UTC)
        for i in range(count):
            event = make_event(rng, now)
            key = event["event_id"].encode()
            if fault_rng.random() < corrupt_rate:
                kind = kinds[len(faults) % len(kinds)]
                record = FaultRecord(kind, FAULT_CODES[kind])
                faults.append(record)

                def landed(msg, record=record):
                    record.partition, record.offset = msg.partition(), msg.offset()

                yield key, inject_fault(kind, event, fault_rng), landed
            else:
                yield key, encode(event), None
            if i % 10_000 == 9_999:
                now = datetime.now(UTC)

    report = send_all(settings, TOPIC, messages(), total=count, progress=progress)
    return ProduceResult(delivery=report, faults=faults)
