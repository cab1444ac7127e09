"""The exactly-once invariant over a whole topic, as the kill and single-writer tests check it:
each offset of the stream's topic is one row of its bronze table, good or dead, never two,
never none, and there are as many as the producer delivered."""

from __future__ import annotations

from lakehouse.contracts.bronze_columns import ERROR_CODE, KAFKA_OFFSET, KAFKA_PARTITION
from lakehouse.core.kafka_admin import end_offsets


def assert_every_offset_once(session, settings, stream: str, delivered: int, dead_letters: int | None = None) -> None:
    """Over topic ``stream`` and table bronze.``stream``; ``dead_letters``: how many rows must be
    dead (the faults the producer injected), when the test knows."""
    ends = end_offsets(settings, stream)
    rows = session.table(f"bronze.{stream}").select(KAFKA_PARTITION, KAFKA_OFFSET, ERROR_CODE).collect()
    good = [(r[KAFKA_PARTITION], r[KAFKA_OFFSET]) for r in rows if r[ERROR_CODE] is None]
    dead = [(r[KAFKA_PARTITION], r[KAFKA_OFFSET]) for r in rows if r[ERROR_CODE] is not None]
    assert len(good) == len(set(good)), "a record landed twice in bronze"
    assert len(dead) == len(set(dead)), "a record landed twice in the dead letters"
    assert not set(good) & set(dead), "a record landed on both sides"
    assert set(good) | set(dead) == {(p, o) for p, end in ends.items() for o in range(end)}
    assert len(good) + len(dead) == delivered
    if dead_letters is not None:
        assert len(dead) == dead_letters
