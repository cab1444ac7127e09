"""A producer's messages caught instead of sent: no Kafka, no topic created."""

from producers import delivery


def capture_sends(monkeypatch) -> dict[str, list]:
    """{topic: the messages of its last send} for every producer run after this call."""
    sent: dict[str, list] = {}

    def send_all(settings, topic, messages, total=None, progress=True, rate=None, track_faults=True):
        sent[topic] = list(messages)
        return delivery.DeliveryReport(topic=topic)

    monkeypatch.setattr(delivery, "ensure_topic", lambda *args, **kwargs: None)
    monkeypatch.setattr(delivery, "send_all", send_all)
    return sent
