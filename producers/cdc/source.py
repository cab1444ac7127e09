"""The source database of the CDC streams: a SQLite file holding the tables of source_tables.sql.

Its committed state is the truth the silver mirrors are checked against (ARCHITECTURE §9), so it is
read back exactly as stored: one dict per row, keyed by primary key, nothing converted.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime
from decimal import Decimal
from pathlib import Path

DDL_FILE = Path(__file__).resolve().parent / "source_tables.sql"
DATABASE = "shop"  # the name its change events give the database (Debezium's db, DMS's schema-name)

# Table -> primary key column. Also the allow-list of names that may reach an SQL string.
TABLES: dict[str, str] = {"customers": "customer_id", "accounts": "account_id"}


def key_column(table: str) -> str:
    try:
        return TABLES[table]
    except KeyError:
        raise ValueError(f"unknown source table {table!r}; known: {', '.join(TABLES)}") from None


def open_source(db_path: str | Path) -> sqlite3.Connection:
    """Open (creating if needed) the source database with its tables in place.

    Autocommit mode: callers open their own transactions (BEGIN IMMEDIATE), so a simulated
    transaction is exactly one SQLite transaction rather than whatever the sqlite3 module's
    implicit transaction handling would make of it.
    """
    path = Path(db_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.row_factory = sqlite3.Row
    # WAL: an oracle check may read the file while a producer is still writing to it.
    conn.execute("pragma journal_mode = wal")
    conn.execute("pragma busy_timeout = 10000")
    conn.executescript(DDL_FILE.read_text())
    return conn


def read_row(conn: sqlite3.Connection, table: str, key: int) -> dict | None:
    column = key_column(table)
    row = conn.execute(f"select * from {table} where {column} = ?", (key,)).fetchone()
    return None if row is None else dict(row)


def read_table(conn: sqlite3.Connection, table: str) -> dict[int, dict]:
    """The whole table as {primary key: row}, in key order."""
    column = key_column(table)
    rows = conn.execute(f"select * from {table} order by {column}").fetchall()
    return {row[column]: dict(row) for row in rows}


def read_tables(db_path: str | Path) -> dict[str, dict[int, dict]]:
    """Every source table of the database at ``db_path``: {table: {primary key: row}}."""
    conn = open_source(db_path)
    try:
        return {table: read_table(conn, table) for table in TABLES}
    finally:
        conn.close()


# How silver names and types the source's columns: silver column -> source column, for the
# columns silver renames, and the source tables' columns in their order (source_tables.sql).
SILVER_RENAMES = {
    "customers": {"customer_name": "name", "country_code": "country"},
    "accounts": {},
}
SOURCE_COLUMNS = {
    "customers": ("customer_id", "name", "email", "country", "city", "tier", "created_at", "updated_at"),
    "accounts": ("account_id", "customer_id", "account_type", "balance", "currency", "status", "updated_at"),
}


def as_stored(value):
    """A silver value spelled the way this database stores it."""
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
    renamed = SILVER_RENAMES[table]
    spelled = {}
    for row in rows:
        source_row = {renamed.get(name, name): as_stored(value) for name, value in row.items()}
        spelled[source_row[key_column(table)]] = {column: source_row[column] for column in SOURCE_COLUMNS[table]}
    return spelled


class SimulatorSource:
    """One table of a simulator database as the truth of its mirror (expectations.mirror.MirrorSource)."""

    def __init__(self, db_path: str | Path, table: str):
        key_column(table)  # an unknown table fails here, not in the middle of a check
        self.path = Path(db_path)
        self.table = table

    def rows(self) -> dict[int, dict]:
        return read_tables(self.path)[self.table]

    def spelled(self, live_rows: list[dict]) -> dict[int, dict]:
        return as_source_rows(self.table, live_rows)
