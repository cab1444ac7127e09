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
