import json
import re

import pytest
import yaml
from pyspark.sql.types import LongType, StringType, TimestampType

from lakehouse.contracts.streams import get_stream, json_contract, load_pipeline
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
        # a CDC contract declares no _source_ts: it is the changelog's own column
        _contract_of(tmp_path, fmt, {"id": {"type": "integer"}, **({} if fmt == "debezium" else {
            "_source_ts": {"type": "string"}}), "x": prop})


def test_a_field_the_source_added_is_typed_from_its_connect_schema_else_its_json_type():
    from lakehouse.contracts.streams import added_field

    assert added_field([("int32", None, None, "BIGINT")]) == {"type": "integer"}
    assert added_field([("float64", None, None, "DOUBLE")]) == {"type": "number"}
    assert added_field([("int64", "io.debezium.time.MicroTimestamp", None, "BIGINT")]) == {
        "type": "string", "format": "date-time", "x-debezium-type": "io.debezium.time.MicroTimestamp"}
    assert added_field([("bytes", "org.apache.kafka.connect.data.Decimal",
                         {"scale": "2", "connect.decimal.precision": "10"}, "STRING")]) == {
        "type": "string", "format": "decimal(10,2)", "x-debezium-type": "org.apache.kafka.connect.data.Decimal"}
    assert added_field([("string", None, None, "STRING")]) == {"type": "string"}
    # without schemas: the values' JSON types; an integer and a fraction make a number
    assert added_field([(None, None, None, "BIGINT"), (None, None, None, "DECIMAL(3,1)")]) == {"type": "number"}
    assert added_field([(None, None, None, "STRING"), (None, None, None, "VOID")]) == {"type": "string"}
    # no column type holds these as they are: they stay in _rescued
    for seen in ([(None, None, None, "VOID")], [(None, None, None, "STRING"), (None, None, None, "BIGINT")],
                 [(None, None, None, "OBJECT<a: BIGINT>")], [("struct", None, None, "OBJECT<a: BIGINT>")],
                 [("bytes", None, None, "STRING")],
                 [("struct", "io.debezium.data.VariableScaleDecimal", None, "OBJECT<scale: BIGINT, value: STRING>")]):
        assert added_field(seen) is None, seen


def one_stream_pipeline(tmp_path):
    """spec(**entry): the stream `t` of a pipeline file holding only it (one integer column, id)."""
    (tmp_path / "t.schema.json").write_text(json.dumps({"properties": {"id": {"type": "integer"}}}))

    def spec(**entry):
        document = {"streams": {"t": {"schema": "t.schema.json", "event_time": "_source_ts", "identity": "id",
                                      **entry}}}
        (tmp_path / "p.yml").write_text(yaml.safe_dump(document))
        return load_pipeline(tmp_path / "p.yml")["t"]
    return spec


def test_the_contract_mode_is_additive_for_cdc_by_default_and_fixed_on_request(tmp_path):
    spec = one_stream_pipeline(tmp_path)
    assert spec(format="debezium").adds_fields and spec(format="dms").adds_fields
    assert not spec(format="debezium", contract="fixed").adds_fields
    assert not spec(format="json", event_time="id").adds_fields
    with pytest.raises(LakehouseError, match="contract: additive applies to debezium and dms streams only"):
        spec(format="json", event_time="id", contract="additive")
    with pytest.raises(LakehouseError, match="contract: expected one of additive, fixed, got 'open'"):
        spec(format="dms", contract="open")


def test_a_debezium_stream_names_its_connectors_unavailable_value_placeholder(tmp_path):
    spec = one_stream_pipeline(tmp_path)
    assert spec(format="debezium").unavailable_placeholder == "__debezium_unavailable_value"
    assert spec(format="debezium", unavailable_placeholder="<toasted>").unavailable_placeholder == "<toasted>"
    with pytest.raises(LakehouseError, match="t.unavailable_placeholder: only a debezium stream has one"):
        spec(format="dms", unavailable_placeholder="<toasted>")
    with pytest.raises(LakehouseError, match="t.unavailable_placeholder: expected the text of the connector's"):
        spec(format="debezium", unavailable_placeholder="")


def test_added_fields_join_the_contract_after_its_own_and_never_replace_them():
    spec = get_stream("customers")
    contract = json_contract(spec, {"tier": {"type": "integer"}, "level": {"type": "integer"},
                                    "joined": {"type": "string", "format": "date",
                                               "x-debezium-type": "io.debezium.time.Date"}})
    names = contract.schema.fieldNames()
    assert names[-2:] == ["level", "joined"] and names.count("tier") == 1
    assert contract.schema["tier"].dataType.simpleString() == "string"  # the file's own declaration
    assert contract.schema["joined"].dataType.simpleString() == "date"
    assert contract.semantic_fields["joined"] == ("date", "io.debezium.time.Date")


def test_an_event_contract_may_declare_the_changelogs_names_but_not_the_kafka_columns(tmp_path):
    """`op` is a CDC changelog's own column, not an event stream's; `timestamp` is the decoded
    batch's Kafka column in every stream (declared, the batch was ambiguous)."""
    event = {"id": {"type": "integer"}, "_source_ts": {"type": "string", "format": "date-time"}}
    assert "op" in _contract_of(tmp_path, "json", {**event, "op": {"type": "string"}}).schema.fieldNames()
    with pytest.raises(LakehouseError, match="stream 't' declares timestamp, a name bronze gives a column of its own"):
        _contract_of(tmp_path, "json", {**event, "timestamp": {"type": "string"}})


def test_a_column_renamed_from_its_source_reads_the_field_of_the_source_name(tmp_path):
    """`lakehouse cdc add --rename-columns value=reading` (issue 56): the contract declares
    `reading`, read from the change events' field `value`; a name bronze keeps for itself is
    fine as a field's, never as a column's."""
    contract = _contract_of(tmp_path, "debezium", {
        "id": {"type": "integer"}, "reading": {"type": "number", "x-source-column": "value"},
        "read_at": {"type": "string", "format": "date-time", "x-source-column": "timestamp"},
        "same": {"type": "string", "x-source-column": "same"}})
    assert contract.schema.fieldNames() == ["id", "reading", "read_at", "same"]
    assert contract.source_names == {"reading": "value", "read_at": "timestamp"}
    assert contract.wire_schema.fieldNames() == ["id", "value", "timestamp", "same"]
    assert contract.semantic_fields == {"read_at": ("timestamp", None)}


@pytest.mark.parametrize("fmt, properties, message", [
    ("debezium", {"a": {"type": "string", "x-source-column": "note"}, "note": {"type": "string"}},
     "the row field(s) note would be read by two columns (x-source-column)"),
    ("debezium", {"a": {"type": "string", "x-source-column": "x"}, "b": {"type": "string", "x-source-column": "x"}},
     "the row field(s) x would be read by two columns"),
    ("debezium", {"a": {"type": "string", "x-source-column": ""}}, "a: x-source-column: expected the source column"),
    ("dms", {"a": {"type": "string", "x-source-column": "value"}}, "a: x-source-column applies to debezium streams"),
    ("debezium", {"value": {"type": "string", "x-source-column": "reading"}}, "declares value, a name bronze gives"),
])
def test_a_bad_source_column_is_one_clear_line(tmp_path, fmt, properties, message):
    with pytest.raises(LakehouseError, match=re.escape(message)):
        _contract_of(tmp_path, fmt, {"id": {"type": "integer"}, **properties})
