"""Kafka metadata for the producers and jobs, failing in seconds with one clear line."""

from __future__ import annotations

import functools
from collections import deque

from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings

CONNECT_TIMEOUT_S = 5.0


@functools.cache
def _admin_class():
    from confluent_kafka.admin import AdminClient

    class Admin(AdminClient):
        """Keeps librdkafka's errors: a failed metadata request only says "transport failure",
        the error callback says why (e.g. SASL credentials refused)."""

    return Admin


def admin_client(settings: Settings):
    errors: deque = deque(maxlen=20)  # the latest only: a long-lived client retries forever
    # log_level 0: an unreachable broker is reported once, by us, not by librdkafka per retry.
    admin = _admin_class()({**settings.kafka_client_config(), "log_level": 0, "error_cb": errors.append})
    admin.errors = errors
    return admin


def _authentication_error(admin) -> str | None:
    from confluent_kafka import KafkaError

    errors = getattr(admin, "errors", None)
    if errors is None:
        return None
    admin.poll(0)  # serves the error callbacks
    refused = (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED)
    return next((error.str() for error in errors if error.code() in refused), None)


def topic_names(admin, settings: Settings) -> set[str]:
    from confluent_kafka import KafkaException

    try:
        return set(admin.list_topics(timeout=CONNECT_TIMEOUT_S).topics)
    except KafkaException:
        refused = _authentication_error(admin)
        if refused:
            raise LakehouseError(f"Kafka at {settings.kafka_bootstrap_servers} refused the credentials "
                                 "(LAKEHOUSE_KAFKA_OPT_SASL_USERNAME / _PASSWORD): "
                                 f"{refused.split(': ', 1)[-1]}") from None
        raise LakehouseError(
            f"cannot reach Kafka at {settings.kafka_bootstrap_servers} within {CONNECT_TIMEOUT_S:.0f}s: "
            "is it running? (`lakehouse kafka start`)"
        ) from None


_consumers: dict[str, object] = {}


def end_offsets(settings: Settings, topic: str) -> dict[int, int]:
    """{partition: offset of the next message} of a topic (its high watermarks).

    One consumer per process and broker list, kept: jobs ask after every micro-batch.
    """
    return {partition: high for partition, (_, high) in watermarks(settings, topic).items()}


def watermarks(settings: Settings, topic: str) -> dict[int, tuple[int, int]]:
    """{partition: (its first offset still held, the offset of its next message)} of a topic."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = _consumers.get(settings.kafka_bootstrap_servers)
    if consumer is None:
        consumer = _consumers[settings.kafka_bootstrap_servers] = Consumer({
            **settings.kafka_client_config(), "group.id": "lakehouse-watermarks",
            "enable.auto.commit": False, "log_level": 0})
    try:
        metadata = consumer.list_topics(topic, timeout=CONNECT_TIMEOUT_S).topics.get(topic)
        if metadata is None or metadata.error is not None:
            raise LakehouseError(f"topic {topic!r} does not exist on {settings.kafka_bootstrap_servers}")
        return {
            partition: tuple(consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                            timeout=CONNECT_TIMEOUT_S, cached=False))
            for partition in sorted(metadata.partitions)
        }
    except KafkaException:
        raise LakehouseError(
            f"cannot reach Kafka at {settings.kafka_bootstrap_servers} within {CONNECT_TIMEOUT_S:.0f}s") from None
