"""The CDC oracle check: does a live silver mirror equal its source database, row for row?

The CDC simulator's SQLite database is the truth for the mirrors (DESIGN §9). Silver renames
and types the source's columns; this module spells mirror rows the way the source stores them
(text instants with milliseconds, two-place decimal text) so the two compare exactly. The demo
prints the verdict; the integration tests assert it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from lakehouse.config import Settings

# silver column -> source column, for the columns silver renames
RENAMED = {
    "customers": {"customer_name": "name", "country_code": "country"},
    "accounts": {},
}
# columns of the source tables, in their order (producers/schemas/cdc_source.sql)
SOURCE_COLUMNS = {
    "customers": ("customer_id", "name", "email", "country", "city", "tier", "created_at", "updated_at"),
    "accounts": ("account_id", "customer_id", "account_type", "balance", "currency", "status", "updated_at"),
}
KEYS = {"customers": "customer_id", "accounts": "account_id"}


def _spell(value):
    if isinstance(value, datetime):  # an instant in UTC, as the source's check constraint spells it
        return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
    if isinstance(value, Decimal):
        return f"{value:.2f}"
    return value


def as_source_rows(table: str, rows: list[dict]) -> dict[int, dict]:
    """Live mirror rows (silver names and types) as {primary key: row as the source holds it}.

    Instants must be UTC wall-clock values: pyiceberg's and Arrow's are; PySpark's collect()
    converts to the Python process's time zone, so read Spark rows through toArrow().
    """
    back = {silver: source for silver, source in RENAMED[table].items()}
    spelled = {}
    for row in rows:
        source_row = {back.get(name, name): _spell(value) for name, value in row.items()}
        spelled[source_row[KEYS[table]]] = {column: source_row[column] for column in SOURCE_COLUMNS[table]}
    return spelled


@dataclass(frozen=True)
class MirrorCheck:
    table: str
    source_rows: int
    mirror_rows: int
    missing: int  # in the source, not in the mirror
    extra: int  # in the mirror, not in the source
    different: int  # in both, with other values

    @property
    def equal(self) -> bool:
        return self.missing == self.extra == self.different == 0


def compare(table: str, source: dict[int, dict], mirror: dict[int, dict]) -> MirrorCheck:
    both = source.keys() & mirror.keys()
    return MirrorCheck(table, len(source), len(mirror), len(source.keys() - mirror.keys()),
                       len(mirror.keys() - source.keys()), sum(source[k] != mirror[k] for k in both))


def check_mirror(spark, settings: Settings, stream: str) -> MirrorCheck:
    """The live view silver.<table> (through Spark) against the stream's source database."""
    from producers.cdc.source import read_tables
    from producers.cdc.stream import FORMATS, source_path

    table = FORMATS[stream].table
    source = read_tables(source_path(settings, stream))[table]
    live = spark.table(f"silver.{table}").toArrow().to_pylist()
    return compare(table, source, as_source_rows(table, live))
