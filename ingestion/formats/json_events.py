"""JSON events, through the project's JVM decoder (ingestion/json_udf.py)."""

from __future__ import annotations

from datetime import datetime

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    MapType,
    StringType,
)

from ingestion.formats.checks import event_time_check, kafka_columns, missing_check, with_errors
from lakehouse.contracts.bronze_columns import (
    RESCUED,
)
from lakehouse.contracts.streams import JsonContract


def decode_json(raw: DataFrame, function: str, contract: JsonContract, event_time_column: str,
                now: datetime | None = None) -> DataFrame:
    """JSON objects through the registered function ``function`` (ingestion/json_udf.py), which
    reads each record once into its declared fields with the strict checks above. Only a record
    with an undeclared key is parsed again, into a map, for ``RESCUED``."""
    parsed = raw.select(*kafka_columns(raw), F.call_function(function, F.col("value")).alias("_decoded"))
    decoded = F.col("_decoded")
    payload = decoded["payload"]
    declared = [field.name for field in contract.schema.fields]
    text = F.col("value").cast("string")
    extra = F.map_filter(F.from_json(text, MapType(StringType(), StringType())), lambda k, _v: ~k.isin(*declared))
    rescued = F.when(decoded["undeclared"], F.to_json(extra))
    return with_errors(parsed, [*[payload[name].alias(name) for name in declared], rescued.alias(RESCUED)], [
        (decoded["not_object"], "CORRUPT_PAYLOAD", F.lit("payload is not a JSON object")),
        (decoded["wrong_fields"].isNotNull(), "SCHEMA_MISMATCH",
         F.concat(F.lit("wrong type for field(s): "), decoded["wrong_fields"])),
        missing_check(payload, contract.required),
        event_time_check(payload[event_time_column], event_time_column, now),
    ])
