"""The pipeline configuration: which streams exist and how each one lands in bronze.

A stream is data, not code: an entry in the pipeline file (lakehouse/contracts/pipeline.yml, or the
file LAKEHOUSE_PIPELINE_FILE names) plus a schema file. The schema file is the contract
with the producer (lakehouse/contracts/schemas/). Everything is checked when the file is loaded, so
a bad entry stops the job with one line naming the problem, before Spark starts.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from pyspark.sql.types import (
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from lakehouse.contracts import bronze_columns
from lakehouse.core.errors import LakehouseError
from lakehouse.core.sql import TABLE_NAME_RULE, check_table_name, quote

DEFAULT_PIPELINE_FILE = Path(__file__).resolve().parent / "pipeline.yml"

# The names bronze and the decoding give columns of their own (ARCHITECTURE §6, "Fields the
# contract lacks"): the Kafka record's columns a decoded batch carries (ingestion/formats/checks.py
# KAFKA_COLUMNS, HEADERS_COLUMN) and bronze's own (lakehouse/contracts/bronze_columns.py: the
# metadata, every name of its Kafka prefix included, and a dead row's); a CDC stream's also the
# changelog's. A record's field of one of these names, in any case (Spark resolves names
# case-insensitively), is no column of the contract: beside bronze's own it made the decoded
# batch ambiguous and stopped the stream.
BRONZE_OWN_COLUMNS = frozenset({
    "key", "value", "topic", "partition", "offset", "timestamp", "headers",
    *bronze_columns.METADATA_COLUMNS,
})
CDC_OWN_COLUMNS = frozenset(bronze_columns.CDC_COLUMNS)
BRONZE_OWN_PREFIX = bronze_columns.KAFKA_PREFIX


def is_bronze_own(name: str, cdc: bool = True) -> bool:
    """Whether a column of this name is bronze's own, never a field of a record: of a CDC
    stream's bronze table (``cdc``), else of an event stream's."""
    lowered = name.lower()
    return (lowered in BRONZE_OWN_COLUMNS or (cdc and lowered in CDC_OWN_COLUMNS)
            or lowered.startswith(BRONZE_OWN_PREFIX))


def refuse_own_fields(spec: StreamSpec, names, where: str, remedy: str = "rename the field") -> None:
    """A schema that declares a field named like one of bronze's own columns (`is_bronze_own`) is
    refused, in one line: the record's column and bronze's own would be two columns of one name."""
    own = [name for name in names if is_bronze_own(name, spec.is_cdc)]
    if own:
        raise LakehouseError(
            f"{where}: stream {spec.name!r}{f' (source table {spec.source_table})' if spec.is_cdc else ''} "
            f"declares {', '.join(own)}, a name bronze gives a column of its own: {remedy}")


PIPELINE_FILE_VARIABLE = "LAKEHOUSE_PIPELINE_FILE"

EVENT_FORMATS = ("json", "avro", "protobuf")
CDC_FORMATS = ("debezium", "dms")
# A Debezium connector's transaction topic (provide.transaction.metadata): BEGIN and END events,
# a fixed shape (ingestion/formats/debezium_transactions.py), no schema file
TRANSACTIONS_FORMAT = "debezium_transactions"
FORMATS = EVENT_FORMATS + CDC_FORMATS + (TRANSACTIONS_FORMAT,)
# the identity and event time of a transactions stream's bronze rows
TRANSACTIONS_IDENTITY = ("id", "status")
TRANSACTIONS_EVENT_TIME = "event_ts"
# Which schema file each format takes (by suffix): a wrong pairing is a config error.
SCHEMA_SUFFIXES = {"json": ".json", "debezium": ".json", "dms": ".json", "avro": ".avsc", "protobuf": ".proto"}
KEYS = {"topic", "format", "schema", "message", "subject", "bronze_table", "event_time", "identity", "required",
        "transactions",
        "source_table", "partitions", "source_url_variable", "contract", "unavailable_placeholder", "signal_table"}
# CDC streams: what becomes of a row field the contract lacks (ARCHITECTURE §6, "Fields the
# contract lacks"). additive: a new column of bronze, typed from the change event (the source
# added a column); fixed: kept in `RESCUED`. Neither drops it.
CONTRACT_MODES = ("additive", "fixed")
# Debezium's stand-in for a value it does not have (its connector setting
# `unavailable.value.placeholder`, this by default): an unchanged TOASTed PostgreSQL column. A
# stream whose connector sets another one names it (`unavailable_placeholder`), or the stand-in
# would be taken for the column's value (ingestion/formats/debezium.py without_unavailable_values).
DEBEZIUM_UNAVAILABLE_PLACEHOLDER = "__debezium_unavailable_value"


@dataclass(frozen=True)
class StreamSpec:
    name: str
    topic: str
    format: str
    schema_path: Path | None  # None: a format of a fixed shape (debezium_transactions)
    bronze_table: str
    event_time_column: str
    identity_columns: tuple[str, ...]
    required_columns: tuple[str, ...]
    message: str | None = None  # protobuf message type
    subject: str | None = None  # avro registry subject
    source_table: str | None = None  # CDC: the table the envelope must name
    # CDC: the environment variable holding the source database's URL (never the URL itself: it
    # holds a password), for `lakehouse cdc verify` and the quality suite's mirror check
    source_url_variable: str | None = None
    partitions: int = 3
    contract: str = "fixed"  # CDC: "additive" by default (CONTRACT_MODES); event streams: fixed
    unavailable_placeholder: str = DEBEZIUM_UNAVAILABLE_PLACEHOLDER  # Debezium streams
    # Debezium: the connector's signal table (its `signal.data.collection`, SCHEMA.NAME or
    # DATABASE.NAME), where `lakehouse cdc snapshot` asks for an incremental snapshot
    signal_table: str | None = None
    # Debezium: the stream of its connector's transaction topic (format debezium_transactions);
    # set, the CDC models publish whole source transactions only (ARCHITECTURE §9, "Transactions")
    transactions: str | None = None

    @property
    def is_transactions(self) -> bool:
        """A connector's transaction topic: no schema file, no rows of a table."""
        return self.format == TRANSACTIONS_FORMAT

    @property
    def adds_fields(self) -> bool:
        """Whether a row field the contract lacks becomes a new column (else it is rescued)."""
        return self.contract == "additive"

    @property
    def is_cdc(self) -> bool:
        return self.format in CDC_FORMATS

    @property
    def partitioning(self) -> tuple[str, ...]:
        # CDC: by ingestion day, so a MERGE's increment reads few partitions (ARCHITECTURE §6).
        # DDL: the column quoted, as it comes from the pipeline file. Then the reason a row is
        # dead, null for good rows: dead rows in files of their own, pruned by a reader of good
        # rows (ARCHITECTURE §6; ingestion/bronze.py DEAD_PARTITION).
        by_day = f"days({bronze_columns.INGESTED_AT})" if self.is_cdc or self.is_transactions \
            else f"days({quote(self.event_time_column)})"
        return (by_day, bronze_columns.ERROR_CODE)


def pipeline_file() -> Path:
    return Path(os.environ.get(PIPELINE_FILE_VARIABLE) or DEFAULT_PIPELINE_FILE)


def _as_names(value, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise LakehouseError(f"{where}: expected a column name or a list of them, got {value!r}")
    return tuple(value)


def _spec(name: str, entry: dict, schema_dir: Path, where: str) -> StreamSpec:
    if not isinstance(entry, dict):
        raise LakehouseError(f"{where}: expected a mapping of settings")
    unknown = set(entry) - KEYS
    if unknown:
        raise LakehouseError(
            f"{where}: unknown setting(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(KEYS))}")
    fmt = entry.get("format")
    if fmt not in FORMATS:
        raise LakehouseError(f"{where}: unknown format {fmt!r}; supported: {', '.join(FORMATS)}")
    if fmt == TRANSACTIONS_FORMAT:
        return _transactions_spec(name, entry, where)
    for key in ("schema", "event_time", "identity"):
        if not entry.get(key):
            raise LakehouseError(f"{where}: `{key}` is required")
    schema_path = schema_dir / entry["schema"]
    if not schema_path.name.endswith(SCHEMA_SUFFIXES[fmt]):
        raise LakehouseError(f"{where}: a {fmt} stream takes a {SCHEMA_SUFFIXES[fmt]} schema, got {entry['schema']}")
    if fmt == "protobuf" and not entry.get("message"):
        raise LakehouseError(f"{where}: a protobuf stream needs `message` (the full name of the message type)")
    identity = _as_names(entry["identity"], f"{where}.identity")
    if fmt == "dms" and len(identity) > 1:
        # ingestion reads a DMS message key as the bare value of the key (ingestion/formats/dms.py)
        raise LakehouseError(f"{where}.identity: a dms stream takes a one-column key, got {', '.join(identity)} "
                             "(a composite key needs Debezium)")
    event_time = entry["event_time"]
    required = _as_names(entry["required"], f"{where}.required") if "required" in entry else (
        identity if fmt in CDC_FORMATS else tuple(dict.fromkeys((*identity, event_time))))
    topic = str(entry.get("topic", name))
    try:
        partitions = int(entry.get("partitions", 3))
    except (TypeError, ValueError):
        raise LakehouseError(f"{where}.partitions: expected a number, got {entry.get('partitions')!r}") from None
    bronze_table = _bronze_table(name, entry, where)
    return StreamSpec(
        name=name,
        topic=topic,
        format=fmt,
        schema_path=schema_path,
        bronze_table=bronze_table,
        event_time_column=str(event_time),
        identity_columns=identity,
        required_columns=required,
        message=entry.get("message"),
        subject=entry.get("subject", f"{topic}-value") if fmt == "avro" else None,
        source_table=entry.get("source_table", name) if fmt in CDC_FORMATS else None,
        source_url_variable=_source_url_variable(entry, fmt, where),
        partitions=partitions,
        contract=_contract_mode(entry, fmt, where),
        unavailable_placeholder=_unavailable_placeholder(entry, fmt, where),
        signal_table=_signal_table(entry, fmt, where),
        transactions=_transactions_of(entry, fmt, where),
    )


def _transactions_spec(name: str, entry: dict, where: str) -> StreamSpec:
    """A connector's transaction topic: its shape is Debezium's, so it takes no schema, event
    time or identity; one partition keeps its events in commit order."""
    given = sorted(set(entry) - {"format", "topic", "bronze_table", "partitions"})
    if given:
        raise LakehouseError(f"{where}: a {TRANSACTIONS_FORMAT} stream takes only topic, bronze_table and "
                             f"partitions (its events have Debezium's fixed shape), got {', '.join(given)}")
    if str(entry.get("partitions", 1)) != "1":
        raise LakehouseError(f"{where}.partitions: a transaction topic has one partition (its events in commit "
                             f"order), got {entry.get('partitions')!r}")
    return StreamSpec(name=name, topic=str(entry.get("topic", name)), format=TRANSACTIONS_FORMAT,
                      schema_path=None, bronze_table=_bronze_table(name, entry, where),
                      event_time_column=TRANSACTIONS_EVENT_TIME, identity_columns=TRANSACTIONS_IDENTITY,
                      required_columns=TRANSACTIONS_IDENTITY, partitions=1)


def _debezium_only(entry: dict, key: str, fmt: str, where: str, what: str) -> None:
    """A setting only a Debezium stream takes: set on another, one line saying ``what`` it is."""
    if key in entry and fmt != "debezium":
        raise LakehouseError(f"{where}.{key}: only a debezium stream has {what}")


def _transactions_of(entry: dict, fmt: str, where: str) -> str | None:
    _debezium_only(entry, "transactions", fmt, where,
                   "transaction metadata (DMS sends no END counts: ARCHITECTURE §9, \"Transactions\")")
    name = entry.get("transactions")
    if name is None:
        return None
    if not isinstance(name, str) or not name:
        raise LakehouseError(f"{where}.transactions: expected the name of a {TRANSACTIONS_FORMAT} stream, got {name!r}")
    return name


def _unavailable_placeholder(entry: dict, fmt: str, where: str) -> str:
    _debezium_only(entry, "unavailable_placeholder", fmt, where, "one (Debezium's unavailable.value.placeholder)")
    value = entry.get("unavailable_placeholder", DEBEZIUM_UNAVAILABLE_PLACEHOLDER)
    if not isinstance(value, str) or not value:
        raise LakehouseError(f"{where}.unavailable_placeholder: expected the text of the connector's "
                             f"unavailable.value.placeholder, got {value!r}")
    return value


def _signal_table(entry: dict, fmt: str, where: str) -> str | None:
    _debezium_only(entry, "signal_table", fmt, where, "one (its connector's signal.data.collection)")
    table = entry.get("signal_table")
    if table is None:
        return None
    if not isinstance(table, str) or len(table.split(".")) != 2 or not all(table.split(".")):
        raise LakehouseError(f"{where}.signal_table: expected the connector's signal.data.collection, "
                             f"SCHEMA.NAME (PostgreSQL) or DATABASE.NAME (MySQL, MariaDB), got {table!r}")
    return table


def _contract_mode(entry: dict, fmt: str, where: str) -> str:
    mode = entry.get("contract", "additive" if fmt in CDC_FORMATS else "fixed")
    if mode not in CONTRACT_MODES:
        raise LakehouseError(f"{where}.contract: expected one of {', '.join(CONTRACT_MODES)}, got {mode!r}")
    if mode == "additive" and fmt not in CDC_FORMATS:
        # an event's unknown fields are rescued (JSON) or come with a registered schema (Avro, Protobuf)
        raise LakehouseError(f"{where}.contract: additive applies to debezium and dms streams only; "
                             "an event stream's contract changes with its schema file")
    return mode


def _source_url_variable(entry: dict, fmt: str, where: str) -> str | None:
    variable = entry.get("source_url_variable")
    if variable is None:
        return None
    if fmt not in CDC_FORMATS:
        raise LakehouseError(f"{where}.source_url_variable: only a CDC stream has a source database")
    if not isinstance(variable, str) or not variable.replace("_", "a").isalnum() or "://" in variable:
        raise LakehouseError(f"{where}.source_url_variable: expected the name of an environment variable "
                             f"(the URL itself would put its password in the file), got {variable!r}")
    return variable


def _bronze_table(name: str, entry: dict, where: str) -> str:
    """The stream's bronze table: a plain name (lakehouse/core/sql.py), since it lands in SQL and
    in dbt's sources; the default, bronze.<stream>, only when the stream's name makes one."""
    table = entry.get("bronze_table", f"bronze.{name}")
    try:
        return check_table_name(table)
    except LakehouseError:
        if "bronze_table" not in entry:
            raise LakehouseError(f"{where}: the stream name does not make a valid table name (bronze.{name}): "
                                 f"set `bronze_table`, {TABLE_NAME_RULE}") from None
        raise LakehouseError(f"{where}.bronze_table: invalid table name {table!r}: "
                             f"expected {TABLE_NAME_RULE}") from None


@cache
def _load(path: Path, mtime_ns: int) -> dict[str, StreamSpec]:
    import yaml

    try:
        document = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise LakehouseError(f"cannot read the pipeline file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise LakehouseError(f"pipeline file {path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(document, dict) or not isinstance(document.get("streams"), dict) or not document["streams"]:
        raise LakehouseError(f"pipeline file {path}: expected a `streams:` mapping with at least one stream")
    schema_dir = (path.parent / str(document.get("schema_dir", "."))).resolve()
    specs = {
        str(name): _spec(str(name), entry, schema_dir, f"{path.name}: streams.{name}")
        for name, entry in document["streams"].items()
    }
    for spec in specs.values():
        if spec.transactions is not None and (
                spec.transactions not in specs or not specs[spec.transactions].is_transactions):
            raise LakehouseError(f"{path.name}: streams.{spec.name}.transactions: {spec.transactions!r} is not a "
                                 f"{TRANSACTIONS_FORMAT} stream of this file")
    return specs


def load_pipeline(path: Path | None = None) -> dict[str, StreamSpec]:
    """Every configured stream by name (re-read when the file changes)."""
    path = (path or pipeline_file()).resolve()
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        raise LakehouseError(f"pipeline file not found: {path} (set {PIPELINE_FILE_VARIABLE} or restore it)") from None
    return _load(path, mtime)


def stream_names() -> list[str]:
    return sorted(load_pipeline())


def get_stream(name: str) -> StreamSpec:
    streams = load_pipeline()
    spec = streams.get(name)
    if spec is None:
        raise LakehouseError(f"unknown stream {name!r}; configured streams: {', '.join(sorted(streams))}")
    if spec.schema_path is not None and not spec.schema_path.is_file():
        raise LakehouseError(f"schema file of stream {name!r} not found: {spec.schema_path}")
    return spec


def resolve_streams(names: list[str]) -> list[StreamSpec]:
    """The specs of the named streams; ``["all"]`` means every configured stream."""
    if names == ["all"]:
        names = stream_names()
    return [get_stream(name) for name in dict.fromkeys(names)]


_DECIMAL_FORMAT = re.compile(r"decimal\(\s*([0-9]+)\s*,\s*([0-9]+)\s*\)")


def _decimal_type(text: str, where: str) -> DecimalType:
    match = _DECIMAL_FORMAT.fullmatch(text.strip())
    precision, scale = (int(match[1]), int(match[2])) if match else (0, -1)
    if not match or not (1 <= precision <= 38 and 0 <= scale <= precision):
        raise LakehouseError(f"{where}: format {text!r} is not decimal(precision, scale) with 1 <= precision <= 38 "
                             "and 0 <= scale <= precision")
    return DecimalType(precision, scale)


def _json_type(prop: dict, where: str) -> DataType:
    kind = prop.get("type")
    if isinstance(kind, list):  # ["string", "null"]: nullable is the default in Spark
        kind = next((k for k in kind if k != "null"), "string")
    form = prop.get("format")
    if kind in ("number", "string") and isinstance(form, str) and form.startswith("decimal"):
        return _decimal_type(form, where)
    if kind == "string":
        # a time of day stays text ("10:15:30.5"): Spark 4.1's TIME type is a preview that Iceberg's
        # Spark runtime (1.12) cannot write
        return {"date-time": TimestampType(), "date": DateType()}.get(form, StringType())
    if kind == "integer":
        return LongType()
    if kind == "number":
        return DoubleType()
    if kind == "boolean":
        return BooleanType()
    raise LakehouseError(f"{where}: JSON Schema type {kind!r} is not supported for bronze columns (use a string)")


# a CDC contract's columns of the source table left out on purpose (`lakehouse cdc add
# --exclude-columns`): `lakehouse cdc verify` names any other column the contract lacks.
EXCLUDED_KEYWORD = "x-excluded-columns"

# Debezium's semantic types (the `name` of a field in its Connect schema) that say how a value is
# written on the wire, by the kind of declared type they can fill. A field of these kinds is
# read by its semantic type: from the event's own schema when schemas are enabled, else from
# the contract's `x-debezium-type` (absent: plain JSON, an ISO-8601 string or a JSON number).
DEBEZIUM_TYPE_KEYWORD = "x-debezium-type"
DEBEZIUM_TYPES: dict[str, tuple[str, ...]] = {
    "timestamp": ("io.debezium.time.Timestamp", "io.debezium.time.MicroTimestamp", "io.debezium.time.NanoTimestamp",
                  "io.debezium.time.ZonedTimestamp", "org.apache.kafka.connect.data.Timestamp"),
    "date": ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date"),
    "time": ("io.debezium.time.Time", "io.debezium.time.MicroTime", "io.debezium.time.NanoTime",
             "io.debezium.time.ZonedTime", "org.apache.kafka.connect.data.Time"),
    "decimal": ("org.apache.kafka.connect.data.Decimal", "io.debezium.data.VariableScaleDecimal"),
}


def semantic_kind(declared: DataType, prop: dict | None = None) -> str | None:
    """Which kind of DEBEZIUM_TYPES a field declared ``declared`` (JSON Schema ``prop``) is."""
    if isinstance(declared, TimestampType):
        return "timestamp"
    if isinstance(declared, DateType):
        return "date"
    if isinstance(declared, DecimalType):
        return "decimal"
    if isinstance(declared, StringType) and prop is not None and prop.get("format") == "time":
        return "time"
    return None


# A Debezium contract's column read from a row field of another name (`lakehouse cdc add
# --rename-columns`): the source table's column, as the change events name it.
SOURCE_COLUMN_KEYWORD = "x-source-column"


@dataclass(frozen=True)
class JsonContract:
    schema: StructType  # the declared payload columns, in declaration order
    required: tuple[str, ...]
    # Debezium: the fields read by their semantic type, each with its kind (DEBEZIUM_TYPES) and
    # the semantic type the contract declares for it (None: plain JSON)
    semantic_fields: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    # Debezium: the columns read from a row field of another name ({column: the field's name})
    source_names: dict[str, str] = field(default_factory=dict)

    def source_name(self, column: str) -> str:
        """The name of the change events' field ``column`` is read from."""
        return self.source_names.get(column, column)

    @property
    def wire_schema(self) -> StructType:
        """``schema`` with each column under its field's name in the change events."""
        return StructType([StructField(self.source_name(f.name), f.dataType, f.nullable) for f in self.schema.fields])


def _semantic_fields(properties: dict, schema: StructType, spec: StreamSpec, where: str
                     ) -> dict[str, tuple[str, str | None]]:
    fields = {}
    for f in schema.fields:
        prop = properties[f.name]
        kind, named = semantic_kind(f.dataType, prop), prop.get(DEBEZIUM_TYPE_KEYWORD)
        if named is not None and spec.format != "debezium":
            raise LakehouseError(f"{where}: {f.name}: {DEBEZIUM_TYPE_KEYWORD} applies to debezium streams only")
        if named is not None and (kind is None or named not in DEBEZIUM_TYPES[kind]):
            allowed = ", ".join(DEBEZIUM_TYPES[kind]) if kind else "none (declare a date-time, date, time or decimal)"
            raise LakehouseError(f"{where}: {f.name}: {DEBEZIUM_TYPE_KEYWORD} {named!r} does not fit the declared "
                                 f"type; it takes: {allowed}")
        if kind is not None and spec.format == "debezium":
            fields[f.name] = (kind, named)
    return fields


def json_contract(spec: StreamSpec, added: dict[str, dict] | None = None) -> JsonContract:
    """Spark schema and required fields from a JSON Schema file (flat objects).

    For CDC streams this is the schema of the row image. Required fields are the schema's
    own ``required`` plus the stream's required columns (the identity at least). ``added``: the
    fields an additive CDC stream took from its source (JSON Schema properties by name, see
    `added_field`), after the file's; the file declares a field it names itself.
    """
    path = spec.schema_path
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise LakehouseError(f"schema file of stream {spec.name!r} not found: {path}") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise LakehouseError(f"cannot read JSON Schema {path}: {exc}") from None
    properties = document.get("properties") or {}
    refuse_own_fields(spec, properties, str(path), "leave it out of the contract (the record's field is then "
                      f"kept in bronze's {bronze_columns.RESCUED})")
    properties = {**properties, **{name: prop for name, prop in (added or {}).items() if name not in properties}}
    fields = [StructField(name, _json_type(prop, f"{path.name}: {name}"), True) for name, prop in properties.items()]
    required = tuple(dict.fromkeys([*document.get("required", []), *spec.required_columns]))
    unknown = set(required) - set(properties)
    if unknown:
        raise LakehouseError(f"{path}: required fields not declared: {', '.join(sorted(unknown))}")
    if not spec.is_cdc and spec.event_time_column not in properties:
        raise LakehouseError(f"{path}: event-time column {spec.event_time_column!r} is not declared")
    schema = StructType(fields)
    return JsonContract(schema, required, _semantic_fields(properties, schema, spec, path.name),
                        _source_names(properties, spec, path.name))


def _source_names(properties: dict, spec: StreamSpec, where: str) -> dict[str, str]:
    """{column: the row field it reads} of the columns the contract reads from a field of another
    name (SOURCE_COLUMN_KEYWORD); every field read by one column only."""
    names = {name: prop[SOURCE_COLUMN_KEYWORD] for name, prop in properties.items() if SOURCE_COLUMN_KEYWORD in prop}
    for name, source in names.items():
        if spec.format != "debezium":
            raise LakehouseError(f"{where}: {name}: {SOURCE_COLUMN_KEYWORD} applies to debezium streams only")
        if not isinstance(source, str) or not source:
            raise LakehouseError(f"{where}: {name}: {SOURCE_COLUMN_KEYWORD}: expected the source column's name, "
                                 f"got {source!r}")
    read = [names.get(name, name) for name in properties]
    twice = sorted({field for field in read if read.count(field) > 1})
    if twice:
        raise LakehouseError(f"{where}: the row field(s) {', '.join(twice)} would be read by two columns "
                             f"({SOURCE_COLUMN_KEYWORD})")
    return {name: source for name, source in names.items() if source != name}


# A field a CDC source added (its contract lacks it) as a JSON Schema property, from what its
# change events say of it: the Kafka Connect schema of the field when schemas are enabled
# (type, semantic name, parameters), else the JSON types of its values. None when no column
# type would hold every value as it is (a struct, an array, bytes, a decimal beyond 38 digits,
# values of several JSON types, only nulls so far): the field stays in `RESCUED`.
_CONNECT_INTEGERS = ("int8", "int16", "int32", "int64")
_JSON_KINDS = {"BIGINT": "integer", "BOOLEAN": "boolean", "STRING": "string", "DOUBLE": "number"}


def _connect_property(connect_type: str, name: str | None, parameters: dict[str, str]) -> dict | None:
    by_kind = {semantic: kind for kind, names in DEBEZIUM_TYPES.items() for semantic in names}
    kind = by_kind.get(name or "")
    formats = {"timestamp": "date-time", "date": "date", "time": "time"}
    if kind in formats and (connect_type in _CONNECT_INTEGERS or connect_type == "string"):
        return {"type": "string", "format": formats[kind], DEBEZIUM_TYPE_KEYWORD: name}
    if kind == "decimal" and name == "org.apache.kafka.connect.data.Decimal":
        precision, scale = parameters.get("connect.decimal.precision"), parameters.get("scale")
        if precision and scale and precision.isdigit() and scale.isdigit() and int(scale) <= int(precision) <= 38:
            return {"type": "string", "format": f"decimal({precision},{scale})", DEBEZIUM_TYPE_KEYWORD: name}
        return None
    if kind is not None:  # a VariableScaleDecimal: no precision to declare
        return None
    return {**{t: {"type": "integer"} for t in _CONNECT_INTEGERS}, "float32": {"type": "number"},
            "float64": {"type": "number"}, "boolean": {"type": "boolean"},
            "string": {"type": "string"}}.get(connect_type)


def added_field(seen: list[tuple[str | None, str | None, dict[str, str] | None, str | None]]) -> dict | None:
    """The JSON Schema property of a field the contract lacks, from what a batch's events say of
    it: per distinct description, (Connect type, semantic name, parameters, JSON type of the
    value as Spark's ``schema_of_variant`` names it; Connect's three None without schemas)."""
    described = {(t, n, tuple(sorted((p or {}).items()))) for t, n, p, _ in seen if t is not None}
    if described:
        props = [_connect_property(t, n, dict(p)) for t, n, p in described]
        return props[0] if len(props) == 1 or all(p == props[0] for p in props) else None
    kinds = {kind for *_, kind in seen if kind not in (None, "VOID")}
    kinds = {"DOUBLE" if kind.startswith("DECIMAL") else kind for kind in kinds}
    if kinds == {"BIGINT", "DOUBLE"}:  # an integer and a fraction: a number
        kinds = {"DOUBLE"}
    if len(kinds) != 1:
        return None
    kind = _JSON_KINDS.get(next(iter(kinds)))
    return {"type": kind} if kind else None
