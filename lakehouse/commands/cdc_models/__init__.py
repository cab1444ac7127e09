"""The dbt models of a CDC stream, rendered from the templates beside this file: what `lakehouse
cdc add` writes for a new stream, and what the demo's `customers` and `accounts` models are.

The demo's models are not written by hand: :data:`DEMO_STREAMS` describes the two streams (the
rest comes from their contracts and pipeline entries) and ``python -m lakehouse.commands.cdc_models``
writes their models from the templates; tests/unit/test_cdc_models.py holds the files in models/
equal to what the templates render, byte for byte. So a change to a CDC model is a change to a
template, which every stream `cdc add` writes from then on takes too.

The templates are dbt models, full of ``{{ }}`` and ``{% %}``: theirs are ``[[ ]]`` and ``[% %]``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from lakehouse.contracts.bronze_columns import INGESTED_AT, SEQ
from lakehouse.core.sql import quote, sql_string

TEMPLATES = Path(__file__).resolve().parent
BUCKETS = 16  # the mirror's, the live table's and the history's buckets of the key
REPO = TEMPLATES.parents[2]


@dataclass(frozen=True)
class Column:
    """A column of the changelog: its bronze name, and what silver makes of it."""

    name: str
    silver_name: str | None = None  # silver's name of it, if another
    cast: str | None = None  # the Spark SQL type silver casts it to (bronze keeps the source's text)
    comment: str | None = None  # why, in one line above it


@dataclass(frozen=True)
class CdcStream:
    """What the templates need to know of a CDC stream."""

    stream: str
    table: str  # the source table's name
    origin: str  # where its changes come from, in the models' comments: "postgresql, through Debezium"
    format: str  # debezium or dms (CDC_FORMATS): DMS has no truncation and sends an update of the key as one change
    key: tuple[str, ...]
    columns: tuple[Column, ...]
    note: str  # how the files came to be, one sentence
    quoted: bool = True  # every name backtick-quoted: a source table's column may be any name, a keyword too
    # the transactions model whose published transactions alone its models apply (a Debezium
    # stream with `transactions`: macros/cdc_transactions.sql), or none
    transactions: str | None = None

    def sql(self, name: str) -> str:
        return quote(name) if self.quoted else name


WRITTEN_BY_CDC_ADD = "Written by `lakehouse cdc add`."


def render(spec: CdcStream) -> dict[str, str]:
    """{path under the dbt project: text} of the stream's source entry, models and data tests."""
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    environment = Environment(loader=FileSystemLoader(TEMPLATES), undefined=StrictUndefined, keep_trailing_newline=True,
                              variable_start_string="[[", variable_end_string="]]",
                              block_start_string="[%", block_end_string="%]",
                              comment_start_string="[#", comment_end_string="#]")
    key = [spec.sql(name) for name in spec.key]
    selects = []
    for column in spec.columns:
        name = spec.sql(column.name)
        expression = f"cast({name} as {column.cast})" if column.cast else name
        silver = spec.sql(column.silver_name or column.name)
        selects.append((column.comment, expression if expression == silver else f"{expression} as {silver}"))

    # Jinja's literals are Python's: a str's repr is a Jinja string, whatever the column's name
    key_config = repr(spec.key[0]) if len(spec.key) == 1 else repr(list(spec.key))
    values = {
        "stream": spec.stream, "table": spec.table, "origin": spec.origin, "buckets": BUCKETS,
        "note": spec.note,
        "truncates": spec.format == "debezium", "unavailable": spec.format == "debezium",
        "splits_key_updates": spec.format == "dms",
        "key": key, "key_config": key_config,
        "named": repr([column.name for column in spec.columns]),
        "non_key": [spec.sql(column.name) for column in spec.columns if column.name not in spec.key],
        "selects": selects,
        "renamed": {sql_string(column.name): sql_string(column.silver_name) for column in spec.columns
                    if column.silver_name and column.silver_name != column.name},
        # the data tests' YAML: JSON strings are YAML strings, whatever the column's name
        "key_names": [json.dumps(name) for name in spec.key], "key_yaml": json.dumps(list(spec.key)),
        "history_key_yaml": json.dumps([*spec.key, SEQ]), "seq": SEQ, "ingested_at": INGESTED_AT,
        "key_text": ", ".join(spec.key), "transactions": spec.transactions,
    }
    files = {"source.yml.j2": f"models/bronze/_{spec.stream}__source.yml",
             "changelog.sql.j2": f"models/silver/{spec.stream}_changelog.sql",
             "mirror.sql.j2": f"models/silver/{spec.stream}_mirror.sql",
             "live.sql.j2": f"models/silver/{spec.stream}.sql",
             "history.sql.j2": f"models/silver/{spec.stream}_history.sql",
             "models.yml.j2": f"models/silver/_{spec.stream}__models.yml"}
    return {path: environment.get_template(template).render(values) for template, path in files.items()}


# --- the demo's two CDC streams ------------------------------------------------------------------

DEMO_NOTE = "Rendered by lakehouse/commands/cdc_models."

# What silver makes of each stream's columns beyond its contract: names and types.
DEMO_STREAMS = {
    "customers": ("Debezium", {
        "name": Column("name", silver_name="customer_name"),
        "country": Column("country", silver_name="country_code"),
        "created_at": Column("created_at", cast="timestamp"),
        "updated_at": Column("updated_at", cast="timestamp"),
    }),
    "accounts": ("AWS DMS", {
        "balance": Column("balance", cast="decimal(18, 2)",
                          comment="exact: the source keeps money as two-place decimal text"),
        "updated_at": Column("updated_at", cast="timestamp"),
    }),
}


def demo_streams() -> list[CdcStream]:
    """The demo's CDC streams, their columns and keys from their contracts and pipeline entries."""
    from lakehouse.contracts.streams import load_pipeline

    streams = load_pipeline(REPO / "lakehouse" / "contracts" / "pipeline.yml")
    specs = []
    for name, (origin, silver) in DEMO_STREAMS.items():
        stream = streams[name]
        properties = json.loads(stream.schema_path.read_text())["properties"]
        specs.append(CdcStream(name, stream.source_table or name, origin, stream.format, stream.identity_columns,
                               tuple(silver.get(column, Column(column)) for column in properties), DEMO_NOTE,
                               quoted=False, transactions=stream.transactions))
    return specs


def demo_models() -> dict[str, str]:
    """{path under the repository: text} of the demo's CDC models, as the templates render them (its
    bronze sources and data tests are its own YAML's, with descriptions of every column)."""
    return {path: text for spec in demo_streams() for path, text in render(spec).items()
            if path.endswith(".sql")}
