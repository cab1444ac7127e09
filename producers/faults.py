"""Fault injection switches shared by every producer: rates, off by default, on in the demo.

Faults of two kinds. Those the pipeline must keep (a re-sent duplicate, a late event, an
out-of-order delivery, a record of an evolved schema) land in bronze; those it cannot read
must land in dead letters with the code below. Every injected fault is recorded with the
Kafka coordinates it landed at, so tests and the demo check dead letters record for record.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

from lakehouse.core.errors import LakehouseError
from producers.message import Outgoing

# Fault kind -> the dead-letter code ingestion must give it (ARCHITECTURE §7).
DEAD_LETTER_CODES = {
    "truncated": "CORRUPT_PAYLOAD",
    "garbled": "CORRUPT_PAYLOAD",
    "missing_field": "MISSING_REQUIRED_FIELD",
    "wrong_type": "SCHEMA_MISMATCH",
    "unknown_schema_id": "UNKNOWN_SCHEMA_ID",
    "invalid_envelope": "INVALID_CDC_ENVELOPE",
}


@dataclass(frozen=True)
class FaultRates:
    """Share of messages (0..1) given each fault; ``evolve_after`` is a share of the run."""

    duplicate: float = 0.0  # the same message sent again, later
    late: float = 0.0  # event time days in the past
    out_of_order: float = 0.0  # held back and sent after newer messages (CDC: other partition)
    corrupt: float = 0.0  # truncated or garbled bytes
    invalid: float = 0.0  # readable, but a required field is missing or has the wrong type
    unknown_schema_id: float = 0.0  # registry-framed formats: an id no registry knows
    evolve_after: float | None = None  # switch to the evolved schema after this share of the run

    def __post_init__(self):
        for rate in fields(self):
            value = getattr(self, rate.name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise LakehouseError(f"fault rate {rate.name.replace('_', '-')}={value} is not within 0..1")

    @classmethod
    def demo(cls) -> FaultRates:
        """The demo mix: every fault present, a small share of unreadable records."""
        return cls(duplicate=0.02, late=0.01, out_of_order=0.02, corrupt=0.003, invalid=0.003,
                   unknown_schema_id=0.002, evolve_after=0.5)

    def as_dict(self) -> dict:
        return asdict(self)


class Budget:
    """How many messages a run makes: a count, or as many as a duration allows."""

    def __init__(self, count: int | None, duration: float | None = None):
        self.count, self.duration = count, duration
        self.started = time.monotonic()

    def __iter__(self) -> Iterator[int]:
        for index in itertools.count():
            if self.count is not None and index >= self.count:
                return
            if self.duration is not None and index % 16 == 0 and self.elapsed() >= self.duration:
                return
            yield index

    def records(self, make: Callable[[datetime], tuple[bytes | None, Any]], clock_every: int = 1000):
        """(key, record) pairs from ``make(now)``, one per message of the budget. The clock is
        read every ``clock_every`` records: event times stay near real time at little cost."""
        now = datetime.now(UTC)
        for index in self:
            if index % clock_every == 0:
                now = datetime.now(UTC)
            yield make(now)

    def chunks(self, size: int = 1000) -> Iterator[int]:
        """Sizes of the chunks to generate: ``count`` in all, or chunks until the duration is up."""
        remaining = self.count
        while remaining is None or remaining > 0:
            if self.duration is not None and self.elapsed() >= self.duration:
                return
            chunk = size if remaining is None else min(size, remaining)
            yield chunk
            if remaining is not None:
                remaining -= chunk

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def share_done(self, index: int) -> float:
        if self.count:
            return index / self.count
        return self.elapsed() / self.duration if self.duration else 0.0


@dataclass(frozen=True)
class FaultHooks:
    """How one stream encodes its records and breaks them; records are the stream's own objects.

    ``corrupt`` and ``invalid`` map a fault kind (a key of DEAD_LETTER_CODES) to a function
    returning the bytes of an unreadable message; a rate with no kinds is not applicable to
    the format and injects nothing.
    """

    encode: Callable[[Any], bytes]
    late: Callable[[Any, random.Random], Any]  # the record with its event time days in the past
    corrupt: dict[str, Callable[[Any, random.Random], bytes]]
    invalid: dict[str, Callable[[Any, random.Random], bytes]] = field(default_factory=dict)
    unknown_schema_id: Callable[[Any, random.Random], bytes] | None = None
    evolve: Callable[[Any, random.Random], Any] | None = None  # the record in the evolved schema


# Held-back and re-sent messages go out at most this many messages later.
MAX_DELAY = 500


def fault_random(seed: int | None, purpose: str = "faults") -> random.Random:
    """The random source of a run's faults: apart from the records' own, so one seed gives the
    same records whatever the fault rates (duplicates across runs on demand)."""
    return random.Random(None if seed is None else f"{purpose}-{seed}")


def inject(
    records: Iterable[tuple[bytes | None, Any]],
    faults: FaultRates,
    seed: int | None,
    hooks: FaultHooks,
    share_done: Callable[[int], float],
) -> Iterator[Outgoing]:
    """The messages of the records, with faults injected: one fault per record at most.

    Re-sent duplicates are extra messages, held-back ones are only delayed; a re-send always
    follows its original. Faults draw from their own random source (see ``fault_random``).
    """
    rng = fault_random(seed)
    corrupt_kinds = itertools.cycle(sorted(hooks.corrupt)) if hooks.corrupt else None
    invalid_kinds = itertools.cycle(sorted(hooks.invalid)) if hooks.invalid else None
    corrupt = faults.corrupt if hooks.corrupt else 0.0
    invalid = corrupt + (faults.invalid if hooks.invalid else 0.0)
    unknown = invalid + (faults.unknown_schema_id if hooks.unknown_schema_id else 0.0)
    late = unknown + faults.late
    pending: list[tuple[int, Outgoing]] = []  # (release after record index, message)
    for index, (key, record) in enumerate(records):
        fault = None
        if hooks.evolve and faults.evolve_after is not None and share_done(index) >= faults.evolve_after:
            record, fault = hooks.evolve(record, rng), "evolved"
        draw = rng.random()
        if draw < corrupt:
            kind = next(corrupt_kinds)
            yield Outgoing(key, hooks.corrupt[kind](record, rng), None, kind)
        elif draw < invalid:
            kind = next(invalid_kinds)
            yield Outgoing(key, hooks.invalid[kind](record, rng), None, kind)
        elif draw < unknown:
            yield Outgoing(key, hooks.unknown_schema_id(record, rng), None, "unknown_schema_id")
        else:
            if draw < late:
                record, fault = hooks.late(record, rng), "late"
            message = Outgoing(key, hooks.encode(record), None, fault)
            released = index
            if fault is None and rng.random() < faults.out_of_order:
                released = index + rng.randint(5, MAX_DELAY)
                pending.append((released, message._replace(fault="out_of_order")))
            else:
                yield message
            if rng.random() < faults.duplicate:
                pending.append((released + rng.randint(1, MAX_DELAY), Outgoing(key, message.value, None, "duplicate")))
        if pending and min(due for due, _ in pending) <= index:
            # Stable sort: of two messages due together, the one scheduled first goes first.
            due_now = sorted((p for p in pending if p[0] <= index), key=lambda p: p[0])
            pending = [p for p in pending if p[0] > index]
            for _, message in due_now:
                yield message
    for _, message in sorted(pending, key=lambda p: p[0]):
        yield message
