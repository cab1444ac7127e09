"""`lakehouse cdc add`: a table of a PostgreSQL, MySQL or MariaDB database becomes a CDC stream
in one command.

It reads the table's columns and primary key from the database (SQLAlchemy) and writes what a
stream needs (docs/connect-a-database.md): the contract (a JSON Schema whose temporal and decimal
columns name the Debezium semantic type they arrive in), the pipeline entry, the dbt source
entry and the changelog, mirror, live-view and history models; it creates the topic and prints
the Debezium properties to set. It never overwrites: a stream or file that exists stops it
before anything is written.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

from lakehouse.contracts.source_tables import SourceTable, read_table
from lakehouse.contracts.streams import load_pipeline, pipeline_file
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings
from lakehouse.core.sql import quote

TEMPLATES = Path(__file__).resolve().parent / "cdc_models"
BUCKETS = 16


# --- the files it writes -------------------------------------------------------------------------

def contract(source: SourceTable) -> str:
    where = f"{source.schema}.{source.name}" if source.schema else f"{source.database}.{source.name}"
    return json.dumps({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"{source.name} row",
        "description": f"A row of the {source.kind} table {where}, as Debezium's before and after images carry "
                       f"it (written by `lakehouse cdc add` on {datetime.now(UTC):%Y-%m-%d}).",
        "type": "object",
        "properties": source.columns,
        "required": list(source.key),
    }, indent=2) + "\n"


def pipeline_entry(stream: str, source: SourceTable, partitions: int) -> str:
    identity = ", ".join(json.dumps(k) for k in source.key)
    return (f"\n  {stream}:  # `lakehouse cdc add`, {source.kind} table {source.name}\n"
            f"    format: debezium\n"
            f"    schema: {stream}.schema.json\n"
            f"    event_time: _source_ts\n"
            f"    identity: [{identity}]\n"
            f"    source_table: {json.dumps(source.name)}\n"
            f"    partitions: {partitions}\n")


def models(stream: str, source: SourceTable) -> dict[str, str]:
    """{path under the dbt project: text} of the stream's source entry and models."""
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    # the templates are dbt models, full of {{ }} and {% %}: ours are [[ ]] and [% %]
    environment = Environment(loader=FileSystemLoader(TEMPLATES), undefined=StrictUndefined, keep_trailing_newline=True,
                              variable_start_string="[[", variable_end_string="]]",
                              block_start_string="[%", block_end_string="%]",
                              comment_start_string="[#", comment_end_string="#]")
    key = list(source.key)
    values = {
        "stream": stream, "table": source.name, "kind": source.kind, "buckets": BUCKETS,
        "columns": [quote(name) for name in source.columns], "first_key": quote(key[0]),
        "key_config": repr(key[0]) if len(key) == 1 else repr(key), "history_key": repr([*key, "_seq"]),
    }
    files = {"source.yml": f"models/bronze/_{stream}__source.yml",
             "changelog.sql": f"models/silver/{stream}_changelog.sql",
             "mirror.sql": f"models/silver/{stream}_mirror.sql",
             "live.sql": f"models/silver/{stream}.sql",
             "history.sql": f"models/silver/{stream}_history.sql"}
    return {path: environment.get_template(template).render(values) for template, path in files.items()}


def debezium_properties(stream: str, source: SourceTable, url: str, settings: Settings) -> str:
    """The connector's properties for Debezium Server (or Kafka Connect): the password left out."""
    parts = urlsplit(url)
    name = source.name
    common = [
        f"topic.prefix={stream}",
        "key.converter=org.apache.kafka.connect.json.JsonConverter",
        "value.converter=org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable=false",
        "value.converter.schemas.enable=false",
        "# the table's topic (<topic.prefix>.<schema or database>.<table>) renamed as the stream",
        "transforms=route",
        "transforms.route.type=org.apache.kafka.connect.transforms.RegexRouter",
        "transforms.route.regex=" + re.escape(f"{stream}.{source.schema or source.database}.{name}"),
        f"transforms.route.replacement={stream}",
        "# send TRUNCATE as a change (skipped by default: the mirror would keep the rows)",
        "skipped.operations=none",
        f"# Kafka: {settings.kafka_bootstrap_servers}",
    ]
    if source.kind == "postgresql":
        specific = [
            "connector.class=io.debezium.connector.postgresql.PostgresConnector",
            "plugin.name=pgoutput",
            f"slot.name={stream}_slot",
            f"publication.name={stream}_publication",
            "publication.autocreate.mode=filtered",
            f"table.include.list={source.schema}.{name}",
        ]
    else:
        specific = [
            "connector.class=io.debezium.connector.mysql.MySqlConnector  "
            "# MariaDB: io.debezium.connector.mariadb.MariaDbConnector",
            "database.server.id=<a number no other replica uses>",
            f"table.include.list={source.database}.{name}",
            "include.schema.changes=false  # DDL events have a topic of their own, not the stream's",
            "schema.history.internal=io.debezium.storage.file.history.FileSchemaHistory",
            f"schema.history.internal.file.filename=<a file of its own>/{stream}.history",
        ]
    connection = [f"database.hostname={parts.hostname}", f"database.port={parts.port or _default_port(source)}",
                  f"database.user={parts.username or '<user>'}", "database.password=<the password>"]
    if source.kind == "postgresql":
        connection.append(f"database.dbname={source.database}")
    if source.excluded:
        prefix = f"{source.schema or source.database}.{name}"
        common.append("column.exclude.list=" + ",".join(re.escape(f"{prefix}.{column}") for column in source.excluded))
    return "\n".join([*specific, *connection, *common]) + "\n"


def _default_port(source: SourceTable) -> int:
    return 5432 if source.kind == "postgresql" else 3306


# --- the command ---------------------------------------------------------------------------------

def add(settings: Settings, table: str, url: str, stream: str | None, partitions: int, project_dir: Path,
        create_topic: bool = True, exclude: tuple[str, ...] = ()) -> tuple[str, SourceTable, dict[str, Path]]:
    """Everything `lakehouse cdc add` does: (the stream, its source table, the files it wrote by
    what they are)."""
    from lakehouse.core.sql import check_table_name

    source = read_table(url, table, exclude)
    stream = stream or source.name
    check_table_name(f"bronze.{stream}")
    pipeline_path = pipeline_file().resolve()
    streams = load_pipeline(pipeline_path)
    if stream in streams:
        raise LakehouseError(f"stream {stream!r} is already in {pipeline_path}; choose another with --stream")
    schema_dir = _schema_dir(pipeline_path)
    files = {"contract": schema_dir / f"{stream}.schema.json"}
    rendered = models(stream, source)
    files.update({path: project_dir / path for path in rendered})
    existing = [str(path) for path in files.values() if path.exists()]
    if existing:
        raise LakehouseError(f"would overwrite {', '.join(existing)}: remove them or choose another --stream")

    original = pipeline_path.read_text()
    pipeline_path.write_text(original.rstrip("\n") + "\n" + pipeline_entry(stream, source, partitions))
    files["contract"].write_text(contract(source))
    try:
        load_pipeline(pipeline_path)  # the entry reads back, or nothing stays written
    except LakehouseError:
        pipeline_path.write_text(original)
        files["contract"].unlink()
        raise
    for path, text in rendered.items():
        files[path].parent.mkdir(parents=True, exist_ok=True)
        files[path].write_text(text)
    files["pipeline"] = pipeline_path
    if create_topic:
        from producers.delivery import ensure_topic

        ensure_topic(settings, stream, partitions=partitions)
    return stream, source, files


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
