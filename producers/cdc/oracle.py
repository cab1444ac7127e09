"""The normalized changelog (ARCHITECTURE §6) and the reference semantics of a CDC mirror (ARCHITECTURE §9).

Whatever the wire format (Debezium, DMS), a change decodes to a ``NormalizedChange``; ``apply``
turns any bag of them into the live state of a table. The Spark normalizer and the dbt mirror
must reproduce exactly this: tests compare their output with ``apply`` and with the source
database the simulator keeps.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

OPS = ("I", "U", "D", "R")  # insert, update, delete, read (snapshot / full load)


class InvalidChange(ValueError):
    """A message that claims to be a change but lacks what its format requires.

    The ingestion routes such a record to dead letters as INVALID_CDC_ENVELOPE (ARCHITECTURE §7).
    """


@dataclass(frozen=True)
class NormalizedChange:
    """One committed change of one row, as bronze stores it.

    ``image`` is the after-image, or for a delete the before-image (the only one a delete has).
    ``seq`` totally orders the changes of one key as the source committed them; it is a tuple
    compared element-wise, whose shape depends on the source format:

    - Debezium: ``(phase, commit position, change position)`` (producers.cdc.debezium.sequence;
      ARCHITECTURE §9). For the simulator's PostgreSQL changes, which carry no
      ``source.sequence``: snapshot reads ``(0, lsn, lsn)``, streamed changes ``(1, -1, lsn)``.
      Every change has its own WAL position and the row lock a change holds until commit means
      two transactions cannot interleave changes of the same row, so for one key the WAL order
      of streamed changes is commit order, including two changes of the key inside one
      transaction; the commit timestamp is not usable at all (two transactions can commit in
      the same millisecond).
    - AWS DMS: ``(log order, commit timestamp in µs, stream position, transaction id,
      transaction record id)``. The source's log position (DMS's ``stream-position``, in its log
      order: producers.cdc.dms.log_order, never as text, whose order differs once an offset
      grows a digit) orders the changes: a source server writes its log in commit order. Not the
      commit timestamp, which is the source host's clock: a clock stepped back stamps a later
      commit earlier, and ordered by it the mirror kept the older row. The commit time only
      breaks a tie of positions, which one server never writes for two commits. Never the
      transaction id: a database assigns it when the transaction starts, so of two overlapping
      transactions the one with the lower id can commit second (the simulator does so too). The
      id and the record id only order changes that share a position (one transaction's).

    Only seqs of the same format are ever compared: one table comes from one stream.

    ``before_key``: the key the row had before an update that changed its primary key (DMS: the
    update's ``before-image``); the update then ends the old key as a delete at the same seq
    (``row_changes``), as Debezium's own delete and create of a key change do.
    """

    table: str
    op: str
    key: int
    image: dict = field(hash=False)
    seq: tuple
    source_ts_ms: int | None = None  # commit time at the source; bronze's `SOURCE_TS`
    before_key: int | None = None

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise InvalidChange(f"unknown op {self.op!r}; expected one of {', '.join(OPS)}")
        if self.before_key is not None and self.op != "U":
            raise InvalidChange(f"a {self.op} change has no key before it; only an update changes a key")

    @property
    def changes_key(self) -> bool:
        return self.before_key is not None and self.before_key != self.key


def row_changes(change: NormalizedChange) -> list[NormalizedChange]:
    """The changes of one row each that ``change`` makes: itself, and for an update of the
    primary key first the delete of the old key (at the same seq; its image the old key alone)."""
    if not change.changes_key:
        return [change]
    assert change.before_key is not None
    deleted = NormalizedChange(change.table, "D", change.before_key, {}, change.seq, change.source_ts_ms)
    return [deleted, change]


def latest_by_key(changes: Iterable[NormalizedChange]) -> dict[int, NormalizedChange]:
    """The change with the highest seq per key, deletes included (the mirror with its tombstones).

    Arrival order does not matter and a duplicate is harmless, but two *different* changes with
    the same key and seq mean the seq is not a total order, which would make the mirror depend on
    arrival order: that is an error, not something to pick a winner for.
    """
    latest: dict[int, NormalizedChange] = {}
    table: str | None = None
    for change in (one for given in changes for one in row_changes(given)):
        if table is None:
            table = change.table
        elif change.table != table:
            raise ValueError(f"changes of two tables mixed: {table!r} and {change.table!r}")
        current = latest.get(change.key)
        if current is None or change.seq > current.seq:
            latest[change.key] = change
        elif change.seq == current.seq and change != current:
            raise ValueError(f"two different changes of key {change.key} share seq {change.seq}")
    return latest


def apply(changes: Iterable[NormalizedChange]) -> dict[int, dict]:
    """The live state of one table, {key: row} in key order, from changes in any order.

    Per key the change with the highest seq wins; when that is a delete the key is absent, so a
    late older insert or update cannot bring it back.
    """
    latest = latest_by_key(changes)
    return {key: dict(latest[key].image) for key in sorted(latest) if latest[key].op != "D"}


def strict_int(value: object) -> int:
    """An integer field of a change record; bools and numeric strings are not integers."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return value
