"""What each micro-batch pays for besides its records: schema look-ups that read nothing
when nothing changed, the lag from the query's own progress, and checks that depend on the
batch alone (so the two passes over a batch classify every record alike)."""

import dataclasses
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ingestion import decoders
from ingestion.formats.json_events import decode_json
from ingestion.job import progress_lag
from ingestion.json_udf import register_json_udf
from lakehouse.contracts.streams import get_stream, json_contract

pytestmark = pytest.mark.integration  # Spark in this process (tests/unit starts no JVM)

SPEC = get_stream("user_events")
EVENT = {"event_id": "e-1", "customer_id": 7, "session_id": "s-7-1", "event_type": "search",
         "event_timestamp": "2026-11-21T12:00:00Z", "page": "/search", "device": "web", "duration_ms": 40}


def test_event_times_are_checked_against_the_batch_timestamp_not_the_clock(spark):
    raw = spark.createDataFrame([(b"k", json.dumps(EVENT).encode(), "user_events", 0, 0, None)],
                                "key binary, value binary, topic string, partition int, offset long, "
                                "timestamp timestamp")
    contract = json_contract(SPEC)
    register_json_udf(spark, "decode_user_events", contract.schema)
    a_day_before = decode_json(raw, "decode_user_events", contract, SPEC.event_time_column,
                               datetime(2026, 11, 20, 11, tzinfo=UTC))
    same_day = decode_json(raw, "decode_user_events", contract, SPEC.event_time_column,
                           datetime(2026, 11, 21, tzinfo=UTC))
    assert a_day_before.collect()[0]._error_code == "EVENT_TIME_OUT_OF_RANGE"
    assert same_day.collect()[0]._error_code is None
    assert "current_timestamp" not in same_day._jdf.queryExecution().analyzed().toString().lower()


def test_a_schema_file_is_read_again_only_when_it_changes(spark, settings, tmp_path, monkeypatch):
    schema = tmp_path / SPEC.schema_path.name
    shutil.copy(SPEC.schema_path, schema)
    decoder = decoders.decoder_for(spark, settings, dataclasses.replace(SPEC, schema_path=schema))
    reads = []
    for method in ("read_bytes", "read_text"):
        original = getattr(Path, method)

        def counted(path, *args, _original=original, **kwargs):
            if path == schema:
                reads.append(path)
            return _original(path, *args, **kwargs)

        monkeypatch.setattr(Path, method, counted)
    decoder.refresh()
    first = len(reads)
    assert first >= 1
    assert decoder.refresh() == [] and decoder.refresh() == []
    assert len(reads) == first, "an unchanged schema file was read again"

    document = json.loads(schema.read_text())
    document["properties"]["referrer"] = {"type": "string"}
    schema.write_text(json.dumps(document))
    assert decoder.refresh() == ["new field referrer string"]


def test_the_lag_comes_from_the_querys_progress():
    progress = {"batchId": 4, "numInputRows": 10, "sources": [{
        "startOffset": {"employees": {"0": 0, "1": 0}},
        "endOffset": {"employees": {"0": 100, "1": 50}},
        "latestOffset": {"employees": {"0": 130, "1": 50, "2": 5}},
    }]}
    assert progress_lag(progress) == 35
    as_text = {**progress, "sources": [{key: json.dumps(value) for key, value in progress["sources"][0].items()}]}
    assert progress_lag(as_text) == 35
    # PySpark 4.1's progress objects give a source's offsets as the text of a Python dict
    as_python_text = {**progress, "sources": [{key: str(value) for key, value in progress["sources"][0].items()}]}
    assert progress_lag(as_python_text) == 35
    assert progress_lag({"batchId": 0, "sources": [{"endOffset": None, "latestOffset": None}]}) is None
    assert progress_lag({"batchId": 0, "sources": []}) is None


def test_the_last_committed_batch_is_read_from_the_snapshot_lineage_without_a_spark_job(spark):
    from ingestion import bronze

    spark.sql("drop table if exists bronze.lineage_probe")
    spark.sql("create table bronze.lineage_probe (x int) using iceberg")
    rows = spark.range(2).selectExpr("cast(id as int) as x")
    bronze.append(spark, "bronze.lineage_probe", rows, "query-a", 4)
    bronze.append(spark, "bronze.lineage_probe", rows, "query-b", 9)
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("lineage-probe", "commit checks")
    try:
        found = {query: bronze._last_batch_in_lineage(spark, "bronze.lineage_probe", query)
                 for query in ("query-a", "query-b", "query-c")}
        assert tracker.getJobIdsForGroup("lineage-probe") == []
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert found == {"query-a": 4, "query-b": 9, "query-c": None}
    assert bronze.committed_batches_in_snapshots(spark, "bronze.lineage_probe") == {"query-a": 4, "query-b": 9}
    spark.sql("drop table bronze.lineage_probe")


def test_maintenance_markers_keep_the_newest_batch_once_its_snapshot_expires(spark):
    """`lakehouse maintain` may expire the snapshot of a query's last batch; the marker it writes
    first keeps the batch, so a replay of it is still skipped (ARCHITECTURE §8)."""
    from ingestion import bronze

    table = "bronze.marker_probe"
    spark.sql(f"drop table if exists {table}")
    spark.sql(f"create table {table} (x int) using iceberg")
    rows = spark.range(2).selectExpr("cast(id as int) as x")
    bronze.append(spark, table, rows, "query-a", 3)
    bronze.append(spark, table, rows, "query-a", 4)
    bronze.append(spark, table, rows, "query-b", 9)
    # an instant an older version kept beside its marker: dropped, nothing reads it now
    spark.sql(f"alter table {table} set tblproperties ('lakehouse.committed-instant.query-a' = '1')")
    assert bronze.record_committed_batches(spark, table) == {"query-a": 4, "query-b": 9}
    properties = {r.key: r.value for r in spark.sql(f"show tblproperties {table}").collect()}
    assert not [key for key in properties if "committed-instant" in key]

    catalog = spark.catalog.currentCatalog()
    spark.sql(f"call {catalog}.system.expire_snapshots(table => '{table}', "
              f"older_than => timestamp '9999-01-01 00:00:00', retain_last => 1)")
    assert set(bronze.committed_batches_in_snapshots(spark, table)) == {"query-b"}  # query-a's are gone
    assert bronze.last_committed_batch(spark, table, "query-a") == 4

    # A query whose checkpoint is gone loses its marker.
    assert bronze.record_committed_batches(spark, table, live_query_ids={"query-b"}) == {"query-b": 9}
    keys = {r.key for r in spark.sql(f"show tblproperties {table}").collect()}
    assert not {k for k in keys if k.endswith("query-a")}
    spark.sql(f"drop table {table}")


@pytest.mark.parametrize("stream, payload, code", [("user_events", b"{}", "MISSING_REQUIRED_FIELD"),
                                                   ("employees", b"\xff", "CORRUPT_PAYLOAD")])
def test_a_batch_in_a_session_of_its_own_is_decoded_by_the_current_function(spark, settings, stream, payload, code):
    # A query's batches come in a clone of the starting session, made when the query starts: a
    # decoding function registered after that (a new schema) must reach the batch's session.
    decoder = decoders.decoder_for(spark, settings, get_stream(stream))
    decoder.refresh()
    batch_session = spark.newSession()
    raw = batch_session.createDataFrame([(b"k", payload, stream, 0, 0, None)],
                                        "key binary, value binary, topic string, partition int, offset long, "
                                        "timestamp timestamp")
    assert decoder.decode(raw, datetime(2026, 11, 21, tzinfo=UTC)).collect()[0]._error_code == code


@pytest.mark.parametrize("stream, module", [("user_events", "register_json_udf"), ("employees", "register_udf")])
def test_a_decoder_started_again_in_the_same_session_registers_nothing(spark, settings, monkeypatch, stream, module):
    # The function's name is per schema version, so a session that has it has the right one.
    # Registering it again replaced it, and Spark logged a warning for every job started again
    # in one session (the benchmarks' repeated runs, the tests).
    decoders.decoder_for(spark, settings, get_stream(stream)).refresh()
    registered = []
    original = getattr(decoders, module)
    monkeypatch.setattr(decoders, module, lambda session, *args: registered.append(args) or original(session, *args))
    again = decoders.decoder_for(spark, settings, get_stream(stream))
    again.refresh()
    raw = spark.createDataFrame([], decoders.KAFKA_SOURCE_SCHEMA)
    again.decode(raw, datetime(2026, 11, 21, tzinfo=UTC)).collect()
    assert registered == []


def _generated_sources(frame) -> list[str]:
    """The Java source Spark generates for a DataFrame's plan, one per whole-stage codegen stage."""
    stages = frame._jdf.queryExecution().debug().codegenToSeq()
    return [stages.apply(i)._2() for i in range(stages.size())]


@pytest.mark.parametrize("stream", ["employees", "purchases", "user_events", "customers", "accounts"])
def test_every_batch_compiles_to_the_same_code(spark, settings, stream):
    """Each batch's plan is built afresh (foreachBatch) with the batch's own instant and id. Spark
    writes number literals into the source it generates, so each batch had classes of its own,
    compiled by Spark and then from cold by the JVM (a fifth of the job's throughput, issue 43).
    The plan of a batch's bronze rows (ingestion.job.bronze_rows, as the job appends them) must
    generate the same source whatever the batch's instant and id, and keep their values."""
    from ingestion.decoders import decoder_for
    from ingestion.job import bronze_rows

    spec = get_stream(stream)
    raw = spark.createDataFrame([(b"k", b"not a record", spec.topic, 0, 7, datetime(2026, 11, 21, tzinfo=UTC))],
                                "key binary, value binary, topic string, partition int, offset long, "
                                "timestamp timestamp")
    decoder = decoder_for(spark, settings, spec)
    first, _ = bronze_rows(decoder, raw, 3, datetime(2026, 11, 21, 12, 0, 0, 123456, tzinfo=UTC))
    second, _ = bronze_rows(decoder, raw, 4, datetime(2026, 11, 21, 12, 0, 31, tzinfo=UTC))
    sources = _generated_sources(first)
    assert sources, "no generated code: the comparison below would pass for nothing"
    assert sources == _generated_sources(second)
    [row] = first.select("_batch_id", "_ingested_at", "_dead_at", "_error_code").collect()
    assert (row._batch_id, row._error_code) == (3, "CORRUPT_PAYLOAD")
    assert row._ingested_at == row._dead_at == datetime(2026, 11, 21, 12, 0, 0, 123456)
    assert second.select("_batch_id").first()._batch_id == 4
