"""`lakehouse published`: the published cut, and how to read it from Spark SQL and DuckDB.

A dbt run publishes its tables one catalog commit each (macros/audit_publish.sql): a reader of
two tables' main while a run publishes may find one table of the new publication and one of the
old. After the last of them the run writes the cut, in one commit: the table PUBLICATIONS_TABLE,
one row per silver and gold table naming its snapshot (ARCHITECTURE §4, "Publication"). A reader
who reads each table at the snapshot the cut names reads every table as of the same publication.

Reads the catalog through pyiceberg only (no Spark). Pure functions (the reading instructions)
are kept apart from the reader.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from datetime import datetime

from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import CATALOG_NAME, Settings

# dbt_project.yml's var `publications_table` names it for the macros (tests/unit/test_published.py
# holds the two equal)
PUBLICATIONS_TABLE = "gold.publications"


@dataclass(frozen=True)
class Cut:
    """One publication: every table's snapshot of main, all from the same one."""

    publication: str  # the dbt run's audit branch that published it (audit_<invocation id>)
    published_at: str  # ISO 8601, the publishing host's clock: to show, never to order
    cut_snapshot_id: int  # the publications table's snapshot holding this cut
    tables: dict[str, int]  # {namespace.table: snapshot id}


def read_cut(catalog, snapshot_id: int | None = None) -> Cut | None:
    """The cut of the publications table's main (or of its snapshot ``snapshot_id``, an earlier
    cut); None when nothing was published yet."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    try:
        table = catalog.load_table(PUBLICATIONS_TABLE)
    except (NoSuchTableError, NoSuchNamespaceError):
        return None
    snapshot = table.snapshot_by_id(snapshot_id) if snapshot_id is not None else table.current_snapshot()
    if snapshot is None:
        if snapshot_id is not None:
            raise LakehouseError(f"{PUBLICATIONS_TABLE} has no snapshot {snapshot_id} (expired, or never one)")
        return None
    rows = table.scan(snapshot_id=snapshot.snapshot_id).to_arrow().to_pylist()
    publications = {row["publication"] for row in rows}
    if len(publications) != 1:  # one commit writes one publication's rows: anything else is damage
        raise LakehouseError(f"{PUBLICATIONS_TABLE} snapshot {snapshot.snapshot_id} holds "
                             f"{len(publications)} publications, not one: {sorted(publications)}")
    published_at = max(row["published_at"] for row in rows)
    rows.sort(key=lambda row: row["table_name"])
    return Cut(publication=publications.pop(), cut_snapshot_id=snapshot.snapshot_id,
               published_at=published_at.isoformat() if isinstance(published_at, datetime) else str(published_at),
               tables={row["table_name"]: row["snapshot_id"] for row in rows})


def spark_sql(cut: Cut) -> list[str]:
    """A query per table reading it as of the cut (spark-sql, the Thrift server, a Spark session
    of the lakehouse)."""
    return [f"select * from {CATALOG_NAME}.{name} version as of {snapshot};" for name, snapshot in cut.tables.items()]


def duckdb_python(cut: Cut, settings: Settings) -> list[str]:
    """Python that puts every table of the cut in a DuckDB connection, through pyiceberg: DuckDB's
    own `iceberg` extension downloads from extensions.duckdb.org (docs/models.md)."""
    if settings.catalog_type == "rest":
        catalog = (f'catalog = RestCatalog("{CATALOG_NAME}", uri="{settings.catalog_uri}", '
                   f'warehouse="{settings.warehouse}")')
        opening = ["import duckdb", "from pyiceberg.catalog.rest import RestCatalog"]
    else:
        database = settings.catalog_uri.removeprefix("jdbc:sqlite:")
        catalog = (f'catalog = SqlCatalog("{CATALOG_NAME}", uri="sqlite:///{database}", '
                   f'warehouse="{settings.warehouse}")')
        opening = ["import duckdb", "from pyiceberg.catalog.sql import SqlCatalog"]
    return [*opening, catalog, "connection = duckdb.connect()",
            *(f'catalog.load_table("{name}").scan(snapshot_id={snapshot}).to_duckdb("{name.replace(".", "_")}", '
              "connection)" for name, snapshot in cut.tables.items())]


def format_cut(cut: Cut, settings: Settings) -> str:
    width = max(len(name) for name in cut.tables)
    lines = [f"publication {cut.publication}, published {cut.published_at} (the publishing host's clock): "
             f"{len(cut.tables)} table(s), {PUBLICATIONS_TABLE} snapshot {cut.cut_snapshot_id}"]
    lines.extend(f"  {name:<{width}}  snapshot {snapshot}" for name, snapshot in cut.tables.items())
    lines.append("")
    lines.append("Read every table as of this publication (each one's main may be a publication ahead "
                 "while a dbt run publishes):")
    lines.append("  Spark SQL (spark-sql, the Thrift server, a lakehouse Spark session):")
    lines.extend(f"    {query}" for query in spark_sql(cut))
    lines.append("  DuckDB, through pyiceberg (Python):")
    lines.extend(f"    {line}" for line in duckdb_python(cut, settings))
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="one JSON object: publication, published_at, cut_snapshot_id, tables "
                             "({table: snapshot id}), spark_sql and duckdb_python (lists of lines)")
    parser.add_argument("--snapshot", type=int, metavar="ID",
                        help=f"an earlier cut: a snapshot id of {PUBLICATIONS_TABLE} "
                             f"(`select snapshot_id, committed_at from {CATALOG_NAME}.{PUBLICATIONS_TABLE}.snapshots`)")


def main(args: argparse.Namespace, settings: Settings) -> int:
    from lakehouse.operations.status import existing_catalog

    catalog = existing_catalog(settings)
    cut = read_cut(catalog, args.snapshot) if catalog is not None else None
    if cut is None:
        raise LakehouseError(f"nothing published yet: no {PUBLICATIONS_TABLE} (a `lakehouse dbt build` whose "
                             "models and tests pass writes it)")
    if args.json:
        print(json.dumps({**asdict(cut), "spark_sql": spark_sql(cut),
                          "duckdb_python": duckdb_python(cut, settings)}, indent=2))
    else:
        print(format_cut(cut, settings))
    return 0
