"""Schema evolution mid-stream: a running query meets new schemas and bronze follows.

A stream of its own pipeline file (LAKEHOUSE_PIPELINE_FILE), so the registry subject and
the schema file can change while the query runs: Avro v2 (a new optional field) and v3 (a
field widened from int to long) registered mid-stream, and a JSON field declared mid-stream.
No record may be lost or dead-lettered, and the job must not need a restart.
"""

import json
import logging
import random
import shutil
import time
from datetime import UTC, datetime

import pytest
import yaml
from pyspark.errors import AnalysisException

from ingestion import job
from ingestion.decoders import decoder_for
from lakehouse.contracts.registry import registry_for
from lakehouse.contracts.streams import get_stream
from producers import avro, purchases, user_events
from producers.delivery import ensure_topic, producer_config

pytestmark = pytest.mark.integration

SCHEMAS = purchases.SCHEMAS_DIR


@pytest.fixture
def pipeline(tmp_path, monkeypatch):
    shutil.copy(SCHEMAS / "purchases-v1.avsc", tmp_path)
    shutil.copy(SCHEMAS / "user_events.schema.json", tmp_path)
    document = {"schema_dir": str(tmp_path), "streams": {
        "evolving_purchases": {"format": "avro", "schema": "purchases-v1.avsc", "event_time": "transaction_time",
                               "identity": ["transaction_id"]},
        "evolving_events": {"format": "json", "schema": "user_events.schema.json", "event_time": "event_timestamp",
                            "identity": ["event_id"]},
    }}
    path = tmp_path / "pipeline.yml"
    path.write_text(yaml.safe_dump(document))
    monkeypatch.setenv("LAKEHOUSE_PIPELINE_FILE", str(path))
    return tmp_path


def send(settings, topic, messages):
    from confluent_kafka import Producer

    ensure_topic(settings, topic)
    producer = Producer(producer_config(settings))
    for key, value in messages:
        producer.produce(topic, value, key)
    assert producer.flush(30) == 0


def wait_for(predicate, what, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}")


def started(spark, settings, name):
    spec = get_stream(name)
    decoder = decoder_for(spark, settings, spec)
    job.ensure_tables(spark, spec, decoder)
    return spec, job.build_query(spark, settings, spec, trigger="1 second", decoder=decoder).start()


def count(spark, table, where="true"):
    """Rows of ``table``, or -1 while a batch widens it under this read: Spark 4.1 refuses a read
    whose table changed between its analysis and its run (INCOMPATIBLE_TABLE_CHANGE_AFTER_ANALYSIS),
    and the polls of `wait_for` read while the stream evolves the table on purpose."""
    try:
        return spark.table(table).where(where).count()
    except AnalysisException as error:
        if "INCOMPATIBLE_TABLE_CHANGE_AFTER_ANALYSIS" not in str(error):
            raise
        return -1


def test_avro_versions_registered_mid_stream_add_and_widen_columns(spark, settings, kafka, pipeline, caplog):
    caplog.set_level(logging.INFO, logger="lakehouse.ingest")
    registry = registry_for(settings)
    subject = "evolving_purchases-value"
    v2_text = purchases.SCHEMAS[2].text
    v3 = json.loads(v2_text)
    for field in v3["fields"]:
        if field["name"] == "quantity":
            field["type"] = "long"  # int -> long: Avro's and Iceberg's lossless promotion
    v3_text = json.dumps(v3)
    rng, now = random.Random(5), datetime.now(UTC)

    def framed(version, text, schema_id, n):
        parsed = avro.parsed(text)
        return [(b"k", avro.encode(purchases.make_purchase(rng, now, version) if version < 3 else
                                   {**purchases.make_purchase(rng, now, 2), "quantity": 2**40},
                                   schema_id, parsed)) for _ in range(n)]

    v1_id = registry.register(subject, purchases.SCHEMAS[1].text)
    send(settings, "evolving_purchases", framed(1, purchases.SCHEMAS[1].text, v1_id, 40))
    spec, query = started(spark, settings, "evolving_purchases")
    try:
        wait_for(lambda: count(spark, spec.bronze_table) == 40, "the v1 records")
        assert "payment_method" not in spark.table(spec.bronze_table).columns
        v2_id, v3_id = registry.register(subject, v2_text), registry.register(subject, v3_text)
        send(settings, "evolving_purchases", framed(2, v2_text, v2_id, 40) + framed(3, v3_text, v3_id, 40))
        wait_for(lambda: count(spark, spec.bronze_table) == 120, "the v2 and v3 records")
    finally:
        query.stop()
    bronze = spark.table(spec.bronze_table)
    assert dict(bronze.dtypes)["quantity"] == "bigint" and "payment_method" in bronze.columns
    assert count(spark, spec.bronze_table, "_error_code is not null") == 0
    by_id = {r._schema_id: r for r in bronze.groupBy("_schema_id").agg({"payment_method": "count", "quantity": "max"})
             .collect()}
    assert by_id[v1_id]["count(payment_method)"] == 0 and by_id[v2_id]["count(payment_method)"] > 0
    assert by_id[v3_id]["max(quantity)"] == 2**40 and by_id[v1_id]["max(quantity)"] <= 5
    assert any("no query restart needed" in r.getMessage() for r in caplog.records)


def test_a_json_field_declared_mid_stream_becomes_a_column(spark, settings, kafka, pipeline):
    rng, now = random.Random(6), datetime.now(UTC)

    def events(n):
        return [(b"k", json.dumps({**user_events.make_event(rng, now), "referrer": "newsletter"}).encode())
                for _ in range(n)]

    send(settings, "evolving_events", events(30))
    spec, query = started(spark, settings, "evolving_events")
    try:
        wait_for(lambda: count(spark, spec.bronze_table) == 30, "the first events")
        assert count(spark, spec.bronze_table, "_rescued like '%referrer%'") == 30  # kept, not dropped
        schema_file = pipeline / "user_events.schema.json"
        document = json.loads(schema_file.read_text())
        document["properties"]["referrer"] = {"type": "string"}
        schema_file.write_text(json.dumps(document))
        send(settings, "evolving_events", events(30))
        wait_for(lambda: count(spark, spec.bronze_table) == 60, "the events after the schema change")
    finally:
        query.stop()
    assert count(spark, spec.bronze_table, "referrer = 'newsletter' and _rescued is null") == 30
    assert count(spark, spec.bronze_table, "_error_code is not null") == 0
