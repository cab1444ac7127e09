"""Fault injection switches shared by every producer: rates, off by default, on in the demo.

Faults of two kinds. Those the pipeline must keep (a re-sent duplicate, a late event, an
out-of-order delivery, a record of an evolved schema) land in bronze; those it cannot read
must land in dead letters with the code below. Every injected fault is recorded with the
Kafka coordinates it landed at, so tests and the demo check dead letters record for record.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from lakehouse.errors import LakehouseError

# Fault kind -> the dead-letter code ingestion must give it (DESIGN §7).
DEAD_LETTER_CODES = {
    "truncated": "CORRUPT_PAYLOAD",
    "garbled": "CORRUPT_PAYLOAD",
    "missing_field": "MISSING_REQUIRED_FIELD",
    "wrong_type": "SCHEMA_MISMATCH",
    "unknown_schema_id": "UNKNOWN_SCHEMA_ID",
    "invalid_envelope": "INVALID_CDC_ENVELOPE",
}
# Fault kinds whose records are readable and must reach bronze.
KEPT_FAULTS = ("duplicate", "late", "out_of_order", "evolved")


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
        for field in fields(self):
            value = getattr(self, field.name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise LakehouseError(f"fault rate {field.name.replace('_', '-')}={value} is not within 0..1")

    @classmethod
    def demo(cls) -> FaultRates:
        """The demo mix: every fault present, a small share of unreadable records."""
        return cls(duplicate=0.02, late=0.01, out_of_order=0.02, corrupt=0.003, invalid=0.003,
                   unknown_schema_id=0.002, evolve_after=0.5)

    def as_dict(self) -> dict:
        return asdict(self)
