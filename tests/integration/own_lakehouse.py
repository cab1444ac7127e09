"""A lakehouse of a test module's own: state folder, catalog, warehouse, broker, Spark session.

For tests whose topics and tables must start empty and stay apart from the session's
shared lakehouse (tests/conftest.py). The jars are linked, never fetched again.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from lakehouse.core import local_kafka
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings
from lakehouse.core.spark import ensure_namespaces, session_on


@contextmanager
def own_lakehouse(spark, settings: Settings, tmp_path_factory, name: str, rest: bool = False, s3: bool = False,
                  extra_env: dict[str, str] | None = None, publication_gate: bool = False,
                  ) -> Iterator[tuple[Settings, object, Path]]:
    """(its settings, a Spark session on its catalog, a dbt target folder); its broker runs
    until the block ends. ``rest``: the catalog is an Iceberg REST catalog server (the cluster
    profile's kind) instead of the JDBC catalog on SQLite; ``s3``: its warehouse is
    s3://lakehouse/warehouse on an S3-compatible store, whose keys are then in this process's
    environment (and so in every `lakehouse` command started with cli_env) until the block ends.
    ``extra_env``: more settings of the lakehouse (LAKEHOUSE_SCHEMA_REGISTRY_URL, say).
    ``publication_gate``: off unless asked: these lakehouses hold synthetic rows (tiers, regions,
    operations the project's quality suites do not accept), and a test that is not about
    publication is about what dbt builds; the tests of the gate, of publication and the demo's
    keep it on (the production default)."""
    home = tmp_path_factory.mktemp(f"{name}-home")
    (home / "jars").symlink_to(settings.jars_dir.resolve())
    env = {"LAKEHOUSE_HOME": str(home), "LAKEHOUSE_SHUFFLE_PARTITIONS": "2",
           "LAKEHOUSE_PUBLICATION_GATE": "on" if publication_gate else "off", **(extra_env or {})}
    with ExitStack() as stack:
        store, warehouse = None, f"file://{home}/warehouse"
        if s3:
            from tests.integration.s3_store import s3_store

            store = stack.enter_context(s3_store(settings.jars_dir, home / "s3-store", ["lakehouse"]))
            warehouse = "s3://lakehouse/warehouse"
            env.update({"LAKEHOUSE_WAREHOUSE": warehouse, "LAKEHOUSE_S3_ENDPOINT": store.endpoint})
            saved = {key: os.environ.get(key) for key in store.env()}
            os.environ.update(store.env())
            stack.callback(_restore_environment, saved)
            # This test process's Spark JVM started before the keys existed: its AWS SDK reads
            # them from Java system properties (first in the SDK's default chain) instead.
            system = spark._jvm.java.lang.System
            system.setProperty("aws.accessKeyId", store.access_key)
            system.setProperty("aws.secretAccessKey", store.secret_key)
            stack.callback(system.clearProperty, "aws.secretAccessKey")
            stack.callback(system.clearProperty, "aws.accessKeyId")
        if rest:
            from tests.integration.rest_catalog import rest_catalog

            uri = stack.enter_context(rest_catalog(settings.jars_dir, home / "rest-catalog", warehouse, s3=store))
            env.update({"LAKEHOUSE_CATALOG_TYPE": "rest", "LAKEHOUSE_CATALOG_URI": uri})
        own = start_broker_on_a_free_port(env)
        stack.callback(local_kafka.stop, own)
        session = session_on(spark, own)
        ensure_namespaces(session)
        yield own, session, tmp_path_factory.mktemp(f"{name}-dbt")


def start_broker_on_a_free_port(env: dict[str, str], attempts: int = 3) -> Settings:
    """The lakehouse's settings, its broker started on a port that was free. A port found free
    may be taken before the broker binds it (another process's outgoing connection draws its
    local port from the same range; seen once in a two-worker run): then another port, up to
    ``attempts``."""
    for attempt in range(1, attempts + 1):
        own = Settings.from_env({**env, "LAKEHOUSE_KAFKA_PORT": str(local_kafka.free_port())})
        try:
            local_kafka.start(own)
            return own
        except LakehouseError as exc:
            log = own.kafka_dir / "logs" / "server.log"
            taken = "is already in use" in str(exc) or (  # taken before the start, or before the bind
                log.exists() and f"bind to 127.0.0.1:{own.kafka_port}: Address already in use" in log.read_text())
            if attempt == attempts or not taken:
                raise
    raise ValueError("attempts must be at least 1")


def lakehouse_fixture(name: str, publication_gate: bool = False):
    """A module's fixture of a lakehouse of its own named ``name`` (own_lakehouse), for its tests
    to share: ``lake = lakehouse_fixture("dlq-replay")``."""

    @pytest.fixture(scope="module")
    def lake(spark, settings: Settings, tmp_path_factory):
        with own_lakehouse(spark, settings, tmp_path_factory, name, publication_gate=publication_gate) as lakehouse:
            yield lakehouse

    return lake


def _restore_environment(saved: dict[str, str | None]) -> None:
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def cli_env(own: Settings) -> dict[str, str]:
    """The environment that points a `lakehouse` command at that lakehouse."""
    return {**os.environ, "LAKEHOUSE_HOME": str(own.home), "LAKEHOUSE_KAFKA_PORT": str(own.kafka_port),
            "LAKEHOUSE_SHUFFLE_PARTITIONS": "2", "LAKEHOUSE_CATALOG_TYPE": own.catalog_type,
            "LAKEHOUSE_PUBLICATION_GATE": own.publication_gate,
            "LAKEHOUSE_CATALOG_URI": own.catalog_uri, "LAKEHOUSE_WAREHOUSE": own.warehouse,
            "LAKEHOUSE_S3_ENDPOINT": own.s3_endpoint, "LAKEHOUSE_SCHEMA_REGISTRY_URL": own.schema_registry_url}


def ingest_purchases(own: Settings, session, count: int, seed: int) -> None:
    """`count` purchases (Avro, no faults) produced to the lakehouse's broker and ingested into
    bronze (an available-now run of the job), for tests of what dbt makes of them."""
    ingest(own, session, {"purchases": count}, seed)


def ingest(own: Settings, session, counts: dict[str, int], seed: int) -> None:
    """{stream: count} of purchases (Avro) and user events (JSON), no faults, produced to the
    lakehouse's broker and ingested into bronze by one available-now run of the job."""
    from ingestion import job
    from lakehouse.contracts.registry import registry_for
    from producers import purchases, user_events
    from producers.delivery import produce_to_topic
    from producers.faults import FaultRates

    for stream, count in counts.items():
        if stream == "purchases":
            messages = purchases.messages(count, purchases.register_schemas(registry_for(own)), seed)
        else:
            assert stream == "user_events", stream
            messages = user_events.messages(count, seed=seed)
        report = produce_to_topic(own, stream, messages, FaultRates(), total=count, progress=False)
        assert report.failed == 0
    job.run(session, own, list(counts), available_now=True)
