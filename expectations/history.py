"""The quality history: every expectation result of every run, in the Iceberg table quality.results.

One row per expectation per run, appended when a run ends, so quality has a history that SQL,
dbt, pyiceberg or the landing page (expectations.report) can read like any other table.
Observed values and unexpected samples have no fixed type (a count, a date, a list of rows), so
they are stored as JSON text.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from lakehouse.core.settings import CATALOG_NAME, QUALITY_NAMESPACE

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from expectations.runner import QualityReport

RESULTS_TABLE = f"{QUALITY_NAMESPACE}.results"
COLUMNS = (
    ("run_id", "string"),
    ("run_at", "timestamp"),
    ("layer", "string"),
    ("stream", "string"),
    ("suite", "string"),
    ("table_name", "string"),
    ("expectation", "string"),
    ("column_name", "string"),
    ("severity", "string"),
    ("success", "boolean"),
    ("observed_value", "string"),
    ("unexpected_count", "bigint"),
    ("element_count", "bigint"),
    ("unexpected_sample", "string"),
    ("message", "string"),
)
SCHEMA = ", ".join(f"{name} {kind}" for name, kind in COLUMNS)


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, default=str, ensure_ascii=False)


def result_rows(report: QualityReport) -> list[dict[str, Any]]:
    """The rows a run adds to the history (pure)."""
    return [
        {
            "run_id": report.run_id, "run_at": report.run_at,
            "layer": suite.layer, "stream": suite.stream, "suite": suite.name, "table_name": suite.table,
            "expectation": r.expectation, "column_name": r.column, "severity": r.severity,
            "success": r.success, "observed_value": _json(r.observed_value),
            "unexpected_count": r.unexpected_count, "element_count": r.element_count,
            "unexpected_sample": _json(list(r.unexpected_sample)) if r.unexpected_sample else None,
            "message": r.message,
        }
        for suite in report.suites for r in suite.results
    ]


def ensure_results_table(spark: SparkSession) -> None:
    spark.sql(f"create namespace if not exists {CATALOG_NAME}.{QUALITY_NAMESPACE}")
    spark.sql(f"create table if not exists {CATALOG_NAME}.{RESULTS_TABLE} ({SCHEMA}) "
              "using iceberg partitioned by (days(run_at))")


def append_results(spark: SparkSession, report: QualityReport) -> int:
    """Append the run's results (one Iceberg commit); returns the number of rows."""
    rows = result_rows(report)
    ensure_results_table(spark)
    if rows:
        spark.createDataFrame([tuple(row[name] for name, _ in COLUMNS) for row in rows], SCHEMA) \
            .writeTo(RESULTS_TABLE).append()
    return len(rows)


def recent_results(spark: SparkSession, runs: int = 30) -> list[dict[str, Any]]:
    """The rows of the last `runs` runs, oldest first, with UTC-aware run_at values.

    Read through Arrow: collect() would turn timestamps into the Python process's local time.
    """
    ensure_results_table(spark)
    recent = spark.table(RESULTS_TABLE).select("run_id", "run_at").distinct() \
        .orderBy("run_at", ascending=False).limit(runs)
    rows = spark.table(RESULTS_TABLE).join(recent.select("run_id"), "run_id") \
        .orderBy("run_at", "suite", "expectation").toArrow().to_pylist()
    return rows
