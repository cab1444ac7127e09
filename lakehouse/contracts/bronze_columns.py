"""Bronze's own columns: the one declaration of their names and types (ARCHITECTURE §6, §7).

Every bronze table has these beside its payload columns: the Kafka record's coordinates, the
batch that read it, the dead-row columns and the replay state (§7); a CDC stream's table also
the changelog's columns (§6, "CDC changelog shape"). Python imports the names from here; dbt
reads them from the var ``bronze_columns`` in dbt_project.yml (`dbt_var`, which a unit test
holds equal to this module); YAML that must spell a name is checked against `COLUMNS` by the
same test (tests/unit/test_bronze_columns.py). No pyspark here: the contracts floor reads it too.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BronzeColumn:
    """``key``: its name in the dbt var (``var('bronze_columns').<key>``); ``type``: Spark SQL,
    empty where the stream's format decides it (a CDC order key's or before-image's struct)."""

    key: str
    name: str
    type: str


def _column(key: str, name: str, type_: str) -> str:
    COLUMNS[key] = BronzeColumn(key, name, type_)
    return name


COLUMNS: dict[str, BronzeColumn] = {}

# The Kafka record's coordinates: its identity, and when and with which key it was written.
KAFKA_TOPIC = _column("kafka_topic", "_kafka_topic", "string")
KAFKA_PARTITION = _column("kafka_partition", "_kafka_partition", "int")
KAFKA_OFFSET = _column("kafka_offset", "_kafka_offset", "bigint")
KAFKA_TIMESTAMP = _column("kafka_timestamp", "_kafka_timestamp", "timestamp")
KAFKA_KEY = _column("kafka_key", "_kafka_key", "string")
# The micro-batch that read it: its instant (a replay's, for a replayed row) and id.
INGESTED_AT = _column("ingested_at", "_ingested_at", "timestamp")
BATCH_ID = _column("batch_id", "_batch_id", "bigint")
# Avro only: the writer schema id of the Confluent header (kept on a dead row).
SCHEMA_ID = _column("schema_id", "_schema_id", "int")
# JSON, Debezium, DMS: the fields the contract lacks, as a JSON object.
RESCUED = _column("rescued", "_rescued", "string")
# A dead row (§7): its reason (null on a good row; a partition field), the bytes, when.
ERROR_CODE = _column("error_code", "_error_code", "string")
ERROR_DETAIL = _column("error_detail", "_error_detail", "string")
RAW_KEY = _column("raw_key", "_raw_key", "binary")
RAW_VALUE = _column("raw_value", "_raw_value", "binary")
RAW_HEADERS = _column("raw_headers", "_raw_headers", "array<struct<key: string, value: binary>>")
DEAD_AT = _column("dead_at", "_dead_at", "timestamp")
# Replay state (§7): on every row a replay touched; the last two on a row it fixed.
REPLAY_ATTEMPTS = _column("replay_attempts", "_replay_attempts", "int")
LAST_REPLAY_AT = _column("last_replay_at", "_last_replay_at", "timestamp")
REPLAYED_AT = _column("replayed_at", "_replayed_at", "timestamp")
REPLAYED_ERROR_CODE = _column("replayed_error_code", "_replayed_error_code", "string")
# A CDC stream's changelog (§6, §9).
OP = _column("op", "op", "string")
SOURCE_TS = _column("source_ts", "_source_ts", "timestamp")
SEQ = _column("seq", "_seq", "")
IS_TOMBSTONE = _column("is_tombstone", "_is_tombstone", "boolean")
BEFORE_KEY = _column("before_key", "_before_key", "")
UNAVAILABLE = _column("unavailable", "_unavailable", "array<string>")
# Debezium with provide.transaction.metadata: the change's transaction (its id, the change's place
# among the transaction's events and among its events of this table); null without metadata.
TRANSACTION = _column("transaction", "_transaction",
                      "struct<id: string, total_order: bigint, data_collection_order: bigint>")

KAFKA_COORDINATES = (KAFKA_TOPIC, KAFKA_PARTITION, KAFKA_OFFSET)  # a record's identity
DEAD_COLUMNS = (ERROR_CODE, ERROR_DETAIL, RAW_KEY, RAW_VALUE, RAW_HEADERS, DEAD_AT)
REPLAY_COLUMNS = (REPLAY_ATTEMPTS, LAST_REPLAY_AT, REPLAYED_AT, REPLAYED_ERROR_CODE)
CDC_COLUMNS = (OP, SOURCE_TS, SEQ, IS_TOMBSTONE, UNAVAILABLE, BEFORE_KEY, TRANSACTION)
# Every event stream's metadata (CDC's changelog columns apart); `_kafka_*` names are all bronze's.
METADATA_COLUMNS = (RESCUED, SCHEMA_ID, INGESTED_AT, BATCH_ID, *DEAD_COLUMNS, *REPLAY_COLUMNS)
KAFKA_PREFIX = KAFKA_TOPIC[:len("_kafka_")]

# A bronze table's good rows, and its dead ones (a replay that fixes a row clears its reason).
GOOD = f"{ERROR_CODE} is null"
DEAD = f"{ERROR_CODE} is not null"


def type_of(name: str) -> str:
    """The declared Spark SQL type of bronze's own column ``name``."""
    return next(column.type for column in COLUMNS.values() if column.name == name)


def dbt_var() -> dict[str, str]:
    """The var ``bronze_columns`` dbt_project.yml holds: {key: name}."""
    return {key: column.name for key, column in COLUMNS.items()}
