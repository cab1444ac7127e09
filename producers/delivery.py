"""Reliable delivery to Kafka: acks=all, idempotence, no message dropped, every failure counted."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from lakehouse.core.console import progress as progress_bar
from lakehouse.core.errors import LakehouseError
from lakehouse.core.kafka_admin import admin_client, topic_names
from lakehouse.core.settings import Settings
from producers.faults import DEAD_LETTER_CODES, FaultRates
from producers.message import Outgoing


def producer_config(settings: Settings, **overrides) -> dict:
    return {
        **settings.kafka_client_config(),
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 20,
        "batch.size": 1_000_000,
        "compression.type": "lz4",
        "log_level": 3,
        **overrides,
    }


def ensure_topic(settings: Settings, topic: str, partitions: int = 3) -> None:
    """Create the topic if missing; fail in seconds with one line if Kafka is unreachable."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    admin = admin_client(settings)
    if topic in topic_names(admin, settings):
        return
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    try:
        futures[topic].result(timeout=30)
    except KafkaException as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise LakehouseError(f"cannot create topic {topic}: {exc}") from None


@dataclass
class FaultRecord:
    kind: str
    partition: int
    offset: int

    @property
    def expected_code(self) -> str | None:
        return DEAD_LETTER_CODES.get(self.kind)


@dataclass
class DeliveryReport:
    topic: str
    sent: int = 0
    delivered: int = 0
    failed: int = 0
    bytes: int = 0
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    faults: list[FaultRecord] = field(default_factory=list)
    # messages delivered to other topics (Outgoing.topic), {topic: count}, when every message has
    # been acknowledged; a failure there counts in `failed` like any other
    other_topics: dict[str, int] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.delivered / self.seconds if self.seconds else 0.0

    def merge(self, other: DeliveryReport) -> DeliveryReport:
        """Reports of several producer processes as one (seconds: the longest)."""
        return DeliveryReport(
            topic=self.topic, sent=self.sent + other.sent, delivered=self.delivered + other.delivered,
            failed=self.failed + other.failed, bytes=self.bytes + other.bytes,
            errors=(self.errors + other.errors)[:5], seconds=max(self.seconds, other.seconds),
            faults=self.faults + other.faults,
            other_topics={topic: self.other_topics.get(topic, 0) + other.other_topics.get(topic, 0)
                          for topic in {**self.other_topics, **other.other_topics}},
        )

    def manifest(self, fault_rates: dict | None = None) -> dict:
        """What was produced, for exact checks downstream: counts per fault kind, and the
        coordinates and expected code of every record that must end in dead letters."""
        counts: dict[str, int] = {}
        for fault in self.faults:
            counts[fault.kind] = counts.get(fault.kind, 0) + 1
        dead = sorted((f for f in self.faults if f.expected_code), key=lambda f: (f.partition, f.offset))
        return {
            "topic": self.topic,
            "produced": self.delivered,
            "failed": self.failed,
            "fault_rates": fault_rates or {},
            "faults": dict(sorted(counts.items())),
            "dead_letters": [
                {"partition": f.partition, "offset": f.offset, "kind": f.kind, "error_code": f.expected_code}
                for f in dead
            ],
        }


def send_all(
    settings: Settings,
    topic: str,
    messages: Iterable[Outgoing],
    total: int | None = None,
    progress: bool = True,
    rate: float | None = None,
    track_faults: bool = True,
) -> DeliveryReport:
    """Produce the messages; block until every one is acknowledged or failed.

    ``track_faults=False`` (a run with no faults injected) asks the client to report failures
    only: a Python callback per acknowledged message is a large share of a producer's time.

    ``rate`` caps messages per second. BufferError (local queue full) is handled by serving
    delivery callbacks and retrying, never by dropping. Ctrl-C stops producing but still
    flushes what was handed to the client, so the report counts every message.
    """
    from confluent_kafka import Producer

    report = DeliveryReport(topic=topic)
    producer = Producer(producer_config(settings, **({} if track_faults else {"delivery.report.only.error": True})))

    def acknowledged(err, msg):
        if err is not None:
            report.failed += 1
            if len(report.errors) < 5:
                report.errors.append(str(err))
        else:
            report.delivered += 1

    sent_elsewhere: dict[str, int] = {}
    failed_elsewhere: dict[str, int] = {}

    def acknowledged_elsewhere(err, msg):
        if err is not None:
            acknowledged(err, msg)
            failed_elsewhere[msg.topic()] = failed_elsewhere.get(msg.topic(), 0) + 1

    def acknowledged_fault(err, msg, kind: str):
        acknowledged(err, msg)
        if err is None:
            report.faults.append(FaultRecord(kind, msg.partition(), msg.offset()))

    def delivered_so_far() -> int:  # also when only failures are reported: not failed, no longer queued
        return max(0, report.sent - len(producer) - report.failed)

    started = time.monotonic()
    # Serve callbacks and check the rate often enough for a low rate to be smooth.
    every = 1000 if not rate else max(1, min(1000, int(rate // 20)))
    with progress_bar(f"produce {topic}: delivered", total, show=progress) as advance:
        try:
            for message in messages:
                # an Outgoing, or a plain tuple in its field order without the topic (the fast
                # paths of the event producers: a NamedTuple costs them a third of a record)
                if len(message) == 4:
                    (key, value, partition, fault), elsewhere = message, None
                else:
                    key, value, partition, fault, elsewhere = message
                callback = acknowledged if fault is None else (
                    lambda err, msg, kind=fault: acknowledged_fault(err, msg, kind))
                if elsewhere is not None:
                    # always reported: a failure must be counted, a delivery is counted apart
                    callback = acknowledged_elsewhere
                while True:
                    try:
                        if partition is None:
                            producer.produce(elsewhere or topic, value, key, on_delivery=callback)
                        else:
                            producer.produce(elsewhere or topic, value, key, partition=partition, on_delivery=callback)
                        break
                    except BufferError:
                        producer.poll(0.1)
                if elsewhere is not None:
                    sent_elsewhere[elsewhere] = sent_elsewhere.get(elsewhere, 0) + 1
                    continue
                report.sent += 1
                report.bytes += len(value or b"")
                if report.sent % every == 0:
                    producer.poll(0)
                    advance(completed=delivered_so_far())
                    if rate:
                        # poll() returns as soon as it served an event: wait until on schedule.
                        while (ahead := report.sent / rate - (time.monotonic() - started)) > 0:
                            producer.poll(min(ahead, 0.05))
        finally:
            # Deliver (or fail) everything handed to the client, also on Ctrl-C. Wait until the
            # client's queue is empty, not for a fixed time: a message still being retried (a
            # broker restarting) is neither lost nor failed yet, and the client itself fails each
            # message, with its reason, once message.timeout.ms has passed, so this loop ends.
            while len(producer):
                producer.flush(1)
                advance(completed=delivered_so_far())
            report.other_topics = {name: count - failed_elsewhere.get(name, 0)
                                   for name, count in sent_elsewhere.items()}
            if not track_faults:  # only failures were reported
                report.delivered = report.sent - (report.failed - sum(failed_elsewhere.values()))
            report.seconds = time.monotonic() - started
    return report


def produce_to_topic(
    settings: Settings,
    topic: str,
    messages: Iterable[Outgoing],
    faults: FaultRates,
    partitions: int = 3,
    total: int | None = None,
    progress: bool = True,
    rate: float | None = None,
) -> DeliveryReport:
    """What every stream's producer does: create the topic if needed, then send everything.

    Deliveries are reported one by one only when faults are injected (their coordinates go to
    the manifest); otherwise the client reports failures only, which is cheaper.
    """
    ensure_topic(settings, topic, partitions)
    return send_all(settings, topic, messages, total=total, progress=progress, rate=rate,
                    track_faults=faults != FaultRates())


def stream_producer(topic: str, messages: Callable[..., Iterable[Outgoing]], partitions: int = 3,
                    doc: str | None = None) -> Callable[..., DeliveryReport]:
    """The produce function of a stream whose ``messages(count, faults, seed, duration)`` need
    nothing more, by the signature producers.run calls every producer with."""

    def produce(settings: Settings, count: int | None = None, faults: FaultRates = FaultRates(),
                seed: int | None = None, progress: bool = True, duration: float | None = None,
                rate: float | None = None) -> DeliveryReport:
        return produce_to_topic(settings, topic, messages(count, faults, seed, duration), faults, partitions,
                                total=count, progress=progress, rate=rate)

    produce.__doc__ = doc
    return produce
