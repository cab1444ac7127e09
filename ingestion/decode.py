"""Pure transformations from Kafka rows to validated records: DataFrame in, DataFrame out.

Input: the Kafka source's columns (key, value, topic, partition, offset, timestamp, ...).
Output of ``decode_json``: the declared payload columns, ``_rescued`` (undeclared fields as a
JSON object), the Kafka columns, and ``_error_code`` / ``_error_detail``, which are null for
a good record and name the reason (DESIGN §7) for one that must go to dead letters.
"""

from __future__ import annotations

import operator
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import MapType, StringType, StructField, StructType

from ingestion.streams import JsonContract

CORRUPT_COLUMN = "_corrupt_record"
KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp")
EARLIEST_EVENT_TIME = "2000-01-01 00:00:00"
MAX_CLOCK_SKEW = "INTERVAL 1 DAY"


def _first_error(checks: list[tuple[Column, str, Column]]) -> tuple[Column, Column]:
    """(code, detail) of the first failing check, in order of precedence; nulls if none fails."""
    code, detail = F.lit(None).cast("string"), F.lit(None).cast("string")
    for failed, error_code, error_detail in reversed(checks):
        code = F.when(failed, F.lit(error_code)).otherwise(code)
        detail = F.when(failed, error_detail).otherwise(detail)
    return code, detail


def _names_where(conditions: dict[str, Column]) -> Column:
    """Comma-separated names whose condition holds (for error details)."""
    return F.concat_ws(", ", *[F.when(cond, F.lit(name)) for name, cond in conditions.items()])


def decode_json(raw: DataFrame, contract: JsonContract, event_time_column: str) -> DataFrame:
    text = F.col("value").cast("string")
    # Parsed twice on purpose: as a loose map (is it a JSON object at all? which keys does it
    # have?) and against the declared schema (typed values; a field that does not convert sets
    # the corrupt-record column while the others keep their values).
    loose = F.from_json(text, MapType(StringType(), StringType()))
    typed_schema = StructType([*contract.schema.fields, StructField(CORRUPT_COLUMN, StringType(), True)])
    typed = F.from_json(text, typed_schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_COLUMN})
    parsed = raw.select(*KAFKA_COLUMNS, loose.alias("_loose"), typed.alias("_typed"))

    declared = [field.name for field in contract.schema.fields]
    loose_col, typed_col = F.col("_loose"), F.col("_typed")
    wrong_type = {
        name: loose_col[name].isNotNull() & typed_col[name].isNull() for name in declared
    }
    missing = {name: typed_col[name].isNull() for name in contract.required}
    event_time = typed_col[event_time_column]
    code, detail = _first_error([
        (loose_col.isNull(), "CORRUPT_PAYLOAD", F.lit("payload is not a JSON object")),
        (typed_col[CORRUPT_COLUMN].isNotNull(), "SCHEMA_MISMATCH",
         F.concat(F.lit("wrong type for field(s): "), _names_where(wrong_type))),
        (reduce(operator.or_, missing.values(), F.lit(False)), "MISSING_REQUIRED_FIELD",
         F.concat(F.lit("missing required field(s): "), _names_where(missing))),
        ((event_time < F.lit(EARLIEST_EVENT_TIME).cast("timestamp"))
         | (event_time > F.current_timestamp() + F.expr(MAX_CLOCK_SKEW)),
         "EVENT_TIME_OUT_OF_RANGE",
         F.concat(F.lit(f"{event_time_column}="), event_time.cast("string"))),
    ])
    extra = F.map_filter(loose_col, lambda k, _v: ~k.isin(*declared))
    rescued = F.when(F.size(extra) > 0, F.to_json(extra))
    return parsed.select(
        *[typed_col[name].alias(name) for name in declared],
        rescued.alias("_rescued"),
        *KAFKA_COLUMNS,
        code.alias("_error_code"),
        detail.alias("_error_detail"),
    )


def to_bronze(decoded: DataFrame, payload_columns: list[str], batch_id: int, ingested_at: Column) -> DataFrame:
    """Bronze rows of a decoded batch: good records with their Kafka metadata (DESIGN §6)."""
    return decoded.where(F.col("_error_code").isNull()).select(
        *payload_columns,
        "_rescued",
        F.col("topic").alias("_kafka_topic"),
        F.col("partition").cast("int").alias("_kafka_partition"),
        F.col("offset").cast("long").alias("_kafka_offset"),
        F.col("timestamp").alias("_kafka_timestamp"),
        F.col("key").cast("string").alias("_kafka_key"),
        ingested_at.alias("_ingested_at"),
        F.lit(batch_id).cast("long").alias("_batch_id"),
    )
