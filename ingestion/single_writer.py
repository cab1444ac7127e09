"""One ingestion job per stream (ARCHITECTURE §8, "One writer per stream"): a second job started
on a stream that is already running is refused before it reads anything.

Two guards, because a stream's state is in two places:

- **the state folder**: a file lock per stream (``locks/ingest-<stream>.lock``, a kernel flock
  that dies with its holder), taken before Spark starts, so a second `lakehouse ingest` from
  the same state folder is refused at once. Beside it, ``ingest-<stream>.json`` names the
  holder for the error line.
- **the catalog**: a lease in the stream's bronze table properties (``lakehouse.writer-lease``:
  holder id, host, pid, state folder, when it was taken and last renewed). Jobs on other
  machines (a cluster, checkpoints on object storage) share the catalog, not the state folder.
  The running job renews its lease every RENEW_SECONDS; a new job takes a lease only when it
  is free, its own, or lapsed: held by a process of this host that is gone (by pid and start
  time: a `kill -9` is taken over at once), or, from another host, not renewed for
  LEASE_SECONDS.

The lease is written with the table operations' compare-and-swap (`TableOperations.commit(base,
new)`): on catalogs that check the base metadata (JDBC, Hive, Glue, Nessie, Hadoop) two jobs
cannot both write it over the same base. A REST catalog checks only the requirements the
client sends, and Iceberg sends none for a property change, so there the last writer wins:
every job reads its lease back SETTLE_SECONDS after writing it and stops if another job's is
there. Both jobs of a race read back after both wrote, so exactly one finds its own. Before a
batch commits, a job whose lease was not confirmed in the last 2 * RENEW_SECONDS reads it again
(a driver that stalled past its lease stops instead of writing beside the one that took over).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psutil
from filelock import FileLock, Timeout
from pyspark.sql import SparkSession

from lakehouse.contracts.streams import StreamSpec
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings
from lakehouse.core.spark import CATALOG_NAME

log = logging.getLogger("lakehouse.ingest")

LEASE_PROPERTY = "lakehouse.writer-lease"
RENEW_SECONDS = 30.0
LEASE_SECONDS = 120.0  # from another host, a lease not renewed for this long is lapsed
SETTLE_SECONDS = 1.0  # a lease is read back this long after it is written (REST catalogs)
COMMIT_ATTEMPTS = 20  # a lease commit refused because the table changed (an append) is retried


# --- the state folder ---------------------------------------------------------------------------

def lock_path(settings: Settings, stream: str) -> Path:
    return settings.home / "locks" / f"ingest-{stream}.lock"


@contextmanager
def local_locks(settings: Settings, specs: list[StreamSpec]) -> Iterator[None]:
    """Hold every stream's lock in the state folder, or refuse with one line naming the job that
    holds one. Reentrant within a process (`lakehouse ingest` takes them before Spark starts,
    `run` again), never between processes."""
    with ExitStack() as held:
        for spec in specs:
            path = lock_path(settings, spec.name)
            path.parent.mkdir(parents=True, exist_ok=True)
            lock = FileLock(path, is_singleton=True)  # one object per path: acquiring again counts
            try:
                lock.acquire(blocking=False)
            except Timeout:
                raise LakehouseError(f"stream {spec.name} is already being ingested from this state folder "
                                     f"({settings.home}) by {_holder_text(path.with_suffix('.json'))}: stop that "
                                     "job first (two jobs on one stream would race for its offsets)") from None
            held.callback(lock.release)
            if lock.lock_counter == 1:
                path.with_suffix(".json").write_text(json.dumps(_identity(settings)))
        yield


def _holder_text(path: Path) -> str:
    try:
        holder = json.loads(path.read_text())
        return f"pid {holder['pid']} on {holder['host']} (started {holder['started_at']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


def _identity(settings: Settings) -> dict:
    return {"host": socket.gethostname(), "pid": os.getpid(), "process_started": psutil.Process().create_time(),
            "state_folder": str(settings.home), "started_at": _now_text()}


def _now_text() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# --- the catalog --------------------------------------------------------------------------------

@dataclass
class Lease:
    holder: str
    host: str
    pid: int
    process_started: float
    state_folder: str
    started_at: str
    renewed_at: float  # epoch seconds

    def text(self) -> str:
        ago = max(0.0, time.time() - self.renewed_at)
        return (f"pid {self.pid} on {self.host} (state folder {self.state_folder}, started {self.started_at}, "
                f"lease renewed {ago:.0f} s ago)")


def parse_lease(value: str | None) -> Lease | None:
    """A lease property's value, or None for none or one this version cannot read (taken as free,
    with a warning: it would otherwise block the stream for good)."""
    if not value:
        return None
    try:
        raw = json.loads(value)
        return Lease(str(raw["holder"]), str(raw["host"]), int(raw["pid"]), float(raw["process_started"]),
                     str(raw["state_folder"]), str(raw["started_at"]), float(raw["renewed_at"]))
    except (ValueError, KeyError, TypeError):
        log.warning("the writer lease %s cannot be read (%.200s): taken as free; another job may hold it if a "
                    "different version of the project wrote it", LEASE_PROPERTY, value)
        return None


def is_live(lease: Lease, now: float, host: str | None = None) -> bool:
    """Whether the lease's holder may still be running: on this host, its process is alive (the
    same pid and start time: a pid reused since is not it); elsewhere, renewed lately."""
    if lease.host == (host or socket.gethostname()):
        return process_alive(lease.pid, lease.process_started)
    return now - lease.renewed_at < LEASE_SECONDS


def process_alive(pid: int, process_started: float) -> bool:
    """Whether process ``pid`` of this host runs and is the one started at ``process_started``
    (a pid reused since is not it)."""
    try:
        return abs(psutil.Process(pid).create_time() - process_started) < 1.0
    except psutil.Error:
        return False


class LeaseLost(LakehouseError):
    """Another job holds the lease of a stream this job was writing."""


def lease_lost(spec: StreamSpec, current: Lease | None) -> LeaseLost:
    """The one message for a lost lease, whether a renewal or a batch's check found it first."""
    holder = current.text() if current else "no job"
    return LeaseLost(f"stream {spec.name}: its lease is held by {holder}, not by this job: "
                     "this job stops (another job is ingesting the stream)")


class CatalogLeases:
    """This job's leases on its streams' bronze tables (see the module's docstring)."""

    def __init__(self, spark: SparkSession, settings: Settings, specs: list[StreamSpec]):
        self.spark = spark
        self.specs = specs
        identity = _identity(settings)
        self.mine = Lease(uuid.uuid4().hex, identity["host"], identity["pid"], identity["process_started"],
                          identity["state_folder"], identity["started_at"], 0.0)
        self.confirmed_at: dict[str, float] = {}

    # -- the table's operations, through the JVM: Spark SQL has no compare-and-swap of a property
    def _operations(self, table: str):
        jvm = self.spark.sparkContext._jvm
        # the catalog named: a bare `bronze.x` would be tried as catalog `bronze` first (a logged warning)
        return jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            self.spark._jsparkSession, f"{CATALOG_NAME}.{table}").operations()

    def _read(self, table: str):
        operations = self._operations(table)
        base = operations.refresh()
        return operations, base, parse_lease(base.properties().get(LEASE_PROPERTY))

    def _write(self, operations, base, lease: Lease | None) -> bool:
        """Compare-and-swap the lease property over ``base``; False when the table changed meanwhile."""
        properties = self.spark.sparkContext._jvm.java.util.HashMap(base.properties())
        if lease is None:
            properties.remove(LEASE_PROPERTY)
        else:
            properties.put(LEASE_PROPERTY, json.dumps(lease.__dict__))
        try:
            operations.commit(base, base.replaceProperties(properties))
        except Exception as exc:  # py4j wraps Iceberg's CommitFailedException
            if "CommitFailedException" in str(exc):
                return False
            raise
        return True

    def _take(self, spec: StreamSpec, renewing: bool) -> None:
        for _ in range(COMMIT_ATTEMPTS):
            operations, base, current = self._read(spec.bronze_table)
            now = time.time()
            if current is not None and current.holder != self.mine.holder:
                if renewing:
                    raise lease_lost(spec, current)
                if is_live(current, now):
                    raise LakehouseError(f"stream {spec.name} is already being ingested by {current.text()}: stop "
                                         f"that job first, or, if it is gone, wait until its lease lapses "
                                         f"({LEASE_SECONDS:.0f} s after its last renewal)")
                log.warning("%s: taking over the lease of a job that is gone: %s", spec.name, current.text())
            self.mine.renewed_at = now
            if self._write(operations, base, self.mine):
                self.confirmed_at[spec.name] = time.monotonic()
                return
        raise LakehouseError(f"stream {spec.name}: could not write its lease to {spec.bronze_table} in "
                             f"{COMMIT_ATTEMPTS} attempts (the table changed every time); try again")

    def acquire(self) -> None:
        """Take every stream's lease, then read each back after SETTLE_SECONDS (module docstring)."""
        for spec in self.specs:
            self._take(spec, renewing=False)
        time.sleep(SETTLE_SECONDS)
        for spec in self.specs:
            self.confirm(spec, force=True)
        log.info("writer lease taken on %s", ", ".join(spec.bronze_table for spec in self.specs))

    def confirm(self, spec: StreamSpec, force: bool = False) -> None:
        """Before a batch commits: LeaseLost if another job holds the stream's lease; read from the
        catalog only when the lease was not confirmed lately (or ``force``)."""
        if not force and time.monotonic() - self.confirmed_at.get(spec.name, 0.0) < 2 * RENEW_SECONDS:
            return
        _, _, current = self._read(spec.bronze_table)
        if current is None or current.holder != self.mine.holder:
            raise lease_lost(spec, current)
        self.confirmed_at[spec.name] = time.monotonic()

    def renew_if_due(self) -> None:
        """Called between batches by the job's wait loop: renews the leases every RENEW_SECONDS."""
        for spec in self.specs:
            if time.monotonic() - self.confirmed_at.get(spec.name, 0.0) >= RENEW_SECONDS:
                self._take(spec, renewing=True)

    def release(self) -> None:
        """Give the leases up (a job that stops); a failure is only logged: the lease lapses."""
        for spec in self.specs:
            try:
                for _ in range(COMMIT_ATTEMPTS):
                    operations, base, current = self._read(spec.bronze_table)
                    if current is None or current.holder != self.mine.holder or self._write(operations, base, None):
                        break
            except Exception as exc:  # noqa: BLE001 - stopping anyway
                log.warning("%s: could not release its writer lease (%s); it lapses by itself", spec.name,
                            str(exc).splitlines()[0][:200])
