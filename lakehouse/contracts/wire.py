"""The Confluent wire format: magic byte 0, a 4-byte big-endian schema id, then the body.

Every message of a registry-backed topic (ARCHITECTURE §5, `purchases`) starts with these five
bytes, so a reader finds the writer's schema in the registry before decoding the body.
Confluent's serializers, Spark's from_avro readers and Kafka Connect all agree on it.
"""

from __future__ import annotations

import struct
from functools import lru_cache

MAGIC_BYTE = 0
HEADER_SIZE = 5
MAX_SCHEMA_ID = 2**31 - 1  # Java readers take the id as a signed int32
_HEADER = struct.Struct(">bI")


@lru_cache(maxsize=1024, typed=True)  # typed: 1.0 must not hit the entry of 1
def header(schema_id: int) -> bytes:
    """The five header bytes for a schema id (cached: a producer uses a handful of ids)."""
    if not isinstance(schema_id, int) or not 0 <= schema_id <= MAX_SCHEMA_ID:
        raise ValueError(f"schema id must be an int in [0, {MAX_SCHEMA_ID}], got {schema_id!r}")
    return _HEADER.pack(MAGIC_BYTE, schema_id)


def frame(schema_id: int, body: bytes) -> bytes:
    return header(schema_id) + body


def unframe(data: bytes | bytearray | memoryview) -> tuple[int, bytes]:
    """Split a framed message into (schema id, body); ValueError if it is not one."""
    if data is None or len(data) < HEADER_SIZE:
        size = "no value" if data is None else f"{len(data)} bytes"
        raise ValueError(f"not Confluent wire format: {size}, need at least {HEADER_SIZE} (magic byte + schema id)")
    magic, schema_id = _HEADER.unpack_from(data)
    if magic != MAGIC_BYTE:
        raise ValueError(f"not Confluent wire format: magic byte 0x{data[0]:02x}, expected 0x00")
    return schema_id, bytes(data[HEADER_SIZE:])
