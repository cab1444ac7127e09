"""`lakehouse status`: where the lakehouse stands, without starting Spark.

Four parts, each read from files or through pyiceberg only:

* Streams: the last committed micro-batch of each query (from its checkpoint), how many
  records it read and how fast, the lag against the topic's end offsets, bronze rows, and
  dead letters still pending by reason (plus how many were replayed).
* Tables: every table of the bronze, silver, gold and quality namespaces: rows, data and
  delete files, average file size, snapshots, and the last `lakehouse maintain` run on it.
* dbt: the last run, from dbt's own ``run_results.json``.
* Quality: the verdict of the last quality run, from the table ``quality.results``.

``--check`` turns the report into a health check (``check_problems``): one line per thing
that needs attention (a stream stopped, a lag over its limit, a quality run failed, a dbt
model failed or stale, a table whose last maintenance pass failed or whose maintenance is
overdue) and exit status 3, or one ``ok`` line and 0. Every key of ``--json``
is documented in docs/operations.md (a test compares the two).

Each part may be missing (no run yet, broker stopped, no catalog): that part says so and
the rest is still shown. Pure functions (summaries, formatting) are kept apart from the
readers so that they can be tested without a lakehouse.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ingestion import checkpoint
from ingestion.checkpoint import records_of_batch
from ingestion.job import checkpoint_location
from lakehouse.contracts.bronze_columns import ERROR_CODE, REPLAYED_AT, REPLAYED_ERROR_CODE, RESCUED
from lakehouse.contracts.streams import resolve_streams
from lakehouse.core import maintenance_log
from lakehouse.core.errors import LakehouseError
from lakehouse.core.kafka_admin import end_offsets
from lakehouse.core.settings import CATALOG_NAME, NAMESPACES, PREFIX, PROJECT_ROOT, QUALITY_NAMESPACE, Settings

QUALITY_RESULTS_TABLE = f"{QUALITY_NAMESPACE}.results"  # expectations.history.RESULTS_TABLE
MAINTENANCE_LOG = maintenance_log.LOG  # under the state folder, appended by `lakehouse maintain`
DBT_FAILED_STATUSES = ("error", "fail", "runtime error")
BROKER_PROBE_TIMEOUT_S = 2.0
NEEDS_ATTENTION = 3  # exit status of `status --check` with problems (as `kafka status` for a broker down)
# Why a part is empty on a lakehouse that has simply not started: said, but nothing to attend to.
NO_CATALOG = "no catalog yet (nothing ingested)"


# --------------------------------------------------------------------------------------------
# What is reported
# --------------------------------------------------------------------------------------------

@dataclass
class StreamStatus:
    stream: str
    topic: str
    bronze_table: str
    last_batch: int | None = None
    last_batch_at: str | None = None
    last_batch_records: int | None = None  # records the last committed batch read from Kafka
    last_batch_seconds: float | None = None  # from its offsets file (batch start) to its commit file
    last_batch_rate: float | None = None  # records per second of that batch
    committed_offsets: dict[int, int] = field(default_factory=dict)
    end_offsets: dict[int, int] | None = None
    lag: int | None = None
    bronze_rows: int | None = None
    dead_letters: dict[str, int] = field(default_factory=dict)  # pending (not replayed) by error code
    dead_letters_replayed: int = 0
    # Row fields the contract lacks (ARCHITECTURE §6): those an additive CDC stream took from its
    # source as columns (name -> JSON Schema type), and bronze rows that keep some in `RESCUED`
    added_fields: dict[str, str] = field(default_factory=dict)
    rescued_rows: int = 0
    rescued_fields: list[str] = field(default_factory=list)
    # Whether an ingestion job holds the stream now: its process in this state folder is alive,
    # or its writer lease in the bronze table is live (ingestion/single_writer.py); who it is.
    running: bool = False
    writer: str | None = None
    problems: list[str] = field(default_factory=list)


@dataclass
class TableStatus:
    table: str
    kind: str = "table"  # or "view": views have no files, only a name
    rows: int | None = None
    data_files: int | None = None
    delete_files: int | None = None
    total_bytes: int | None = None
    average_file_bytes: int | None = None
    snapshots: int | None = None
    updated_at: str | None = None  # commit time of the current snapshot
    oldest_snapshot_at: str | None = None  # commit time of its oldest snapshot kept (its creation, if none expired)
    last_maintenance: dict[str, Any] | None = None  # the last non-dry-run entry of the maintenance log
    last_maintenance_success: str | None = None  # when its last successful maintenance pass ended
    # audit branches of dbt runs not published (macros/audit_publish.sql): a build that failed, or runs
    held_back: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@dataclass
class StatusReport:
    streams: list[StreamStatus]
    tables: list[TableStatus]
    dbt: dict[str, Any] | None
    quality: dict[str, Any] | None
    # Why a whole part is empty or partial, by part ("streams", "tables", "dbt", "quality",
    # "transactions").
    problems: dict[str, str] = field(default_factory=dict)
    # per transactions model (ARCHITECTURE §9, "Transactions"): what waits to be published
    transactions: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "streams": [asdict(s) for s in self.streams],
            "tables": [asdict(t) for t in self.tables],
            "dbt": self.dbt,
            "quality": self.quality,
            "transactions": list(self.transactions),
            "problems": dict(self.problems),
        }


# --------------------------------------------------------------------------------------------
# Pure functions: computations and summaries
# --------------------------------------------------------------------------------------------

def batch_rate(records: int | None, started_at: float | None, committed_at: float | None
               ) -> tuple[float | None, float | None]:
    """(seconds the batch took, records per second); None where unknown or not measurable."""
    if started_at is None or committed_at is None:
        return None, None
    seconds = committed_at - started_at
    if seconds <= 0:  # clock steps or copied checkpoints: no meaningful duration
        return None, None
    return round(seconds, 3), None if records is None else round(records / seconds, 1)


def dead_letter_counts(streams: Iterable[str], codes: Iterable[str], replayed: Iterable[bool]
                       ) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """(pending dead letters by stream and error code, replayed dead letters by stream)."""
    pending: Counter[tuple[str, str]] = Counter()
    replayed_by_stream: Counter[str] = Counter()
    for stream, code, was_replayed in zip(streams, codes, replayed, strict=True):
        if was_replayed:
            replayed_by_stream[stream] += 1
        else:
            pending[(stream, code)] += 1
    by_stream: dict[str, dict[str, int]] = {}
    for (stream, code), n in sorted(pending.items()):
        by_stream.setdefault(stream, {})[code] = n
    return by_stream, dict(replayed_by_stream)


def table_figures(summary: dict[str, str]) -> dict[str, int | None]:
    """Rows, files and sizes of a table from its current snapshot's summary.

    The average is over data and delete files: ``total-files-size`` counts both, and either
    kind being small is what compaction fixes.
    """
    def number(key: str) -> int | None:
        try:
            return int(summary[key])
        except (KeyError, ValueError):
            return None

    data_files, delete_files, total_bytes = (number("total-data-files"), number("total-delete-files"),
                                             number("total-files-size"))
    files = (data_files or 0) + (delete_files or 0)
    return {
        "rows": number("total-records"),
        "data_files": data_files,
        "delete_files": delete_files,
        "total_bytes": total_bytes,
        "average_file_bytes": round(total_bytes / files) if total_bytes is not None and files else None,
    }


def last_maintenance_by_table(lines: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The last real (not dry-run) entry per table of the maintenance log; bad lines are skipped."""
    return {table: passes.last for table, passes in maintenance_log.passes_by_table(lines).items()}


def maintenance_problems(table: TableStatus, max_age_hours: float, now: datetime) -> list[str]:
    """What needs attention in a table's maintenance, one line each: its last pass failed (until
    a later one succeeds), or its last successful pass is older than ``max_age_hours`` (never
    maintained: its oldest snapshot is). A view, or a table that never had a snapshot, has none."""
    if table.kind != "table":
        return []
    problems = []
    last = table.last_maintenance
    if last is not None and (failed := maintenance_log.failures(last)):
        problems.append(f"the last maintenance pass ({human_time(last.get('finished_at'))}) failed: "
                        + "; ".join(failed))
    since = parse_time(table.last_maintenance_success) if table.last_maintenance_success else None
    if since is not None:
        what = f"last successful maintenance pass {human_time(table.last_maintenance_success)}"
    else:
        since = parse_time(table.oldest_snapshot_at) if table.oldest_snapshot_at else None
        what = f"never maintained successfully, oldest snapshot {human_time(table.oldest_snapshot_at)}"
    if since is not None and (now - since).total_seconds() > max_age_hours * 3600:
        problems.append(f"maintenance overdue: {what}, more than {max_age_hours:g} hours ago "
                        f"({PREFIX}STATUS_MAX_MAINTENANCE_AGE_HOURS; `lakehouse maintain`)")
    return problems


def summarize_run_results(results: dict[str, Any]) -> dict[str, Any]:
    """What `lakehouse status` shows of a dbt ``run_results.json``."""
    metadata = results.get("metadata") or {}
    args = results.get("args") or {}
    command = args.get("invocation_command") or (f"dbt {args['which']}" if args.get("which") else None)
    nodes = results.get("results") or []
    counts = Counter(str(node.get("status")) for node in nodes)
    elapsed = results.get("elapsed_time")
    return {
        "generated_at": metadata.get("generated_at"),
        "command": command,
        "elapsed_seconds": round(elapsed, 1) if isinstance(elapsed, int | float) else None,
        "dbt_version": metadata.get("dbt_version"),
        "counts": dict(sorted(counts.items())),
        "failed": [node.get("unique_id") for node in nodes if node.get("status") in DBT_FAILED_STATUSES],
        "models": {str(node["unique_id"]).split(".")[-1]: {
            "status": str(node.get("status")),
            "completed_at": _completed_at(node) or metadata.get("generated_at")}
            for node in nodes if str(node.get("unique_id", "")).startswith("model.")},
    }


def _completed_at(node: dict[str, Any]) -> str | None:
    """When dbt finished a node: the end of its last timing step (run_results.json)."""
    ends = [step.get("completed_at") for step in node.get("timing") or [] if isinstance(step, dict)]
    return max((end for end in ends if isinstance(end, str)), default=None)


def quality_verdict(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The verdict of the latest quality run among result rows (one per expectation).

    A run passes unless a critical expectation failed; failed warnings are counted, not fatal.
    None when there are no rows.
    """
    if not rows:
        return None
    latest = max(rows, key=lambda r: (r["run_at"], r["run_id"]))
    run = [r for r in rows if r["run_id"] == latest["run_id"]]
    critical = [r for r in run if r.get("severity") == "critical" and not r.get("success")]
    warnings = [r for r in run if r.get("severity") != "critical" and not r.get("success")]
    run_at = latest["run_at"]
    return {
        "run_id": latest["run_id"],
        "run_at": run_at.isoformat(timespec="seconds") if isinstance(run_at, datetime) else str(run_at),
        "verdict": "FAILED" if critical else "PASSED",
        "checks": len(run),
        "critical_failed": len(critical),
        "warnings_failed": len(warnings),
        "critical_failures": sorted({_check_name(r) for r in critical}),
    }


def _check_name(row: dict[str, Any]) -> str:
    name = f"{row.get('suite') or '?'}: {row.get('expectation') or '?'}"
    return f"{name} ({row['column_name']})" if row.get("column_name") else name


def parse_time(iso: str | None) -> datetime | None:
    """An ISO timestamp as an aware datetime (UTC when it names no zone); None if unreadable."""
    try:
        moment = datetime.fromisoformat(str(iso).replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def check_problems(report: StatusReport, settings: Settings, now: datetime, named: bool = False) -> list[str]:
    """What needs attention, one line each (`lakehouse status --check`); [] when healthy.

    A stream must be running when it was named (``named``) or has ever committed a batch: one
    never ingested is not expected to run. A model is stale when its last success in dbt's
    last run (run_results.json) is older than LAKEHOUSE_STATUS_MAX_MODEL_AGE_MINUTES; one that
    run did not touch is not judged. No dbt or quality run recorded is not a problem.
    """
    problems = [f"{part}: {problem}" for part, problem in report.problems.items()
                if problem != NO_CATALOG]
    for s in report.streams:
        if not (named or s.last_batch is not None):
            continue
        if not s.running:
            last = "no batch committed yet" if s.last_batch is None else \
                f"last batch #{s.last_batch} at {human_time(s.last_batch_at)}"
            problems.append(f"stream {s.stream}: stopped (no ingestion job holds it; {last})")
        if s.lag is None:
            problems.append(f"stream {s.stream}: lag unknown: " + ("; ".join(s.problems) or "no end offsets"))
        elif s.lag > settings.status_max_lag:
            problems.append(f"stream {s.stream}: lag {s.lag:,} records, over the limit of {settings.status_max_lag:,} "
                            f"({PREFIX}STATUS_MAX_LAG)")
    if report.quality is not None and report.quality["verdict"] != "PASSED":
        failures = report.quality["critical_failures"]
        problems.append(f"quality: the last run ({human_time(report.quality['run_at'])}) failed "
                        f"{report.quality['critical_failed']:,} critical check(s)"
                        + (": " + "; ".join(failures) if failures else ""))
    for table in report.tables:
        problems += [f"table {table.table}: {problem}" for problem in
                     maintenance_problems(table, settings.status_max_maintenance_age_hours, now)]
    for waiting in report.transactions:
        landed = parse_time(waiting["oldest_waiting_landed_at"])
        if landed is not None and (now - landed).total_seconds() > settings.status_max_model_age_minutes * 60:
            problems.append(f"transactions {waiting['table']}: {waiting['waiting']:,} waiting to be published, the "
                            f"oldest ({waiting['oldest_waiting_id']}) landed "
                            f"{human_time(waiting['oldest_waiting_landed_at'])}, "
                            f"more than {settings.status_max_model_age_minutes:g} minutes ago "
                            f"({PREFIX}STATUS_MAX_MODEL_AGE_MINUTES): its END or a change has not arrived")
    if report.dbt is not None:
        limit = settings.status_max_model_age_minutes
        for name, model in sorted((report.dbt.get("models") or {}).items()):
            if model["status"] != "success":
                problems.append(f"dbt: model {name}: {model['status']} in the last run "
                                f"({human_time(model['completed_at'])})")
                continue
            done = parse_time(model["completed_at"])
            if done is None or (now - done).total_seconds() > limit * 60:
                problems.append(f"dbt: model {name}: stale, last success {human_time(model['completed_at'])}, "
                                f"more than {limit:g} minutes ago ({PREFIX}STATUS_MAX_MODEL_AGE_MINUTES)")
    return problems


def check_ok_line(report: StatusReport, settings: Settings) -> str:
    """The one line of a healthy `status --check`: what was checked."""
    running = [s for s in report.streams if s.running]
    lags = [s.lag for s in running if s.lag is not None]
    parts = [f"{len(running)} stream(s) running" + (f", lag at most {max(lags):,} records (limit "
                                                      f"{settings.status_max_lag:,})" if lags else "")]
    models = (report.dbt or {}).get("models") or {}
    parts.append(f"{len(models)} dbt model(s) fresh" if report.dbt else "no dbt run recorded")
    tables = [t for t in report.tables if t.kind == "table"]
    if tables:
        parts.append(f"{len(tables)} table(s), no maintenance failed or overdue")
    parts.append(f"quality {report.quality['verdict']}" if report.quality else "no quality run recorded")
    return "ok: " + "; ".join(parts)


# --------------------------------------------------------------------------------------------
# Pure functions: formatting
# --------------------------------------------------------------------------------------------

def human_bytes(size: int | float | None) -> str:
    if size is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(size) < 1024 or unit == "TB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def human_number(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def human_rate(per_second: float | None) -> str:
    if per_second is None:
        return "-"
    return f"{per_second:,.0f}/s" if per_second >= 100 else f"{per_second:,.1f}/s"


def human_time(iso: str | None) -> str:
    """An ISO timestamp shortened to the minute, in UTC; unparseable text is shown as is."""
    if not iso:
        return "-"
    try:
        moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return iso
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def aligned(rows: list[list[str]], right: Iterable[int] = (), indent: str = "  ") -> list[str]:
    """Rows of cells as lines of aligned columns; columns in ``right`` are right-aligned (numbers).

    Not rich's Table: this output is read by scripts and pinned by tests, so it must not depend
    on the terminal's width (rich wraps or crops columns to it), and the notes under a row
    would need a cell spanning every column, which rich tables do not have.
    """
    right = set(right)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(cell.rjust(w) if i in right else cell.ljust(w)
                               for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip()
            for row in rows]


def format_streams(statuses: list[StreamStatus]) -> str:
    if not statuses:
        return "  no streams configured"
    rows = [["stream", "last batch", "at", "records", "rate", "lag", "bronze rows", "dead letters (pending)"]]
    notes: dict[int, list[str]] = {}
    for s in statuses:
        dead = ", ".join(f"{code} {n:,}" for code, n in s.dead_letters.items()) or "none"
        if s.dead_letters_replayed:
            dead += f"; {s.dead_letters_replayed:,} replayed"
        rows.append([
            s.stream, "-" if s.last_batch is None else f"#{s.last_batch}", human_time(s.last_batch_at),
            human_number(s.last_batch_records), human_rate(s.last_batch_rate),
            "unknown" if s.lag is None else f"{s.lag:,}", human_number(s.bronze_rows), dead,
        ])
        notes[len(rows) - 1] = [*s.problems, *field_notes(s)]
    lines = []
    for index, line in enumerate(aligned(rows, right=(3, 4, 5, 6))):
        lines.append(line)
        lines.extend(f"      note: {problem}" for problem in notes.get(index, []))
    return "\n".join(lines)


def field_notes(s: StreamStatus) -> list[str]:
    """What became of the row fields the stream's contract lacks: never dropped, so said here."""
    notes = []
    if s.added_fields:
        notes.append("fields the source added, now columns: "
                     + ", ".join(f"{name} ({kind})" for name, kind in s.added_fields.items()))
    if s.rescued_rows:
        notes.append(f"{s.rescued_rows:,} bronze rows keep fields the contract lacks in {RESCUED}: "
                     + ", ".join(s.rescued_fields))
    return notes


AUDIT_BRANCH_PREFIX = "audit_"  # macros/audit_publish.sql, audit_branch()


def held_back_note(table: str, branch: str) -> str:
    return (f"not published: dbt run {branch} (failed, or running now); its rows: "
            f"select * from {table} version as of '{branch}'")


def format_tables(tables: list[TableStatus], settings: Settings | None = None, now: datetime | None = None) -> str:
    """The tables part; with ``settings`` and ``now``, each table's maintenance problems as notes."""
    if not tables:
        return "  no tables yet"
    rows = [["table", "rows", "data files", "avg file", "delete files", "snapshots", "last maintenance"]]
    notes: dict[int, list[str]] = {}
    for t in tables:
        if t.kind == "view":
            rows.append([t.table, "view", "", "", "", "", ""])
        else:
            rows.append([t.table, human_number(t.rows), human_number(t.data_files), human_bytes(t.average_file_bytes),
                         human_number(t.delete_files), human_number(t.snapshots),
                         format_maintenance(t.last_maintenance)])
        late = maintenance_problems(t, settings.status_max_maintenance_age_hours, now) \
            if settings is not None and now is not None else []
        notes[len(rows) - 1] = [*t.problems, *late, *(held_back_note(t.table, branch) for branch in t.held_back)]
    lines = []
    for index, line in enumerate(aligned(rows, right=(1, 2, 3, 4, 5))):
        lines.append(line)
        lines.extend(f"      note: {problem}" for problem in notes.get(index, []))
    return "\n".join(lines)


def format_maintenance(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "never"
    text = human_time(entry.get("finished_at"))
    before, after = entry.get("data_files_before"), entry.get("data_files_after")
    if before is not None and after is not None:
        text += f", {before:,} -> {after:,} files"
    if entry.get("snapshots_expired"):
        text += f", {entry['snapshots_expired']:,} snapshots expired"
    if entry.get("problems"):
        text += f", {len(entry['problems'])} note(s)"
    if maintenance_log.skipped(entry):
        text += ", skipped"
    if failed := maintenance_log.failures(entry):
        text += f", {len(failed)} step(s) FAILED"
    return text


def format_dbt(dbt: dict[str, Any] | None) -> str:
    if dbt is None:
        return "  no dbt run recorded"
    took = "" if dbt["elapsed_seconds"] is None else f", took {dbt['elapsed_seconds']:,.1f}s"
    lines = [f"  last run: {dbt['command'] or 'dbt'} at {human_time(dbt['generated_at'])}{took}",
             "  results:  " + (", ".join(f"{status} {n:,}" for status, n in dbt["counts"].items()) or "no nodes")]
    if dbt["failed"]:
        lines.append("  failed:   " + ", ".join(dbt["failed"]))
    return "\n".join(lines)


def format_quality(quality: dict[str, Any] | None) -> str:
    if quality is None:
        return "  no quality run recorded"
    lines = [f"  last run: {human_time(quality['run_at'])} ({quality['run_id']}): {quality['verdict']}",
             f"  checks:   {quality['checks']:,}, critical failed {quality['critical_failed']:,}, "
             f"warnings failed {quality['warnings_failed']:,}"]
    lines.extend(f"  failed:   {name}" for name in quality["critical_failures"])
    return "\n".join(lines)


def format_transactions(transactions: list[dict[str, Any]]) -> str:
    """Per transactions model: the source transactions the CDC models wait for (ARCHITECTURE §9)."""
    lines = []
    for t in transactions:
        waiting = "none waiting" if not t["waiting"] else (
            f"{t['waiting']:,} waiting for their END or a change, the oldest {t['oldest_waiting_id']} "
            f"(landed {human_time(t['oldest_waiting_landed_at'])})")
        lines.append(f"  {t['table']}: {t['published']:,} published, {waiting}")
    return "\n".join(lines)


def format_report(report: StatusReport, settings: Settings | None = None, now: datetime | None = None) -> str:
    sections = [
        ("Streams", format_streams(report.streams)),
        ("Tables", format_tables(report.tables, settings, now)),
        ("dbt", format_dbt(report.dbt)),
        ("Quality", format_quality(report.quality)),
        *([("Transactions", format_transactions(report.transactions))]
          if report.transactions or "transactions" in report.problems else []),
    ]
    out = []
    for title, body in sections:
        problem = report.problems.get(title.lower())
        out.append(title + "\n" + (f"  note: {problem}\n" if problem else "") + body)
    return "\n\n".join(out)


# --------------------------------------------------------------------------------------------
# Readers
# --------------------------------------------------------------------------------------------

def pyiceberg_catalog(settings: Settings):
    """The catalog the Spark jobs use, opened by pyiceberg (same SQLite database, same name)."""
    from pyiceberg.catalog.sql import SqlCatalog


    if settings.catalog_type == "rest":
        from pyiceberg.catalog.rest import RestCatalog

        # S3 credentials, like Spark's, come from the AWS SDK's environment variables.
        properties = {"uri": settings.catalog_uri, "warehouse": settings.warehouse, "s3.region": settings.s3_region}
        if settings.s3_endpoint:
            properties["s3.endpoint"] = settings.s3_endpoint
        return RestCatalog(CATALOG_NAME, **properties)
    if not settings.catalog_uri.startswith("jdbc:sqlite:"):
        raise LakehouseError(f"pyiceberg reads only the local SQLite catalog; LAKEHOUSE_CATALOG_URI is "
                             f"{settings.catalog_uri}")
    database = settings.catalog_uri.removeprefix("jdbc:sqlite:")
    return SqlCatalog(CATALOG_NAME, uri=f"sqlite:///{database}", warehouse=settings.warehouse)


def existing_catalog(settings: Settings):
    """The catalog, or None when its database does not exist yet (nothing ingested).

    Opening it would create an empty database just to look, so it is not opened then.
    """
    if settings.catalog_uri.startswith("jdbc:sqlite:") and \
            not Path(settings.catalog_uri.removeprefix("jdbc:sqlite:")).exists():
        return None
    return pyiceberg_catalog(settings)


def existing_table(catalog, name: str):
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    try:
        return catalog.load_table(name)
    except (NoSuchTableError, NoSuchNamespaceError):
        return None


def _summary(table) -> dict[str, str] | None:
    snapshot = table.current_snapshot()
    return None if snapshot is None else dict(snapshot.summary.additional_properties)


def last_batch_throughput(checkpoint: str | Path, batch_id: int, topic: str) -> tuple[int | None, float | None]:
    """(records read, seconds taken) by a committed batch of a checkpoint; None where unknown.

    Its offsets file is written when the batch starts and its commit file when it is done.
    """

    folder = Path(checkpoint)
    try:
        started_at: float | None = (folder / "offsets" / str(batch_id)).stat().st_mtime
        committed_at: float | None = (folder / "commits" / str(batch_id)).stat().st_mtime
    except OSError:
        started_at = committed_at = None
    records = records_of_batch(folder, batch_id, topic)
    seconds, _ = batch_rate(records, started_at, committed_at)
    return records, seconds


def broker_accepts_connections(bootstrap_servers: str, timeout: float = BROKER_PROBE_TIMEOUT_S) -> bool:
    """Whether any bootstrap server accepts a TCP connection.

    Checked first because the Kafka client waits its full timeout for a stopped broker, and
    a stopped broker is an ordinary state for `lakehouse status` to report quickly.
    """
    for server in bootstrap_servers.split(","):
        host, _, port = server.strip().rpartition(":")
        if server.strip().startswith("[") and "]" in host:  # [IPv6]:port
            host = host.strip("[]")
        try:
            with socket.create_connection((host or "localhost", int(port)), timeout=timeout):
                return True
        except (OSError, ValueError):
            continue
    return False


def stream_status(settings: Settings, names: list[str] | None = None, catalog=None) -> list[StreamStatus]:
    """The streams part; ``catalog`` is opened here when not given (None), False when the
    caller already found there is none."""

    specs = resolve_streams(names or ["all"])
    if catalog is None:
        catalog = existing_catalog(settings)
    catalog = catalog or None
    pending, replayed = _dead_letters_by_stream(catalog, specs)
    # One broker for all streams: ask whether it is there once, not once per stream.
    kafka_down: str | None = None if broker_accepts_connections(settings.kafka_bootstrap_servers) else (
        f"cannot reach Kafka at {settings.kafka_bootstrap_servers}: is it running? (`lakehouse kafka start`)")
    result = []
    for spec in specs:
        status = StreamStatus(spec.name, spec.topic, spec.bronze_table, dead_letters=pending.get(spec.name, {}),
                              dead_letters_replayed=replayed.get(spec.name, 0))
        location = checkpoint_location(settings, spec)
        commit = checkpoint.last_commit(location)
        if commit is None:
            status.problems.append("no batch committed yet")
        else:
            status.last_batch = commit.batch_id
            status.last_batch_at = commit.committed_at.isoformat(timespec="seconds")
            status.committed_offsets = commit.offsets.get(spec.topic, {})
            status.last_batch_records, status.last_batch_seconds = last_batch_throughput(
                location, commit.batch_id, spec.topic)
            _, status.last_batch_rate = batch_rate(status.last_batch_records, 0.0, status.last_batch_seconds)
        try:
            if kafka_down:
                raise LakehouseError(kafka_down)
            status.end_offsets = end_offsets(settings, spec.topic)
            status.lag = checkpoint.lag(status.end_offsets, status.committed_offsets)
        except LakehouseError as exc:
            kafka_down = str(exc) if "cannot reach" in str(exc) else kafka_down
            status.problems.append(str(exc))
        table = existing_table(catalog, spec.bronze_table) if catalog is not None else None
        if table is not None:
            status.bronze_rows = table_figures(_summary(table) or {"total-records": "0"})["rows"]
            _fill_fields(table, status)
        status.writer = ingestion_job(settings, spec.name, table)
        status.running = status.writer is not None
        result.append(status)
    return result


def ingestion_job(settings: Settings, stream: str, bronze_table=None) -> str | None:
    """The ingestion job that holds a stream now, as text; None when none does.

    The job's own marks (ingestion/single_writer.py), read, never taken: the holder file beside
    its lock in this state folder (its process alive: same pid and start time), else the writer
    lease in the bronze table's properties (a job of another host whose lease looks renewed
    lately: an estimate that compares that host's clock with this one, for the report only).
    """
    from ingestion import single_writer

    try:
        holder = json.loads(single_writer.lock_path(settings, stream).with_suffix(".json").read_text())
        if holder.get("host") == socket.gethostname() and \
                single_writer.process_alive(int(holder["pid"]), float(holder["process_started"])):
            return f"pid {holder['pid']} on {holder['host']} (started {holder.get('started_at')})"
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if bronze_table is not None:
        lease = single_writer.parse_lease(bronze_table.properties.get(single_writer.LEASE_PROPERTY))
        if lease is not None and single_writer.looks_live(lease, time.time(), settings.writer_lease_seconds):
            return lease.text()
    return None


ADDED_FIELDS_PROPERTY = "lakehouse.added-fields"  # ingestion.bronze's, without importing pyspark


def added_field_kinds(recorded: str | None) -> dict[str, str]:
    """The fields recorded in a bronze table's ``lakehouse.added-fields``, each with its type as
    the contract would declare it (its format, else its JSON type)."""
    fields = json.loads(recorded or "{}")
    return {name: prop.get("format") or prop.get("type", "?") for name, prop in fields.items()}


def rescued_field_names(rescued: Iterable[str]) -> list[str]:
    """The field names in ``RESCUED`` values (JSON objects), each once, sorted."""
    return sorted({name for text in rescued for name in json.loads(text)})


def _fill_fields(table, status: StreamStatus) -> None:
    from pyiceberg.expressions import NotNull

    status.added_fields = added_field_kinds(table.properties.get(ADDED_FIELDS_PROPERTY))
    if RESCUED not in {f.name for f in table.schema().fields} or table.current_snapshot() is None:
        return
    # only the rows that have one: files whose column is all null are skipped by their metrics
    rescued = table.scan(row_filter=NotNull(RESCUED), selected_fields=(RESCUED,)).to_arrow()
    status.rescued_rows = rescued.num_rows
    status.rescued_fields = rescued_field_names(rescued.column(RESCUED).to_pylist())


def _dead_letters_by_stream(catalog, specs) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """Each stream's dead rows, pending by reason, and replayed, from its bronze table
    (ARCHITECTURE §7): a filter the partition on ``ERROR_CODE`` and the files' null counts of
    ``REPLAYED_AT`` answer without reading the good rows."""
    from pyiceberg.expressions import NotNull, Or

    streams, codes, replayed = [], [], []
    for spec in specs if catalog is not None else ():
        table = existing_table(catalog, spec.bronze_table)
        if table is None or table.current_snapshot() is None:
            continue
        if not {ERROR_CODE, REPLAYED_AT} <= {f.name for f in table.schema().fields}:
            continue  # a table of a version before dead rows lived in bronze (`lakehouse migrate`)
        rows = table.scan(row_filter=Or(NotNull(ERROR_CODE), NotNull(REPLAYED_AT)),
                          selected_fields=(ERROR_CODE, REPLAYED_AT, REPLAYED_ERROR_CODE)).to_arrow()
        streams += [spec.name] * rows.num_rows
        was_replayed = rows.column(REPLAYED_AT).is_valid().to_pylist()
        codes += [code if code is not None else before for code, before in zip(
            rows.column(ERROR_CODE).to_pylist(), rows.column(REPLAYED_ERROR_CODE).to_pylist(), strict=True)]
        replayed += [bool(r) for r in was_replayed]
    return dead_letter_counts(streams, codes, replayed)


def read_maintenance_log(settings: Settings) -> dict[str, maintenance_log.TablePasses]:
    """The last maintenance pass and the last successful one per table; {} when `lakehouse
    maintain` never ran."""
    return maintenance_log.read(settings.home)


def table_status(settings: Settings, catalog) -> list[TableStatus]:
    """Every table (and view, when the catalog can list them) of the lakehouse namespaces."""
    from pyiceberg.exceptions import NoSuchNamespaceError

    maintenance = read_maintenance_log(settings)
    result = []
    for namespace in (*NAMESPACES, QUALITY_NAMESPACE):
        try:
            identifiers = sorted(catalog.list_tables(namespace))
        except NoSuchNamespaceError:
            continue
        for identifier in identifiers:
            name = ".".join(identifier)
            passes = maintenance.get(name)
            success = passes.last_success if passes else None
            status = TableStatus(name, last_maintenance=passes.last if passes else None,
                                 last_maintenance_success=success.get("finished_at") if success else None)
            _guarded(status.problems, "", lambda status=status: _fill_table(catalog, status))
            result.append(status)
        result.extend(TableStatus(".".join(view), kind="view") for view in _views(catalog, namespace))
    return result


def _views(catalog, namespace: str) -> list[tuple[str, ...]]:
    from pyiceberg.exceptions import NoSuchNamespaceError

    try:
        return sorted(catalog.list_views(namespace))
    except (NotImplementedError, NoSuchNamespaceError):  # pyiceberg's SQL catalog cannot list views yet
        return []


def _fill_table(catalog, status: TableStatus) -> None:
    table = existing_table(catalog, status.table)
    if table is None:  # dropped between listing and loading
        status.problems.append("no longer in the catalog")
        return
    status.snapshots = len(table.metadata.snapshots)
    status.held_back = sorted(name for name in table.metadata.refs if name.startswith(AUDIT_BRANCH_PREFIX))
    if table.metadata.snapshots:
        oldest = min(snapshot.timestamp_ms for snapshot in table.metadata.snapshots)
        status.oldest_snapshot_at = datetime.fromtimestamp(oldest / 1000, UTC).isoformat(timespec="seconds")
    snapshot = table.current_snapshot()
    if snapshot is None:
        status.rows, status.data_files, status.delete_files = 0, 0, 0
        return
    status.updated_at = datetime.fromtimestamp(snapshot.timestamp_ms / 1000, UTC).isoformat(timespec="seconds")
    for key, value in table_figures(dict(snapshot.summary.additional_properties)).items():
        setattr(status, key, value)


def dbt_run_results_path() -> Path:
    target = os.environ.get("DBT_TARGET_PATH")
    return (Path(target) if target else PROJECT_ROOT / "target") / "run_results.json"


def dbt_status(path: Path | None = None) -> dict[str, Any] | None:
    """The last dbt run, or None when none is recorded."""
    path = path or dbt_run_results_path()
    try:
        results = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LakehouseError(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise LakehouseError(f"{path} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(results, dict):
        raise LakehouseError(f"{path} is not a dbt run_results.json")
    return {**summarize_run_results(results), "path": str(path)}


def quality_status(catalog) -> dict[str, Any] | None:
    """The verdict of the last quality run, or None when none is recorded."""
    from pyiceberg.expressions import EqualTo

    table = existing_table(catalog, QUALITY_RESULTS_TABLE)
    if table is None or table.current_snapshot() is None:
        return None
    runs = table.scan(selected_fields=("run_id", "run_at")).to_arrow().to_pylist()
    runs = [r for r in runs if r["run_id"] is not None and r["run_at"] is not None]
    if not runs:
        return None
    latest = max(runs, key=lambda r: (r["run_at"], r["run_id"]))
    rows = table.scan(
        row_filter=EqualTo("run_id", latest["run_id"]),
        selected_fields=("run_id", "run_at", "suite", "expectation", "column_name", "severity", "success"),
    ).to_arrow().to_pylist()
    return quality_verdict(rows)


def transactions_status(settings: Settings, catalog) -> list[dict[str, Any]]:
    """Per transactions model (silver.<transactions stream>) built: how many source transactions
    it published and how many wait, with the first of them in commit order."""
    from lakehouse.contracts.streams import load_pipeline

    found = []
    for spec in load_pipeline().values():
        table = existing_table(catalog, f"silver.{spec.name}") if spec.is_transactions else None
        if table is None or table.current_snapshot() is None:
            continue
        rows = table.scan(selected_fields=("id", "published", "end_offset", "first_ingested_at")).to_arrow().to_pylist()
        # the first in the connector's commit order (its END's offset; one without an END yet
        # comes after every END that arrived): the one every later one waits for
        waiting = sorted((r for r in rows if not r["published"]),
                         key=lambda r: (r["end_offset"] is None, r["end_offset"] or 0,
                                        r["first_ingested_at"] is None, r["first_ingested_at"] or 0))
        oldest = waiting[0] if waiting else None
        found.append({"table": f"silver.{spec.name}", "published": len(rows) - len(waiting), "waiting": len(waiting),
                      "oldest_waiting_id": oldest and oldest["id"],
                      "oldest_waiting_landed_at": oldest and oldest["first_ingested_at"]
                      and oldest["first_ingested_at"].replace(tzinfo=UTC).isoformat()})
    return found


def _guarded(problems: list[str] | dict[str, str], part: str, read: Callable[[], Any]) -> Any:
    """Run one reader; a failure becomes a line in that part instead of ending the command.

    Status is what people run when something is wrong, so a broken table or file must not
    hide the rest. LAKEHOUSE_DEBUG=1 lets unexpected errors through with their stack trace.
    """
    try:
        return read()
    except LakehouseError as exc:
        message = str(exc)
    except Exception as exc:  # noqa: BLE001 - see the docstring
        if os.environ.get(PREFIX + "DEBUG") == "1":
            raise
        message = f"cannot read: {type(exc).__name__}: {exc}"
    if isinstance(problems, dict):
        problems[part] = message
    else:
        problems.append(message)
    return None


def collect_status(settings: Settings, names: list[str] | None = None) -> StatusReport:
    """Every part of the status; a part that cannot be read says why in ``problems``."""

    resolve_streams(names or ["all"])  # an unknown stream name is the user's error: refuse it now
    problems: dict[str, str] = {}
    catalog = _guarded(problems, "tables", lambda: existing_catalog(settings))
    if catalog is None and "tables" not in problems:
        problems["tables"] = NO_CATALOG
    if catalog is None:
        problems["quality"] = problems["tables"]
    streams = _guarded(problems, "streams", lambda: stream_status(settings, names, catalog=catalog or False)) or []
    tables = (_guarded(problems, "tables", lambda: table_status(settings, catalog)) or []) if catalog else []
    dbt = _guarded(problems, "dbt", dbt_status)
    quality = _guarded(problems, "quality", lambda: quality_status(catalog)) if catalog else None
    transactions = (_guarded(problems, "transactions", lambda: transactions_status(settings, catalog)) or []) \
        if catalog else []
    return StatusReport(streams, tables, dbt, quality, problems, transactions)


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("streams", nargs="*", metavar="STREAM", help="only these streams (default: all)")
    parser.add_argument("--json", action="store_true", help="one JSON object, for machines (keys: docs/operations.md)")
    parser.add_argument("--check", action="store_true",
                        help="a health check: one line per problem (a stream stopped or lagging over "
                             f"{PREFIX}STATUS_MAX_LAG, the last quality run failed, a dbt model failed or not "
                             f"rebuilt for {PREFIX}STATUS_MAX_MODEL_AGE_MINUTES, a table's last maintenance "
                             f"pass failed or none succeeded for {PREFIX}STATUS_MAX_MAINTENANCE_AGE_HOURS) "
                             "and exit status "
                             f"{NEEDS_ATTENTION}, or one `ok` line and 0. A stream must run when named here or "
                             "once ingested. With --json: the report plus its `check`")


def main(args: argparse.Namespace, settings: Settings) -> int:
    report = collect_status(settings, args.streams or None)
    problems = check_problems(report, settings, datetime.now(UTC), named=bool(args.streams)) if args.check else []
    if args.json:
        shown = report.to_dict()
        if args.check:
            shown["check"] = {"ok": not problems, "problems": problems}
        print(json.dumps(shown, indent=2, default=str))
    elif args.check:
        print("\n".join(problems) if problems else check_ok_line(report, settings))
    else:
        print(format_report(report, settings, datetime.now(UTC)))
    return NEEDS_ATTENTION if problems else 0

