"""benchmarks/ingest_throughput.py's raw ceiling, in real Spark: the rows it appends are the
value with the Kafka metadata bronze keeps, in bronze's names and types. A test of a
benchmark's own code, so it imports the benchmark (tests/unit/test_suite_layout.py names it);
the benchmark's other helpers are checked without Spark in tests/unit/test_ingest_benchmark.py."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from benchmarks.ingest_throughput import raw_rows

pytestmark = pytest.mark.integration  # Spark in this process (tests/unit starts no JVM)


def test_the_raw_ceiling_appends_the_value_with_the_kafka_metadata_bronze_keeps(spark):
    from ingestion.formats.bronze_shape import to_bronze

    source = spark.createDataFrame(
        [(b"k", b"\x01\x02", "employees", 3, 41, datetime(2026, 11, 30, 12, tzinfo=UTC))],
        "key binary, value binary, topic string, partition int, offset long, timestamp timestamp")
    rows = raw_rows(source)
    decoded = source.selectExpr("*", "cast(null as string) as _error_code", "cast(null as string) as _error_detail")
    bronze = to_bronze(decoded, 0, source.timestamp)
    kept = [field for field in bronze.schema.fields if field.name.startswith("_kafka_")]
    assert [field.name for field in rows.schema.fields] == ["value", *[field.name for field in kept]]
    assert rows.schema.fields[1:] == kept  # bronze's names and types
    row = rows.first()
    assert (row.value, row._kafka_key, row._kafka_partition, row._kafka_offset) == (b"\x01\x02", "k", 3, 41)
