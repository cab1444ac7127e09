"""The dead-letter table: every record that could not be read, with its bytes and a reason.

Error codes are a closed set (ARCHITECTURE §7); each record is in bronze or here, never both.
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

from lakehouse.contracts import error_codes

TABLE = "bronze.dead_letters"

ERROR_CODES = error_codes.ERROR_CODES  # the closed set lives in a pyspark-free module

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
    # Replay (`lakehouse dlq replay`, lakehouse/operations/dead_letters/replay.py): set on the dead letter, which stays
    # as the record of what happened. replayed_at is set once its record is in bronze; a
    # record that still fails keeps replayed_at null and gets the new error_code/detail.
    StructField("replayed_at", TimestampType(), True),
    StructField("replay_attempts", IntegerType(), True),
    StructField("last_replay_at", TimestampType(), True),
])
PARTITIONING = ("days(ingested_at)", "stream")


def schema_id(decoded: DataFrame) -> Column:
    """The schema id each decoded record's header names, for formats whose messages carry one
    (Avro in the Confluent wire format: ``_schema_id``); null for the others, and for a record
    too short or without the magic byte to have one."""
    return (F.col("_schema_id") if "_schema_id" in decoded.columns else F.lit(None)).cast("int")


def to_dead_letters(decoded: DataFrame, stream: str, batch_id: int, ingested_at: Column) -> DataFrame:
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
        schema_id(decoded).alias("schema_id"),
        ingested_at.alias("ingested_at"),
        F.lit(batch_id).cast("long").alias("batch_id"),
        F.lit(None).cast("timestamp").alias("replayed_at"),
        F.lit(None).cast("int").alias("replay_attempts"),
        F.lit(None).cast("timestamp").alias("last_replay_at"),
    )
