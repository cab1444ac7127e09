"""Prometheus metrics of the ingestion job and `lakehouse dbt loop` (docs/operations.md#metrics).

Every metric is declared here, once, in one registry: the alert rules and the dashboard
(ops/) may only name metrics of `served_names` (tests/unit/test_metrics_files.py). `serve`
starts the endpoint on LAKEHOUSE_METRICS_PORT, listening on LAKEHOUSE_METRICS_BIND_ADDRESS (this
machine's loopback unless set: the metrics name every stream and table, and nothing authenticates
a scrape); nothing is served when the port is unset. The
values are handed in as plain data by the processes that know them: the job's batch counts
and Spark's own StreamingQueryProgress (`observe_query`), the dbt loop's run results and the
last quality verdict. The maintenance metrics are read from the maintenance log of the state
folder when scraped (`lakehouse maintain` is a command that ends, not a server), by every
endpoint. Instants are exported as Unix timestamps (`*_timestamp_seconds`), the
Prometheus convention: "seconds since" is `time() - metric` in a query, true at any scrape.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.metrics import MetricWrapperBase

from lakehouse.core import maintenance_log
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import PREFIX, Settings

log = logging.getLogger("lakehouse.metrics")

REGISTRY = CollectorRegistry()

# --- per stream (the ingestion job) ----------------------------------------------------------
RECORDS_READ = Counter("lakehouse_stream_records_read", "Records the stream's query read from Kafka "
                       "(Spark's numInputRows)", ["stream"], registry=REGISTRY)
# A stream's bronze rows are its good rows (decoded) and its dead rows (a reason and the bytes):
# one name for each, as in the job's lines, `lakehouse status` and the docs.
GOOD_ROWS = Counter("lakehouse_stream_good_rows", "Good (decoded) rows the job committed to the stream's "
                    "bronze table", ["stream"], registry=REGISTRY)
DEAD_ROWS = Counter("lakehouse_stream_dead_rows", "Dead rows the job committed to the stream's bronze "
                    "table, by reason code (lakehouse/contracts/error_codes.py)", ["stream", "reason"],
                    registry=REGISTRY)
BATCH_DURATION = Histogram("lakehouse_stream_batch_duration_seconds", "Duration of a micro-batch that read "
                           "records (Spark's durationMs.triggerExecution)", ["stream"], registry=REGISTRY,
                           buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600))
LAG = Gauge("lakehouse_stream_lag_records", "Records in the topic beyond what the last micro-batch read, when "
            "it was planned (sources' latestOffset minus endOffset)", ["stream"], registry=REGISTRY)
LAST_COMMIT = Gauge("lakehouse_stream_last_commit_timestamp_seconds", "When the stream's last micro-batch "
                    "committed to bronze (Unix time; at start, its checkpoint's last commit)", ["stream"],
                    registry=REGISTRY)
QUERY_STATES = ("active", "stopped", "failed")
QUERY_STATE = Gauge("lakehouse_stream_query_state", "The stream's streaming query: 1 for its state (active, "
                    "stopped, failed), 0 for the others", ["stream", "state"], registry=REGISTRY)

# --- per dbt model and run (`lakehouse dbt loop`) -------------------------------------------
MODEL_DURATION = Gauge("lakehouse_dbt_model_duration_seconds", "How long the model took in the last run that "
                       "ran it", ["model"], registry=REGISTRY)
MODEL_ROWS = Counter("lakehouse_dbt_model_rows_written", "Rows the model's runs added to its table (the "
                     "added-records of the Iceberg snapshots each run committed)", ["model"], registry=REGISTRY)
MODEL_LAST_SUCCESS = Gauge("lakehouse_dbt_model_last_success_timestamp_seconds", "When the model last built "
                           "successfully (Unix time; at start, from dbt's run_results.json)", ["model"],
                           registry=REGISTRY)
MODEL_FAILED = Gauge("lakehouse_dbt_model_failed", "1 when the model failed in the last run that ran it, else 0",
                     ["model"], registry=REGISTRY)
DBT_RUNS = Counter("lakehouse_dbt_runs", "dbt invocations of the loop, by result (success, failure)", ["result"],
                   registry=REGISTRY)

# --- the last quality run (read by `lakehouse dbt loop` after each run) ----------------------
QUALITY_FAILED = Gauge("lakehouse_quality_checks_failed", "Checks that failed in the last quality run, by "
                       "severity (critical, warning)", ["severity"], registry=REGISTRY)
QUALITY_LAST_RUN = Gauge("lakehouse_quality_last_run_timestamp_seconds", "When the last quality run ran "
                         "(Unix time)", registry=REGISTRY)

# --- table maintenance (`lakehouse maintain`), read from its log at each scrape (_MaintenanceLog) -
MAINTENANCE_LAST_SUCCESS = Gauge("lakehouse_maintenance_last_success_timestamp_seconds", "When the table's last "
                                 "maintenance pass with no failed step ended (Unix time)", ["table"], registry=None)
MAINTENANCE_FAILED_STEPS = Gauge("lakehouse_maintenance_failed_steps", "Steps that failed in the table's last "
                                 "maintenance pass (0: none failed)", ["table"], registry=None)

_SUFFIXES = {"counter": ("_total", "_created"), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum", "_created")}


def served_names() -> set[str]:
    """The name of every sample the endpoint can serve (a counter `x` serves `x_total`...)."""
    metrics = [m for m in globals().values() if isinstance(m, MetricWrapperBase)]
    return {m._name + suffix for m in metrics for suffix in _SUFFIXES[m._type]}


# --------------------------------------------------------------------------------------------
# The endpoint
# --------------------------------------------------------------------------------------------

class _MaintenanceLog:
    """The maintenance gauges, set from the maintenance log of the state folder the endpoint
    serves (`watch`) whenever the log changed since the last scrape; nothing before `watch`."""

    metrics = (MAINTENANCE_LAST_SUCCESS, MAINTENANCE_FAILED_STEPS)

    def __init__(self) -> None:
        self.home: Any = None
        self.seen: tuple | None = None

    def watch(self, home) -> None:
        self.home, self.seen = home, None

    def describe(self):
        return [family for metric in self.metrics for family in metric.describe()]

    def collect(self):
        if self.home is None:
            return
        try:
            self._refresh()
        except Exception as exc:  # noqa: BLE001 - a scrape must not fail for the other metrics' sake
            log.warning("maintenance metrics not updated: %s: %s", type(exc).__name__, exc)
        for metric in self.metrics:
            yield from metric.collect()

    def _refresh(self) -> None:
        path = maintenance_log.log_path(self.home)
        try:
            stat = path.stat()
            seen = (stat.st_mtime_ns, stat.st_size)
        except FileNotFoundError:
            seen = None
        if seen == self.seen and seen is not None:
            return
        passes = maintenance_log.read(self.home) if seen is not None else {}
        for metric in self.metrics:
            metric.clear()
        for table, table_passes in passes.items():
            MAINTENANCE_FAILED_STEPS.labels(table).set(len(maintenance_log.failures(table_passes.last)))
            ended = _unix_time(table_passes.last_success.get("finished_at")) if table_passes.last_success else None
            if ended is not None:
                MAINTENANCE_LAST_SUCCESS.labels(table).set(ended)
        self.seen = seen


def _unix_time(iso: Any) -> float | None:
    try:
        moment = datetime.fromisoformat(str(iso).replace("Z", "+00:00"))
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


_maintenance = _MaintenanceLog()
REGISTRY.register(_maintenance)
_served: dict[int, Any] = {}


def serve(settings: Settings) -> bool:
    """Serve /metrics on LAKEHOUSE_METRICS_PORT at LAKEHOUSE_METRICS_BIND_ADDRESS from a daemon
    thread, once per process and port; False when the port is unset. A port in use, or an address
    this machine does not have, is a user error."""
    port, address = settings.metrics_port, settings.metrics_bind_address
    if port is None:
        return False
    _maintenance.watch(settings.home)
    if port not in _served:
        try:
            _served[port] = start_http_server(port, addr=address, registry=REGISTRY)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise LakehouseError(f"cannot serve metrics on port {port} ({PREFIX}METRICS_PORT): "
                                     f"{exc.strerror or exc}: pick a free port or unset it") from None
            raise LakehouseError(f"cannot serve metrics at {address}:{port} ({PREFIX}METRICS_BIND_ADDRESS): "
                                 f"{exc.strerror or exc}: give an address of this machine") from None
        log.info("metrics on http://%s:%d/metrics", address, port)
    return True


def serving() -> bool:
    return bool(_served)


def stop_serving() -> None:
    """Close every endpoint of this process: for a job run inside another program (the tests),
    whose process outlives the run; a command's endpoint ends with its process."""
    while _served:
        server, thread = _served.popitem()[1]
        server.shutdown()
        server.server_close()
        thread.join()


# --------------------------------------------------------------------------------------------
# Updates: streams
# --------------------------------------------------------------------------------------------

def batch_committed(stream: str, good_rows: int, dead_rows: Mapping[str, int], committed_at: float) -> None:
    """A micro-batch committed its good rows and its dead rows (count by reason code) to bronze, in one commit."""
    GOOD_ROWS.labels(stream).inc(good_rows)
    for reason, count in dead_rows.items():
        DEAD_ROWS.labels(stream, reason).inc(count)
    LAST_COMMIT.labels(stream).set(committed_at)


def last_commit(stream: str, committed_at: float) -> None:
    """The stream's last commit before this process started (its checkpoint's)."""
    LAST_COMMIT.labels(stream).set(committed_at)


_seen: dict[str, tuple[int, str]] = {}  # stream -> (batchId, timestamp) of the last progress counted


def observe_query(stream: str, query, lag_of: Callable[[dict], int | None]) -> None:
    """Spark's progress of a stream's query (a StreamingQuery): records read and batch
    durations of the progress reports not seen yet, the lag of the last one, the query's state.

    Only the last report crosses from the JVM unless batches were skipped since the last call;
    then the recent ones (Spark keeps the last 100) are read.
    """
    last = query.lastProgress
    if last:
        seen_batch, seen_at = _seen.get(stream, (-2, ""))
        reports = [last] if last["batchId"] <= seen_batch + 1 else query.recentProgress
        for report in _unseen(reports, seen_at):
            RECORDS_READ.labels(stream).inc(report.get("numInputRows") or 0)
            if report.get("numInputRows"):  # idle triggers (no data) report too: not batches
                milliseconds = (report.get("durationMs") or {}).get("triggerExecution", 0)
                BATCH_DURATION.labels(stream).observe(milliseconds / 1000)
            _seen[stream] = (report["batchId"], report["timestamp"])
        lag = lag_of(last)
        if lag is not None:
            LAG.labels(stream).set(lag)
    state = "active" if query.isActive else ("failed" if query.exception() is not None else "stopped")
    for name in QUERY_STATES:
        QUERY_STATE.labels(stream, name).set(1 if name == state else 0)


def _unseen(reports: Iterable[dict], seen_at: str) -> list[dict]:
    # A report's timestamp is its trigger's start (ISO 8601, UTC, fixed width): later is greater.
    return sorted((r for r in reports if r.get("timestamp", "") > seen_at), key=lambda r: r["timestamp"])


# --------------------------------------------------------------------------------------------
# Updates: dbt and quality
# --------------------------------------------------------------------------------------------

def dbt_model_ran(model: str, success: bool, seconds: float, rows_written: int | None,
                  completed_at: float | None) -> None:
    MODEL_DURATION.labels(model).set(seconds)
    MODEL_FAILED.labels(model).set(0 if success else 1)
    if success:
        MODEL_ROWS.labels(model).inc(rows_written or 0)
        if completed_at is not None:
            MODEL_LAST_SUCCESS.labels(model).set(completed_at)


def dbt_model_succeeded_before(model: str, completed_at: float) -> None:
    """A success recorded before this process started (run_results.json)."""
    MODEL_LAST_SUCCESS.labels(model).set(completed_at)


def dbt_run(success: bool) -> None:
    DBT_RUNS.labels("success" if success else "failure").inc()


def quality_run(critical_failed: int, warnings_failed: int, run_at: float | None) -> None:
    QUALITY_FAILED.labels("critical").set(critical_failed)
    QUALITY_FAILED.labels("warning").set(warnings_failed)
    if run_at is not None:
        QUALITY_LAST_RUN.set(run_at)
