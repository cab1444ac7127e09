"""The JVM Protobuf function (jvm/protobuf-decoder) registered in a Spark session: Python glue only.

Why not ``pyspark.sql.protobuf.functions.from_protobuf``: it needs the ``spark-protobuf``
connector jar, which the only reachable Maven registry does not serve. So
``io.github.lakehouse.protobuf.ProtobufDecoder`` (built by ``make setup`` into
``<home>/jars/spark/``, which the local session puts on its classpath) decodes against a
descriptor set read at run time, reading the wire format with protobuf-java's
``CodedInputStream`` with DynamicMessage's semantics (DynamicMessage itself cost 4-5 times
as much per message).

The registered function takes the message bytes and returns one struct::

    struct<payload: struct<...the message's fields...>, error_code: string, error_detail: string>

A value that does not parse gives a null payload and ``CORRUPT_PAYLOAD``; one whose field
came with a wire type its declared type cannot take (a producer changed the field's type), a
null payload and ``SCHEMA_MISMATCH`` naming the field's path and both wire types (where
protobuf-java would skip the field and leave its default). It never fails the task. Select
the function's result once as a column, then expand it: each call parses.

It is registered as a Catalyst expression (``DecodeExpression``), not a Java UDF, so Spark
takes the row it builds as it is, with no conversion per field after each call.

This module is glue only; the type mapping lives in the Java code.
"""

from __future__ import annotations

import json

from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from ingestion.jvm_udf import jvm_class, schema_errors

UDF_CLASS = "io.github.lakehouse.protobuf.ProtobufDecoder"


def _udf_class(spark: SparkSession):
    return jvm_class(spark, UDF_CLASS, "Protobuf decoder")


def _schema_errors(message_name: str):
    return schema_errors(f"Protobuf message {message_name}")


def udf_result_schema(spark: SparkSession, descriptor_set: bytes, message_name: str) -> StructType:
    """The result struct the function returns for ``message_name`` of ``descriptor_set``."""
    with _schema_errors(message_name):
        schema_json = _udf_class(spark).sparkSchemaJson(bytearray(descriptor_set), message_name)
    return StructType.fromJson(json.loads(schema_json))


def register_udf(spark: SparkSession, udf_name: str, descriptor_set: bytes, message_name: str) -> StructType:
    """Register ``udf_name(value binary)`` (replacing a function of that name); return its result struct."""
    with _schema_errors(message_name):
        _udf_class(spark).register(spark._jsparkSession, udf_name, bytearray(descriptor_set), message_name)
    return udf_result_schema(spark, descriptor_set, message_name)
