"""One decoder per stream: the pure decode of ingestion/decode.py plus the schemas it reads.

A decoder knows where its stream's schemas live (a schema file, the registry subject, a
compiled descriptor set) and looks again before every micro-batch (`refresh`), so a new
Avro version, a new JSON field or a new Protobuf field reaches bronze without a restart:
foreachBatch builds a fresh plan for every batch, so no query restart is ever needed.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from ingestion import decode
from ingestion.bronze import is_widening
from lakehouse.contracts.streams import StreamSpec, json_contract
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings

KAFKA_SOURCE_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
                       "timestamp timestamp, timestampType int")


class Decoder:
    """Base: subclasses set ``self._decode`` (raw DataFrame -> decoded) in ``refresh``."""

    def __init__(self, spark: SparkSession, settings: Settings, spec: StreamSpec):
        self.spark, self.settings, self.spec = spark, settings, spec
        self._version: object = None
        self._decode = None

    def refresh(self) -> list[str]:
        """Re-read the stream's schemas; a description of each change (empty: unchanged)."""
        version = self._current_version()
        if version == self._version:
            return []
        changes = self._load(version)
        self._version = version
        return changes

    def decode(self, raw: DataFrame) -> DataFrame:
        if self._decode is None:
            self.refresh()
        return self._decode(raw)

    def bronze_schema(self) -> StructType:
        """Columns of the bronze table: what `decode` gives for good records, with metadata."""
        empty = self.spark.createDataFrame([], KAFKA_SOURCE_SCHEMA)
        return decode.to_bronze(self.decode(empty), 0, F.lit(datetime.now(UTC)).cast("timestamp")).schema

    def _current_version(self) -> object:
        return _file_version(self.spec.schema_path)

    def _load(self, version: object) -> list[str]:
        raise NotImplementedError


def _file_version(path) -> object:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        raise LakehouseError(f"schema file not found: {path}") from None
    except OSError as exc:
        raise LakehouseError(f"cannot read schema file {path}: {exc.strerror}") from None


def _field_changes(before: StructType | None, after: StructType) -> list[str]:
    if before is None:
        return []
    old = {f.name: f.dataType for f in before.fields}
    return [f"new field {f.name} {f.dataType.simpleString()}" if f.name not in old
            else f"field {f.name} {old[f.name].simpleString()} -> {f.dataType.simpleString()}"
            for f in after.fields if old.get(f.name) != f.dataType]


class JsonSchemaDecoder(Decoder):
    """Formats whose schema file is a JSON Schema: JSON events (undeclared fields kept in
    ``_rescued``), and Debezium or DMS change records (the schema of the row image) into the
    normalized changelog (ARCHITECTURE §6)."""

    _columns: StructType | None = None

    def _load(self, version) -> list[str]:
        contract = json_contract(self.spec)
        changes = _field_changes(self._columns, contract.schema)
        self._columns = contract.schema
        spec = self.spec
        if spec.format == "json":
            self._decode = lambda raw: decode.decode_json(raw, contract, spec.event_time_column)
        else:
            normalize = decode.decode_debezium if spec.format == "debezium" else decode.decode_dms
            self._decode = lambda raw: normalize(raw, contract, spec.identity_columns, spec.source_table)
        return changes


def _union(columns: list[StructField], extra: StructType) -> list[StructField]:
    """``columns`` plus the fields of ``extra`` it lacks; a field both have takes the wider type."""
    merged = {f.name: f for f in columns}
    for field in extra.fields:
        known = merged.get(field.name)
        if known is None:
            merged[field.name] = StructField(field.name, field.dataType, True)
        elif is_widening(known.dataType, field.dataType):
            merged[field.name] = StructField(field.name, field.dataType, True)
    return list(merged.values())


class AvroDecoder(Decoder):
    """Confluent-framed Avro: the writer schema of each record by the id in its header.

    The bronze columns are the union of the stream's base schema file and every version
    registered under its subject; a record whose id the subject does not list is a dead
    letter (UNKNOWN_SCHEMA_ID), kept until its schema is registered and it is replayed.
    """

    _columns: StructType | None = None
    _schema_ids: set[int] | None = None

    def __init__(self, spark, settings, spec):
        super().__init__(spark, settings, spec)
        from lakehouse.contracts.registry import registry_for

        self.registry = registry_for(settings)
        self._types: dict[str, StructType] = {}

    def _current_version(self) -> object:
        return _file_version(self.spec.schema_path), tuple(self.registry.subject_schemas(self.spec.subject).items())

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
        fields = list(self._spark_type(self.spec.schema_path.read_text()).fields)
        for schema_id in sorted(writer_types):
            fields = _union(fields, writer_types[schema_id])
        columns = StructType(fields)
        changes = _field_changes(self._columns, columns)
        new_ids = set(writer_schemas) - self._schema_ids if self._schema_ids is not None else set()
        if new_ids:
            changes.insert(0, f"new schema id(s) {', '.join(map(str, sorted(new_ids)))} under {self.spec.subject}")
        self._columns, self._schema_ids = columns, set(writer_schemas)
        spec = self.spec
        self._decode = lambda raw: decode.decode_avro(raw, writer_schemas, writer_types, columns,
                                                      spec.required_columns, spec.event_time_column)
        return changes


class ProtobufDecoder(Decoder):
    """Protobuf through the project's JVM decoder, with the descriptor set compiled from the .proto.

    (spark-protobuf's from_protobuf would be the natural choice; the Maven registry reachable
    here does not serve it, see ingestion/protobuf_decoder.py.)
    """

    _columns: StructType | None = None

    def _descriptor_path(self):
        from lakehouse.contracts import protobuf

        protobuf.compile_all(schemas_dir=self.spec.schema_path.parent)  # a no-op when up to date
        return protobuf.GENERATED_DIR / f"{protobuf.module_name(self.spec.schema_path)}.desc"

    def _current_version(self) -> object:
        _file_version(self.spec.schema_path)  # a clear error if the .proto is gone
        return _file_version(self._descriptor_path())

    def _load(self, version) -> list[str]:
        from ingestion.protobuf_decoder import register_decoder

        function = f"lakehouse_decode_{self.spec.name}"
        result = register_decoder(self.spark, function, self._descriptor_path().read_bytes(), self.spec.message)
        columns = result["payload"].dataType
        changes = _field_changes(self._columns, columns)
        self._columns = columns
        spec = self.spec
        self._decode = lambda raw: decode.decode_protobuf(raw, function, columns, spec.required_columns,
                                                          spec.event_time_column)
        return changes


DECODERS = {"json": JsonSchemaDecoder, "avro": AvroDecoder, "protobuf": ProtobufDecoder,
            "debezium": JsonSchemaDecoder, "dms": JsonSchemaDecoder}


def decoder_for(spark: SparkSession, settings: Settings, spec: StreamSpec) -> Decoder:
    return DECODERS[spec.format](spark, settings, spec)


def _first_line(exc) -> str:
    text = str(getattr(exc, "desc", None) or exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
