"""A Kafka that wants SASL: one set of LAKEHOUSE_KAFKA_OPT_* variables serves both clients.

The producers (librdkafka) take `sasl.username`/`sasl.password` as they are; Spark's Java
client needs a JAAS login instead (Settings.java_kafka_options). Here the real broker gets a
SASL_PLAINTEXT listener with PLAIN users, and the same settings produce through it and
ingest from it; wrong credentials are refused, so the listener really checks them.
"""

from __future__ import annotations

import dataclasses

import pytest

from ingestion import job
from lakehouse.core import local_kafka
from lakehouse.core.errors import LakehouseError
from lakehouse.core.kafka_admin import admin_client, topic_names
from lakehouse.core.settings import Settings
from producers.run import produce
from tests.integration.own_lakehouse import own_lakehouse

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

USER, PASSWORD = "ingest", "s3cret-with-\"quote"
EVENTS = 300


@pytest.fixture(scope="module")
def sasl_lakehouse(spark, settings, tmp_path_factory):
    """An own lakehouse whose broker also listens with SASL/PLAIN on a second port."""
    sasl_port = local_kafka.free_port()
    plain_properties = local_kafka.server_properties

    def with_sasl(data_dir, port, controller_port):
        text = plain_properties(data_dir, port, controller_port)
        text = text.replace(f"listeners=PLAINTEXT://127.0.0.1:{port},",
                            f"listeners=PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port},")
        text = text.replace(f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
                            f"advertised.listeners=PLAINTEXT://127.0.0.1:{port},"
                            f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}")
        text = text.replace("listener.security.protocol.map=PLAINTEXT:PLAINTEXT,",
                            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,")
        # JAAS escapes the quote with a backslash, and the properties file that backslash again.
        escaped = PASSWORD.replace('"', '\\\\"')
        return text + "\n".join([
            "sasl.enabled.mechanisms=PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config="
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="admin" password="admin-secret" user_admin="admin-secret" user_{USER}="{escaped}";',
            "",
        ])

    local_kafka.server_properties = with_sasl
    try:
        with own_lakehouse(spark, settings, tmp_path_factory, "sasl") as (own, session, _):
            assert f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}" in (own.kafka_dir / "server.properties").read_text()
            sasl = Settings.from_env({
                "LAKEHOUSE_HOME": str(own.home), "LAKEHOUSE_SHUFFLE_PARTITIONS": "2",
                "LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{sasl_port}",
                "LAKEHOUSE_KAFKA_OPT_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                "LAKEHOUSE_KAFKA_OPT_SASL_MECHANISM": "PLAIN",
                "LAKEHOUSE_KAFKA_OPT_SASL_USERNAME": USER,
                "LAKEHOUSE_KAFKA_OPT_SASL_PASSWORD": PASSWORD,
            })
            yield sasl, session
    finally:
        local_kafka.server_properties = plain_properties


def test_wrong_credentials_are_refused(sasl_lakehouse):
    sasl, _ = sasl_lakehouse
    wrong = dataclasses.replace(sasl, kafka_options={**sasl.kafka_options, "sasl.password": "guess"})
    with pytest.raises(LakehouseError, match=f"Kafka at {sasl.kafka_bootstrap_servers} refused the credentials "
                                              r"\(LAKEHOUSE_KAFKA_OPT_SASL_USERNAME / _PASSWORD\): .*Invalid username"):
        topic_names(admin_client(wrong), wrong)


def test_produce_and_ingest_through_sasl_with_one_set_of_options(sasl_lakehouse):
    sasl, session = sasl_lakehouse
    assert "sasl.jaas.config" in sasl.java_kafka_options()  # what Spark's client is given
    report = produce(sasl, "user_events", EVENTS, seed=3, progress=False)  # librdkafka, SASL
    assert (report.delivered, report.failed) == (EVENTS, 0)
    job.run(session, sasl, ["user_events"], available_now=True)  # Spark's Java client, SASL
    bronze = session.table("bronze.user_events")
    assert bronze.count() == EVENTS
    assert bronze.select("_kafka_partition", "_kafka_offset").distinct().count() == EVENTS
