"""Avro records in the Confluent wire format, each read with the writer schema its header names."""

from __future__ import annotations

import operator
from collections.abc import Collection
from datetime import datetime
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DataType,
    StructType,
)

from ingestion.formats.checks import any_of, event_time_check, kafka_columns, missing_check, with_errors
from ingestion.formats.column_types import by_name, misfits
from lakehouse.contracts import wire
from lakehouse.contracts.bronze_columns import (
    SCHEMA_ID,
)

HEADER_SIZE = wire.HEADER_SIZE  # magic byte 0 + 4-byte big-endian schema id


def confluent_schema_id(value: Column, known_ids: Collection[int] = ()) -> Column:
    """The schema id of a framed message; null when the value has no wire-format header.

    The header of an id in ``known_ids`` (the registered writer schemas) is matched as bytes,
    against that id's own 5 bytes. Only other headers have their id read as a number: Spark has
    no bytes-to-int function, and hex-then-base-conversion is a string round trip per record (9%
    of the task samples of purchases' ingestion when every record took it, benchmarks/RESULTS.md
    "Avro schema ids matched as bytes")."""
    framed = (F.length(value) >= HEADER_SIZE) & (F.substring(value, 1, 1) == F.lit(bytearray(b"\x00")))
    schema_id = F.when(framed, F.conv(F.hex(F.substring(value, 2, 4)), 16, 10).cast("long"))
    header = F.substring(value, 1, HEADER_SIZE)
    for known in sorted(set(known_ids), reverse=True):
        schema_id = F.when(header == F.lit(bytearray(wire.header(known))), F.lit(known).cast("long")) \
            .otherwise(schema_id)
    return schema_id


def decode_avro(
    raw: DataFrame,
    writer_schemas: dict[int, str],
    writer_types: dict[int, StructType],
    columns: StructType,
    required: tuple[str, ...],
    event_time_column: str,
    now: datetime | None = None,
) -> DataFrame:
    """Avro records, each read with the writer schema its header names, as ``columns``.

    ``writer_types`` is the Spark type each writer schema decodes to; ``columns`` is their union
    (bronze's payload columns, ingestion/formats/column_types.py `union`): a field a writer lacks is null
    in its records. Each writer's record is fitted to ``columns`` by name at every depth
    (`conformed`), never by position, and never cast where the column does not hold the writer's
    type exactly: a record with a value in such a place (`misfits`) is SCHEMA_MISMATCH, naming
    the writer schema id, the field's path and both types.
    """
    from pyspark.sql.avro.functions import from_avro

    schema_id = confluent_schema_id(F.col("value"), writer_schemas)
    body = F.expr(f"substring(value, {HEADER_SIZE + 1})")
    # Each body is decoded once, by its own writer schema, into a column of that writer's
    # shape; only then are the fields picked (a field per from_avro call would decode the
    # record once per field). PERMISSIVE: a body that does not decode gives null (or an
    # all-null struct), caught below.
    by_writer = {writer_id: f"_writer_{writer_id}" for writer_id in writer_schemas}
    framed = raw.select(*kafka_columns(raw), schema_id.alias(SCHEMA_ID), *[
        F.when(schema_id == writer_id, from_avro(body, writer_schema, {"mode": "PERMISSIVE"}))
        .alias(by_writer[writer_id])
        for writer_id, writer_schema in writer_schemas.items()])
    payload = F.lit(None).cast(columns)
    undecoded = F.lit(True)
    mismatch, mismatch_detail = F.lit(False), F.lit(None).cast("string")
    for writer_id in writer_schemas:
        decoded, writer = F.col(by_writer[writer_id]), writer_types[writer_id]
        this_writer = F.col(SCHEMA_ID) == writer_id
        payload = F.when(this_writer, conformed(decoded, writer, columns)).otherwise(payload)
        # what PERMISSIVE gives for a body that does not decode: null, or a struct of nulls
        undecoded = F.when(this_writer, decoded.isNull() | reduce(
            operator.and_, [decoded[f.name].isNull() for f in writer.fields], F.lit(True))).otherwise(undecoded)
        wrong = misfits(writer, columns)
        if wrong:
            present = {misfit.describe(): _present(decoded, misfit.steps) for misfit in wrong}
            mismatch = mismatch | (this_writer & any_of(present.values()))
            mismatch_detail = F.when(this_writer, F.concat(
                F.lit(f"writer schema id {writer_id}: "),
                F.concat_ws("; ", *[F.when(value_there, F.lit(text)) for text, value_there in present.items()]),
                F.lit(": not held exactly, never cast"))).otherwise(mismatch_detail)
    parsed = framed.select(*kafka_columns(framed), SCHEMA_ID, payload.alias("_payload"),
                           undecoded.alias("_undecoded"), mismatch.alias("_mismatch"),
                           mismatch_detail.alias("_mismatch_detail"))
    payload_col, id_col = F.col("_payload"), F.col(SCHEMA_ID)
    known_ids = list(writer_schemas) or [-1]
    return with_errors(parsed, [*[payload_col[f.name].alias(f.name) for f in columns.fields],
                                 id_col.cast("int").alias(SCHEMA_ID)], [
        (id_col.isNull(), "CORRUPT_PAYLOAD",
         F.lit("no Confluent wire-format header (magic byte 0 and a 4-byte schema id)")),
        (~id_col.isin(*known_ids), "UNKNOWN_SCHEMA_ID",
         F.concat(F.lit("schema id "), id_col.cast("string"), F.lit(" is not registered for this stream"))),
        (F.col("_undecoded"), "CORRUPT_PAYLOAD",
         F.concat(F.lit("body does not decode with writer schema "), id_col.cast("string"))),
        (F.col("_mismatch"), "SCHEMA_MISMATCH", F.col("_mismatch_detail")),
        missing_check(payload_col, required),
        event_time_check(payload_col[event_time_column], event_time_column, now),
    ])


def conformed(value: Column, writer: DataType, column: DataType) -> Column:
    """``value``, of the writer's type, as ``column``'s type (`by_name`): a leaf cast only where
    the column holds it exactly (`misfits` finds none there; so the cast changes nothing), null
    where it does not (the record is then SCHEMA_MISMATCH, or its value there was null)."""
    return by_name(value, writer, column, _exact_or_null)


def _exact_or_null(value: Column, writer: DataType, column: DataType) -> Column:
    return value.cast(column) if not misfits(writer, column) else F.lit(None).cast(column)


def _present(value: Column, steps: tuple[tuple[str, ...], ...]) -> Column:
    """Whether ``value`` has a non-null value at ``steps`` (a `Misfit`'s place): in any element of
    an array, any key or value of a map."""
    if not steps:
        return value.isNotNull()
    step, rest = steps[0], steps[1:]
    if step[0] == "field":
        return _present(value[step[1]], rest)
    inside = value if step[0] == "element" else F.map_keys(value) if step[0] == "key" else F.map_values(value)
    return F.coalesce(F.exists(inside, lambda item: _present(item, rest)), F.lit(False))
