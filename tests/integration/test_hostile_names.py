"""Names from schemas and pipeline files are data, in real Spark: a JSON stream whose schema
declares fields named to break out of their identifier (tests/unit/test_hostile_names.py's
names, whose quoting it checks without Spark): the decoder, the bronze table's DDL, its
evolution and the append must keep each one a single column, with its value, and create nothing
else. An Avro or Protobuf field named like one of bronze's own columns is refused when the
decoder loads the schema.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
import yaml
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from ingestion import bronze
from ingestion.decoders import KAFKA_SOURCE_SCHEMA, decoder_for
from ingestion.formats.bronze_shape import to_bronze
from lakehouse.contracts.streams import get_stream, load_pipeline
from lakehouse.core.errors import LakehouseError
from tests.unit.test_hostile_names import BREAKOUT, DOTTED, EVENT_TIME, SPACED

pytestmark = pytest.mark.integration  # Spark in this process (tests/unit starts no JVM)


@pytest.fixture
def hostile_stream(tmp_path, monkeypatch):
    """A JSON stream whose schema's field names (and event-time column) are hostile."""
    schema = {"type": "object", "required": ["id"], "properties": {
        "id": {"type": "string"},
        EVENT_TIME: {"type": "string", "format": "date-time"},
        BREAKOUT: {"type": "string"},
        SPACED: {"type": "integer"},
        DOTTED: {"type": "string"},
    }}
    (tmp_path / "hostile.schema.json").write_text(json.dumps(schema))
    pipeline = tmp_path / "pipeline.yml"
    pipeline.write_text(yaml.safe_dump({"schema_dir": str(tmp_path), "streams": {"hostile": {
        "format": "json", "schema": "hostile.schema.json", "event_time": EVENT_TIME, "identity": ["id"],
        "bronze_table": "bronze.hostile_names"}}}))
    monkeypatch.setenv("LAKEHOUSE_PIPELINE_FILE", str(pipeline))
    assert load_pipeline()["hostile"].partitioning == ("days(`event ``time```)", "_error_code")
    return get_stream("hostile")


def test_hostile_field_names_survive_as_columns(spark, settings, hostile_stream):
    spec = hostile_stream
    spark.sql("drop table if exists bronze.hostile_names purge")
    decoder = decoder_for(spark, settings, spec)
    decoder.refresh()
    assert bronze.ensure_table(spark, spec.bronze_table, decoder.bronze_schema(), spec.partitioning) == [
        "created bronze.hostile_names"]
    payload = {"id": "r-1", EVENT_TIME: "2026-11-20T10:00:00Z", BREAKOUT: "kept", SPACED: 7, DOTTED: "dot"}
    raw = spark.createDataFrame(
        [(b"k", json.dumps(payload).encode(), "hostile", 0, 0, datetime(2026, 11, 20, tzinfo=UTC), 0)],
        KAFKA_SOURCE_SCHEMA)
    now = datetime(2026, 11, 21, tzinfo=UTC)
    rows = to_bronze(decoder.decode(raw, now), 1, F.lit(now).cast("timestamp"))
    bronze.append(spark, spec.bronze_table, rows, "query-1", 1)

    table = spark.table(spec.bronze_table)
    payload_columns = [c for c in table.columns if not c.startswith("_")]
    assert payload_columns == ["id", EVENT_TIME, BREAKOUT, SPACED, DOTTED]  # no "injected", nothing split
    [row] = table.collect()
    assert (row["id"], row[BREAKOUT], row[SPACED], row[DOTTED]) == ("r-1", "kept", 7, "dot")
    assert row[EVENT_TIME] == datetime(2026, 11, 20, 10, 0)  # session time zone is UTC
    described = {r.col_name: r.data_type for r in spark.sql("describe table bronze.hostile_names").collect()}
    assert described["Part 0"] == spec.partitioning[0] == "days(`event ``time```)"  # the column itself

    # evolution: a new top-level and a new nested field, as hostile, each one column again
    nested = StructType([StructField(BREAKOUT, StringType())])
    evolved = StructType([*bronze.conform_to_schema(rows, table.schema).schema.fields,
                          StructField("n`ew, `x", LongType()), StructField("inner", nested)])
    assert bronze.evolve_table(spark, spec.bronze_table, evolved)
    wider = StructType([*evolved.fields[:-1], StructField("inner", StructType([
        *nested.fields, StructField(SPACED, LongType())]))])
    assert bronze.evolve_table(spark, spec.bronze_table, wider) == [
        "bronze.hostile_names: add column `inner`.`a``b c` bigint"]
    schema = spark.table(spec.bronze_table).schema
    assert [f.name for f in schema.fields if not f.name.startswith("_")] == [
        "id", EVENT_TIME, BREAKOUT, SPACED, DOTTED, "n`ew, `x", "inner"]
    assert [f.name for f in schema["inner"].dataType.fields] == [BREAKOUT, SPACED]
    spark.sql("drop table bronze.hostile_names purge")


def test_hostile_nested_names_in_a_new_table(spark):
    spark.sql("drop table if exists bronze.hostile_nested purge")
    schema = StructType([StructField("id", StringType()),
                         StructField("s", StructType([StructField("x>y, z: int", StringType()),
                                                      StructField(BREAKOUT, LongType())]))])
    bronze.ensure_table(spark, "bronze.hostile_nested", schema, ("id",))
    assert spark.table("bronze.hostile_nested").schema == schema
    spark.sql("drop table bronze.hostile_nested purge")


AVRO_WITH_OWN_NAME = {"type": "record", "name": "Tick", "namespace": "t", "fields": [
    {"name": "id", "type": "string"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "offset", "type": "long"}]}  # bronze's own Kafka column of the record's offset


def test_an_avro_or_protobuf_field_named_like_a_bronze_column_is_refused_in_one_line(
        spark, settings, tmp_path, monkeypatch):
    """A field named like one of bronze's own columns (`offset`, `timestamp`, `_error_code`...)
    cannot be a column beside them: the decoded record and the Kafka metadata would hold two
    columns of one name. JSON contracts were refused; an Avro or Protobuf schema got as far as the
    first batch and stopped the stream with an ambiguous-column error from Spark. Now the schema is
    refused when the decoder loads it, with one line naming the field."""
    employees = get_stream("employees")
    (tmp_path / "tick.avsc").write_text(json.dumps(AVRO_WITH_OWN_NAME))
    pipeline = tmp_path / "pipeline.yml"
    pipeline.write_text(yaml.safe_dump({"schema_dir": str(tmp_path), "streams": {"ticks": {
        "format": "avro", "schema": "tick.avsc", "event_time": "at", "identity": ["id"],
        "bronze_table": "bronze.ticks"}}}))
    monkeypatch.setenv("LAKEHOUSE_PIPELINE_FILE", str(pipeline))
    with pytest.raises(LakehouseError, match=r"^tick\.avsc: stream 'ticks' declares offset, a name bronze gives a "
                                             r"column of its own: rename the field"):
        decoder_for(spark, settings, get_stream("ticks")).refresh()

    from ingestion import decoders

    payload = StructType([StructField("id", LongType()), StructField("timestamp", StringType())])
    monkeypatch.setattr(decoders, "udf_result_schema", lambda *args: StructType([StructField("payload", payload)]))
    with pytest.raises(LakehouseError, match=r"^Employee\.proto: stream 'employees' declares timestamp, a name bronze "
                                             r"gives a column of its own"):
        decoder_for(spark, settings, employees).refresh()
