"""The pipeline configuration: which streams exist and how each one lands in bronze.

A stream is data, not code: adding one means an entry here plus a schema file. The
schema file is the contract with the producer (producers/schemas/).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql.types import (
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from lakehouse.errors import LakehouseError

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "producers" / "schemas"


@dataclass(frozen=True)
class StreamSpec:
    name: str
    topic: str
    format: str  # json (protobuf, avro, debezium, dms: issue 4)
    schema_file: str  # relative to producers/schemas/
    bronze_table: str
    event_time_column: str
    identity_columns: tuple[str, ...]
    partitions: int = 3  # Kafka partitions when the topic is created

    @property
    def schema_path(self) -> Path:
        return SCHEMA_DIR / self.schema_file


STREAMS: dict[str, StreamSpec] = {
    "user_events": StreamSpec(
        name="user_events",
        topic="user_events",
        format="json",
        schema_file="user_events.schema.json",
        bronze_table="bronze.user_events",
        event_time_column="event_timestamp",
        identity_columns=("event_id",),
    ),
}

SUPPORTED_FORMATS = {"json"}


def get_stream(name: str) -> StreamSpec:
    spec = STREAMS.get(name)
    if spec is None:
        raise LakehouseError(f"unknown stream {name!r}; configured streams: {', '.join(sorted(STREAMS))}")
    if spec.format not in SUPPORTED_FORMATS:
        raise LakehouseError(f"stream {name!r} has unsupported format {spec.format!r}")
    if not spec.schema_path.is_file():
        raise LakehouseError(f"schema file of stream {name!r} not found: {spec.schema_path}")
    return spec


def _json_type(prop: dict) -> DataType:
    kind = prop.get("type")
    if isinstance(kind, list):  # ["string", "null"]: nullable is the default in Spark
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "string":
        return {"date-time": TimestampType(), "date": DateType()}.get(prop.get("format"), StringType())
    if kind == "integer":
        return LongType()
    if kind == "number":
        return DoubleType()
    if kind == "boolean":
        return BooleanType()
    raise LakehouseError(f"JSON Schema type {kind!r} is not supported for bronze columns (use a string)")


@dataclass(frozen=True)
class JsonContract:
    schema: StructType  # the declared payload columns, in declaration order
    required: tuple[str, ...]


def json_contract(spec: StreamSpec) -> JsonContract:
    """Spark schema and required fields from the stream's JSON Schema (flat objects)."""
    try:
        document = json.loads(spec.schema_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise LakehouseError(f"cannot read JSON Schema {spec.schema_path}: {exc}") from None
    properties = document.get("properties") or {}
    fields = [StructField(name, _json_type(prop), True) for name, prop in properties.items()]
    required = tuple(document.get("required", []))
    unknown = set(required) - set(properties)
    if unknown:
        raise LakehouseError(f"{spec.schema_path}: required fields not declared: {', '.join(sorted(unknown))}")
    return JsonContract(StructType(fields), required)
