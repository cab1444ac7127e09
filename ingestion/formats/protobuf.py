"""Protobuf records, through the project's JVM decoder (ingestion/protobuf_udf.py)."""

from __future__ import annotations

from datetime import datetime

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    StructType,
)

from ingestion.formats.checks import event_time_check, kafka_columns, missing_check, with_errors


def decode_protobuf(raw: DataFrame, function: str, columns: StructType, required: tuple[str, ...],
                    event_time_column: str, now: datetime | None = None) -> DataFrame:
    """Protobuf records through the registered function ``function`` (see
    ingestion/protobuf_udf.py), which returns (payload, error_code, error_detail): CORRUPT_PAYLOAD
    for bytes that are no message, SCHEMA_MISMATCH for a field sent with a wire type its declared
    type cannot take (the detail names its path and both wire types)."""
    parsed = raw.select(*kafka_columns(raw), F.call_function(function, F.col("value")).alias("_decoded"))
    decoded = F.col("_decoded")
    payload, code = decoded["payload"], decoded["error_code"]
    return with_errors(parsed, [payload[f.name].alias(f.name) for f in columns.fields], [
        (code == F.lit("CORRUPT_PAYLOAD"), "CORRUPT_PAYLOAD", decoded["error_detail"]),
        (code == F.lit("SCHEMA_MISMATCH"), "SCHEMA_MISMATCH",
         F.concat(F.lit("wrong wire type for field "), decoded["error_detail"])),
        missing_check(payload, required),
        event_time_check(payload[event_time_column], event_time_column, now),
    ])
