"""The CDC oracle check: does a live silver mirror equal its source database, row for row?

The source comes in through :class:`MirrorSource`, so this check knows no database: the demo's
CDC simulator (producers.cdc.source.SimulatorSource) is one implementation, and any database
a mirror is fed from can be another. A source spells its own rows and the live mirror's rows
the same way (names, text instants, decimal text), so the two compare exactly. The demo
prints the verdict; the integration tests assert it (docs/ARCHITECTURE.md §9).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Protocol


class MirrorSource(Protocol):
    """The source table a CDC stream mirrors: the truth its live view in silver must equal."""

    table: str  # the source table's name, which is also the live view's name in silver

    def row_count(self) -> int:
        """Rows in the source table now."""

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

    @property
    def equal(self) -> bool:
        return self.missing == self.extra == self.different == 0


def compare(table: str, source: dict[Hashable, dict], mirror: dict[Hashable, dict]) -> MirrorCheck:
    both = source.keys() & mirror.keys()
    return MirrorCheck(table, len(source), len(mirror), len(source.keys() - mirror.keys()),
                       len(mirror.keys() - source.keys()), sum(source[k] != mirror[k] for k in both))


def check_mirror(spark, source: MirrorSource) -> MirrorCheck:
    """The live view silver.<table> (through Spark) against its source.

    Read through toArrow(): Arrow keeps instants as UTC wall-clock values, where PySpark's
    collect() would convert them to the Python process's time zone.
    """
    live = spark.table(f"silver.{source.table}").toArrow().to_pylist()
    return compare(source.table, source.rows(), source.spelled(live))
