"""A producer outlives a broker outage: what it sent while the broker was down is delivered once
the broker is back, and nothing is counted as failed without a reason.

The default run's short chaos story stops the broker while producers send; how long the broker
takes to come back depends on the machine's load. A producer that stopped waiting after a fixed
time (60 s) counted the messages the client was still retrying as failed, with no reason, and
the story failed now and then ("could not deliver 1330: []").
"""

from __future__ import annotations

import threading
import time

import pytest

from lakehouse.core import local_kafka
from lakehouse.core.settings import Settings
from producers.delivery import ensure_topic, send_all
from producers.message import Outgoing

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

# Longer than the fixed flush window the producer used to have (60 s), shorter than the client's
# message.timeout.ms (300 s by default), after which a message fails with its reason.
OUTAGE_S = 75


def test_messages_sent_during_an_outage_are_delivered_after_it(tmp_path, settings):
    (tmp_path / "jars").symlink_to(settings.jars_dir.resolve())
    own = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_KAFKA_PORT": str(local_kafka.free_port())})
    local_kafka.start(own, log=lambda _: None)
    try:
        ensure_topic(own, "outage", partitions=1)
        local_kafka.stop(own, log=lambda _: None)
        messages = [Outgoing(f"k{n}".encode(), f"v{n}".encode(), 0, None) for n in range(20)]
        reports = []
        sender = threading.Thread(target=lambda: reports.append(
            send_all(own, "outage", messages, total=len(messages), progress=False)), daemon=True)
        sender.start()
        time.sleep(OUTAGE_S)  # the outage's length is what this test is about, not a wait for an event
        assert sender.is_alive(), "the producer gave up while the broker was down"
        local_kafka.start(own, log=lambda _: None)
        sender.join(120)
        assert not sender.is_alive(), "the producer did not finish after the broker came back"
        report = reports[0]
        assert (report.sent, report.delivered, report.failed) == (20, 20, 0), report
    finally:
        local_kafka.stop(own, log=lambda _: None)
