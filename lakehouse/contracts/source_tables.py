"""Source tables of CDC streams, read from their database (PostgreSQL, MySQL, MariaDB) through
SQLAlchemy: a table's columns and primary key, each column as Debezium sends it (the JSON Schema
property of the stream's contract), and its rows in key order, a range at a time.

`lakehouse cdc add` writes a stream from :func:`read_table`; `lakehouse cdc verify` and the quality
suite's mirror check compare a live mirror with :func:`rows_in_key_order`
(expectations/database_source.py).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from lakehouse.core.errors import LakehouseError

# The SQLAlchemy driver of each kind of URL a user passes (both drivers install from PyPI).
DRIVERS = {"postgresql": "postgresql+psycopg", "postgres": "postgresql+psycopg", "mysql": "mysql+pymysql",
           "mariadb": "mysql+pymysql"}
UNSCALED_NUMERIC = "decimal(38,10)"  # a PostgreSQL numeric without a declared scale: narrow it if you can


@dataclass(frozen=True)
class SourceTable:
    kind: str  # postgresql or mysql (MariaDB included)
    database: str
    schema: str | None
    name: str
    columns: dict[str, dict]  # name -> its JSON Schema property
    key: tuple[str, ...]
    excluded: tuple[str, ...] = ()  # columns Debezium is told to leave out
    url: str = field(default="", repr=False)  # where it was read (SQLAlchemy form, password included)
    text_columns: tuple[str, ...] = ()  # columns of a character type (ordered byte by byte when keys)
    json_columns: tuple[str, ...] = ()  # columns of a JSON type (their values compare as JSON)
    left_out: tuple[str, ...] = ()  # columns of the table not read: not in ``only`` (read_table)
    # the columns read under another name (`lakehouse cdc add --rename-columns`): {name: the
    # table's}. Every other field names a column as the stream calls it.
    renamed: dict[str, str] = field(default_factory=dict)
    partitioned: bool = False  # a PostgreSQL partitioned table (its changes published through it)

    def source_name(self, column: str) -> str:
        """The table's name of ``column`` (the stream's name of it)."""
        return self.renamed.get(column, column)


# --- what Debezium sends for each column type, as `lakehouse cdc add` sets it up: its defaults
# (time.precision.mode=adaptive, or adaptive_time_microseconds for MySQL) but for
# decimal.handling.mode=string, whose text carries each value's scale ------------------------------

def column_property(kind: str, column: str, sql_type, key: bool = False) -> dict:
    """The JSON Schema property of a column of SQLAlchemy type ``sql_type`` (pure); ``key``: a
    column of the primary key, which takes every type a row takes but JSON (refused: its
    values are JSON, their text the wrong thing to key, order and compare by)."""
    from sqlalchemy import types

    name = type(sql_type).__name__.upper()
    json_type = isinstance(sql_type, types.JSON) or name in ("JSON", "JSONB")
    if key and json_type:
        raise LakehouseError(f"column {column} of the primary key: type {sql_type} cannot key a stream (its values "
                             "are compared as JSON, not as the text Debezium sends; docs/connect-a-database.md "
                             "lists the types a key takes)")
    if isinstance(sql_type, types.Boolean):
        return {"type": "boolean"}
    if isinstance(sql_type, types.Integer):
        return {"type": "integer"}
    if isinstance(sql_type, types.Float) or name in ("REAL", "DOUBLE", "DOUBLE_PRECISION"):
        return {"type": "number"}
    if isinstance(sql_type, types.Numeric):
        # decimal.handling.mode=string: the digits as text, read as they are (no x-debezium-type);
        # a value the declared decimal cannot hold exactly is a dead letter
        if sql_type.precision is None:
            return {"type": "number", "format": UNSCALED_NUMERIC}
        if sql_type.precision > 38:
            raise LakehouseError(f"column {column}: {sql_type} has more digits than Spark's decimals hold (38)")
        return {"type": "number", "format": f"decimal({sql_type.precision},{sql_type.scale or 0})"}
    if isinstance(sql_type, types.DateTime):  # before Date: some dialects derive one from the other
        zoned = getattr(sql_type, "timezone", False) or (kind == "mysql" and name == "TIMESTAMP")
        if zoned:
            return {"type": "string", "format": "date-time", "x-debezium-type": "io.debezium.time.ZonedTimestamp"}
        digits = _fraction_digits(sql_type)
        return {"type": "string", "format": "date-time", "x-debezium-type":
                "io.debezium.time.Timestamp" if digits <= 3 else "io.debezium.time.MicroTimestamp"}
    if isinstance(sql_type, types.Date):
        return {"type": "string", "format": "date", "x-debezium-type": "io.debezium.time.Date"}
    if isinstance(sql_type, types.Time):
        if getattr(sql_type, "timezone", False):
            return {"type": "string", "format": "time", "x-debezium-type": "io.debezium.time.ZonedTime"}
        micro = kind == "mysql" or _fraction_digits(sql_type) > 3
        return {"type": "string", "format": "time",
                "x-debezium-type": "io.debezium.time.MicroTime" if micro else "io.debezium.time.Time"}
    if isinstance(sql_type, types.String | types.Enum | types.Uuid) or json_type or name == "UUID":
        return {"type": "string"}
    if key:
        raise LakehouseError(f"column {column} of the primary key: type {sql_type} is not supported "
                             "(docs/connect-a-database.md lists the types a key takes)")
    raise LakehouseError(f"column {column}: type {sql_type} is not supported yet (docs/connect-a-database.md "
                         "lists the supported types): leave it out with --exclude-columns")


def _fraction_digits(sql_type) -> int:
    """Digits of a second a temporal column keeps (PostgreSQL's default: 6; MySQL's: 0)."""
    digits = getattr(sql_type, "precision", None)
    if digits is None:
        digits = getattr(sql_type, "fsp", None)
    if digits is None:
        return 6 if type(sql_type).__module__.endswith("postgresql.types") else 0
    return int(digits)


def engine(engine_url: str):
    """A SQLAlchemy engine whose sessions are in UTC, whatever the server's zone: PyMySQL reads a
    MySQL/MariaDB TIMESTAMP as a naive wall-clock of the session's zone, and `cdc verify` takes
    naive instants as UTC (as Debezium sends them). PostgreSQL's timestamptz comes back zoned
    anyway; its session is UTC too so both kinds read alike."""
    from sqlalchemy import create_engine

    if engine_url.startswith("postgresql"):
        return create_engine(engine_url, connect_args={"options": "-c timezone=UTC"})
    return create_engine(engine_url, connect_args={"init_command": "SET time_zone = '+00:00'"})


def read_table(url: str, table: str, exclude: tuple[str, ...] = (), only: Collection[str] | None = None,
               renames: dict[str, str] | None = None) -> SourceTable:
    """The table's columns and primary key, read from the database at ``url``. ``table`` is
    ``name`` or ``schema.name`` (PostgreSQL's default schema: public); the columns in
    ``exclude`` are left out (Debezium leaves them out too: column.exclude.list); ``renames``
    ({the table's name: the stream's}) names columns as the stream calls them; with ``only``
    (the stream's names), every column not in it is left out."""
    from sqlalchemy import inspect, types
    from sqlalchemy.exc import NoSuchTableError, SQLAlchemyError

    parts = urlsplit(url)
    if parts.scheme not in DRIVERS:
        raise LakehouseError(f"database URL: expected postgresql://, mysql:// or mariadb://, got {parts.scheme!r}")
    kind = "postgresql" if DRIVERS[parts.scheme].startswith("postgresql") else "mysql"
    database = parts.path.lstrip("/")
    if not database:
        raise LakehouseError("database URL: it names no database (…/DATABASE)")
    schema, _, name = table.rpartition(".")
    schema = schema or ("public" if kind == "postgresql" else None)
    engine_url = parts._replace(scheme=DRIVERS[parts.scheme]).geturl()
    database_engine = engine(engine_url)
    where = f"{schema + '.' if schema else ''}{name} in {database} at {parts.hostname}"
    try:
        inspector = inspect(database_engine)
        columns = inspector.get_columns(name, schema=schema)
        key = tuple(inspector.get_pk_constraint(name, schema=schema).get("constrained_columns") or ())
        partitioned, root = _partitioning(database_engine, schema, name) if kind == "postgresql" else (False, None)
    except NoSuchTableError:
        raise LakehouseError(f"table {where} not found") from None
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise LakehouseError(f"cannot read table {where}: {reason}") from None
    finally:
        database_engine.dispose()
    if root is not None:
        # published through its root (publish.via.partition.root): its changes come under the root's name
        raise LakehouseError(f"table {where} is a partition of {root}: add {root}, whose changes are its "
                             "partitions' (docs/connect-a-database.md, \"Partitioned tables\")")
    if not key:
        raise LakehouseError(f"table {where} has no primary key: Debezium keys its changes by it, and the "
                             "mirror needs one")
    names = {c["name"] for c in columns}
    unknown = sorted(set(exclude) - names)
    if unknown:
        raise LakehouseError(f"--exclude-columns: table {where} has no column {', '.join(unknown)}")
    if set(exclude) & set(key):
        raise LakehouseError(f"--exclude-columns: {', '.join(sorted(set(exclude) & set(key)))} is in the primary key")
    renames = check_renames(renames or {}, names, exclude, where)
    called = {c["name"]: renames.get(c["name"], c["name"]) for c in columns}  # the stream's name of each
    kept = [c for c in columns if c["name"] not in exclude and (only is None or called[c["name"]] in only)]
    return SourceTable(kind, database, schema, name,
                       {called[c["name"]]: column_property(kind, called[c["name"]], c["type"], c["name"] in key)
                        for c in kept},
                       tuple(called[k] for k in key), tuple(exclude), engine_url,
                       tuple(called[c["name"]] for c in kept if isinstance(c["type"], types.String | types.Enum)),
                       tuple(called[c["name"]] for c in kept if isinstance(c["type"], types.JSON)
                             or type(c["type"]).__name__.upper() in ("JSON", "JSONB")),
                       tuple(c["name"] for c in columns if c["name"] not in exclude and c not in kept),
                       {called[c["name"]]: c["name"] for c in kept if called[c["name"]] != c["name"]},
                       partitioned)


def check_renames(renames: dict[str, str], columns: Collection[str], exclude: Collection[str],
                  where: str) -> dict[str, str]:
    """``renames`` ({column: its new name}) of a table of ``columns``, checked: each a column, not
    left out, each new name a name no other column has or takes."""
    unknown = sorted(set(renames) - set(columns))
    if unknown:
        raise LakehouseError(f"--rename-columns: table {where} has no column {', '.join(unknown)} (to rename)")
    both = sorted(set(renames) & set(exclude))
    if both:
        raise LakehouseError(f"--rename-columns: {', '.join(both)} is left out (--exclude-columns) too")
    # (Spark resolves names in any case: `Reading` and `reading` would be one column)
    called = [renames.get(column, column).lower() for column in columns if column not in exclude]
    taken = sorted({name for name in called if called.count(name) > 1})
    if taken:
        raise LakehouseError(f"--rename-columns: table {where} would have two columns named {', '.join(taken)}")
    return {column: name for column, name in renames.items() if name != column}


def _partitioning(database_engine, schema: str, name: str) -> tuple[bool, str | None]:
    """PostgreSQL: (is the table partitioned, the partitioned table at the root of the tree it is a
    partition of, else None)."""
    from sqlalchemy import text

    query = text("select c.relkind = 'p', case when c.relispartition then "
                 "(select format('%s.%s', n.nspname, r.relname) from pg_class r join pg_namespace n "
                 "on n.oid = r.relnamespace where r.oid = pg_partition_root(c.oid)) end "
                 "from pg_class c where c.oid = to_regclass(format('%I.%I', cast(:schema as text), "
                 "cast(:name as text)))")
    with database_engine.connect() as connection:
        found = connection.execute(query, {"schema": schema, "name": name}).first()
    return (bool(found[0]), found[1]) if found else (False, None)


def publication_via_root(url: str, publication: str) -> bool | None:
    """PostgreSQL: whether the publication publishes a partitioned table's changes under its own
    name (publish_via_partition_root); None when there is no such publication."""
    from sqlalchemy import text
    from sqlalchemy.exc import SQLAlchemyError

    parts = urlsplit(url)
    database_engine = engine(parts._replace(scheme=DRIVERS[parts.scheme]).geturl())
    try:
        with database_engine.connect() as connection:
            found = connection.execute(text("select pubviaroot from pg_publication where pubname = :name"),
                                       {"name": publication}).first()
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise LakehouseError(f"cannot read publication {publication}: {reason}") from None
    finally:
        database_engine.dispose()
    return None if found is None else bool(found[0])


def rows_in_key_order(source: SourceTable, columns: list[str], chunk_rows: int = 10_000) -> Iterator[dict]:
    """Every row of the table (``columns`` of it), in the order of its primary key, read
    ``chunk_rows`` at a time: each read starts after the last key of the one before (keyset
    pagination), so a large table is never held whole, and no read scans what it skips. Text key
    columns are ordered byte by byte (PostgreSQL's "C" collation, MySQL's BINARY), as Spark
    orders strings."""
    from sqlalchemy import BINARY, MetaData, Table, cast, collate, select, tuple_

    database_engine = engine(source.url)
    try:
        table = Table(source.name, MetaData(), autoload_with=database_engine, schema=source.schema)

        def read(name: str):  # a column as the stream calls it
            column = table.c[source.source_name(name)]
            return column if name == column.name else column.label(name)

        def ordered(name: str):
            column = table.c[source.source_name(name)]
            if name not in source.text_columns:
                return column
            return collate(column, "C") if source.kind == "postgresql" else cast(column, BINARY())
        keys = [ordered(name) for name in source.key]
        query = select(*[read(name) for name in columns]).order_by(*keys).limit(chunk_rows)
        last = None
        with database_engine.connect() as connection:
            while True:
                statement = query if last is None else query.where(tuple_(*keys) > tuple_(*last))
                rows = [dict(row._mapping) for row in connection.execute(statement)]
                yield from rows
                if len(rows) < chunk_rows:
                    return
                last = [rows[-1][name] for name in source.key]
    finally:
        database_engine.dispose()
