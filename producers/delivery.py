"""Reliable delivery to Kafka: acks=all, idempotence, no message dropped, every failure counted."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from lakehouse.config import Settings
from lakehouse.errors import LakehouseError
from lakehouse.kafka_admin import admin_client, topic_names


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
class DeliveryReport:
    topic: str
    sent: int = 0
    delivered: int = 0
    failed: int = 0
    bytes: int = 0
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.delivered / self.seconds if self.seconds else 0.0


class Progress:
    """One self-overwriting line on stderr: messages and rate, at most once a second."""

    def __init__(self, label: str, total: int | None, enabled: bool = True):
        self.label, self.total, self.enabled = label, total, enabled and sys.stderr.isatty()
        self.started = self.last = time.monotonic()

    def update(self, done: int, force: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (now - self.last < 1.0 and not force):
            return
        self.last = now
        rate = done / max(now - self.started, 1e-9)
        of_total = f"/{self.total:,}" if self.total else ""
        sys.stderr.write(f"\r{self.label}: {done:,}{of_total} messages, {rate:,.0f} msg/s ")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def send_all(
    settings: Settings,
    topic: str,
    messages: Iterable[tuple[bytes | None, bytes | None, Callable | None]],
    total: int | None = None,
    progress: bool = True,
) -> DeliveryReport:
    """Produce (key, value, on_delivery) triples; block until every one is acknowledged.

    ``on_delivery(msg)`` (optional, per message) sees the delivered message, e.g. to record
    the offset of an injected fault. BufferError (local queue full) is handled by serving
    delivery callbacks and retrying, never by dropping. Ctrl-C still flushes what was sent.
    """
    from confluent_kafka import Producer

    report = DeliveryReport(topic=topic)
    producer = Producer(producer_config(settings))
    bar = Progress(f"produce {topic}", total, progress)

    def acknowledged(err, msg, extra: Callable | None = None):
        if err is not None:
            report.failed += 1
            if len(report.errors) < 5:
                report.errors.append(str(err))
            return
        report.delivered += 1
        if extra is not None:
            extra(msg)

    started = time.monotonic()
    try:
        for key, value, on_delivery in messages:
            callback = acknowledged if on_delivery is None else (
                lambda err, msg, extra=on_delivery: acknowledged(err, msg, extra))
            while True:
                try:
                    producer.produce(topic, value=value, key=key, on_delivery=callback)
                    break
                except BufferError:
                    producer.poll(0.1)
            report.sent += 1
            report.bytes += len(value or b"")
            if report.sent % 1000 == 0:
                producer.poll(0)
                bar.update(report.delivered)
    finally:
        # Deliver (or fail) everything handed to the client, also on Ctrl-C.
        remaining = producer.flush(60)
        report.failed += remaining
        report.seconds = time.monotonic() - started
        bar.update(report.delivered, force=True)
        bar.close()
    return report
