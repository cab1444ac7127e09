"""One decoder per stream: the pure decoding of ingestion/formats/ plus the schemas it reads.

A decoder knows where its stream's schemas live (a schema file, the registry subject, a
compiled descriptor set) and looks again before every micro-batch (`refresh`), so a new
Avro version, a new JSON field or a new Protobuf field reaches bronze without a restart:
foreachBatch builds a fresh plan for every batch, so no query restart is ever needed.

Looking again is cheap: a schema file is re-read only when its stat (modification time,
size, inode) changed, the local registry only when its file changed, and a remote registry
at most every ``REGISTRY_POLL_SECONDS``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from datetime import UTC, datetime
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from ingestion import bronze
from ingestion.formats.avro import decode_avro
from ingestion.formats.bronze_shape import to_bronze
from ingestion.formats.changelog import unknown_field_descriptions
from ingestion.formats.column_types import misfits, union
from ingestion.formats.debezium import decode_debezium
from ingestion.formats.debezium_transactions import decode_debezium_transactions
from ingestion.formats.dms import decode_dms
from ingestion.formats.json_events import decode_json
from ingestion.formats.protobuf import decode_protobuf
from ingestion.json_udf import register_json_udf
from ingestion.protobuf_udf import register_udf, udf_result_schema
from lakehouse.contracts import protobuf
from lakehouse.contracts.bronze_columns import RESCUED
from lakehouse.contracts.registry import LocalSchemaRegistry, registry_for
from lakehouse.contracts.streams import (
    TRANSACTIONS_FORMAT,
    JsonContract,
    StreamSpec,
    added_field,
    is_bronze_own,
    json_contract,
    refuse_own_fields,
)
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings

log = logging.getLogger("lakehouse.ingest")

KAFKA_SOURCE_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
                       "timestamp timestamp, timestampType int")

# A record whose schema id is registered between two polls is a dead letter (UNKNOWN_SCHEMA_ID)
# until replayed; a poll per batch would cost an HTTP round trip on every micro-batch.
REGISTRY_POLL_SECONDS = 10.0


class StreamDecoder:
    """Base: subclasses set ``self._decode`` (raw DataFrame, now -> decoded) in ``_load``."""

    # The JVM function that reads the current schema's records (JSON events and Protobuf), by name
    function: str | None = None

    def __init__(self, spark: SparkSession, settings: Settings, spec: StreamSpec):
        self.spark, self.settings, self.spec = spark, settings, spec
        self._version: object = None
        self._decode = None

    def refresh(self) -> list[str]:
        """Look at the stream's schemas again; a description of each change (empty: unchanged)."""
        version = self._current_version()
        if version == self._version:
            return []
        changes = self._load(version)
        self._version = version
        return changes

    def decode(self, raw: DataFrame, now: datetime | None = None) -> DataFrame:
        """The decoded rows (ingestion/formats/). ``now`` is the instant event times are
        checked against: the batch's own instant (its ``INGESTED_AT``), one per attempt, so every
        record of an attempt is classified against the same "now". A batch that a crash makes
        Spark run again is decoded afresh, with the new attempt's instant and the schemas current
        then: a record may change sides (good or dead), and only the attempt that commits leaves
        rows (ARCHITECTURE §8)."""
        if self._decode is None:
            self.refresh()
        return self._decode(raw, now or datetime.now(UTC))

    def bronze_schema(self) -> StructType:
        """Columns of the bronze table: what `decode` gives for good records, with metadata."""
        empty = self.spark.createDataFrame([], KAFKA_SOURCE_SCHEMA)
        return to_bronze(self.decode(empty), 0, F.lit(datetime.now(UTC)).cast("timestamp")).schema

    def _current_version(self) -> object:
        return _file_version(self.spec.schema_path)

    def _load(self, version: object) -> list[str]:
        raise NotImplementedError


def _file_version(path: Path) -> tuple[int, int, int]:
    """What changes when a file is rewritten, without reading it: (mtime ns, size, inode)."""
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        raise LakehouseError(f"schema file not found: {path}") from None
    except OSError as exc:
        raise LakehouseError(f"cannot read schema file {path}: {exc.strerror}") from None
    return stat.st_mtime_ns, stat.st_size, stat.st_ino


def _field_changes(before: StructType | None, after: StructType) -> list[str]:
    if before is None:
        return []
    old = {f.name: f.dataType for f in before.fields}
    return [f"new field {f.name} {f.dataType.simpleString()}" if f.name not in old
            else f"field {f.name} {old[f.name].simpleString()} -> {f.dataType.simpleString()}"
            for f in after.fields if old.get(f.name) != f.dataType]


class JsonStreamDecoder(StreamDecoder):
    """Formats whose schema file is a JSON Schema: JSON events (undeclared fields kept in
    ``RESCUED``), and Debezium or DMS change records (the schema of the row image) into the
    normalized changelog (ARCHITECTURE §6)."""

    _columns: StructType | None = None
    _wire_columns: StructType | None = None  # the columns under the names the change events give them
    # The fields an additive CDC stream took from its source (JSON Schema properties by name),
    # read from its bronze table when the decoder first looks (ingestion/bronze.py)
    added: dict[str, dict] | None = None

    def _current_version(self) -> object:
        if self.added is None:
            recorded = bronze.added_fields(self.spark, self.spec.bronze_table) if self.spec.is_cdc else {}
            # a version before bronze's own names were kept apart recorded them, and its stream
            # then stopped at every batch: they are not columns, the rows keep them in RESCUED
            own = sorted(name for name in recorded if is_bronze_own(name))
            if own:
                log.warning("%s: recorded added field(s) %s are named like bronze's own columns: not columns, kept "
                            "in %s", self.spec.name, ", ".join(own), RESCUED)
            self.added = {name: prop for name, prop in recorded.items() if not is_bronze_own(name)}
        return _file_version(self.spec.schema_path), json.dumps(self.added, sort_keys=True)

    def add_fields(self, fields: dict[str, dict]) -> None:
        """Fields the source added: columns of the contract from the next `refresh` on."""
        self.added = {**(self.added or {}), **fields}

    def discover(self, raw: DataFrame) -> tuple[dict[str, dict], list[str], list[str]]:
        """The row fields of ``raw``'s change events that the contract lacks: (those a column can
        hold, as JSON Schema properties; those none can, by name; those named like one of
        bronze's own columns (`is_bronze_own`) or like a column the contract reads from a field
        of another name, by name). The last two stay in ``RESCUED``."""
        if self._columns is None:
            self.refresh()
        seen: dict[str, list] = {}
        for row in unknown_field_descriptions(raw, self.spec.format, self._wire_columns).collect():
            parameters = json.loads(row.parameters) if row.parameters else None
            seen.setdefault(row.name, []).append((row.connect_type, row.connect_name, parameters, row.json_kind))
        taken = set(self._columns.fieldNames())
        own = [name for name in sorted(seen) if is_bronze_own(name) or name in taken]
        typed = {name: added_field(descriptions) for name, descriptions in sorted(seen.items()) if name not in own}
        return ({name: prop for name, prop in typed.items() if prop is not None},
                [name for name, prop in typed.items() if prop is None], own)

    def _load(self, version) -> list[str]:
        contract = json_contract(self.spec, self.added)
        changes = _field_changes(self._columns, contract.schema)
        self._columns, self._wire_columns = contract.schema, contract.wire_schema
        spec = self.spec
        if spec.format == "json":
            schema = contract.schema
            function = self.function = _function_name(spec, schema.json().encode())
            def register(session: SparkSession) -> None:
                register_json_udf(session, function, schema)

            _ensure_function(self.spark, function, register)  # a schema it cannot read fails here, at start

            def decode(raw: DataFrame, now: datetime) -> DataFrame:
                _ensure_function(raw.sparkSession, function, register)
                return decode_json(raw, function, contract, spec.event_time_column, now)
            self._decode = decode
        else:
            if spec.format == "debezium":
                _warn_of_unscaled_decimals(spec, contract, self.added or {})
                self._decode = lambda raw, now: decode_debezium(
                    raw, contract, spec.identity_columns, spec.source_table, spec.unavailable_placeholder)
            else:
                self._decode = lambda raw, now: decode_dms(
                    raw, contract, spec.identity_columns, spec.source_table)
        return changes


def _warn_of_unscaled_decimals(spec: StreamSpec, contract: JsonContract, added: dict[str, dict]) -> None:
    """A contract that reads a decimal as Debezium's precise Decimal (``x-debezium-type``) vouches
    for its scale: schemaless JSON carries base64 of the unscaled digits and no scale, so the
    contract's is applied, and an ALTER of the column's scale at the source would multiply every
    later value by a power of ten with no error (schemas enabled, the event's own schema says
    it). `lakehouse cdc add` no longer writes such contracts; one written before is read as
    before, with this warning each time it is loaded. Added fields aside: typed from events with
    schemas (a schemaless decimal arrives as text)."""
    unscaled = [name for name, (kind, semantic) in contract.semantic_fields.items()
                if semantic == "org.apache.kafka.connect.data.Decimal" and name not in added]
    if unscaled:
        log.warning("%s: %s read as Debezium's Decimal at the contract's scale (x-debezium-type): in JSON without "
                    "schemas a change carries no scale, so an ALTER of the column's scale at the source would "
                    "multiply its values in silence; set the connector's decimal.handling.mode=string and take "
                    "x-debezium-type out of these fields (docs/connect-a-database.md, \"Decimals\")",
                    spec.name, ", ".join(unscaled))


class AvroStreamDecoder(StreamDecoder):
    """Confluent-framed Avro: the writer schema of each record by the id in its header.

    The bronze columns are the union of the stream's base schema file and every version
    registered under its subject, merged by name at every depth (ingestion/formats/column_types.py
    `union`: a field a writer adds is a column, a type Iceberg widens widens); a writer's field
    the column does not hold exactly is never cast, its records with a value there are dead
    rows (SCHEMA_MISMATCH), and the job warns when it first sees such a writer. A record whose
    id the subject does not list is a dead letter (UNKNOWN_SCHEMA_ID), kept until its schema is
    registered and it is replayed.
    """

    _columns: StructType | None = None
    _schema_ids: set[int] | None = None

    def __init__(self, spark, settings, spec):
        super().__init__(spark, settings, spec)

        self.registry = registry_for(settings)
        self._types: dict[str, StructType] = {}
        self._registry_seen: object = None  # the local registry file's stat, or when a remote one was polled
        self._subject: tuple[tuple[int, str], ...] = ()
        self._misfits_said: dict[int, tuple[str, ...]] = {}  # per writer schema id, the misfits last logged

    def _current_version(self) -> object:
        return _file_version(self.spec.schema_path), self._subject_schemas()

    def _subject_schemas(self) -> tuple[tuple[int, str], ...]:
        """The subject's (id, schema) pairs, read again only when the registry may have changed."""

        if isinstance(self.registry, LocalSchemaRegistry):
            try:
                seen: object = _file_version(self.registry.path)
            except LakehouseError:
                seen = None  # no registry file yet: nothing registered
            stale = seen != self._registry_seen or seen is None
        else:
            seen = time.monotonic()
            stale = self._registry_seen is None or seen - self._registry_seen >= REGISTRY_POLL_SECONDS
        if stale:
            self._subject = tuple(self.registry.subject_schemas(self.spec.subject).items())
            self._registry_seen = seen
        return self._subject

    def _spark_type(self, schema_text: str) -> StructType:
        from pyspark.sql.avro.functions import from_avro

        cached = self._types.get(schema_text)
        if cached is None:
            try:
                probe = self.spark.range(0).select(from_avro(F.lit(b""), schema_text).alias("record"))
            except Exception as exc:  # an unparseable schema: name it, not the JVM trace
                raise LakehouseError(f"stream {self.spec.name}: invalid Avro schema: {_first_line(exc)}") from None
            cached = self._types[schema_text] = probe.schema["record"].dataType
            if not isinstance(cached, StructType):
                raise LakehouseError(f"stream {self.spec.name}: the Avro schema is not a record")
        return cached

    def _load(self, version) -> list[str]:
        _, writers = version
        writer_schemas = dict(writers)
        writer_types = {schema_id: self._spark_type(text) for schema_id, text in writer_schemas.items()}
        for schema_id, writer in writer_types.items():
            refuse_own_fields(self.spec, writer.names, f"schema id {schema_id} under {self.spec.subject}")
        fields = list(self._spark_type(self.spec.schema_path.read_text()).fields)
        refuse_own_fields(self.spec, [f.name for f in fields], self.spec.schema_path.name)
        for schema_id in sorted(writer_types):
            fields = union(fields, writer_types[schema_id])
        columns = StructType(fields)
        changes = _field_changes(self._columns, columns)
        new_ids = set(writer_schemas) - self._schema_ids if self._schema_ids is not None else set()
        if new_ids:
            changes.insert(0, f"new schema id(s) {', '.join(map(str, sorted(new_ids)))} under {self.spec.subject}")
        self._say_misfits(writer_types, columns)
        self._columns, self._schema_ids = columns, set(writer_schemas)
        spec = self.spec
        self._decode = lambda raw, now: decode_avro(raw, writer_schemas, writer_types, columns,
                                                           spec.required_columns, spec.event_time_column, now)
        return changes

    def _say_misfits(self, writer_types: dict[int, StructType], columns: StructType) -> None:
        """Warn, before the first record of it is read (when the job starts, or at the batch that
        first sees it), that a writer schema sends a type bronze does not hold exactly: its
        records with a value there become dead rows. And say when a contract change made such
        a writer fit, so its dead rows can be replayed."""
        said = self._misfits_said
        for schema_id, writer in sorted(writer_types.items()):
            wrong = tuple(misfit.describe() for misfit in misfits(writer, columns))
            if wrong and said.get(schema_id) != wrong:
                log.warning("%s: writer schema id %d under %s sends %s: not held exactly, never cast; its records "
                            "with a value there become dead rows SCHEMA_MISMATCH (docs/streams.md, \"Producer type "
                            "changes\")", self.spec.name, schema_id, self.spec.subject, "; ".join(wrong))
            elif not wrong and said.get(schema_id):
                log.info("%s: writer schema id %d under %s now fits bronze: `lakehouse dlq replay --stream %s "
                         "--reason SCHEMA_MISMATCH` lands its dead rows", self.spec.name, schema_id, self.spec.subject,
                         self.spec.name)
            said[schema_id] = wrong


class ProtobufStreamDecoder(StreamDecoder):
    """Protobuf through the project's JVM function, with the descriptor set compiled from the .proto.

    (spark-protobuf's from_protobuf would be the natural choice; the Maven registry reachable
    here does not serve it, see ingestion/protobuf_udf.py.)
    """

    _columns: StructType | None = None
    _proto_seen: object = None

    def _descriptor_path(self) -> Path:
        return protobuf.GENERATED_DIR / f"{protobuf.module_name(self.spec.schema_path)}.desc"

    def _current_version(self) -> object:
        proto = _file_version(self.spec.schema_path)  # a clear error if the .proto is gone
        if proto != self._proto_seen:
            protobuf.compile_all(schemas_dir=self.spec.schema_path.parent)  # a no-op when up to date
            self._proto_seen = proto
        return proto, _file_version(self._descriptor_path())

    def _load(self, version) -> list[str]:
        spec = self.spec
        descriptor_set = self._descriptor_path().read_bytes()
        function = self.function = _function_name(spec, descriptor_set, spec.message.encode())
        columns = udf_result_schema(self.spark, descriptor_set, spec.message)["payload"].dataType
        refuse_own_fields(spec, columns.names, spec.schema_path.name)
        changes = _field_changes(self._columns, columns)
        self._columns = columns

        def register(session: SparkSession) -> None:
            register_udf(session, function, descriptor_set, spec.message)

        _ensure_function(self.spark, function, register)

        def decode(raw: DataFrame, now: datetime) -> DataFrame:
            _ensure_function(raw.sparkSession, function, register)
            return decode_protobuf(raw, function, columns, spec.required_columns, spec.event_time_column, now)
        self._decode = decode
        return changes


def _function_name(spec: StreamSpec, *schema: bytes) -> str:
    """The name of a stream's JVM decoding function for one version of its schema. A name per
    version, not per stream: a session that already has the function has the right one, and
    no registration ever replaces another (which Spark logs as a warning)."""
    digest = hashlib.sha256(b"\0".join(schema)).hexdigest()[:16]
    return f"lakehouse_decode_{spec.name}_{digest}"


def _ensure_function(session: SparkSession, function: str, register) -> None:
    """Register ``function`` in ``session`` unless it has it (a job started again in the same
    session, as tests and benchmarks do, finds it there). Each query's batches come in a
    session of their own: Structured Streaming clones the starting session, with the functions
    it has then, when the query starts, so a function registered later (a new schema) must be
    registered in the batch's session too."""
    if not session.catalog.functionExists(function):
        register(session)


class TransactionsStreamDecoder(StreamDecoder):
    """A Debezium connector's transaction topic: Debezium's fixed shape, no schema to look at."""

    def _current_version(self) -> object:
        return TRANSACTIONS_FORMAT

    def _load(self, version: object) -> list[str]:
        self._decode = lambda raw, now: decode_debezium_transactions(raw)
        return []


DECODERS = {"json": JsonStreamDecoder, "avro": AvroStreamDecoder, "protobuf": ProtobufStreamDecoder,
            "debezium": JsonStreamDecoder, "dms": JsonStreamDecoder, TRANSACTIONS_FORMAT: TransactionsStreamDecoder}


def decoder_for(spark: SparkSession, settings: Settings, spec: StreamSpec) -> StreamDecoder:
    return DECODERS[spec.format](spark, settings, spec)


def _first_line(exc) -> str:
    text = str(getattr(exc, "desc", None) or exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
