"""Kafka metadata for the producers and jobs, failing in seconds with one clear line."""

from __future__ import annotations

from lakehouse.config import Settings
from lakehouse.errors import LakehouseError

CONNECT_TIMEOUT_S = 5.0


def admin_client(settings: Settings):
    from confluent_kafka.admin import AdminClient

    # log_level 0: an unreachable broker is reported once, by us, not by librdkafka per retry.
    return AdminClient({**settings.kafka_client_config(), "log_level": 0})


def topic_names(admin, settings: Settings) -> set[str]:
    from confluent_kafka import KafkaException

    try:
        return set(admin.list_topics(timeout=CONNECT_TIMEOUT_S).topics)
    except KafkaException:
        raise LakehouseError(
            f"cannot reach Kafka at {settings.kafka_bootstrap_servers} within {CONNECT_TIMEOUT_S:.0f}s: "
            "is it running? (`lakehouse kafka start`)"
        ) from None


_consumers: dict[str, object] = {}


def end_offsets(settings: Settings, topic: str) -> dict[int, int]:
    """{partition: offset of the next message} of a topic (its high watermarks).

    One consumer per process and broker list, kept: jobs ask after every micro-batch.
    """
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
            partition: consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                      timeout=CONNECT_TIMEOUT_S, cached=False)[1]
            for partition in sorted(metadata.partitions)
        }
    except KafkaException:
        raise LakehouseError(
            f"cannot reach Kafka at {settings.kafka_bootstrap_servers} within {CONNECT_TIMEOUT_S:.0f}s") from None
