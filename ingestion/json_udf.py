"""The JVM JSON decoder (jvm/json-decoder) registered in a Spark session: Python glue only.

``io.github.lakehouse.json.JsonDecoder`` reads each JSON event once, with Jackson, into its
declared fields, checking every token's JSON type as ingestion/formats/strict_json.py documents (no
coercion; date-times and dates parsed by Spark's own cast). Before it, a record was read by
``from_json``, again by ``json_object_keys``, and its strings checked through VARIANT values:
benchmarks/RESULTS.md has the cost of each.

The registered function takes the message bytes and returns one struct::

    struct<payload: struct<...the declared fields...>, not_object: boolean,
           wrong_fields: string, undeclared: boolean>

Select the function's result once as a column, then expand it: each call parses.
"""

from __future__ import annotations

import json

from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from ingestion.jvm_udf import jvm_class, schema_errors

UDF_CLASS = "io.github.lakehouse.json.JsonDecoder"


def register_json_udf(spark: SparkSession, udf_name: str, declared: StructType) -> StructType:
    """Register ``udf_name(value binary)`` for objects of ``declared`` (replacing a function of
    that name); return its result struct."""
    decoder = jvm_class(spark, UDF_CLASS, "JSON decoder")
    with schema_errors("JSON with this schema"):
        decoder.register(spark._jsparkSession, udf_name, declared.json())
        return StructType.fromJson(json.loads(decoder.sparkSchemaJson(declared.json())))
