"""The CDC oracle check: does a live silver mirror equal its source database, row for row?

The source comes in through :class:`MirrorSource`, so this check knows no database: the demo's
CDC simulator (producers.cdc.source.SimulatorSource) is one implementation, and any database
a mirror is fed from can be another. A source spells its own rows and the live mirror's rows
the same way (names, text instants, decimal text), so the two compare exactly. The demo
prints the verdict; the integration tests assert it (docs/ARCHITECTURE.md §9); the quality
suite ``silver.<stream>.source`` validates :func:`source_comparison` (expectations.suites).

Content, not counts: each row becomes a digest of its values (:func:`row_hash`), one per key
on each side, and the digests are compared; only the digests are kept, the live table is
spelled and hashed an Arrow batch at a time. A count would pass a mirror with the right
number of rows and a wrong value.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

EXAMPLES = 5  # differing keys named in a check's verdict
BATCH_ROWS = 10_000  # live rows spelled and hashed at a time
# What differs at a key (the text after the key in the quality suite's sample).
MISSING = "missing from the mirror"
EXTRA = "not in the source"
DIFFERENT = "values differ"
DUPLICATED = "live rows more than keys (a key in several rows)"


class MirrorSource(Protocol):
    """The source table a CDC stream mirrors: the truth its live table in silver must equal."""

    table: str  # the source table's name, which is also the live table's name in silver

    def rows(self) -> dict[Hashable, dict]:
        """Every row of the source table: {primary key: row as the source spells it}."""

    def spelled(self, live_rows: list[dict]) -> dict[Hashable, dict]:
        """Rows of the live mirror (silver names and types) spelled as :meth:`rows` spells them."""


@dataclass(frozen=True)
class MirrorCheck:
    table: str
    source_rows: int
    mirror_rows: int
    missing: int  # in the source, not in the mirror
    extra: int  # in the mirror, not in the source
    different: int  # in both, with other values
    duplicated: int = 0  # live rows whose key another live row has
    first_differing: tuple[tuple[Hashable, str], ...] = ()  # (key, what differs), the first keys in order
    # of the keys in both with other values, per column that differs: (column, how many keys,
    # the first of them in order); `lakehouse cdc verify` finds them
    differing_columns: tuple[tuple[str, int, tuple[Hashable, ...]], ...] = ()

    @property
    def equal(self) -> bool:
        return self.missing == self.extra == self.different == self.duplicated == 0

    def describe(self) -> str:
        """The differences in one line, naming the first differing keys ('' when equal)."""
        counts = [f"{n:,} {what}" for n, what in ((self.missing, "missing"), (self.extra, "extra"),
                                                   (self.different, "different"), (self.duplicated, "duplicated"))
                  if n]
        keys = "; ".join(f"{key}: {what}" for key, what in self.first_differing)
        return f"{', '.join(counts)} (first keys: {keys})" if counts else ""

    def describe_columns(self) -> list[str]:
        """A line per column whose values differ: in how many rows, and the first keys."""
        return [f"  {column}: {count:,} row{'s' if count > 1 else ''} differ{'' if count > 1 else 's'} (first keys: "
                f"{'; '.join(str(key) for key in keys)})" for column, count, keys in self.differing_columns]


def same_value(a, b) -> bool:
    """Whether two spelled values are one value as :func:`row_hash` sees them."""
    return _canonical(a) == _canonical(b)


def _canonical(value):
    """One spelling per value for :func:`row_hash`, equal where ``==`` says equal: numbers as
    exact fractions (1, 1.0 and Decimal("1.00") alike), booleans apart from numbers."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return ["bool", value]
    if isinstance(value, int | float | Decimal):
        try:
            numerator, denominator = value.as_integer_ratio()
        except (ValueError, OverflowError):  # NaN, infinities
            return ["number", str(value)]
        return ["number", str(numerator), str(denominator)]
    if isinstance(value, bytes):
        return ["bytes", value.hex()]
    return [type(value).__name__, repr(value)]


def row_hash(row: Mapping[str, object]) -> bytes:
    """A 16-byte digest of a row's column names and values (two rows with equal values, the
    same digest; any value changed, another one)."""
    text = json.dumps(sorted((str(name), _canonical(value)) for name, value in row.items()),
                      ensure_ascii=False, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def row_hashes(rows: Mapping[Hashable, Mapping[str, object]]) -> dict[Hashable, bytes]:
    return {key: row_hash(row) for key, row in rows.items()}


def live_row_hashes(spark, source: MirrorSource) -> tuple[dict[Hashable, bytes], int]:
    """({key: digest} of the live table silver.<table>, spelled by the source; its row count).

    Read through toArrow(): Arrow keeps instants as UTC wall-clock values, where PySpark's
    collect() would convert them to the Python process's time zone.
    """
    live = spark.table(f"silver.{source.table}").toArrow()
    hashes: dict[Hashable, bytes] = {}
    for batch in live.to_batches(max_chunksize=BATCH_ROWS):
        hashes.update(row_hashes(source.spelled(batch.to_pylist())))
    return hashes, live.num_rows


def _key_order(key: Hashable):
    return (type(key).__name__, key)


def differences(source: Mapping[Hashable, bytes], mirror: Mapping[Hashable, bytes]) -> dict[Hashable, str]:
    """{key: what differs} for the keys whose rows differ, are missing or extra."""
    found = {key: MISSING for key in source.keys() - mirror.keys()}
    found.update((key, EXTRA) for key in mirror.keys() - source.keys())
    found.update((key, DIFFERENT) for key in source.keys() & mirror.keys() if source[key] != mirror[key])
    return found


def compare(table: str, source: Mapping[Hashable, bytes], mirror: Mapping[Hashable, bytes],
            mirror_rows: int | None = None) -> MirrorCheck:
    """Per-key digests of the source against the live mirror's; `mirror_rows`: the live rows
    read (more than the keys when a key has several rows)."""
    found = differences(source, mirror)
    kinds = list(found.values())
    duplicated = (len(mirror) if mirror_rows is None else mirror_rows) - len(mirror)
    first = heapq.nsmallest(EXAMPLES, found.items(), key=lambda item: _key_order(item[0]))
    return MirrorCheck(table, len(source), len(mirror) + duplicated, kinds.count(MISSING), kinds.count(EXTRA),
                       kinds.count(DIFFERENT), duplicated, tuple(first))


def check_mirror(spark, source: MirrorSource) -> MirrorCheck:
    """The live table silver.<table> (through Spark) against its source, row by row."""
    source_hashes = row_hashes(source.rows())
    mirror_hashes, mirror_rows = live_row_hashes(spark, source)
    return compare(source.table, source_hashes, mirror_hashes, mirror_rows)


def source_comparison(spark, source: MirrorSource):
    """One row per key of the source or the live table, in key order: ``key`` (text) and
    ``difference``, null where the rows are equal, else "<key>: <what differs>". The quality
    suite expects ``difference`` to be null, so its failures name the first differing keys."""
    import pyarrow as pa

    source_hashes = row_hashes(source.rows())
    mirror_hashes, mirror_rows = live_row_hashes(spark, source)
    found = differences(source_hashes, mirror_hashes)
    keys = sorted(source_hashes.keys() | mirror_hashes.keys(), key=_key_order)
    texts = [f"{key}: {found[key]}" if key in found else None for key in keys]
    keys = [str(key) for key in keys]
    if mirror_rows > len(mirror_hashes):  # which key is the live table's uniqueness check's to say
        keys.append(None)
        texts.append(f"{mirror_rows - len(mirror_hashes):,} {DUPLICATED}")
    table = pa.table({"key": pa.array(keys, pa.string()),
                      "difference": pa.array(texts, pa.string())})
    return spark.createDataFrame(table)
