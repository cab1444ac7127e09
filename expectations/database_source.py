"""A real database table as the truth of its live mirror (expectations.mirror.MirrorSource), and
the comparison `lakehouse cdc verify` runs: both sides in key order, a range at a time.

Both sides spell each value one way before it is digested (expectations.mirror.row_hash):
instants as UTC ISO-8601 with microseconds (a `timestamp` without a zone is UTC wall-clock, as
Debezium sends it), dates as ISO text, times of day as PostgreSQL spells them (bronze keeps
them as that text), JSON as its canonical text, UUIDs as text, numbers exactly.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterator
from datetime import UTC, date, datetime, time, timedelta
from uuid import UUID

from expectations.mirror import DIFFERENT, EXAMPLES, EXTRA, MISSING, MirrorCheck, row_hash, same_value
from lakehouse.contracts.source_tables import SourceTable, read_table, rows_in_key_order
from lakehouse.contracts.streams import StreamSpec
from lakehouse.core.errors import LakehouseError

CHUNK_ROWS = 10_000  # source rows read per query


def _time_text(value: time | timedelta) -> str:
    if isinstance(value, timedelta):  # MySQL's TIME, read by PyMySQL
        micros = value // timedelta(microseconds=1)
        value = (datetime.min + timedelta(microseconds=micros)).time()
    text = f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}"
    return text + (f".{value.microsecond:06d}".rstrip("0") if value.microsecond else "")


def _instant(value: datetime, naive_is_local: bool) -> str:
    if value.tzinfo is None:
        # the mirror's values come from Spark in this process's zone; a source `timestamp` is UTC
        value = value.astimezone(UTC) if naive_is_local else value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class DatabaseSource:
    """``source`` (read by lakehouse.contracts.source_tables.read_table) as the truth of the live
    view silver.<stream>, compared on ``columns`` (the ones both have)."""

    def __init__(self, source: SourceTable, stream: str, columns: list[str], uncontracted: tuple[str, ...] = ()):
        self.source, self.table, self.columns = source, stream, columns
        # columns of the table that the stream's contract lacks (and `cdc add --exclude-columns`
        # did not leave out): bronze drops them, so the mirror cannot hold them
        self.uncontracted = uncontracted

    def spell(self, column: str, value, from_mirror: bool):
        """One value of ``column`` as both sides spell it."""
        if value is None:
            return None
        if column in self.source.json_columns:
            parsed = json.loads(value) if isinstance(value, str) else value
            return None if parsed is None else json.dumps(parsed, sort_keys=True, separators=(",", ":"))
        form = self.source.columns[column].get("format")
        if isinstance(value, datetime):
            return _instant(value, naive_is_local=from_mirror)
        if isinstance(value, date):
            return value.isoformat()
        if form == "time" and isinstance(value, time | timedelta):
            return _time_text(value)
        if isinstance(value, UUID):
            return str(value)
        return value

    def spelled_row(self, row: dict, columns: list[str], from_mirror: bool) -> tuple[tuple, dict]:
        spelled = {column: self.spell(column, row[column], from_mirror) for column in columns}
        return tuple(spelled[k] for k in self.source.key), spelled

    # --- MirrorSource -------------------------------------------------------------------------

    def rows(self) -> dict[Hashable, dict]:
        return dict(self._key(self.spelled_row(row, self.columns, False))
                    for row in rows_in_key_order(self.source, self.columns))

    def spelled(self, live_rows: list[dict]) -> dict[Hashable, dict]:
        return dict(self._key(self.spelled_row(row, self.columns, True)) for row in live_rows)

    def _key(self, keyed: tuple[tuple, dict]) -> tuple[Hashable, dict]:
        key, row = keyed
        return (key[0] if len(key) == 1 else key), row


def database_source(spark, spec: StreamSpec, url: str, table: str | None = None) -> tuple[DatabaseSource, list[str]]:
    """The source table of CDC stream ``spec`` in the database at ``url`` (``table``: NAME or
    SCHEMA.NAME, default the stream's source_table), to compare with its live table on the
    columns of its contract that the live table has; also the ones it lacks (renamed in silver,
    say), which are not compared. The contract includes the columns an additive stream took
    from its source (ARCHITECTURE §6, "Fields the contract lacks"), recorded with bronze. The
    table's columns that the contract lacks, other than the ones it names as left out
    (EXCLUDED_KEYWORD), are the source's ``uncontracted``."""
    from ingestion.bronze import added_fields
    from lakehouse.contracts.streams import EXCLUDED_KEYWORD, json_contract
    from lakehouse.core.spark import relation_exists

    live_view = f"silver.{spec.name}"
    if not relation_exists(spark, live_view):
        raise LakehouseError(f"{live_view} does not exist: run "
                             f"`lakehouse dbt run --select {spec.name}_changelog+` first")
    live = spark.table(live_view).columns
    contract = json_contract(spec, added_fields(spark, spec.bronze_table))
    # a column the stream names otherwise (x-source-column) is read from the table's column
    source = read_table(url, table or spec.source_table or spec.name, only=contract.schema.fieldNames(),
                        renames={field: name for name, field in contract.source_names.items()})
    excluded = set(json.loads(spec.schema_path.read_text()).get(EXCLUDED_KEYWORD) or ())
    missing_key = [k for k in source.key if k not in live]
    if missing_key:
        raise LakehouseError(f"{live_view} has no column {', '.join(missing_key)} of the source's key")
    return (DatabaseSource(source, spec.name, [c for c in source.columns if c in live],
                           tuple(c for c in source.left_out if c not in excluded)),
            [c for c in source.columns if c not in live])


def verify(spark, source: DatabaseSource, chunk_rows: int = CHUNK_ROWS) -> MirrorCheck:
    """The live table silver.<stream> against the source table, both read in key order (the source
    ``chunk_rows`` at a time, the mirror streamed from a sorted Spark query), compared by per-key
    row digests; of the rows that differ, column by column."""
    live = spark.table(f"silver.{source.table}")
    columns = source.columns
    ours = (source.spelled_row(row, columns, False) for row in rows_in_key_order(source.source, columns, chunk_rows))
    theirs = (source.spelled_row(row.asDict(), columns, True)
              for row in live.select(*columns).orderBy(*source.source.key).toLocalIterator())
    return _merge(source.table, _digests(ours), _digests(theirs), columns)


def _digests(rows: Iterator[tuple[tuple, dict]]) -> Iterator[tuple[tuple, bytes, dict]]:
    for key, row in rows:
        yield key, row_hash(row), row


def _merge(table: str, source: Iterator[tuple[tuple, bytes, dict]], mirror: Iterator[tuple[tuple, bytes, dict]],
           columns: list[str] | None = None) -> MirrorCheck:
    """Two sequences of (key, digest, row) in key order, walked side by side; of two rows of a key
    with other digests, each column whose values differ is counted, with its first keys."""
    counts = {MISSING: 0, EXTRA: 0, DIFFERENT: 0}
    first: list[tuple[Hashable, str]] = []
    by_column: dict[str, tuple[int, list[Hashable]]] = {}
    source_rows = mirror_rows = duplicated = 0
    end = object()
    ours, theirs = next(source, end), next(mirror, end)
    last_mirror_key = None

    def found(key: tuple, what: str) -> None:
        counts[what] += 1
        if len(first) < EXAMPLES:
            first.append((key[0] if len(key) == 1 else key, what))

    while ours is not end or theirs is not end:
        if theirs is not end and theirs[0] == last_mirror_key:  # a key in two live rows
            duplicated += 1
            mirror_rows += 1
            theirs = next(mirror, end)
            continue
        if theirs is end or (ours is not end and ours[0] < theirs[0]):
            found(ours[0], MISSING)
            source_rows += 1
            ours = next(source, end)
        elif ours is end or theirs[0] < ours[0]:
            found(theirs[0], EXTRA)
            mirror_rows += 1
            last_mirror_key, theirs = theirs[0], next(mirror, end)
        else:
            if ours[1] != theirs[1]:
                found(ours[0], DIFFERENT)
                for column in ours[2]:
                    if not same_value(ours[2][column], theirs[2].get(column)):
                        count, keys = by_column.get(column, (0, []))
                        if len(keys) < EXAMPLES:
                            keys.append(ours[0][0] if len(ours[0]) == 1 else ours[0])
                        by_column[column] = (count + 1, keys)
            source_rows += 1
            mirror_rows += 1
            last_mirror_key = theirs[0]
            ours, theirs = next(source, end), next(mirror, end)
    order = {column: n for n, column in enumerate(columns or by_column)}
    differing = sorted(by_column.items(), key=lambda item: order.get(item[0], len(order)))
    return MirrorCheck(table, source_rows, mirror_rows, counts[MISSING], counts[EXTRA], counts[DIFFERENT],
                       duplicated, tuple(first), tuple((column, n, tuple(keys)) for column, (n, keys) in differing))
