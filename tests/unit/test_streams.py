import re

import pytest
from pyspark.sql.types import LongType, StringType, TimestampType

from lakehouse.contracts.streams import get_stream, json_contract
from lakehouse.core.errors import LakehouseError


def test_json_schema_becomes_the_bronze_payload_columns():
    contract = json_contract(get_stream("user_events"))
    types = {f.name: f.dataType for f in contract.schema.fields}
    assert types["event_id"] == StringType()
    assert types["customer_id"] == LongType()
    assert types["event_timestamp"] == TimestampType()
    assert contract.required == ("event_id", "event_type", "event_timestamp")


def test_unknown_stream_names_the_configured_ones():
    with pytest.raises(LakehouseError, match="unknown stream 'clicks'.*user_events"):
        get_stream("clicks")


def _contract_of(tmp_path, fmt: str, properties: dict):
    import json

    import yaml

    from lakehouse.contracts.streams import load_pipeline

    (tmp_path / "t.schema.json").write_text(json.dumps({"type": "object", "properties": properties}))
    pipeline = tmp_path / "pipeline.yml"
    pipeline.write_text(yaml.safe_dump({"streams": {"t": {
        "format": fmt, "schema": "t.schema.json", "event_time": "_source_ts", "identity": ["id"]}}}))
    return json_contract(load_pipeline(pipeline)["t"])


def test_decimal_time_and_debezium_semantic_types_are_declared_in_the_json_schema(tmp_path):
    from pyspark.sql.types import DecimalType

    contract = _contract_of(tmp_path, "debezium", {
        "id": {"type": "integer"},
        "amount": {"type": "number", "format": "decimal(12,2)",
                   "x-debezium-type": "org.apache.kafka.connect.data.Decimal"},
        "at": {"type": "string", "format": "date-time", "x-debezium-type": "io.debezium.time.MicroTimestamp"},
        "wake": {"type": "string", "format": "time"},
        "name": {"type": "string"},
    })
    assert contract.schema["amount"].dataType == DecimalType(12, 2)
    assert contract.schema["wake"].dataType == StringType()
    assert contract.semantic_fields == {"amount": ("decimal", "org.apache.kafka.connect.data.Decimal"),
                                        "at": ("timestamp", "io.debezium.time.MicroTimestamp"),
                                        "wake": ("time", None)}


@pytest.mark.parametrize("fmt, prop, message", [
    ("debezium", {"type": "number", "format": "decimal(40,2)"},
     "not decimal(precision, scale) with 1 <= precision <= 38"),
    ("debezium", {"type": "number", "format": "decimal(2,3)"}, "0 <= scale <= precision"),
    ("debezium", {"type": "string", "format": "date", "x-debezium-type": "io.debezium.time.MicroTimestamp"},
     "x: x-debezium-type 'io.debezium.time.MicroTimestamp' does not fit the declared type; it takes: "
     "io.debezium.time.Date, org.apache.kafka.connect.data.Date"),
    ("debezium", {"type": "string", "x-debezium-type": "io.debezium.time.Date"},
     "declare a date-time, date, time or decimal"),
    ("json", {"type": "string", "format": "date", "x-debezium-type": "io.debezium.time.Date"},
     "x-debezium-type applies to debezium streams only"),
])
def test_a_bad_type_declaration_is_one_clear_line(tmp_path, fmt, prop, message):
    with pytest.raises(LakehouseError, match=re.escape(message)):
        _contract_of(tmp_path, fmt, {"id": {"type": "integer"}, "_source_ts": {"type": "string"}, "x": prop})
