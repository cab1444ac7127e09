"""Reading a whole topic back with a plain consumer, as tests check what producers wrote."""

from __future__ import annotations

import time


def read_topic(bootstrap: str, topic: str, timeout_s: float = 60.0, missing_ok: bool = False) -> list:
    """Every message of the topic (all partitions, from the start), as confluent_kafka Messages.

    ``missing_ok``: a topic that does not exist reads as empty instead of failing.
    """
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"test-read-{time.time_ns()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        metadata = consumer.list_topics(timeout=10).topics
        if topic not in metadata and missing_ok:
            return []
        partitions = metadata[topic].partitions
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        messages, positions = [], {p: 0 for p in partitions}
        deadline = time.monotonic() + timeout_s
        while any(positions[p] < ends[p] for p in partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {len(messages)} messages of {topic}; ends {ends}, at {positions}")
            for message in consumer.consume(1000, timeout=1.0):
                if message.error():
                    raise RuntimeError(message.error())
                messages.append(message)
                positions[message.partition()] = message.offset() + 1
        return messages
    finally:
        consumer.close()
