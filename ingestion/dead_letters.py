"""The dead-letter table: every record that could not be read, with its bytes and a reason.

Error codes are a closed set (DESIGN §7); each record is in bronze or here, never both.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

TABLE = "bronze.dead_letters"

ERROR_CODES = {
    "CORRUPT_PAYLOAD": "the bytes are not a readable message of the stream's format",
    "SCHEMA_MISMATCH": "a field has a value of the wrong type for the declared schema",
    "MISSING_REQUIRED_FIELD": "a field the schema requires is absent or null",
    "EVENT_TIME_OUT_OF_RANGE": "the event time is implausible (before 2000 or more than a day ahead)",
    "UNKNOWN_SCHEMA_ID": "the registry schema id in the message header is not known",
    "INVALID_CDC_ENVELOPE": "a change record lacks the envelope fields its format requires",
}

SCHEMA = StructType([
    StructField("stream", StringType(), False),
    StructField("topic", StringType(), False),
    StructField("partition", IntegerType(), False),
    StructField("offset", LongType(), False),
    StructField("kafka_timestamp", TimestampType(), True),
    StructField("key", BinaryType(), True),
    StructField("value", BinaryType(), True),
    StructField("error_code", StringType(), False),
    StructField("error_detail", StringType(), True),
    StructField("schema_id", IntegerType(), True),
    StructField("ingested_at", TimestampType(), False),
    StructField("batch_id", LongType(), False),
])
PARTITIONING = ("days(ingested_at)", "stream")


def to_dead_letters(
    decoded: DataFrame, stream: str, batch_id: int, ingested_at: Column, schema_id: Column | None = None,
) -> DataFrame:
    """Dead-letter rows of a decoded batch (rows whose ``_error_code`` is set), bytes untouched."""
    return decoded.where(F.col("_error_code").isNotNull()).select(
        F.lit(stream).alias("stream"),
        F.col("topic"),
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("long").alias("offset"),
        F.col("timestamp").alias("kafka_timestamp"),
        F.col("key"),
        F.col("value"),
        F.col("_error_code").alias("error_code"),
        F.col("_error_detail").alias("error_detail"),
        (schema_id if schema_id is not None else F.lit(None)).cast("int").alias("schema_id"),
        ingested_at.alias("ingested_at"),
        F.lit(batch_id).cast("long").alias("batch_id"),
    )
