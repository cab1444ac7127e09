"""Kafka records as Spark's Kafka source hands them to a decoder, for decoding tests: a DataFrame
of key, value, topic, partition, offset, timestamp (the source's own column types)."""

from __future__ import annotations

from datetime import UTC, datetime

RECORD_TIME = datetime(2026, 11, 20, 12, tzinfo=UTC)


def kafka_rows(spark, messages, topic="t"):
    """One record per (key, value) of `messages`, in partition 0 at offsets 0, 1, ..., all
    stamped RECORD_TIME."""
    rows = [(key, value, topic, 0, offset, RECORD_TIME) for offset, (key, value) in enumerate(messages)]
    return spark.createDataFrame(rows, "key binary, value binary, topic string, partition int, "
                                       "offset long, timestamp timestamp")
