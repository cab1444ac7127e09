"""Debezium's transaction metadata events (provide.transaction.metadata=true) into bronze.

A connector writes a BEGIN and an END event per source transaction to its transaction topic
(``<topic.prefix>.transaction``, one partition: commit order); END counts the transaction's events
in all (``event_count``) and per table (``data_collections``). Each change event carries its
transaction's id in its ``transaction`` block (ingestion/formats/debezium.py, bronze's
TRANSACTION). Together they tell a transaction whose every change is in bronze from one still
arriving: what the CDC models' transaction watermark reads (ARCHITECTURE §9, "Transactions").

Bronze keeps each event as it came: ``status``, ``id``, ``event_count``, ``data_collections``
(null on BEGIN) and ``event_ts`` (the event's ``ts_ms``); a field Debezium adds that these lack
(a later version's) in ``RESCUED``, as JSON, never dropped. A record that is not such an event is
a dead letter, never a row that could complete a transaction.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType

from ingestion.formats.changelog import TEXT_MAP, json_envelope, schema_wrapper, unwrapped
from ingestion.formats.checks import CORRUPT_COLUMN, any_of, kafka_columns, names_where, with_errors
from lakehouse.contracts.bronze_columns import RESCUED

EVENT = StructType([
    StructField("status", StringType()), StructField("id", StringType()), StructField("event_count", LongType()),
    StructField("data_collections", ArrayType(StructType([StructField("data_collection", StringType()),
                                                          StructField("event_count", LongType())]))),
    StructField("ts_ms", LongType()),
])
# bronze's columns of a transactions stream, in order (the bronze table's payload)
COLUMNS = ("status", "id", "event_count", "data_collections", "event_ts")


def decode_debezium_transactions(raw: DataFrame) -> DataFrame:
    """Transaction events (JSON, with or without schemas) -> one row each; see the module."""
    loose, typed = json_envelope(StructType([*EVENT.fields, *schema_wrapper(EVENT).fields]))
    parsed = raw.select(*kafka_columns(raw), loose.alias("_loose"), typed.alias("_typed"))
    event = unwrapped(F.col("_typed"), StructType([*EVENT.fields, StructField(CORRUPT_COLUMN, StringType())]),
                      wrapper_fields=[f.name for f in EVENT.fields])
    parsed = parsed.select(*kafka_columns(parsed), "_loose", event.alias("_event"))
    event, loose = F.col("_event"), F.col("_loose")
    # the event's own fields, inside `payload` when schemas are enabled
    fields = F.when(loose["schema"].isNotNull() & loose["payload"].isNotNull(),
                    F.from_json(loose["payload"], TEXT_MAP)).otherwise(loose)
    unknown = F.map_filter(fields, lambda name, _value: ~name.isin(*EVENT.fieldNames()))
    end = event["status"] == F.lit("END")
    counts = event["data_collections"]
    gaps = {
        "status (BEGIN or END)": ~F.coalesce(event["status"].isin("BEGIN", "END"), F.lit(False)),
        "id": event["id"].isNull() | (event["id"] == F.lit("")),
        "ts_ms": event["ts_ms"].isNull(),
        # an END must say how many events its transaction has, in all and per table, and agree
        "END's event_count and data_collections": end & (
            event["event_count"].isNull() | counts.isNull()
            | F.exists(counts, lambda c: c["data_collection"].isNull() | c["event_count"].isNull()
                       | (c["event_count"] < 0))
            | (F.aggregate(counts, F.lit(0).cast("long"), lambda total, c: total + c["event_count"])
               != event["event_count"])),
    }
    return with_errors(parsed, [
        event["status"].alias("status"), event["id"].alias("id"),
        F.when(end, event["event_count"]).alias("event_count"),
        F.when(end, counts).alias("data_collections"),
        F.timestamp_millis(event["ts_ms"]).alias("event_ts"),
        F.when(F.size(unknown) > 0, F.to_json(unknown)).alias(RESCUED),
    ], [
        (F.col("value").isNull(), "INVALID_CDC_ENVELOPE", F.lit("a transaction event without a value")),
        (F.col("_loose").isNull(), "CORRUPT_PAYLOAD", F.lit("payload is not a JSON object")),
        (event[CORRUPT_COLUMN].isNotNull(), "SCHEMA_MISMATCH",
         F.lit("a field of the transaction event has a value of the wrong type")),
        (any_of(gaps.values()), "INVALID_CDC_ENVELOPE",
         F.concat(F.lit("not a Debezium transaction event, missing or invalid: "), names_where(gaps))),
    ])
