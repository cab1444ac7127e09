"""Debezium (PostgreSQL connector, JSON converter without schemas) messages of the source tables.

The `customers` stream (ARCHITECTURE §5). Key: ``{"customer_id": N}``; value: the change event
envelope (``before``, ``after``, ``source``, ``op``, ``ts_ms``, and ``transaction``: the connector
runs with provide.transaction.metadata=true). A delete is followed by a tombstone, the same key
with a null value, so that log compaction can drop the key; the ingestion must recognise
tombstones rather than dead-letter them (ARCHITECTURE §6).

The transaction metadata: each streamed change's ``transaction`` block (the transaction's id, the
change's place among its events and among its events of the table, from 1), and a BEGIN and an
END event per transaction on the connector's transaction topic (``TRANSACTION_TOPIC``, one
partition: commit order), END counting the transaction's events per table. A snapshot's reads
carry none, as Debezium's do.

Encoding is generic over the source tables, but only `customers` is streamed this way.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from producers.cdc.oracle import InvalidChange, NormalizedChange, strict_int
from producers.cdc.simulator import Change
from producers.cdc.source import DATABASE, TABLES, key_column

TOPIC = "customers"
TABLE = "customers"
CONNECTOR_VERSION = "2.7.0.Final"
SERVER_NAME = "lakehouse"  # topic.prefix of the connector
SCHEMA = "public"
TRANSACTION_TOPIC = f"{SERVER_NAME}.transaction"  # Debezium's default: <topic.prefix>.transaction

OP_CODES = {"I": "c", "U": "u", "D": "d", "R": "r"}
OPS_BY_CODE = {code: op for op, code in OP_CODES.items()}


def _json(document: dict) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


def encode_key(table: str, key: int) -> bytes:
    return _json({key_column(table): key})


def transaction_id(tx_id: int, lsn: int) -> str:
    """A PostgreSQL connector's transaction id as an event of the transaction carries it: the
    transaction's id and that event's position (a change's LSN; BEGIN's, its first change's; END's,
    its commit), so the events of one transaction share the part before the ':' only, as
    Debezium's do (DBZ-5329)."""
    return f"{tx_id}:{lsn}"


def data_collection(table: str) -> str:
    """How Debezium names a PostgreSQL table in transaction metadata: schema.table."""
    return f"{SCHEMA}.{table}"


def envelope(change: Change, emitted_ms: int | None = None, snapshot: str | None = None,
             transaction: dict | None = None) -> dict:
    """The value of a change event as a dict.

    ``snapshot``: "true", "last" (the final record of a snapshot) or "false"; by default "true"
    for a read and "false" otherwise. ``emitted_ms`` is when the connector processed the change
    (the envelope's own ``ts_ms``); it defaults to the commit time so that encoding is pure.
    """
    if snapshot is None:
        snapshot = "true" if change.op == "R" else "false"
    return {
        "before": change.before,
        "after": change.after,
        "source": {
            "version": CONNECTOR_VERSION,
            "connector": "postgresql",
            "name": SERVER_NAME,
            "ts_ms": change.commit_ts_ms,
            "snapshot": snapshot,
            "db": DATABASE,
            "schema": SCHEMA,
            "table": change.table,
            "txId": change.tx_id,
            "lsn": change.lsn,
        },
        "op": OP_CODES[change.op],
        "ts_ms": change.commit_ts_ms if emitted_ms is None else emitted_ms,
        "transaction": transaction,
    }


def encode_change(
    change: Change,
    emitted_ms: int | None = None,
    snapshot: str | None = None,
    transaction: dict | None = None,
) -> list[tuple[bytes, bytes | None]]:
    """The Kafka (key, value) messages of one change: one, or two for a delete (+ tombstone)."""
    key = encode_key(change.table, change.key)
    messages: list[tuple[bytes, bytes | None]] = [(key, _json(envelope(change, emitted_ms, snapshot, transaction)))]
    if change.op == "D":
        messages.append((key, None))
    return messages


def encode_changes(
    changes: Iterable[Change],
    table: str = TABLE,
    emitted_ms: int | None = None,
    metadata: bool = True,
) -> list[tuple[bytes, bytes | None]]:
    """The messages of every change of ``table``, in the given order, each streamed change with
    its ``transaction`` block (transactions_of: whole transactions in one call); ``metadata``
    False: as a connector without provide.transaction.metadata writes them, no block.

    The last read of each snapshot is marked ``snapshot: "last"`` as Debezium does, which needs
    the whole snapshot in one call.
    """
    selected = [change for change in changes if change.table == table]
    blocks = {id(change): block for transaction in (transactions_of(selected) if metadata else [])
              for change, block in zip(transaction, transaction_blocks(transaction), strict=True)}
    messages: list[tuple[bytes, bytes | None]] = []
    for index, change in enumerate(selected):
        following = selected[index + 1] if index + 1 < len(selected) else None
        ends_snapshot = change.op == "R" and (
            following is None or following.op != "R" or following.tx_id != change.tx_id)
        messages.extend(encode_change(change, emitted_ms, "last" if ends_snapshot else None, blocks.get(id(change))))
    return messages


def transactions_of(changes: list[Change]) -> list[list[Change]]:
    """The streamed (not snapshot) changes grouped by transaction, in commit order: a source
    streams a transaction's changes together, when it commits."""
    groups: list[list[Change]] = []
    for change in changes:
        if change.op == "R":
            continue
        if groups and groups[-1][0].tx_id == change.tx_id:
            groups[-1].append(change)
        else:
            groups.append([change])
    return groups


def transaction_blocks(transaction: list[Change]) -> list[dict]:
    """The ``transaction`` block of each change of one transaction (its changes of the streamed
    tables): its id (with the change's own LSN), the change's place among them and among those of
    its table, from 1."""
    per_table: dict[str, int] = {}
    blocks = []
    for order, change in enumerate(transaction, start=1):
        per_table[change.table] = per_table.get(change.table, 0) + 1
        blocks.append({"id": transaction_id(change.tx_id, change.lsn), "total_order": order,
                       "data_collection_order": per_table[change.table]})
    return blocks


def transaction_events(transaction: list[Change], emitted_ms: int | None = None) -> list[dict]:
    """The BEGIN and END events of one transaction (its changes of the streamed tables), as the
    connector writes them to its transaction topic; END counts the events per table."""
    ts_ms = transaction[0].commit_ts_ms if emitted_ms is None else emitted_ms
    counts: dict[str, int] = {}
    for change in transaction:
        counts[change.table] = counts.get(change.table, 0) + 1
    begin, end = transaction_id(transaction[0].tx_id, transaction[0].lsn), transaction_id(
        transaction[-1].tx_id, transaction[-1].lsn + 1)
    return [{"status": "BEGIN", "id": begin, "ts_ms": ts_ms, "event_count": None, "data_collections": None},
            {"status": "END", "id": end, "ts_ms": ts_ms, "event_count": len(transaction),
             "data_collections": [{"data_collection": data_collection(table), "event_count": count}
                                  for table, count in counts.items()]}]


def encode_transactions(changes: Iterable[Change], table: str = TABLE,
                        emitted_ms: int | None = None) -> list[tuple[bytes, bytes]]:
    """The transaction topic's (key, value) messages for the changes of ``table``: BEGIN and END
    of each transaction that changed it, in commit order (key: the transaction's id)."""
    selected = [change for change in changes if change.table == table]
    return [(_json({"id": event["id"]}), _json(event))
            for transaction in transactions_of(selected) for event in transaction_events(transaction, emitted_ms)]


def decode(key: bytes | None, value: bytes | None) -> NormalizedChange | None:
    """The normalized change of one message; None for a tombstone.

    Raises InvalidChange when the value is not a Debezium change event of a known table.
    """
    if value is None:
        return None
    try:
        event = json.loads(value)
        source = event["source"]
        table = source["table"]
        op = OPS_BY_CODE[event["op"]]
        image = event["before"] if op == "D" else event["after"]
        seq = sequence(source, event["op"])
        source_ts_ms = strict_int(source["ts_ms"])
    except (ValueError, TypeError, KeyError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise InvalidChange(f"not a Debezium change event: {type(exc).__name__}: {exc}") from None
    if not isinstance(table, str) or table not in TABLES or not isinstance(image, dict):
        raise InvalidChange(f"change of table {table!r} without its {'before' if op == 'D' else 'after'} image")
    return NormalizedChange(table, op, _key(key, table, image), image, seq, source_ts_ms)


SNAPSHOT_READS = ("true", "first", "last", "first_in_data_collection", "last_in_data_collection")


def sequence(source: dict, op: str) -> tuple[int, int, int]:
    """A change's place in its source's commit order, ``(phase, commit position, change position)``:
    the oracle of ingestion.formats.debezium.debezium_seq (read there why), written apart from it."""
    if source["connector"] in ("mysql", "mariadb"):
        file_number = int(str(source["file"]).rsplit(".", 1)[1])
        return 1, (file_number << 32) + strict_int(source["pos"]), strict_int(source.get("row") or 0)
    if source["connector"] != "postgresql":
        raise ValueError(f"connector not supported: {source['connector']!r}")
    lsn = strict_int(source["lsn"])
    if op == "r" and source.get("snapshot") in SNAPSHOT_READS:
        return 0, lsn, lsn
    last_commit = json.loads(source["sequence"])[0] if source.get("sequence") is not None else None
    return 1, -1 if last_commit is None else int(last_commit), lsn


def _key(key: bytes | None, table: str, image: dict) -> int:
    """The primary key, from the message key when there is one; it must agree with the image."""
    column = key_column(table)
    try:
        from_image = strict_int(image[column])
        from_key = from_image if key is None else strict_int(json.loads(key)[column])
    except (ValueError, TypeError, KeyError) as exc:
        raise InvalidChange(f"no usable {column} in key or image: {type(exc).__name__}: {exc}") from None
    if from_key != from_image:
        raise InvalidChange(f"message key {column}={from_key} but image {column}={from_image}")
    return from_key
