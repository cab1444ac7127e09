"""The dead-letter table: every record that could not be read, with its bytes and a reason.

Error codes are a closed set (ARCHITECTURE §7); each record is in bronze or here, never both.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
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


def _columns(decoded: DataFrame, stream: str, batch_id: int, ingested_at: Column) -> dict[str, Column]:
    """A decoded batch's columns as dead letters, by name in SCHEMA's order, bytes untouched."""
    return {
        "stream": F.lit(stream),
        "topic": F.col("topic"),
        "partition": F.col("partition").cast("int"),
        "offset": F.col("offset").cast("long"),
        "kafka_timestamp": F.col("timestamp"),
        "key": F.col("key"),
        "value": F.col("value"),
        "error_code": F.col("_error_code"),
        "error_detail": F.col("_error_detail"),
        "schema_id": schema_id(decoded),
        "ingested_at": ingested_at,
        "batch_id": F.lit(batch_id).cast("long"),
        "replayed_at": F.lit(None).cast("timestamp"),
        "replay_attempts": F.lit(None).cast("int"),
        "last_replay_at": F.lit(None).cast("timestamp"),
    }


def to_dead_letters(decoded: DataFrame, stream: str, batch_id: int, ingested_at: Column) -> DataFrame:
    """Dead-letter rows of a decoded batch (rows whose ``_error_code`` is set), bytes untouched."""
    columns = _columns(decoded, stream, batch_id, ingested_at)
    return decoded.where(F.col("_error_code").isNotNull()).select(*[c.alias(n) for n, c in columns.items()])


# What a record's dead letter takes from the record; the other columns are the batch's.
RECORD_COLUMNS = ("topic", "partition", "offset", "kafka_timestamp", "key", "value", "error_code", "error_detail",
                  "schema_id")
_RECORD_SCHEMA = ArrayType(StructType([f for f in SCHEMA.fields if f.name in RECORD_COLUMNS]))
# Microseconds, and the offset: a Kafka timestamp survives the trip through JSON unchanged.
_JSON_OPTIONS = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"}


def collected(decoded: DataFrame) -> Column:
    """An aggregate for ``DataFrame.observe``: the failing records of a decoded batch, as a JSON
    array (bytes in base64), so that the pass that writes bronze also brings the dead letters
    home and the batch is decoded once (ARCHITECTURE §8). The caller bounds the batch's size."""
    columns = _columns(decoded, "", 0, F.lit(None))
    record = F.struct(*[columns[name].alias(name) for name in RECORD_COLUMNS])
    return F.to_json(F.collect_list(F.when(F.col("_error_code").isNotNull(), record)), _JSON_OPTIONS)


def from_collected(spark: SparkSession, rows_json: str, stream: str, batch_id: int, ingested_at: Column) -> DataFrame:
    """The dead letters `collected` brought home, as rows of the dead-letter table."""
    records = (spark.createDataFrame([(rows_json,)], "rows string")
               .select(F.explode(F.from_json("rows", _RECORD_SCHEMA, _JSON_OPTIONS)).alias("r")).select("r.*"))
    batch = {"stream": F.lit(stream), "ingested_at": ingested_at, "batch_id": F.lit(batch_id)}
    return records.select(*[(F.col(f.name) if f.name in RECORD_COLUMNS else batch.get(f.name, F.lit(None)))
                            .cast(f.dataType).alias(f.name) for f in SCHEMA.fields])


def reasons(spark: SparkSession, stream: str, batch_id: int) -> dict[str, int]:
    """The dead letters a committed batch of a stream holds, by error code (for the metrics)."""
    rows = (spark.table(TABLE).where((F.col("stream") == stream) & (F.col("batch_id") == batch_id))
            .groupBy("error_code").count().collect())
    return {row["error_code"]: row["count"] for row in rows}
