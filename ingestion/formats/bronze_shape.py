"""A decoded batch as bronze rows: every record once, a good one's columns or a dead one's
bytes and reason (ARCHITECTURE §6, §7)."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ingestion.formats.checks import ERROR_COLUMNS, HEADERS_COLUMN, KAFKA_COLUMNS, batch_constant
from lakehouse.contracts import bronze_columns as bronze_columns_declared
from lakehouse.contracts.bronze_columns import (
    BATCH_ID,
    DEAD_AT,
    ERROR_CODE,
    ERROR_DETAIL,
    INGESTED_AT,
    KAFKA_KEY,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_TIMESTAMP,
    KAFKA_TOPIC,
    RAW_HEADERS,
    RAW_KEY,
    RAW_VALUE,
    SCHEMA_ID,
    type_of,
)
from lakehouse.core.sql import quote


def bronze_columns(decoded: DataFrame) -> list[str]:
    """The payload and format columns of a decoded frame: what bronze keeps besides metadata."""
    internal = {*KAFKA_COLUMNS, HEADERS_COLUMN, *ERROR_COLUMNS}
    return [name for name in decoded.columns if name not in internal]


def to_bronze(decoded: DataFrame, batch_id: int, ingested_at: Column) -> DataFrame:
    """Bronze rows of a decoded batch, every record once (ARCHITECTURE §6): a good record's decoded
    columns; a failing record's raw key, value and headers, its reason, and null decoded columns
    (``SCHEMA_ID`` kept: it tells which writer schema failed); both with their Kafka metadata."""
    dead = F.col(ERROR_CODE).isNotNull()
    headers = F.col(HEADERS_COLUMN) if HEADERS_COLUMN in decoded.columns else F.lit(None).cast(HEADERS_TYPE)
    return decoded.select(
        # quoted: a field name may hold `.`
        *[(F.col(quote(name)) if name in KEPT_ON_DEAD_ROWS else F.when(~dead, F.col(quote(name)))).alias(name)
          for name in bronze_columns(decoded)],
        F.col("topic").alias(KAFKA_TOPIC),
        F.col("partition").cast("int").alias(KAFKA_PARTITION),
        F.col("offset").cast("long").alias(KAFKA_OFFSET),
        F.col("timestamp").alias(KAFKA_TIMESTAMP),
        F.col("key").cast("string").alias(KAFKA_KEY),
        ingested_at.alias(INGESTED_AT),
        batch_constant(batch_id).alias(BATCH_ID),
        F.col(ERROR_CODE).cast("string").alias(ERROR_CODE),
        F.col(ERROR_DETAIL).cast("string").alias(ERROR_DETAIL),
        F.when(dead, F.col("key")).alias(RAW_KEY),
        F.when(dead, F.col("value")).alias(RAW_VALUE),
        F.when(dead, headers.cast(HEADERS_TYPE)).alias(RAW_HEADERS),
        F.when(dead, ingested_at).alias(DEAD_AT),
        *[F.lit(None).cast(data_type).alias(name) for name, data_type in REPLAY_COLUMNS],
    )


# A dead row's columns beside the decoded ones (ARCHITECTURE §6, §7); null on a good row that was
# never dead. ``ERROR_CODE`` is also a partition field: a reader of good rows prunes dead rows.
HEADERS_TYPE = type_of(RAW_HEADERS)
DEAD_COLUMNS = bronze_columns_declared.DEAD_COLUMNS
# Replay bookkeeping (`lakehouse dlq replay`): attempts and the last one on a row still dead; on a
# row a replay fixed, also when (``REPLAYED_AT``) and the reason it had (``REPLAYED_ERROR_CODE``).
REPLAY_COLUMNS = tuple((name, type_of(name)) for name in bronze_columns_declared.REPLAY_COLUMNS)
KEPT_ON_DEAD_ROWS = frozenset({SCHEMA_ID})
