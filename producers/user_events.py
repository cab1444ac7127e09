"""The `user_events` stream: JSON objects described by schemas/user_events.schema.json.

Generation is pure (seeded random sources in, messages out); sending is producers.delivery.
Faults follow producers.faults: one injected fault per message at most, labelled, so the
manifest can say exactly which records must reach dead letters and which bronze.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from functools import partial

from lakehouse.contracts import SCHEMAS_DIR
from producers.delivery import Outgoing, stream_producer
from producers.faults import Budget, FaultHooks, FaultRates, inject

TOPIC = "user_events"
PARTITIONS = 3
SCHEMA_FILE = SCHEMAS_DIR / "user_events.schema.json"
SCHEMA = json.loads(SCHEMA_FILE.read_text())
EVENT_TYPES = SCHEMA["properties"]["event_type"]["enum"]
EVENT_TYPE_WEIGHTS = [50, 15, 15, 5, 10, 5]
DEVICES = SCHEMA["properties"]["device"]["enum"]
PAGES = ["/", "/search", "/product/{}", "/cart", "/checkout", "/account"]
REFERRERS = ["search", "email", "social", "direct"]
# The fault kinds this format can carry that make a record unreadable.
UNREADABLE = ("truncated", "garbled", "missing_field", "wrong_type")


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
        "event_timestamp": _iso(occurred),
        "page": page,
        "device": rng.choice(DEVICES),
        "duration_ms": rng.randint(5, 120_000),
    }


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def encode(event: dict) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode()


def inject_fault(kind: str, event: dict, rng: random.Random) -> bytes:
    """The bytes of an unreadable message of the given kind, derived from a valid event."""
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
    raise ValueError(f"unknown fault kind {kind!r}; known: {', '.join(UNREADABLE)}")


def _late(event: dict, rng: random.Random) -> dict:
    occurred = datetime.fromisoformat(event["event_timestamp"]) - timedelta(days=rng.randint(2, 30))
    return {**event, "event_timestamp": _iso(occurred)}


def _evolve(event: dict, rng: random.Random) -> dict:
    return {**event, "referrer": rng.choice(REFERRERS)}  # a field schema v1 does not declare


HOOKS = FaultHooks(
    encode=encode,
    late=_late,
    corrupt={kind: partial(inject_fault, kind) for kind in ("truncated", "garbled")},
    invalid={kind: partial(inject_fault, kind) for kind in ("missing_field", "wrong_type")},
    evolve=_evolve,
)


def messages(count: int | None, faults: FaultRates = FaultRates(), seed: int | None = None,
             duration: float | None = None) -> Iterator[Outgoing]:
    """``count`` events (or as many as ``duration`` seconds allow), with faults injected.

    Two random sources: the events depend on the seed alone, so the same seed sends the same
    event ids whatever the fault rates (duplicates across runs on demand).
    """
    rng = random.Random(seed)
    budget = Budget(count, duration)

    def make(now):
        event = make_event(rng, now)
        return event["event_id"].encode(), event

    return inject(budget.records(make, clock_every=10_000), faults, seed, HOOKS, budget.share_done)


produce = stream_producer(TOPIC, messages, PARTITIONS, doc="Produce user events to the `user_events` topic.")

