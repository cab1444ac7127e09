"""The project's own JVM functions (jvm/protobuf-decoder, jvm/json-decoder) as Spark sees them.

Both are registered through a static ``register`` method of a class in a jar that
``make setup`` builds into ``<home>/jars/spark/``, which the local session puts on its
classpath. This module finds such a class and turns the JVM's refusal of a schema into a
one-line error; the modules beside it hold each function's own glue.
"""

from __future__ import annotations

from contextlib import contextmanager

from pyspark.errors import IllegalArgumentException
from pyspark.sql import SparkSession

from lakehouse.core.errors import LakehouseError


def jvm_class(spark: SparkSession, class_name: str, what: str):
    """The JVM class ``class_name``; a clear error if its jar (``what``) is not on the classpath."""
    from py4j.java_gateway import JavaClass

    target = spark._jvm
    for part in class_name.split("."):
        target = getattr(target, part)
    # py4j answers an unknown class name with a JavaPackage, not an error.
    if not isinstance(target, JavaClass):
        raise LakehouseError(f"the {what} jar ({class_name}) is missing from Spark's classpath: run `make setup`")
    return target


@contextmanager
def schema_errors(what: str):
    """The JVM's IllegalArgumentException means a schema it cannot decode with (config)."""
    try:
        yield
    except IllegalArgumentException as exc:
        reason = str(exc).partition("\n")[0]
        raise LakehouseError(f"cannot decode {what}: {reason}") from None
