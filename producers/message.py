"""The unit every producer hands to Kafka."""

from __future__ import annotations

from typing import NamedTuple


class Outgoing(NamedTuple):
    """One message to send. ``fault`` names an injected fault (see producers.faults)."""

    key: bytes | None
    value: bytes | None
    partition: int | None = None  # None: the producer's partitioner picks by key
    fault: str | None = None
    # None: the topic the producer sends to; else another (a CDC connector's transaction topic),
    # whose messages the delivery report counts apart (DeliveryReport.other_topics)
    topic: str | None = None
