"""`lakehouse cdc add`: a table of a PostgreSQL, MySQL or MariaDB database becomes a CDC stream
in one command.

It reads the table's columns and primary key from the database (SQLAlchemy) and writes what a
stream needs (docs/connect-a-database.md): the contract (a JSON Schema whose temporal and decimal
columns name the Debezium semantic type they arrive in), the pipeline entry, the dbt source
entry and the changelog, mirror, live-table and history models with their data tests (the key
unique and not null, composite keys included); it creates the topic (and the connector's
transaction topic, <connector>.transaction) and prints the Debezium properties to set, with the
DDL of the connector's signal table (`lakehouse cdc snapshot` writes there). The properties turn
on the transaction metadata (provide.transaction.metadata): bronze keeps each change's
transaction; the models `cdc add` writes apply changes as they arrive (what waits for whole
transactions: ARCHITECTURE §9, "Transactions"). It never overwrites: a stream or file that exists stops it before
anything is written.

`lakehouse cdc snapshot` asks the connector, through that table, to read a stream's table again
(Debezium's incremental snapshot): the rows an `ALTER TABLE ... ADD COLUMN ... DEFAULT` changed
without a change event reach the mirror.
"""

from __future__ import annotations

import json
import re
import zlib
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

from lakehouse.commands import cdc_models
from lakehouse.contracts.bronze_columns import SOURCE_TS
from lakehouse.contracts.source_tables import SourceTable, read_table
from lakehouse.contracts.streams import (
    EXCLUDED_KEYWORD,
    SOURCE_COLUMN_KEYWORD,
    StreamSpec,
    is_bronze_own,
    load_pipeline,
    pipeline_file,
)
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings

# --- the files it writes -------------------------------------------------------------------------

def contract(source: SourceTable) -> str:
    where = f"{source.schema}.{source.name}" if source.schema else f"{source.database}.{source.name}"
    # a column renamed (--rename-columns) reads the row field of its source name
    properties = {name: {**prop, SOURCE_COLUMN_KEYWORD: source.renamed[name]} if name in source.renamed else prop
                  for name, prop in source.columns.items()}
    return json.dumps({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"{source.name} row",
        "description": f"A row of the {source.kind} table {where}, as Debezium's before and after images carry "
                       f"it (written by `lakehouse cdc add` on {datetime.now(UTC):%Y-%m-%d}).",
        "type": "object",
        "properties": properties,
        "required": list(source.key),
        **({EXCLUDED_KEYWORD: list(source.excluded)} if source.excluded else {}),
    }, indent=2) + "\n"


def pipeline_entry(stream: str, source: SourceTable, partitions: int, signal: str | None = None) -> str:
    identity = ", ".join(json.dumps(k) for k in source.key)
    return (f"\n  {stream}:  # `lakehouse cdc add`, {source.kind} table {source.name}\n"
            f"    format: debezium\n"
            f"    schema: {stream}.schema.json\n"
            f"    event_time: {SOURCE_TS}\n"
            f"    identity: [{identity}]\n"
            f"    source_table: {json.dumps(source.name)}\n"
            + (f"    signal_table: {json.dumps(signal)}\n" if signal else "")
            + f"    partitions: {partitions}\n")


def models(stream: str, source: SourceTable) -> dict[str, str]:
    """{path under the dbt project: text} of the stream's source entry, models and data tests."""
    return cdc_models.render(cdc_models.CdcStream(
        stream, source.name, f"{source.kind}, through Debezium", "debezium", source.key,
        tuple(cdc_models.Column(name) for name in source.columns), cdc_models.WRITTEN_BY_CDC_ADD))


RUNTIMES = ("kafka-connect", "debezium-server")
CONNECTOR_CLASSES = {"postgresql": "io.debezium.connector.postgresql.PostgresConnector",
                     "mysql": "io.debezium.connector.mysql.MySqlConnector",
                     # Debezium's MySQL connector is not for MariaDB (3.6's asks for SHOW BINARY LOG STATUS)
                     "mariadb": "io.debezium.connector.mariadb.MariaDbConnector"}
SERVER_ID_BASE = 5400  # MySQL/MariaDB: the connector joins the server as a replica with an id of its own


def signal_table(connector: str, source: SourceTable) -> str:
    """The connector's signal table (its signal.data.collection): ``<connector>_signal`` beside
    the first table, in its schema (PostgreSQL) or database (MySQL, MariaDB). Lower case: the
    printed DDL leaves the name unquoted, which PostgreSQL folds to lower case."""
    return f"{source.schema or source.database}.{connector.lower()}_signal"


def signal_table_ddl(table: str) -> str:
    """The signal table Debezium documents (id, type, data), as one statement both PostgreSQL and
    MySQL/MariaDB take."""
    return f"create table {table} (id varchar(42) primary key, type varchar(32) not null, data varchar(2048));"


def connector_properties(connector: str, streams: list[tuple[str, SourceTable]], url: str) -> list[str]:
    """The connector's own properties for the ``streams`` (stream, its table), all of one database
    at ``url``, as lines: comments on lines of their own (a properties file has no inline
    comments: a `#` after a value is part of the value). The password is a placeholder."""
    parts = urlsplit(url)
    first = streams[0][1]
    kind = "mariadb" if parts.scheme == "mariadb" else first.kind
    where = [f"{source.schema or source.database}.{source.name}" for _, source in streams]
    lines = [f"connector.class={CONNECTOR_CLASSES[kind]}",
             f"database.hostname={parts.hostname}",
             f"database.port={parts.port or _default_port(first)}",
             f"database.user={parts.username or '<user>'}",
             "# the password, never printed: set it here (or through your runtime's secrets)",
             "database.password=<the password>",
             f"topic.prefix={connector}",
             "table.include.list=" + ",".join(_literal(table) for table in where)]
    if first.kind == "postgresql":
        lines += [f"database.dbname={first.database}",
                  "plugin.name=pgoutput",
                  f"slot.name={connector.lower()}_slot",
                  f"publication.name={connector.lower()}_publication",
                  "# the connector creates the publication for the included tables",
                  "publication.autocreate.mode=filtered",
                  # without it, a partitioned table's changes come under its partitions' names,
                  # which table.include.list leaves out: every change after the snapshot lost
                  "# ... publishing a partitioned table's changes under its own name, not its partitions'",
                  "publish.via.partition.root=true"]
    else:
        lines += ["# an id no other replica of the server uses",
                  f"database.server.id={SERVER_ID_BASE + zlib.crc32(connector.encode()) % 100_000}",
                  f"database.include.list={_literal(first.database)}",
                  "# DDL events have a topic of their own, not a stream's",
                  "include.schema.changes=false",
                  "# the tables' shapes as of each binlog position: keep the file where it lasts",
                  "schema.history.internal=io.debezium.storage.file.history.FileSchemaHistory",
                  f"schema.history.internal.file.filename={connector}-schema-history.dat"]
    lines += ["# send TRUNCATE as a change (skipped by default: the mirror would keep the rows)",
              "skipped.operations=none",
              # precise (the default) writes a decimal as base64 of its unscaled digits: the scale
              # is only in the schema, which schemaless JSON leaves out, so a column whose scale an
              # ALTER raised was read at the contract's old one, its values 100x too large
              "# decimals as their digits (scale included): an ALTER of a column's scale can never "
              "multiply its values",
              "decimal.handling.mode=string",
              # the data a reader needs to see whole source transactions: each change's
              # transaction block, and BEGIN/END events counting each transaction's changes
              f"# each change's transaction, and a BEGIN and an END event per transaction on "
              f"{transaction_topic(connector)}",
              "provide.transaction.metadata=true",
              "# the table `lakehouse cdc snapshot` writes to, to have the connector read a table again",
              f"signal.data.collection={signal_table(connector, first)}"]
    excluded = [f"{table}.{column}" for table, (_, source) in zip(where, streams, strict=True)
                for column in source.excluded]
    if excluded:
        lines += ["# columns the contracts leave out (--exclude-columns)",
                  "column.exclude.list=" + ",".join(_literal(column) for column in excluded)]
    return lines


def publication_warning(connector: str, streams: list[tuple[str, SourceTable]], url: str) -> str | None:
    """A PostgreSQL connector whose publication exists already (an earlier connector of that name
    made it) without publish_via_partition_root, for a partitioned table: the connector uses
    it as it is, and the table's changes would come under its partitions' names and be left
    out. What to run, in one line; None when nothing is to be done."""
    from lakehouse.contracts.source_tables import publication_via_root

    partitioned = [source.name for _, source in streams if source.partitioned]
    if not partitioned or streams[0][1].kind != "postgresql":
        return None
    name = f"{connector.lower()}_publication"
    if publication_via_root(url, name) is not False:
        return None
    return (f"warning: publication {name} exists and publishes {', '.join(partitioned)} under its partitions' "
            f"names, which the connector leaves out: run `alter publication {name} set "
            "(publish_via_partition_root = true)` before starting it")


def route_properties(connector: str, streams: list[tuple[str, SourceTable]]) -> list[str]:
    """Kafka Connect transforms and predicates (keys without a prefix): the signal table's own
    changes dropped (Debezium sends them like any captured table's, to a topic no stream reads,
    which the broker would have to hold), then each table's topic,
    <topic.prefix>.<schema or database>.<table>, renamed as its stream."""
    aliases = [f"route_{stream}" for stream, _ in streams]
    lines = ["# the signal table's own changes: no stream's, dropped",
             "predicates=is_signal",
             "predicates.is_signal.type=org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
             f"predicates.is_signal.pattern={_literal(f'{connector}.{signal_table(connector, streams[0][1])}')}",
             "# each table's topic (<topic.prefix>.<schema or database>.<table>) renamed as its stream",
             f"transforms={','.join(['drop_signals', *aliases])}",
             "transforms.drop_signals.type=org.apache.kafka.connect.transforms.Filter",
             "transforms.drop_signals.predicate=is_signal"]
    for alias, (stream, source) in zip(aliases, streams, strict=True):
        lines += [f"transforms.{alias}.type=org.apache.kafka.connect.transforms.RegexRouter",
                  f"transforms.{alias}.regex=" + _literal(f"{connector}.{source.schema or source.database}."
                                                          f"{source.name}"),
                  f"transforms.{alias}.replacement={stream}"]
    return lines


def debezium_properties(connector: str, streams: list[tuple[str, SourceTable]], url: str, settings: Settings,
                        runtime: str = "kafka-connect") -> str:
    """One connector for the ``streams`` (stream, its table) of the database at ``url``, as a
    properties file ``runtime`` reads unedited but for the password: a Kafka Connect connector
    (its .properties file; the Debezium embedded engine takes the same) or Debezium Server's
    application.properties (the connector's under debezium.source., transforms under
    debezium.transforms., converters as debezium.format.*, its Kafka sink)."""
    if runtime not in RUNTIMES:
        raise LakehouseError(f"--runtime: expected one of {', '.join(RUNTIMES)}, got {runtime!r}")
    tables = ", ".join(f"{source.name} as {stream}" for stream, source in streams)
    source = connector_properties(connector, streams, url)
    routes = route_properties(connector, streams)
    if runtime == "kafka-connect":
        lines = [f"# Debezium connector {connector} (lakehouse cdc add): {tables}",
                 f"name={connector}", *source,
                 "# schemaless JSON, the pipeline's `debezium` format",
                 "key.converter=org.apache.kafka.connect.json.JsonConverter",
                 "value.converter=org.apache.kafka.connect.json.JsonConverter",
                 "key.converter.schemas.enable=false",
                 "value.converter.schemas.enable=false",
                 NULL_COMMENT,
                 "value.converter.replace.null.with.default=false",
                 *routes,
                 f"# the worker writes to Kafka: {settings.kafka_bootstrap_servers}"]
    else:
        lines = [f"# Debezium Server (lakehouse cdc add): {tables}",
                 "debezium.sink.type=kafka",
                 f"debezium.sink.kafka.producer.bootstrap.servers={settings.kafka_bootstrap_servers}",
                 "debezium.sink.kafka.producer.key.serializer=org.apache.kafka.common.serialization.StringSerializer",
                 "debezium.sink.kafka.producer.value.serializer=org.apache.kafka.common.serialization.StringSerializer",
                 "# schemaless JSON, the pipeline's `debezium` format",
                 "debezium.format.key=json",
                 "debezium.format.value=json",
                 "debezium.format.key.schemas.enable=false",
                 "debezium.format.value.schemas.enable=false",
                 NULL_COMMENT,
                 "debezium.format.value.replace.null.with.default=false",
                 "# where the connector is in the database's log: keep the file where it lasts",
                 # Debezium does not create the folder: without it, it only logs a warning at each
                 # flush and keeps no offset (seen in real Debezium Server: NoSuchFileException)
                 "# (data/ must exist: the container image has it, an unpacked distribution does not)",
                 f"debezium.source.offset.storage.file.filename=data/{connector}-offsets.dat",
                 *[_prefixed(line, "debezium.source.") for line in source],
                 *[_prefixed(line, "debezium.") for line in routes]]
    return "\n".join(lines) + "\n"


# Kafka's JsonConverter writes a null as the column's default when the schema has one
# (replace.null.with.default, true by default): an explicit NULL would be mirrored as the default
NULL_COMMENT = "# a NULL stays NULL (the converter's default writes the column's DEFAULT in its place)"


def _literal(text: str) -> str:
    """A regular expression matching ``text`` as it is, spelled for a properties file: dots as
    [.], any other escape's backslash doubled (java.util.Properties reads a lone one as an escape)."""
    return re.escape(text).replace("\\.", "[.]").replace("\\", "\\\\")


def _prefixed(line: str, prefix: str) -> str:
    return line if line.startswith("#") else prefix + line


def _default_port(source: SourceTable) -> int:
    return 5432 if source.kind == "postgresql" else 3306


def default_connector(streams: list[str], source: SourceTable) -> str:
    """The connector's name (its topic prefix; PostgreSQL: its slot's and publication's stem):
    the stream's for one table, the database's for several."""
    return streams[0] if len(streams) == 1 else re.sub(r"[^A-Za-z0-9_]", "_", source.database)


# --- the command ---------------------------------------------------------------------------------

def excluded_columns(tables: list[str], exclude: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """{table: its columns to leave out} from --exclude-columns: COLUMN (one table) or
    TABLE.COLUMN, TABLE as it was given."""
    chosen: dict[str, list[str]] = {table: [] for table in tables}
    for entry in exclude:
        table, column = _table_column(tables, entry, "--exclude-columns")
        chosen[table].append(column)
    return {table: tuple(columns) for table, columns in chosen.items()}


def renamed_columns(tables: list[str], renames: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """{table: {column: the stream's name of it}} from --rename-columns: COLUMN=NAME (one table)
    or TABLE.COLUMN=NAME, TABLE as it was given."""
    chosen: dict[str, dict[str, str]] = {table: {} for table in tables}
    for entry in renames:
        column, equals, name = entry.rpartition("=")
        if not equals or not column or not name.strip():
            raise LakehouseError(f"--rename-columns: {entry!r}: expected COLUMN=NAME (TABLE.COLUMN=NAME with several "
                                 "tables)")
        table, column = _table_column(tables, column.strip(), "--rename-columns")
        if column in chosen[table]:
            raise LakehouseError(f"--rename-columns: {entry!r}: {column} is renamed twice")
        chosen[table][column] = name.strip()
    return chosen


def _table_column(tables: list[str], entry: str, option: str) -> tuple[str, str]:
    table, _, column = entry.rpartition(".")
    if not table:
        if len(tables) > 1:
            raise LakehouseError(f"{option}: {entry!r}: with several tables, name its table (TABLE.COLUMN)")
        table = tables[0]
    if table not in tables:
        raise LakehouseError(f"{option}: {entry!r}: {table!r} is not one of the tables added")
    return table, column


def check_source_column_names(sources: list[SourceTable]) -> None:
    """Refuse tables with columns named like one of bronze's own (`is_bronze_own`: `op`, `SEQ`,
    `value`, `ERROR_CODE`, ...), every one of every table in one line: a contract cannot declare
    such a name (ARCHITECTURE §6, "Fields the contract lacks"), and the mirror could not carry
    it. `--rename-columns` names such a column otherwise in the stream; the source keeps it."""
    own = [(source, [column for column in source.columns if is_bronze_own(column)]) for source in sources]
    own = [(source, columns) for source, columns in own if columns]
    if not own:
        return
    if len(sources) == 1:
        ((source, columns),) = own
        names = ", ".join(columns)
        raise LakehouseError(
            f"table {source.name}: column{'s' if len(columns) > 1 else ''} {names} "
            f"{'are' if len(columns) > 1 else 'is'} named like {'columns' if len(columns) > 1 else 'a column'} "
            f"bronze writes itself: name {'them' if len(columns) > 1 else 'it'} otherwise in the stream with "
            f"--rename-columns {','.join(f'{c}=NAME' for c in columns)} (the table keeps its names), "
            f"or leave {'them' if len(columns) > 1 else 'it'} out with --exclude-columns {','.join(columns)}")
    names = ", ".join(f"{source.name}.{column}" for source, columns in own for column in columns)
    raise LakehouseError(f"columns named like one bronze writes itself: {names}: name them otherwise in their "
                         "streams with --rename-columns TABLE.COLUMN=NAME (the tables keep their names), or leave "
                         "them out with --exclude-columns TABLE.COLUMN")


def add(settings: Settings, tables: list[str], url: str, stream: str | None, partitions: int, project_dir: Path,
        create_topic: bool = True, exclude: tuple[str, ...] = (), renames: tuple[str, ...] = (),
        connector: str | None = None,
        ) -> list[tuple[str, SourceTable, dict[str, Path]]]:
    """Everything `lakehouse cdc add` does, for each table: (the stream, its source table, the
    files it wrote by what they are). Every table is read and checked before anything is written.
    ``connector``: the connector's name (default_connector by default), whose signal table each
    stream's entry names."""
    from lakehouse.core.sql import check_table_name

    if stream and len(tables) > 1:
        raise LakehouseError("--stream names one table's stream: with several tables, each stream is named "
                             "after its table")
    excluded, renamed = excluded_columns(tables, exclude), renamed_columns(tables, renames)
    sources = [read_table(url, table, excluded[table], renames=renamed[table]) for table in tables]
    check_source_column_names(sources)
    pipeline_path = pipeline_file().resolve()
    streams = load_pipeline(pipeline_path)
    schema_dir = _schema_dir(pipeline_path)
    planned: list[tuple[str, SourceTable, dict[str, Path], dict[str, str]]] = []
    for source in sources:
        name = stream or source.name
        check_table_name(f"bronze.{name}")
        if name in streams:
            raise LakehouseError(f"stream {name!r} is already in {pipeline_path}; choose another with --stream"
                                 + ("" if len(tables) == 1 else f" (add {source.name} on its own)"))
        if any(name == other for other, *_ in planned):
            raise LakehouseError(f"two tables would be stream {name!r}: add them one at a time with --stream")
        files = {"contract": schema_dir / f"{name}.schema.json"}
        rendered = models(name, source)
        files.update({path: project_dir / path for path in rendered})
        existing = [str(path) for path in files.values() if path.exists()]
        if existing:
            raise LakehouseError(f"would overwrite {', '.join(existing)}: remove them or choose another --stream")
        planned.append((name, source, files, rendered))

    connector = connector or default_connector([name for name, *_ in planned], planned[0][1])
    signal = signal_table(connector, planned[0][1])
    original = pipeline_path.read_text()
    entries = "".join(pipeline_entry(name, source, partitions, signal) for name, source, *_ in planned)
    pipeline_path.write_text(original.rstrip("\n") + "\n" + entries)
    for _, source, files, _ in planned:
        files["contract"].write_text(contract(source))
    try:
        load_pipeline(pipeline_path)  # the entries read back, or nothing stays written
    except LakehouseError:
        pipeline_path.write_text(original)
        for _, _, files, _ in planned:
            files["contract"].unlink()
        raise
    added = []
    for name, source, files, rendered in planned:
        for path, text in rendered.items():
            files[path].parent.mkdir(parents=True, exist_ok=True)
            files[path].write_text(text)
        files["pipeline"] = pipeline_path
        if create_topic:
            from producers.delivery import ensure_topic

            ensure_topic(settings, name, partitions=partitions)
        added.append((name, source, files))
    if create_topic and added:
        from producers.delivery import ensure_topic

        # the connector's transaction topic (provide.transaction.metadata, printed): one partition
        # keeps its BEGIN and END events in commit order; the broker may create no topic itself
        ensure_topic(settings, transaction_topic(connector), partitions=1)
    return added


def transaction_topic(connector: str) -> str:
    """Where a connector writes its BEGIN and END events: Debezium's default, <topic.prefix>.transaction."""
    return f"{connector}.transaction"


def _schema_dir(pipeline_path: Path) -> Path:
    import yaml

    document = yaml.safe_load(pipeline_path.read_text())
    if not isinstance(document, dict) or not isinstance(document.get("streams"), dict):
        raise LakehouseError(f"pipeline file {pipeline_path}: expected a `streams:` mapping")
    last_key = list(document)[-1]
    if last_key != "streams":
        raise LakehouseError(f"pipeline file {pipeline_path}: `streams:` must be its last section to add a stream "
                             f"(`{last_key}` comes after it)")
    return (pipeline_path.parent / str(document.get("schema_dir", "."))).resolve()


# --- `lakehouse cdc snapshot` ---------------------------------------------------------------------

SNAPSHOT_SIGNAL = "execute-snapshot"


def snapshot_signal(data_collection: str) -> tuple[str, str, str]:
    """(id, type, data) of the row that asks Debezium for an incremental snapshot of
    ``data_collection`` (SCHEMA.NAME or DATABASE.NAME): the connector reads the table again in
    chunks of its key while it streams, and sends each row as a read (op `r`) ordered with the
    stream's changes (ARCHITECTURE §9). The id is new each time: Debezium takes each signal once."""
    import uuid

    return (str(uuid.uuid4()), SNAPSHOT_SIGNAL,
            json.dumps({"data-collections": [data_collection], "type": "incremental"}))


def request_snapshot(spec: StreamSpec, url: str, table: str | None = None) -> tuple[str, str, str]:
    """Writes the signal of an incremental snapshot of CDC stream ``spec``'s source table (``table``:
    NAME or SCHEMA.NAME, default its source_table) into its connector's signal table, in the
    database at ``url``: (the table's data collection, the signal table, the signal's id)."""
    from sqlalchemy import column, insert
    from sqlalchemy import table as sql_table
    from sqlalchemy.exc import SQLAlchemyError

    from lakehouse.contracts.source_tables import engine

    if spec.format != "debezium":
        raise LakehouseError(f"stream {spec.name!r} is a {spec.format} stream: `cdc snapshot` asks Debezium "
                             "for an incremental snapshot (with AWS DMS, reload the table from its task)")
    if not spec.signal_table:
        raise LakehouseError(f"stream {spec.name!r} names no signal table: create the connector's (docs/"
                             "connect-a-database.md, \"Read a table again\"), set its signal.data.collection, and "
                             "name it in the stream's pipeline entry (signal_table: SCHEMA.NAME)")
    source = read_table(url, table or spec.source_table or spec.name, only=())
    collection = f"{source.schema or source.database}.{source.name}"
    signal_schema, signal_name = spec.signal_table.split(".")
    signal_id, kind, data = snapshot_signal(collection)
    statement = insert(sql_table(signal_name, column("id"), column("type"), column("data"),
                                 schema=signal_schema)).values(id=signal_id, type=kind, data=data)
    database_engine = engine(source.url)
    try:
        with database_engine.begin() as connection:
            connection.execute(statement)
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise LakehouseError(f"cannot write the signal into {spec.signal_table}: {reason}") from None
    finally:
        database_engine.dispose()
    return collection, spec.signal_table, signal_id
