"""Producing a CDC stream: the simulator commits changes, the stream's format encodes them.

Each CDC stream owns a source database file (<state>/cdc/<stream>.db): its table there is the
authoritative state the silver mirror must equal. When a stream's topic or its source
database is new, the stream starts the way a connector does: an initial load of the source written
silently, then a snapshot of it (Debezium `r`, DMS `load`), then live changes.

Faults: re-sends and reordering across partitions are applied to the real change messages
(the mirror must converge anyway); corrupt and invalid messages are *extra* poison messages,
never a replaced change, so the oracle stays exact.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from lakehouse.core.kafka_admin import admin_client, topic_names
from lakehouse.core.settings import Settings
from producers.cdc import debezium, dms
from producers.cdc.faults import duplicate, key_partition, reorder
from producers.cdc.simulator import CdcSimulator
from producers.cdc.source import SimulatorSource
from producers.delivery import DeliveryReport, Outgoing, ensure_topic, produce_to_topic
from producers.faults import FaultRates, fault_random

PARTITIONS = 3
INITIAL_LOAD_TRANSACTIONS = 200
REORDER_WINDOW = 50
CHUNK_TRANSACTIONS = 200
KEY_SPACE = 1000  # primary keys 1..KEY_SPACE: small enough for updates and deletes to hit


# Of the transactions the producer commits, the share that are transfers: an amount moved
# between two accounts in one transaction (CdcSimulator), which a reader must never see halved.
TRANSFER_SHARE = 0.1


@dataclass(frozen=True)
class CdcFormat:
    stream: str
    table: str
    topic: str
    encode: Callable  # (changes, metadata) -> list[(key, value)]; metadata: with transaction metadata
    # the connector's transaction topic and its messages, (changes) -> list[(key, value)]; none
    # for a format without transaction metadata (DMS: ARCHITECTURE §9, "Transactions")
    transaction_topic: str | None = None
    encode_transactions: Callable | None = None


FORMATS = {
    "customers": CdcFormat("customers", "customers", debezium.TOPIC,
                           lambda changes, metadata: debezium.encode_changes(changes, table="customers",
                                                                             metadata=metadata),
                           debezium.TRANSACTION_TOPIC,
                           lambda changes: debezium.encode_transactions(changes, table="customers")),
    "accounts": CdcFormat("accounts", "accounts", dms.TOPIC,
                          lambda changes, metadata: dms.encode_changes(changes, table="accounts")),
}


def source_path(settings: Settings, stream: str) -> Path:
    return settings.home / "cdc" / f"{stream}.db"


def simulator_source(settings: Settings, stream: str) -> SimulatorSource:
    """The simulator's database of a CDC stream, as the truth its mirror is checked against."""
    return SimulatorSource(source_path(settings, stream), FORMATS[stream].table)


def simulator_sources(settings: Settings) -> dict[str, SimulatorSource]:
    """{stream: source} for every CDC stream whose simulator database is on this machine."""
    return {stream: simulator_source(settings, stream) for stream in FORMATS
            if source_path(settings, stream).is_file()}


def poison(kind: str, key: bytes | None, value: bytes | None, rng: random.Random) -> bytes:
    """An unreadable message derived from a real one."""
    if kind == "truncated":
        return (value or b"{}")[: max(1, len(value or b"{}") // 2)]
    if kind == "garbled":
        return b"\xff\xfe\x00" + rng.randbytes(rng.randint(8, 48))
    # invalid_envelope: valid JSON that is no change record of the format
    document = json.loads(value) if value else {}
    document.pop("op", None)
    document.pop("metadata", None)
    return json.dumps(document).encode()


def labelled(messages: list[tuple[bytes | None, bytes | None]], faults: FaultRates,
             rng: random.Random) -> list[Outgoing]:
    """Apply delivery faults to encoded changes and add poison messages, each labelled."""
    sent = duplicate(messages, faults.duplicate, rng) if faults.duplicate else list(messages)
    placed = reorder(sent, faults.out_of_order, rng, REORDER_WINDOW, PARTITIONS)
    seen: set[tuple] = set()
    out: list[Outgoing] = []
    for partition, key, value in placed:
        label = None
        if (key, value) in seen:
            label = "duplicate"
        elif partition != key_partition(key, PARTITIONS):
            label = "out_of_order"  # away from its key's partition: order with its key is lost
        seen.add((key, value))
        out.append(Outgoing(key, value, partition, label))
        draw = rng.random()
        if value is not None and draw < faults.corrupt + faults.invalid:
            kind = rng.choice(["truncated", "garbled"]) if draw < faults.corrupt else "invalid_envelope"
            out.append(Outgoing(key, poison(kind, key, value, rng), partition, kind))
    return out


def messages(settings: Settings, stream: str, count: int | None, faults: FaultRates, seed: int | None,
             duration: float | None, first_start: bool, key_space: int = KEY_SPACE,
             transactions: bool = False, transfer_share: float = 0.0) -> Iterator[Outgoing]:
    """Change messages until ``count`` changes (not counting faults) or ``duration`` seconds.

    ``transactions``: as a connector with transaction metadata, each change names its transaction
    and, after each chunk's changes, come the transaction topic's BEGIN and END of its
    transactions (a format with transaction metadata; Outgoing.topic names the topic, faults never
    touch them); without, as a connector without it. ``transfer_share``: the share of transactions
    that are transfers."""
    fmt = FORMATS[stream]
    path = source_path(settings, stream)
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = fault_random(seed, "cdc-faults")
    started = time.monotonic()
    with CdcSimulator(path, seed=seed, key_space=key_space, start_ms=int(time.time() * 1000),
                      transfer_share=transfer_share) as simulator:
        if first_start:
            simulator.run(INITIAL_LOAD_TRANSACTIONS)  # the database existed before the connector
            yield from labelled(fmt.encode(simulator.snapshot(), transactions), FaultRates(), rng)
        produced = 0
        while (count is None or produced < count) and (
                duration is None or time.monotonic() - started < duration):
            # Never drop a committed change (the oracle has it): near the end, run fewer
            # transactions instead, so the count is met or exceeded by one transaction at most.
            batch = CHUNK_TRANSACTIONS if count is None else max(1, min(CHUNK_TRANSACTIONS, (count - produced) // 4))
            changes = [c for c in simulator.run(batch) if c.table == fmt.table]
            produced += len(changes)
            yield from labelled(fmt.encode(changes, transactions), faults, rng)
            if transactions and fmt.encode_transactions is not None:
                yield from (Outgoing(key, value, topic=fmt.transaction_topic)
                            for key, value in fmt.encode_transactions(changes))


def produce(settings: Settings, count: int | None = None, faults: FaultRates = FaultRates(),
            seed: int | None = None, progress: bool = True, duration: float | None = None,
            rate: float | None = None, *, stream: str, key_space: int = KEY_SPACE) -> DeliveryReport:
    fmt = FORMATS[stream]
    # A connector snapshots when it starts afresh: for a new topic, or a new source database
    # (whose rows the topic would otherwise never carry, while the oracle holds them).
    first_start = (not source_path(settings, stream).exists()
                   or fmt.topic not in topic_names(admin_client(settings), settings))
    if fmt.transaction_topic is not None:  # one partition: the events in commit order, as Debezium's
        ensure_topic(settings, fmt.transaction_topic, partitions=1)
    changes = messages(settings, stream, count, faults, seed, duration, first_start, key_space,
                       transactions=True, transfer_share=TRANSFER_SHARE)
    return produce_to_topic(settings, fmt.topic, changes, faults, PARTITIONS, total=count, progress=progress,
                            rate=rate)
