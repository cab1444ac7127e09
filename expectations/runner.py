"""Run the quality suites on the lakehouse tables with Great Expectations.

Each selected suite (see :mod:`expectations.suites`) is validated on its Iceberg table, read
with ``spark.table()`` from the caller's SparkSession and handed to GX as a Spark
*dataframe asset*. GX objects live in a File Data Context under ``<home>/gx`` (created on
first use); the Data Docs site (HTML) is ``<home>/gx/uncommitted/data_docs/local_site``.

How GX is kept away from the SparkSession: the Spark datasource is registered without a
``spark_config``. GX only stops and restarts a session when a ``spark_config`` option
differs from the running session and cannot be set at runtime
(``SparkDFExecutionEngine._try_update_or_stop_misconfigured_spark_session``); with no options
it merely calls ``SparkSession.builder.getOrCreate()``, which returns the already running
session. (It first tries a Spark Connect session: with pyspark 4.0 that raises
ModuleNotFoundError while the Connect extras such as grpcio-status are not installed, and
PySparkValueError, a ValueError, when they are but no ``spark.remote`` is set; GX catches
both and falls back to the classic builder.) The dataframes carry the caller's session
anyway; the test checks that the session object and its JVM context survive a run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from expectations.suites import (
    CRITICAL,
    SEVERITIES,
    SEVERITY_META_KEY,
    SUITES,
    WARNING,
    Severity,
    SuiteSpec,
    build_gx_suite,
    select_suites,
)
from lakehouse.config import Settings

if TYPE_CHECKING:
    from great_expectations.checkpoint import Checkpoint, CheckpointResult
    from great_expectations.core.expectation_validation_result import (
        ExpectationSuiteValidationResult,
        ExpectationValidationResult,
    )
    from great_expectations.data_context import FileDataContext
    from great_expectations.datasource.fluent import SparkDatasource
    from pyspark.sql import SparkSession

GX_DIR = "gx"
DATASOURCE_NAME = "lakehouse_spark"
BATCH_DEFINITION_NAME = "whole_table"
DOCS_SITE_NAME = "local_site"  # the site GX scaffolds in a new File Data Context
# The pseudo expectation reported for a suite whose table does not exist (GX never sees it).
TABLE_EXISTS = "table_exists"
# SUMMARY: unexpected_count plus a sample (up to 20) of unexpected values; COMPLETE would
# collect every unexpected value to the driver.
RESULT_FORMAT = {"result_format": "SUMMARY"}


@dataclass(frozen=True)
class ExpectationResult:
    """The outcome of one expectation of one suite."""

    suite: str
    expectation: str  # GX expectation type, e.g. expect_column_values_to_be_unique
    column: str | None
    severity: Severity
    success: bool
    unexpected_count: int | None = None  # rows failing a column-map expectation
    element_count: int | None = None  # rows checked
    observed_value: Any = None  # for aggregate expectations (row counts, means, ...)
    unexpected_sample: tuple[Any, ...] = ()  # some of the unexpected values
    message: str | None = None  # why the check could not be evaluated (missing table, error)

    def to_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite, "expectation": self.expectation, "column": self.column,
            "severity": self.severity, "success": self.success,
            "unexpected_count": self.unexpected_count, "element_count": self.element_count,
            "observed_value": self.observed_value,
            "unexpected_sample": list(self.unexpected_sample), "message": self.message,
        }


@dataclass(frozen=True)
class SuiteResult:
    name: str
    layer: str
    stream: str
    table: str
    results: tuple[ExpectationResult, ...]

    @property
    def success(self) -> bool:
        return all(r.success for r in self.results)


@dataclass(frozen=True)
class QualityReport:
    suites: tuple[SuiteResult, ...]
    docs_index: Path  # index.html of the Data Docs site (exists after a run)
    duration_seconds: float

    @property
    def results(self) -> list[ExpectationResult]:
        return [r for suite in self.suites for r in suite.results]

    def failures(self, severity: Severity | None = None) -> list[ExpectationResult]:
        return [r for r in self.results
                if not r.success and (severity is None or r.severity == severity)]

    @property
    def critical_failures(self) -> int:
        return len(self.failures(CRITICAL))

    @property
    def warning_failures(self) -> int:
        return len(self.failures(WARNING))

    @property
    def passed(self) -> bool:
        return self.critical_failures == 0

    def result(self, suite: str, expectation: str, column: str | None = None) -> ExpectationResult:
        """The one result of `expectation` (on `column`) in `suite`; KeyError if not exactly one."""
        found = [r for r in self.results
                 if r.suite == suite and r.expectation == expectation and r.column == column]
        if len(found) != 1:
            raise KeyError(f"{len(found)} results for {expectation}({column}) in {suite}")
        return found[0]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable form (observed values come from GX's JSON results)."""
        return {
            "passed": self.passed,
            "critical_failures": self.critical_failures,
            "warning_failures": self.warning_failures,
            "docs_index": str(self.docs_index),
            "duration_seconds": round(self.duration_seconds, 3),
            "suites": [{"name": s.name, "layer": s.layer, "stream": s.stream, "table": s.table,
                        "success": s.success, "results": [r.to_dict() for r in s.results]}
                       for s in self.suites],
        }


def run_quality(spark: SparkSession, settings: Settings, layer: str | None = None,
                stream: str | None = None, *, suites: Sequence[SuiteSpec] = SUITES
                ) -> QualityReport:
    """Validate the suites of `layer` / `stream` (None: all) and update the Data Docs.

    `suites` is the catalogue to select from (the project's SUITES unless a caller, e.g. a
    test, brings its own). Never stops or reconfigures `spark`. A suite whose table does not
    exist is reported as a failed critical ``table_exists`` check. Raises LakehouseError
    for a selection that matches no suite.
    """
    specs = select_suites(layer, stream, suites)
    started = time.monotonic()
    context = _gx_context(settings)
    datasource = _spark_datasource(context)
    suite_results = tuple(_run_suite(spark, context, datasource, spec) for spec in specs)
    docs_index = _docs_index(context)
    return QualityReport(suite_results, docs_index, time.monotonic() - started)


# --- GX setup -------------------------------------------------------------------------------

def _gx_context(settings: Settings) -> FileDataContext:
    # GX 1.x documents GX_ANALYTICS_ENABLED as the fallback when a context does not set
    # analytics_enabled. This build (1.24.1) ships no analytics client at all; the variable
    # and the config below are belt and braces for builds that do. setdefault: an explicit
    # user choice wins.
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    root = settings.home / GX_DIR
    # GX scaffolds the context folder itself (great_expectations.yml, stores, Data Docs
    # site) when it has none, but wants its parent to exist.
    root.parent.mkdir(parents=True, exist_ok=True)
    context = gx.get_context(mode="file", context_root_dir=root)

    # The validator draws tqdm bars ("Calculating Metrics") on stderr unless the context
    # config turns them off; analytics off likewise. Saved once into great_expectations.yml.
    # (GX 1.24 emits no Python warnings and no WARNING log records on this path, checked
    # with the warnings filter at "default": nothing else needs silencing.)
    variables = context.variables
    bars = variables.progress_bars
    if bars is None or bars.get("globally", True) or bars.get("metric_calculations", True):
        variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
        variables.save()
    if context.config.analytics_enabled is not False:
        context.enable_analytics(False)  # also saves
    return context


def _spark_datasource(context: FileDataContext) -> SparkDatasource:
    from great_expectations.datasource.fluent import SparkDatasource

    existing = context.data_sources.all().get(DATASOURCE_NAME)
    if isinstance(existing, SparkDatasource) and not existing.spark_config and not existing.persist:
        return existing
    # No spark_config, ever: that is what makes GX reuse the running session untouched.
    # persist=False: GX would otherwise persist() every batch and never unpersist it; the
    # runner caches each table itself for the length of its validation (see _run_suite).
    # add_or_update replaces a stored datasource with an asset-less one; assets are re-added.
    return context.data_sources.add_or_update_spark(DATASOURCE_NAME, persist=False)


def _checkpoint(context: FileDataContext, datasource: SparkDatasource, spec: SuiteSpec
                ) -> Checkpoint:
    """The stored checkpoint of a suite, rewritten from the spec so code changes apply."""
    import great_expectations as gx
    from great_expectations.checkpoint import UpdateDataDocsAction

    try:
        asset = datasource.get_asset(spec.table)
    except LookupError:
        asset = datasource.add_dataframe_asset(spec.table)
    try:
        batch_definition = asset.get_batch_definition(BATCH_DEFINITION_NAME)
    except KeyError:
        batch_definition = asset.add_batch_definition_whole_dataframe(BATCH_DEFINITION_NAME)

    suite = context.suites.add_or_update(build_gx_suite(spec))
    validation = context.validation_definitions.add_or_update(
        gx.ValidationDefinition(name=spec.name, data=batch_definition, suite=suite)
    )
    return context.checkpoints.add_or_update(
        gx.Checkpoint(
            name=spec.name,
            validation_definitions=[validation],
            actions=[UpdateDataDocsAction(name="update_data_docs", site_names=[DOCS_SITE_NAME])],
            result_format=RESULT_FORMAT,
        )
    )


def _docs_index(context: FileDataContext) -> Path:
    sites = context.get_docs_sites_urls(site_name=DOCS_SITE_NAME, only_if_exists=False)
    if not sites or not sites[0].get("site_url"):
        raise RuntimeError(
            f"GX Data Docs site {DOCS_SITE_NAME!r} is not configured in {context.root_directory}"
        )
    index = Path(unquote(urlparse(str(sites[0]["site_url"])).path))
    if not index.is_file():
        # No checkpoint ran (every table missing) on a fresh context: build the empty site.
        context.build_data_docs(site_names=[DOCS_SITE_NAME])
    if not index.is_file():
        raise RuntimeError(f"GX did not build the Data Docs index {index}")
    return index


# --- validation -----------------------------------------------------------------------------

def _run_suite(spark: SparkSession, context: FileDataContext, datasource: SparkDatasource,
               spec: SuiteSpec) -> SuiteResult:
    def result(results: Iterable[ExpectationResult]) -> SuiteResult:
        return SuiteResult(spec.name, spec.layer, spec.stream, spec.table, tuple(results))

    if not spark.catalog.tableExists(spec.table):
        return result([ExpectationResult(
            suite=spec.name, expectation=TABLE_EXISTS, column=None, severity=CRITICAL,
            success=False,
            message=f"table {spec.table} does not exist (not created yet?): suite not run",
        )])

    checkpoint = _checkpoint(context, datasource, spec)
    # Cached for the validation only: GX computes its metrics in several Spark jobs, and the
    # cache makes them all see one snapshot of a table the streaming jobs may be appending to.
    dataframe = spark.table(spec.table).cache()
    try:
        checkpoint_result: CheckpointResult = checkpoint.run(batch_parameters={"dataframe": dataframe})
    finally:
        dataframe.unpersist()
    suite_runs: list[ExpectationSuiteValidationResult] = list(checkpoint_result.run_results.values())
    return result(_expectation_result(spec.name, r) for run in suite_runs for r in run.results)


def _expectation_result(suite: str, evr: ExpectationValidationResult) -> ExpectationResult:
    config = evr.expectation_config
    assert config is not None  # always set on results of a suite run
    severity = (config.meta or {}).get(SEVERITY_META_KEY, CRITICAL)
    if severity not in SEVERITIES:  # a hand-edited stored suite: fail safe
        severity = CRITICAL
    # The JSON form: observed values (dates, decimals, numpy numbers) become plain values.
    details: dict[str, Any] = evr.to_json_dict().get("result") or {}
    column = config.kwargs.get("column")
    return ExpectationResult(
        suite=suite,
        expectation=config.type,
        column=str(column) if column is not None else None,
        severity=severity,
        success=bool(evr.success),
        unexpected_count=details.get("unexpected_count"),
        element_count=details.get("element_count"),
        observed_value=details.get("observed_value"),
        unexpected_sample=tuple(details.get("partial_unexpected_list") or ()),
        message=_exception_message(evr.exception_info),
    )


def _exception_message(info: dict | None) -> str | None:
    """The error of an expectation GX could not evaluate (it then reports success=False).

    GX stores either one {raised_exception, exception_message, ...} dict or, when metrics
    failed, such dicts keyed by metric id.
    """
    if not info:
        return None
    entries = [info] if "raised_exception" in info else [v for v in info.values() if isinstance(v, dict)]
    messages = [str(e.get("exception_message") or "error") for e in entries if e.get("raised_exception")]
    return "; ".join(messages) or None


# --- terminal output ------------------------------------------------------------------------

def format_summary(report: QualityReport) -> str:
    """A plain-text table of every check and a verdict line."""
    header = ("SUITE", "EXPECTATION", "COLUMN", "SEVERITY", "RESULT", "UNEXPECTED")
    rows = [
        (r.suite, r.expectation, r.column or "-", r.severity,
         "pass" if r.success else ("ERROR" if r.message else "FAIL"),
         "-" if r.unexpected_count is None else str(r.unexpected_count))
        for r in report.results
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()

    lines = [line(header), line(tuple("-" * w for w in widths)), *map(line, rows)]
    notes = [f"  {r.suite} {r.expectation}: {r.message}" for r in report.results if r.message]
    if notes:
        lines += ["", "Errors:", *notes]
    checks, suites = len(report.results), len(report.suites)
    verdict = "PASSED" if report.passed else "FAILED"
    lines += [
        "",
        (f"{verdict}: {report.critical_failures} critical failure(s), "
         f"{report.warning_failures} warning(s) in {checks} check(s) of {suites} suite(s) "
         f"({report.duration_seconds:.1f}s)"),
        f"Data Docs: {report.docs_index}",
    ]
    return "\n".join(lines)
