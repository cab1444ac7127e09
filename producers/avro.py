"""Avro records in the Confluent wire format: fastavro bodies behind lakehouse.contracts.wire headers.

Schemas are parsed once (`load_schema`, `parsed`): parsing costs far more than encoding one
record, and a producer encodes millions with the same two or three schemas.

Logical types follow fastavro: a ``timestamp-millis`` field may be written as epoch
milliseconds (an int, the cheap way) or as an aware datetime, and always reads back as an
aware UTC datetime.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import fastavro

from lakehouse.contracts import wire
from lakehouse.contracts.registry import SchemaRegistry


@dataclass(frozen=True)
class AvroSchema:
    text: str  # what is registered: the file as written
    parsed: dict  # what fastavro encodes and decodes with

    @property
    def name(self) -> str:
        return self.parsed["name"]


def load_schema(path: Path | str) -> AvroSchema:
    text = Path(path).read_text()
    return AvroSchema(text=text, parsed=parsed(text))


@lru_cache(maxsize=256)
def parsed(schema_str: str) -> dict:
    """The fastavro form of a schema text; cached, as the same few texts recur for every message."""
    return fastavro.parse_schema(json.loads(schema_str))


def encode(record: dict, schema_id: int, parsed_schema: dict) -> bytes:
    """One record as a framed message: magic byte, schema id, Avro binary body."""
    body = io.BytesIO()
    fastavro.schemaless_writer(body, parsed_schema, record)
    return wire.frame(schema_id, body.getvalue())


def decode_body(body: bytes, parsed_schema: dict) -> dict:
    """An Avro binary body read with the schema it was written with; ValueError if it is not one."""
    buffer = io.BytesIO(body)
    try:
        record = fastavro.schemaless_reader(buffer, parsed_schema, None)
    except (EOFError, ValueError, UnicodeDecodeError, IndexError) as exc:
        raise ValueError(f"not a {parsed_schema.get('name', 'record')} Avro body: {exc!r}") from None
    if buffer.tell() != len(body):  # the schema ran out before the bytes did: not this schema
        raise ValueError(f"{len(body) - buffer.tell()} bytes left after a {parsed_schema.get('name')} record")
    return record


def decode(data: bytes, registry: SchemaRegistry) -> tuple[int, dict]:
    """(schema id, record) of a framed message, with the writer's schema from the registry.

    Raises ValueError for a message that is not framed Avro, and
    lakehouse.contracts.registry.SchemaNotFound for a schema id the registry does not know.
    """
    schema_id, body = wire.unframe(data)
    return schema_id, decode_body(body, parsed(registry.get_schema(schema_id)))
