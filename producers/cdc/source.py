"""The source database of the CDC streams: a SQLite file holding the tables of schemas/cdc_source.sql.

Its committed state is the truth the silver mirrors are checked against (DESIGN §9), so it is
read back exactly as stored: one dict per row, keyed by primary key, nothing converted.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

DDL_FILE = Path(__file__).resolve().parent.parent / "schemas" / "cdc_source.sql"

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
