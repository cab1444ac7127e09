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
