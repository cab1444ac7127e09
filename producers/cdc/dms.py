"""AWS DMS JSON messages (Kafka target endpoint) of the source tables.

The `accounts` stream (ARCHITECTURE §5). Key: the primary key as text (DMS's "primary-key"
partition key type); value: ``{"data": row, "metadata": {...}}``. For a delete, ``data`` is
the before-image, the only image DMS sends for it; an update carries the ``before-image`` of its
key (BeforeImageSettings, pk-only), which tells an update of the primary key from any other.
With ``IncludeTransactionDetails`` the
metadata carries the commit timestamp, the source's log position (``stream-position``), the
transaction id and the record's position in its transaction; the order of changes rests on the
log position (the source's log is in commit order), not the commit timestamp (the source host's
clock, which can step back) and never the transaction id (a database assigns it when the
transaction starts): see NormalizedChange.seq.

Encoding is generic over the source tables, but only `accounts` is streamed this way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from producers.cdc.oracle import InvalidChange, NormalizedChange, strict_int
from producers.cdc.simulator import Change
from producers.cdc.source import DATABASE, TABLES, key_column

TOPIC = "accounts"
BEFORE_IMAGE = "before-image"  # BeforeImageSettings.FieldName the stream expects
TABLE = "accounts"

OPERATIONS = {"I": "insert", "U": "update", "D": "delete", "R": "load"}
OPS_BY_OPERATION = {operation: op for op, operation in OPERATIONS.items()}

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)


def iso_us(epoch_ms: int) -> str:
    """ISO-8601 UTC with microseconds, as DMS writes its timestamps."""
    instant = EPOCH + timedelta(milliseconds=epoch_ms)
    return instant.isoformat(timespec="microseconds").replace("+00:00", "Z")


def epoch_us(text: str) -> int:
    """Microseconds since the epoch of an ISO-8601 instant; exact (integer arithmetic, no float)."""
    instant = datetime.fromisoformat(text)
    if instant.tzinfo is None:
        raise ValueError(f"timestamp without a time zone: {text!r}")
    return (instant - EPOCH) // MICROSECOND


BINLOG_FILE_BYTES = 1 << 16  # the simulated binlog rotates often, so offsets restart and grow in width


def stream_position(lsn: int) -> str:
    """A log position as DMS writes a MySQL source's (AWS's example: ``mysql-bin-changelog.000024:373``):
    the binlog file's number and the offset in it, in decimal of any width. As text,
    ``...:9984`` sorts after ``...:10216``: what reads it must order it as a log position
    (``log_order``), never as text."""
    return f"mysql-bin-changelog.{lsn // BINLOG_FILE_BYTES:06d}:{lsn % BINLOG_FILE_BYTES}"


def log_order(position: str) -> tuple[tuple[int, str], ...]:
    """The reference's order of DMS log positions: the position cut at every character that is
    no letter or digit, each part compared by its width without leading zeros, then as text.
    Decimals of any width then compare as numbers, fixed-width hex (an LSN half) as its text.
    ingestion's log_position_key pads instead; both must agree (tests/integration/test_decode_formats.py)."""
    return tuple((len(part.lstrip("0")), part.lstrip("0")) for part in re.split(r"[^0-9A-Za-z]", position))


def encode_key(key: int) -> bytes:
    return str(key).encode()


def document(change: Change) -> dict:
    commit_time = iso_us(change.commit_ts_ms)
    # BeforeImageSettings {"EnableBeforeImage": true, "FieldName": "before-image",
    # "ColumnFilter": "pk-only"}: every update names the key the row had, so an update of the
    # primary key shows the key it ended
    before = {BEFORE_IMAGE: {key_column(change.table): change.before[key_column(change.table)]}} \
        if change.op == "U" and change.before is not None else {}
    return {
        **before,
        "data": change.before if change.op == "D" else change.after,
        "metadata": {
            "timestamp": commit_time,
            "record-type": "data",
            "operation": OPERATIONS[change.op],
            "partition-key-type": "primary-key",
            "schema-name": DATABASE,
            "table-name": change.table,
            "stream-position": stream_position(change.lsn),
            "transaction-id": change.tx_id,
            "transaction-record-id": change.position,
            "commit-timestamp": commit_time,
        },
    }


def encode_change(change: Change) -> list[tuple[bytes, bytes]]:
    """The Kafka (key, value) messages of one change: always exactly one (DMS sends no tombstones)."""
    value = json.dumps(document(change), separators=(",", ":"), ensure_ascii=False).encode()
    return [(encode_key(change.key), value)]


def encode_changes(changes: Iterable[Change], table: str = TABLE) -> list[tuple[bytes, bytes]]:
    return [message for change in changes if change.table == table for message in encode_change(change)]


def decode(key: bytes | None, value: bytes | None) -> NormalizedChange:
    """The normalized change of one message.

    Raises InvalidChange for anything that is not a DMS data record of a known table (control
    records included: they carry no row).
    """
    try:
        if value is None:
            raise ValueError("no value")
        record = json.loads(value)
        metadata, image = record["metadata"], record["data"]
        if metadata["record-type"] != "data":
            raise ValueError(f"record-type {metadata['record-type']!r}")
        table = metadata["table-name"]
        op = OPS_BY_OPERATION[metadata["operation"]]
        commit_us = epoch_us(metadata["commit-timestamp"])
        position = _text(metadata["stream-position"])
        seq = (log_order(position), commit_us, position, strict_int(metadata["transaction-id"]),
               strict_int(metadata["transaction-record-id"]))
    except (ValueError, TypeError, KeyError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise InvalidChange(f"not a DMS data record: {type(exc).__name__}: {exc}") from None
    if not isinstance(table, str) or table not in TABLES or not isinstance(image, dict):
        raise InvalidChange(f"record of table {table!r} without a data object")
    # `SOURCE_TS` in milliseconds, like Debezium's: both streams then share one event-time type.
    return NormalizedChange(table, op, _key(key, table, image), image, seq, commit_us // 1000,
                            _before_image_key(record, table, op))


def _before_image_key(record: dict, table: str, op: str) -> int | None:
    """The key an update's before-image names (None: the update does not say, the key stayed).

    Without a before-image an update of the primary key cannot be told from any other and the
    old key would stay live in silence: an update without one is refused."""
    if op != "U":
        return None
    before = record.get(BEFORE_IMAGE)
    if not isinstance(before, dict):
        raise InvalidChange(f"update without its {BEFORE_IMAGE} object (BeforeImageSettings)")
    column = key_column(table)
    try:
        return strict_int(before[column]) if column in before else None
    except TypeError as exc:
        raise InvalidChange(f"{BEFORE_IMAGE} {column}: {exc}") from None


def _text(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"expected a non-empty string, got {value!r}")
    return value


def _key(key: bytes | None, table: str, image: dict) -> int:
    column = key_column(table)
    try:
        from_image = strict_int(image[column])
        from_key = from_image if key is None else int(key.decode())
    except (ValueError, TypeError, KeyError) as exc:
        raise InvalidChange(f"no usable {column} in key or data: {type(exc).__name__}: {exc}") from None
    if from_key != from_image:
        raise InvalidChange(f"message key {column}={from_key} but data {column}={from_image}")
    return from_key
