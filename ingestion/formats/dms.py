"""AWS DMS JSON records into the changelog shape, ordered by the source's log position."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    LongType,
    StringType,
    StructField,
    StructType,
)

from ingestion.formats.changelog import json_envelope, lookup, rescued, to_changelog, wrong_type_detail
from ingestion.formats.checks import CORRUPT_COLUMN, any_of, kafka_columns, names_where
from ingestion.formats.strict_json import strict_parse_schema, with_strict_image
from lakehouse.contracts.bronze_columns import (
    BEFORE_KEY,
)
from lakehouse.contracts.streams import JsonContract

DMS_OPS = {"insert": "I", "update": "U", "delete": "D", "load": "R"}
# BeforeImageSettings.FieldName a DMS stream is expected to use (producers/cdc/dms.py)
BEFORE_IMAGE = "before-image"


def _dms_key(key_text: Column, identity: tuple[str, ...], image: StructType) -> Column:
    """The primary key a DMS message key carries: the bare value of a one-column key."""
    (name,) = identity
    return F.struct(key_text.cast(image[name].dataType).alias(name))


# a number in a log position left-padded to this width sorts as text in numeric order; wider
# than any offset, LSN half or counter a database writes (2^64 has 20 digits)
LOG_POSITION_WIDTH = 20


def log_position_key(position: Column) -> Column:
    """A DMS ``stream-position`` in a form whose text order is log order.

    AWS documents what the position is (the source's log position), not its text, and the text
    differs by engine: MySQL's binlog file and offset (``mysql-bin-changelog.000024:373``, the
    offset in decimal of any width), PostgreSQL's fixed-width hex LSNs around a record counter in
    decimal (``00000002/7C007178.3.00000002/7C007178``). Compared as text, ``...:9984`` sorts
    after ``...:10216``. Every part between separators (characters that are no letter or digit)
    that is a number, decimal or hex, is left-padded with zeros to LOG_POSITION_WIDTH: decimals
    then compare as numbers, and fixed-width hex keeps its order (padding equal widths equally
    changes nothing; a hex part of digits only, 70000000, is padded as 7C000000 is). Names
    (``mysql-bin-changelog``) and separators stay as they were.
    """
    parts = F.split(position, r"(?<=[^0-9A-Za-z])|(?=[^0-9A-Za-z])")  # parts and separators apart
    return F.array_join(F.transform(parts, lambda part: F.when(
        part.rlike("^[0-9A-Fa-f]+$") & (F.length(part) < LOG_POSITION_WIDTH),
        F.lpad(part, LOG_POSITION_WIDTH, "0")).otherwise(part)), "")


def decode_dms(raw: DataFrame, row: JsonContract, identity: tuple[str, ...], source_table: str) -> DataFrame:
    """AWS DMS JSON records -> changelog. DMS sends no tombstones: a null value is invalid.

    ``SEQ`` is (log position, commit time in µs, stream position, transaction id, record
    position in the transaction): the source's log position orders the changes, as the source
    committed them (one server writes its log in commit order); the commit time, the source
    host's clock, which can step back, only breaks a tie of positions; never the transaction id,
    which a database assigns at transaction start (ARCHITECTURE §9; producers/cdc/oracle.py).
    ``log_position`` is ``stream-position`` in a form
    that sorts as text in log order (``log_position_key``); ``stream_position`` keeps it as DMS
    wrote it. A record without a position is INVALID_CDC_ENVELOPE, like one without its
    transaction id: the endpoint setting that gives one (``IncludeTransactionDetails``) gives the
    other.

    ``BEFORE_KEY`` is the key an update's ``before-image`` names (BeforeImageSettings; null for
    other ops, or a key field the image leaves out): silver's changelog turns an update of the
    primary key into a delete of the old key and the new key's row. An update without a
    before-image is INVALID_CDC_ENVELOPE.
    """
    image_schema = row.schema
    key_schema = StructType([StructField(name, image_schema[name].dataType) for name in identity])
    envelope = StructType([
        StructField("data", strict_parse_schema(image_schema)),
        StructField(BEFORE_IMAGE, key_schema),
        StructField("metadata", StructType([
            StructField(name, LongType() if name.startswith("transaction") else StringType())
            for name in ("timestamp", "record-type", "operation", "schema-name", "table-name",
                         "stream-position", "transaction-id", "transaction-record-id", "commit-timestamp")])),
    ])
    loose, typed = json_envelope(envelope)
    parsed = raw.select(*kafka_columns(raw), loose.alias("_loose"), typed.alias("_env"),
                        _dms_key(F.col("key").cast("string"), identity, image_schema).alias("_key"))
    env, metadata = F.col("_env"), F.col("_env.metadata")
    op = lookup(DMS_OPS, metadata["operation"])
    committed = metadata["commit-timestamp"].cast("timestamp")
    parsed, image, wrong_type = with_strict_image(parsed, env["data"], image_schema)
    envelope_gaps = {
        "metadata": metadata.isNull(), "data": image.isNull(), "operation": op.isNull(),
        "commit-timestamp": committed.isNull(),
        "stream-position": F.coalesce(metadata["stream-position"] == "", F.lit(True)),
        "transaction-id": metadata["transaction-id"].isNull(),
        "transaction-record-id": metadata["transaction-record-id"].isNull(),
    }
    return to_changelog(
        parsed, image_schema, identity, op, image,
        source_ts=committed,
        seq=F.struct(log_position_key(metadata["stream-position"]).alias("log_position"),
                     F.unix_micros(committed).alias("commit_us"),
                     metadata["stream-position"].alias("stream_position"),
                     metadata["transaction-id"].alias("transaction_id"),
                     metadata["transaction-record-id"].alias("record_id")),
        tombstone=F.lit(False), message_key=F.col("_key"),
        # the key an update's before-image names: the changelog view ends it when it differs
        extra=[F.when(op == "U", env[BEFORE_IMAGE]).alias(BEFORE_KEY)],
        rescued_fields=rescued(F.col("_loose"), "dms", image_schema),
        checks=[
            (F.col("value").isNull(), "INVALID_CDC_ENVELOPE", F.lit("no value (DMS sends no tombstones)")),
            (F.col("_loose").isNull(), "CORRUPT_PAYLOAD", F.lit("payload is not a JSON object")),
            (~metadata["record-type"].eqNullSafe(F.lit("data")), "INVALID_CDC_ENVELOPE",
             F.concat(F.lit("not a DMS data record: record-type "),
                      F.coalesce(metadata["record-type"], F.lit("missing")))),
            (any_of(envelope_gaps.values()), "INVALID_CDC_ENVELOPE",
             F.concat(F.lit("not a DMS data record, missing or invalid: "), names_where(envelope_gaps))),
            # without it an update of the primary key cannot be told from another, and the
            # old key would stay live in silence
            ((op == "U") & env[BEFORE_IMAGE].isNull() & env[CORRUPT_COLUMN].isNull(), "INVALID_CDC_ENVELOPE",
             F.lit(f"update without its {BEFORE_IMAGE} object (BeforeImageSettings)")),
            (~metadata["table-name"].eqNullSafe(F.lit(source_table)), "INVALID_CDC_ENVELOPE",
             F.concat(F.lit(f"record of another table (expected {source_table}): "),
                      F.coalesce(metadata["table-name"], F.lit("none")))),
            (env[CORRUPT_COLUMN].isNotNull() | any_of(wrong for wrong, _ in wrong_type.values()), "SCHEMA_MISMATCH",
             wrong_type_detail("a field of the record has a value of the wrong type", wrong_type)),
        ],
    )
