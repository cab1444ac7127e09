"""Bad ingestion configuration stops `lakehouse ingest` with one line naming the problem,
before Spark starts (so in a second or two, with no stack trace)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ingestion.job import kafka_read_options, normalize_trigger
from lakehouse.contracts.streams import load_pipeline
from lakehouse.core.errors import LakehouseError
from lakehouse.core.local_kafka import free_port
from lakehouse.core.settings import Settings

STREAM = {"format": "json", "schema": "user_events.schema.json", "event_time": "event_timestamp",
          "identity": ["event_id"]}
SCHEMAS = Path(__file__).resolve().parents[2] / "lakehouse" / "contracts" / "schemas"


def ingest(tmp_path, streams: dict, *args: str) -> subprocess.CompletedProcess:
    pipeline = tmp_path / "pipeline.yml"
    pipeline.write_text(yaml.safe_dump({"schema_dir": str(SCHEMAS), "streams": streams}))
    env = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path / "home"), "LAKEHOUSE_PIPELINE_FILE": str(pipeline),
           "LAKEHOUSE_KAFKA_PORT": str(free_port())}  # nothing listens there
    command = [str(Path(sys.executable).with_name("lakehouse")), "ingest", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("streams, args, message", [
    ({"events": STREAM}, ["clicks"], "unknown stream 'clicks'; configured streams: events"),
    ({"events": {**STREAM, "schema": "nowhere.schema.json"}}, ["events"], "schema file of stream 'events' not found"),
    ({"events": {**STREAM, "format": "xml"}}, ["events"], "unknown format 'xml'"),
    ({"events": {**STREAM, "format": "avro"}}, ["events"], "a avro stream takes a .avsc schema"),
    ({"events": {**STREAM, "colour": "red"}}, ["events"], "unknown setting(s) colour"),
    ({"events": {**STREAM, "format": "dms", "schema": "accounts.schema.json", "identity": ["a", "b"]}}, ["events"],
     "streams.events.identity: a dms stream takes a one-column key, got a, b (a composite key needs Debezium)"),
    ({"events": {k: v for k, v in STREAM.items() if k != "identity"}}, ["events"], "`identity` is required"),
    # names that would end their identifier, or the statement, in the DDL
    ({"events": {**STREAM, "bronze_table": "bronze.ev`ents"}}, ["events"],
     "streams.events.bronze_table: invalid table name 'bronze.ev`ents': expected namespace.table"),
    ({"events": {**STREAM, "bronze_table": "bronze.events; drop table bronze.purchases"}}, ["events"],
     "invalid table name 'bronze.events; drop table bronze.purchases'"),
    ({"events": {**STREAM, "bronze_table": "events"}}, ["events"], "invalid table name 'events'"),
    ({"my events": STREAM}, ["my events"],
     "streams.my events: the stream name does not make a valid table name (bronze.my events): set `bronze_table`"),
    # a connector's transaction topic, and the streams that name it (issue 58, item 3)
    ({"events": {**STREAM, "transactions": "tx"}, "tx": {"format": "debezium_transactions"}}, ["events"],
     "streams.events.transactions: only a debezium stream has transaction metadata"),
    ({"events": {**STREAM, "format": "debezium", "schema": "customers.schema.json", "identity": ["customer_id"],
                 "transactions": "other"}, "other": STREAM}, ["events"],
     "streams.events.transactions: 'other' is not a debezium_transactions stream of this file"),
    ({"tx": {"format": "debezium_transactions", "schema": "x.json"}}, ["tx"],
     "streams.tx: a debezium_transactions stream takes only topic, bronze_table and partitions"),
    ({"tx": {"format": "debezium_transactions", "partitions": 3}}, ["tx"],
     "streams.tx.partitions: a transaction topic has one partition (its events in commit order), got 3"),
    ({"events": STREAM}, ["events", "--trigger", "soon"], "invalid trigger interval 'soon'"),
    ({"events": STREAM}, ["events"], "cannot reach Kafka at 127.0.0.1:"),
])
def test_bad_configuration_is_one_clear_line(tmp_path, streams, args, message):
    result = ingest(tmp_path, streams, *args)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr


def test_the_shipped_pipeline_declares_every_demo_stream():
    streams = load_pipeline()
    assert {name: spec.format for name, spec in streams.items()} == {
        "employees": "protobuf", "purchases": "avro", "user_events": "json", "customers": "debezium",
        "accounts": "dms", "cdc_transactions": "debezium_transactions"}
    assert all(spec.schema_path.is_file() for spec in streams.values() if not spec.is_transactions)
    assert streams["customers"].transactions == "cdc_transactions"
    assert streams["cdc_transactions"].topic == "lakehouse.transaction"
    assert streams["customers"].partitioning == ("days(_ingested_at)", "_error_code")
    assert streams["cdc_transactions"].partitioning == ("days(_ingested_at)", "_error_code")
    assert streams["purchases"].partitioning == ("days(`transaction_time`)", "_error_code")


@pytest.mark.parametrize("text, expected", [("30s", "30 seconds"), ("500ms", "500 milliseconds"),
                                            ("2m", "2 minutes"), ("1 minute", "1 minutes"), ("1h", "1 hours")])
def test_trigger_intervals(text, expected):
    assert normalize_trigger(text) == expected


def test_a_bad_trigger_is_refused():
    with pytest.raises(LakehouseError, match="invalid trigger"):
        normalize_trigger("30 parsecs")


def test_the_job_reads_committed_records_only(tmp_path):
    def options(extra: dict) -> dict:
        return kafka_read_options(Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), **extra}))

    assert "isolation.level" not in options({})  # the job adds read_committed itself (kafka_source)
    assert options({"LAKEHOUSE_KAFKA_OPT_ISOLATION_LEVEL": "read_committed"})["isolation.level"] == "read_committed"
    with pytest.raises(LakehouseError, match="isolation.level=read_uncommitted not supported: the job reads "
                                             "read_committed only"):
        options({"LAKEHOUSE_KAFKA_OPT_ISOLATION_LEVEL": "read_uncommitted"})


@pytest.mark.parametrize("topics, names, expected", [
    # the customers stream brings its connector's transaction topic, once that topic exists
    ({"customers", "lakehouse.transaction"}, ["customers"], ["customers", "cdc_transactions"]),
    ({"customers"}, ["customers"], ["customers"]),  # not yet: left out, with a warning
    ({"employees"}, ["employees"], ["employees"]),  # no stream of it names one
    ({"lakehouse.transaction"}, ["all"], ["accounts", "cdc_transactions", "customers", "employees", "purchases",
                                          "user_events"]),
    (set(), ["all"], ["accounts", "customers", "employees", "purchases", "user_events"]),
    (set(), ["cdc_transactions"], ["cdc_transactions"]),  # named: its topic is checked as any other's
])
def test_a_debezium_stream_is_ingested_with_its_transaction_stream_once_its_topic_exists(
        monkeypatch, caplog, topics, names, expected):
    from ingestion import job

    monkeypatch.setattr(job, "admin_client", lambda settings: None)
    monkeypatch.setattr(job, "topic_names", lambda admin, settings: topics)
    settings = Settings.from_env({"LAKEHOUSE_HOME": "/nonexistent"})
    with caplog.at_level("WARNING", logger="lakehouse.ingest"):
        assert job.with_transaction_streams(settings, names) == expected
    left_out = "cdc_transactions" not in expected and (names == ["all"] or "customers" in names)
    assert ("the transaction topic lakehouse.transaction does not exist yet" in caplog.text) == left_out
