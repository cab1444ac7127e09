"""Run the quality suites on the lakehouse tables with Great Expectations.

Each selected suite (see :mod:`expectations.suites`) is validated on its Iceberg table (or on
the rows of its query), read from the caller's SparkSession and handed to GX as a Spark
*dataframe asset*. GX objects live in a File Data Context under ``<home>/gx`` (created on first
use); the Data Docs site is ``<home>/gx/uncommitted/data_docs/local_site``. Every result is
appended to the Iceberg table ``quality.results`` (expectations.history) and the landing page
``<home>/reports/quality/index.html`` (expectations.report) is rewritten from that history.

How GX is kept away from the SparkSession: the Spark datasource is registered without a
``spark_config``. GX only stops and restarts a session when a ``spark_config`` option
differs from the running session and cannot be set at runtime
(``SparkDFExecutionEngine._try_update_or_stop_misconfigured_spark_session``); with no options
it merely calls ``SparkSession.builder.getOrCreate()``, which returns the already running
session. (It first tries a Spark Connect session: with pyspark 4.1 that raises
ModuleNotFoundError while the Connect extras such as grpcio-status are not installed, and
PySparkValueError, a ValueError, when they are but no ``spark.remote`` is set; GX catches
both and falls back to the classic builder.) The dataframes carry the caller's session
anyway; the test checks that the session object and its JVM context survive a run.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from expectations.history import append_results, recent_results
from expectations.mirror import MirrorSource, source_comparison
from expectations.report import write_landing_page
from expectations.suites import (
    CRITICAL,
    FULL_RECONCILIATION,
    SEVERITIES,
    SEVERITY_META_KEY,
    WARNING,
    Severity,
    SuiteSpec,
    build_gx_suite,
    column_label,
    render_query,
    select_suites,
)
from lakehouse.core.console import progress
from lakehouse.core.settings import Settings
from lakehouse.core.spark import relation_exists

if TYPE_CHECKING:
    from great_expectations.checkpoint import Checkpoint, CheckpointResult
    from great_expectations.core.expectation_validation_result import (
        ExpectationSuiteValidationResult,
        ExpectationValidationResult,
    )
    from great_expectations.data_context import FileDataContext
    from great_expectations.datasource.fluent import SparkDatasource
    from pyspark.sql import SparkSession

log = logging.getLogger("lakehouse.quality")

GX_DIR = "gx"
DATASOURCE_NAME = "lakehouse_spark"
BATCH_DEFINITION_NAME = "whole_table"
DOCS_SITE_NAME = "local_site"  # the site GX scaffolds in a new File Data Context
# Pseudo expectations for suites GX never saw: a table missing, or a query Spark refused.
TABLE_EXISTS = "table_exists"
SUITE_RUNS = "suite_runs"
# SUMMARY: unexpected_count plus a sample (up to 20) of unexpected values; COMPLETE would
# collect every unexpected value to the driver.
RESULT_FORMAT = {"result_format": "SUMMARY"}
EVENT_TIME_FLOOR = datetime(2000, 1, 1, tzinfo=UTC)  # as the ingestion's EVENT_TIME_OUT_OF_RANGE


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
    skipped: tuple[str, ...] = ()  # expectations not run, with the reason

    @property
    def success(self) -> bool:
        return all(r.success for r in self.results)

    @property
    def verdict(self) -> str:
        failed = {r.severity for r in self.results if not r.success}
        return "FAIL" if CRITICAL in failed else ("warn" if failed else "pass")


@dataclass(frozen=True)
class QualityReport:
    run_id: str
    run_at: datetime  # UTC
    suites: tuple[SuiteResult, ...]
    docs_index: Path  # index.html of the GX Data Docs site (exists after a run)
    duration_seconds: float
    report_path: Path | None = None  # the landing page, when the run was recorded
    recorded_rows: int = 0  # rows appended to quality.results

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

    def result(self, suite: str, expectation: str, column: str | None = None,
               severity: Severity | None = None) -> ExpectationResult:
        """The one result of `expectation` (on `column`, of `severity`) in `suite`; KeyError if not exactly one."""
        found = [r for r in self.results
                 if r.suite == suite and r.expectation == expectation and r.column == column
                 and (severity is None or r.severity == severity)]
        if len(found) != 1:
            raise KeyError(f"{len(found)} results for {expectation}({column}) in {suite}")
        return found[0]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable form (observed values come from GX's JSON results)."""
        return {
            "run_id": self.run_id,
            "run_at": self.run_at.isoformat(),
            "passed": self.passed,
            "critical_failures": self.critical_failures,
            "warning_failures": self.warning_failures,
            "docs_index": str(self.docs_index),
            "report": str(self.report_path) if self.report_path else None,
            "duration_seconds": round(self.duration_seconds, 3),
            "suites": [{"name": s.name, "layer": s.layer, "stream": s.stream, "table": s.table,
                        "success": s.success, "skipped": list(s.skipped),
                        "results": [r.to_dict() for r in s.results]}
                       for s in self.suites],
        }


def run_quality(spark: SparkSession, settings: Settings, layer: str | None = None,
                stream: str | None = None, *, suites: Sequence[SuiteSpec] | None = None,
                sources: Mapping[str, MirrorSource] | None = None, record: bool = True,
                full: bool = False, branch: str | None = None) -> QualityReport:
    """Validate the suites of `layer` / `stream` (None: all), update Data Docs, record the run.

    `suites` is the catalogue to select from (the project's suites unless a caller, e.g. a
    test, brings its own). `record`: append the results to quality.results and rewrite the
    landing page from the history. `sources`: {CDC stream: the source its mirror must equal}
    (see expectations.mirror), compared row by row by the stream's ``.source`` suite; a
    stream without one skips that suite and says so. Never stops or
    reconfigures `spark`. A suite whose table does not exist is reported as a failed critical
    ``table_exists`` check. Raises LakehouseError for a selection that matches no suite.
    `full`: daily reconciliations check every day, not only the days touched since they last
    passed (expectations.suites.TouchedDays). `branch`: read every table that has this Iceberg
    branch on it (`spark.wap.branch`; the others' main), for the validation only: a dbt run's
    held audit branch (lakehouse/operations/quality_gate.py); the results are recorded on main.
    """
    specs = select_suites(layer, stream, suites)
    started = time.monotonic()
    run_at = datetime.now(UTC)
    run_id = f"{run_at:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"
    parameters = {**quality_parameters(settings, run_at), FULL_RECONCILIATION: full}
    context = _gx_context(settings)
    datasource = _spark_datasource(context)
    suite_results, validation_ids = [], []
    # Progress: a full run is a few dozen suites and takes a minute or more.
    if branch is not None:
        spark.conf.set("spark.wap.branch", branch)
    try:
        with progress("quality", len(specs)) as advance:
            for number, spec in enumerate(specs, 1):
                log.info("quality %d/%d: %s", number, len(specs), spec.name)
                advance(0, description=f"quality {spec.name}")
                suite_result, ids = _run_suite(spark, context, datasource, spec, parameters, sources or {},
                                               run_id, run_at)
                suite_results.append(suite_result)
                validation_ids += ids
                advance()
    finally:
        if branch is not None:
            spark.conf.unset("spark.wap.branch")
    if validation_ids:
        context.build_data_docs(site_names=[DOCS_SITE_NAME], resource_identifiers=validation_ids)
    report = QualityReport(run_id, run_at, tuple(suite_results), _docs_index(context),
                           time.monotonic() - started)
    if record:

        recorded = append_results(spark, report)
        page = write_landing_page(recent_results(spark), report.docs_index, settings.reports_dir / "quality")
        report = dataclasses.replace(report, report_path=page, recorded_rows=recorded,
                                     duration_seconds=time.monotonic() - started)
    return report


def quality_parameters(settings: Settings, now: datetime) -> dict[str, Any]:
    """The values of the suites' parameters for a run at `now`."""
    return {
        "event_time_floor": EVENT_TIME_FLOOR,
        "event_time_ceiling": now + timedelta(days=1),
        "oldest_expected_event_time": now - timedelta(days=settings.quality_max_event_age_days),
        "dead_letter_rate_warn": settings.quality_dead_letter_rate_warn,
        "dead_letter_rate_critical": settings.quality_dead_letter_rate_critical,
        "dead_letter_window_start": now - timedelta(hours=settings.quality_dead_letter_window_hours),
    }


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
    try:
        asset = datasource.get_asset(spec.name)
    except LookupError:
        asset = datasource.add_dataframe_asset(spec.name)
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
            # No UpdateDataDocsAction: it rebuilds the site's index after every suite. The run
            # builds the pages of all its results and the index once, at the end.
            actions=[],
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
               spec: SuiteSpec, parameters: dict[str, Any], sources: Mapping[str, MirrorSource],
               run_id: str, run_at: datetime) -> tuple[SuiteResult, list[Any]]:
    """The suite's result, and the ids of the GX validation results it stored (for Data Docs)."""
    from great_expectations.core.run_identifier import RunIdentifier
    from pyspark.errors import AnalysisException


    def result(results: Iterable[ExpectationResult], skipped: Iterable[str] = ()) -> SuiteResult:
        return SuiteResult(spec.name, spec.layer, spec.stream, spec.table, tuple(results), tuple(skipped))

    def not_run(expectation: str, message: str) -> tuple[SuiteResult, list[Any]]:
        return result([ExpectationResult(suite=spec.name, expectation=expectation, column=None,
                                         severity=CRITICAL, success=False, message=message)]), []

    missing = [table for table in spec.reads if not relation_exists(spark, table)]
    if missing:
        return not_run(TABLE_EXISTS, f"{', '.join(missing)} does not exist (not created yet?): suite not run")

    if spec.compares_with_source and spec.stream not in sources:
        return result([], [f"{e.type}({e.column or ''}): no source database was given for {spec.stream} (no oracle)"
                           for e in spec.expectations]), []
    runnable = [e for e in spec.expectations if all(p in parameters for p in e.parameters)]
    skipped = [f"{e.type}({e.column or ''}): "
               + "; ".join(f"no value for parameter {p}" for p in e.parameters if p not in parameters)
               for e in spec.expectations if e not in runnable]
    spec = dataclasses.replace(spec, expectations=tuple(runnable))
    checkpoint = _checkpoint(context, datasource, spec)
    try:
        if spec.compares_with_source:  # the live table against its source, one row per key
            dataframe = source_comparison(spark, sources[spec.stream])
        else:
            dataframe = spark.sql(render_query(spark, spec, parameters)) if spec.query else spark.table(spec.table)
    except AnalysisException as exc:  # a column renamed under the suite's query, say
        return not_run(SUITE_RUNS, f"Spark cannot run the suite's query: {str(exc).splitlines()[0]}")
    # Cached for the validation only: GX computes its metrics in several Spark jobs, and the
    # cache makes them all see one snapshot of a table the streaming jobs may be appending to.
    dataframe = dataframe.cache()
    used = {p for e in runnable for p in e.parameters}
    try:
        checkpoint_result: CheckpointResult = checkpoint.run(
            batch_parameters={"dataframe": dataframe},
            expectation_parameters={p: parameters[p] for p in used},
            run_id=RunIdentifier(run_name=run_id, run_time=run_at),
        )
    finally:
        dataframe.unpersist()
    suite_runs: list[ExpectationSuiteValidationResult] = list(checkpoint_result.run_results.values())
    # GX returns results in its own order; the suite's order reads better.
    order = {(e.type, e.column): n for n, e in enumerate(runnable)}
    results = sorted((_expectation_result(spec.name, r) for run in suite_runs for r in run.results),
                     key=lambda r: order.get((r.expectation, r.column), len(order)))
    return result(results, skipped), list(checkpoint_result.run_results)


def _expectation_result(suite: str, evr: ExpectationValidationResult) -> ExpectationResult:
    config = evr.expectation_config
    assert config is not None  # always set on results of a suite run
    severity = (config.meta or {}).get(SEVERITY_META_KEY, CRITICAL)
    if severity not in SEVERITIES:  # a hand-edited stored suite: fail safe
        severity = CRITICAL
    # The JSON form: observed values (dates, decimals, numpy numbers) become plain values.
    details: dict[str, Any] = evr.to_json_dict().get("result") or {}
    return ExpectationResult(
        suite=suite,
        expectation=config.type,
        column=column_label(config.kwargs),
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

def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()

    return [line(header), line(tuple("-" * w for w in widths)), *map(line, rows)]


def _short(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = text.encode("unicode_escape").decode("ascii")  # no control characters on the terminal
    return text if len(text) <= limit else text[: limit - 3] + "..."


def format_summary(report: QualityReport) -> str:
    """One line per suite, then every failed check with its count and sample, then the verdict."""
    lines = _table(("LAYER", "STREAM", "SUITE", "CHECKS", "VERDICT"), [
        (s.layer, s.stream, s.name, f"{sum(r.success for r in s.results)}/{len(s.results)}", s.verdict)
        for s in report.suites
    ])
    failures = sorted(report.failures(), key=lambda r: r.severity != CRITICAL)
    if failures:
        lines += ["", "Failed checks:", *_table(
            ("SEVERITY", "SUITE", "EXPECTATION", "COLUMN", "UNEXPECTED", "OBSERVED / SAMPLE"),
            [(r.severity, r.suite, r.expectation, r.column or "-",
              "-" if r.unexpected_count is None else f"{r.unexpected_count:,}",
              _short(r.message or (r.observed_value if r.observed_value is not None else list(r.unexpected_sample))))
             for r in failures])]
    skipped = [f"  {s.name}: {note}" for s in report.suites for note in s.skipped]
    if skipped:
        lines += ["", "Skipped:", *skipped]
    checks, suites = len(report.results), len(report.suites)
    verdict = "PASSED" if report.passed else "FAILED"
    lines += [
        "",
        (f"{verdict}: {report.critical_failures} critical failure(s), "
         f"{report.warning_failures} warning(s) in {checks} check(s) of {suites} suite(s) "
         f"({report.duration_seconds:.1f}s), run {report.run_id}"),
    ]
    if report.report_path:
        lines.append(f"Report: {report.report_path}")
    lines.append(f"Data Docs: {report.docs_index}")
    return "\n".join(lines)
