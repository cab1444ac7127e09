"""Delivery faults of a CDC pipeline, as pure functions over lists of encoded messages.

At-least-once delivery re-sends messages (a connector restarting from its last committed
offset), and a topic with several partitions, or a producer that does not key its messages,
loses the order between changes of one key. The mirror must converge anyway (ARCHITECTURE §9);
these functions make such streams on purpose so the producer can send them and tests can
check convergence without Kafka. Randomness comes in as a ``random.Random``: same seed,
same faults.
"""

from __future__ import annotations

import random
import zlib
from typing import NamedTuple

Message = tuple[bytes | None, bytes | None]  # (Kafka key, value); value None is a tombstone


class Placed(NamedTuple):
    """A message with the partition the producer should send it to."""

    partition: int
    key: bytes | None
    value: bytes | None


def _check_rate(rate: float) -> None:
    if not 0.0 <= rate <= 1.0:
        raise ValueError("rate must be within [0, 1]")


def duplicate(messages: list[Message], rate: float, rng: random.Random) -> list[Message]:
    """Every message once, in order, plus a ``rate`` share of them sent again later.

    A copy lands after its original (a re-send cannot precede the first send), anywhere up to
    the end of the list.
    """
    _check_rate(rate)
    count = len(messages)
    # (index of the original the message follows, 0 for an original / 1 for a copy, tie-break)
    ranked: list[tuple[int, int, float, Message]] = []
    for index, message in enumerate(messages):
        ranked.append((index, 0, 0.0, message))
        if rng.random() < rate:
            ranked.append((rng.randint(index, count - 1), 1, rng.random(), message))
    ranked.sort(key=lambda item: item[:3])
    return [message for *_rank, message in ranked]


def key_partition(key: bytes | None, partitions: int) -> int:
    """A stable partition per key, as a keyed producer would choose (not Kafka's murmur2 hash,
    which does not matter here: only that one key always maps to one partition)."""
    return 0 if key is None else zlib.crc32(key) % partitions


def reorder(
    messages: list[Message],
    rate: float,
    rng: random.Random,
    window: int,
    partitions: int = 1,
) -> list[Placed]:
    """Move a ``rate`` share of the messages by up to ``window`` places, earlier or later.

    Each message gets a partition hint: its key's partition, except that a moved message goes
    to a random partition. On one partition a consumer still sees the new list order; across
    partitions it may interleave them any way, which moves changes of one key further apart
    still. Both are what a mirror ordering by ``seq`` rather than by arrival must withstand.
    A message ends at most ``2 * window`` places from where it was.
    """
    _check_rate(rate)
    if window < 0 or partitions < 1:
        raise ValueError("window must be >= 0 and partitions >= 1")
    ranked: list[tuple[float, int, Placed]] = []
    for index, (key, value) in enumerate(messages):
        target, partition = float(index), key_partition(key, partitions)
        if rng.random() < rate:
            target += rng.uniform(-window, window)
            partition = rng.randrange(partitions)
        ranked.append((target, index, Placed(partition, key, value)))
    ranked.sort(key=lambda item: item[:2])
    return [placed for *_rank, placed in ranked]
