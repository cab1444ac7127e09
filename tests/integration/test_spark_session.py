"""The Spark session the project builds (lakehouse/core/spark.py)."""

from __future__ import annotations

import contextlib

import pytest
from pyspark.sql import Observation
from pyspark.sql import functions as F

pytestmark = pytest.mark.integration  # Spark in this process (tests/unit starts no JVM)

# py4j's protocol: a reflection command ("r") asking for a member it does not know yet ("u"),
# which the JVM answers by loading classes: what `sc._jvm.functions` (a short name, tried under
# every imported package, each miss a search of every jar) and `getattr(jvm, "org...")` cost.
UNKNOWN_MEMBER = "r\nu\n"


@contextlib.contextmanager
def sent_commands(spark, monkeypatch):
    """The py4j commands the Python side sends to the JVM inside the block, in order."""
    client = spark.sparkContext._gateway._gateway_client
    sent: list[str] = []
    send = client.send_command

    def counting(command, *args, **kwargs):
        sent.append(command)
        return send(command, *args, **kwargs)

    monkeypatch.setattr(client, "send_command", counting)
    try:
        yield sent
    finally:
        monkeypatch.undo()


def test_building_columns_sends_no_class_lookup(spark, monkeypatch):
    """PySpark asks the JVM for Spark's `functions` (and `PythonUtils`) class on every column
    function and operator, and records each call's Python call site in the JVM; the session
    get_spark builds answers the first from the Python side and skips the second, so building a
    column sends no class lookup (they were a fifth of the ingestion JVM's profile, issue 43)."""
    F.col("warm")  # PySpark reads its debugging setting once, at the first column of the process
    with sent_commands(spark, monkeypatch) as sent:
        condition = ((F.col("a") == 1) & F.col("b").isNull()) | (F.col("c") > F.lit(3))
        several = F.concat_ws(",", F.col("a"), F.col("c"))  # a function of several columns: PythonUtils
    assert sent, "no command seen: the check below would pass for nothing"
    lookups = [command.split("\n")[2] for command in sent if command.startswith(UNKNOWN_MEMBER)]
    assert lookups == [], f"{len(lookups)} class lookup(s) while building one column: {lookups}"
    rows = (spark.range(3).selectExpr("id as a", "cast(null as int) as b", "id + 2 as c").where(condition)
            .select("a", several.alias("both")).collect())
    assert [(row.a, row.both) for row in rows] == [(1, "1,3"), (2, "2,4")]


def test_reading_observed_counts_sends_no_class_lookup(spark, monkeypatch):
    """The job reads each batch's counts with ``Observation.get``, whose walk over the Java map
    ends on a Java exception (the iterator's end); PySpark converts every Java exception by
    asking ``jvm.py4j.reflection.TypeUtil`` a dozen times, package by package: 39 class
    lookups a batch before the session bound it (issue 43). None now, and the counts are right."""
    observation = Observation()
    rows = spark.range(5).observe(observation, F.count(F.lit(1)).alias("read"), F.sum("id").alias("total")).collect()
    assert len(rows) == 5
    with sent_commands(spark, monkeypatch) as sent:
        counts = observation.get
    assert sent, "no command seen: the check below would pass for nothing"
    lookups = [command.split("\n")[2] for command in sent if command.startswith(UNKNOWN_MEMBER)]
    assert lookups == [], f"{len(lookups)} class lookup(s) while reading one observation: {lookups}"
    assert counts == {"read": 5, "total": 10}


def test_the_jvm_compiles_huge_generated_methods(spark):
    """HotSpot leaves a method of more than 8,000 bytes of bytecode to its interpreter for good;
    a wide whole-stage codegen stage is such a method (purchases' Avro decoding in the ingestion
    job ran interpreted for every record: issue 43). The session's JVM compiles them."""
    jvm = spark.sparkContext._jvm
    bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))
    assert bean.getVMOption("DontCompileHugeMethods").getValue() == "false"
