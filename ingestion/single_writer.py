"""One ingestion job per stream (ARCHITECTURE §8, "One writer per stream"): a second job started
on a stream that is already running is refused before it reads anything, and a job that lost
the stream cannot commit a batch.

Two guards, because a stream's state is in two places:

- **the state folder**: a file lock per stream (``locks/ingest-<stream>.lock``, a kernel flock
  that dies with its holder), taken before Spark starts, so a second `lakehouse ingest` from
  the same state folder is refused at once. Beside it, ``ingest-<stream>.json`` names the
  holder for the error line.
- **the catalog**: a lease in the stream's bronze table properties (``lakehouse.writer-lease``:
  holder id, host, pid, state folder, when it was taken, a renewal count). Jobs on other
  machines (a cluster, checkpoints on object storage) share the catalog, not the state folder.
  The running job renews its lease every ``writer_renew_seconds``; a new job takes a lease that
  is free or its own at once, and one held by a process of this host that is gone (by pid and
  start time: a `kill -9` is taken over at once). Any other holder is watched on the new job's
  own monotonic clock, never by comparing clocks of two hosts: a renewal seen refuses the new
  job at once, a lease seen unchanged for ``writer_lease_seconds`` has lapsed and is taken over
  (a holder on another host that died, or one of this host that is alive but stalled).

**The fence.** Every batch's append names this job's lease holder in its snapshot summary
(``lakehouse.writer-lease-holder``, ingestion/bronze.py), and the catalog's commit
(jvm/catalog, ``WriterFence``) refuses such a snapshot unless the base it commits over holds
that same lease: a driver that stalled past its lease, inside its append even, cannot land the
batch the job that took over replays. The refusal ends the job with one line (`refused`).
On a REST catalog the check runs where its server commits, when the server serves that catalog.

The lease is written with the table operations' compare-and-swap (`TableOperations.commit(base,
new)`): on catalogs that check the base metadata (JDBC, Hive, Glue, Nessie, Hadoop) two jobs
cannot both write it over the same base. A REST catalog checks only the requirements the
client sends, and Iceberg sends none for a property change, so there the last writer wins:
every job reads its lease back SETTLE_SECONDS after writing it and stops if another job's is
there. Both jobs of a race read back after both wrote, so exactly one finds its own. Before a
batch, a job whose lease was not confirmed in the last 2 renewals reads it again: an early
check that spares the batch's work; the fence is the commit's.
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
# The words of the catalog's refusal (jvm/catalog WriterFence.REFUSED), found in the append's error.
FENCE_REFUSED = "commit refused by the writer lease"
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
                holder = path.with_suffix(".json")
                holder.write_text(json.dumps(_identity(settings)))
                # Gone before the lock is released: a process that ran a job and lives on (a test
                # worker, `lakehouse demo`) is not shown by `lakehouse status` as its writer.
                held.callback(holder.unlink, missing_ok=True)
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
    renewed_at: float  # epoch seconds by the holder's clock: shown by `lakehouse status`, never compared here
    renewal: int = 0  # counts the holder's writes: a renewal changes the value even on a clock that stands still

    def text(self) -> str:
        return f"pid {self.pid} on {self.host} (state folder {self.state_folder}, started {self.started_at})"

    def value(self) -> str:
        # `holder` first: the catalog's fence reads it from this text (jvm/catalog, WriterFence)
        return json.dumps(self.__dict__)


def parse_lease(value: str | None) -> Lease | None:
    """A lease property's value, or None for none or one this version cannot read (taken as free,
    with a warning: it would otherwise block the stream for good)."""
    if not value:
        return None
    try:
        raw = json.loads(value)
        return Lease(str(raw["holder"]), str(raw["host"]), int(raw["pid"]), float(raw["process_started"]),
                     str(raw["state_folder"]), str(raw["started_at"]), float(raw["renewed_at"]),
                     int(raw.get("renewal", 0)))
    except (ValueError, KeyError, TypeError, AttributeError):
        log.warning("the writer lease %s cannot be read (%.200s): taken as free; another job may hold it if a "
                    "different version of the project wrote it", LEASE_PROPERTY, value)
        return None


def holder_gone(lease: Lease, host: str | None = None) -> bool:
    """Whether the lease's holder is a process of this host that is gone (same pid and start time:
    a pid reused since is not it). A holder of another host, or alive here, is not known gone."""
    return lease.host == (host or socket.gethostname()) and not process_alive(lease.pid, lease.process_started)


def looks_live(lease: Lease, now: float, lease_seconds: float, host: str | None = None) -> bool:
    """`lakehouse status` only, which reads once and cannot watch: the holder's process alive on
    this host; from another host, renewed within ``lease_seconds`` by comparing the holder's clock
    with this one (an estimate for a report; a job never decides a take-over by it)."""
    if lease.host == (host or socket.gethostname()):
        return process_alive(lease.pid, lease.process_started)
    return now - lease.renewed_at < lease_seconds


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
    """The one message for a lost lease, found by a renewal or a batch's early check."""
    holder = current.text() if current else "no job"
    return LeaseLost(f"stream {spec.name}: its lease is held by {holder}, not by this job: "
                     "this job stops (another job is ingesting the stream)")


class CatalogLeases:
    """This job's leases on its streams' bronze tables (see the module's docstring)."""

    def __init__(self, spark: SparkSession, settings: Settings, specs: list[StreamSpec]):
        self.spark = spark
        self.specs = specs
        self.lease_seconds = settings.writer_lease_seconds
        self.renew_seconds = settings.writer_renew_seconds
        identity = _identity(settings)
        self.mine = Lease(uuid.uuid4().hex, identity["host"], identity["pid"], identity["process_started"],
                          identity["state_folder"], identity["started_at"], 0.0)
        self.confirmed_at: dict[str, float] = {}

    @property
    def holder(self) -> str:
        """This job's lease holder id: what its appends name in their snapshot summary (the fence)."""
        return self.mine.holder

    # -- the table's operations, through the JVM: Spark SQL has no compare-and-swap of a property
    def _operations(self, table: str):
        jvm = self.spark.sparkContext._jvm
        # the catalog named: a bare `bronze.x` would be tried as catalog `bronze` first (a logged warning)
        return jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            self.spark._jsparkSession, f"{CATALOG_NAME}.{table}").operations()

    def _read(self, table: str):
        """(operations, base metadata, the lease property's text, the lease)."""
        operations = self._operations(table)
        base = operations.refresh()
        value = base.properties().get(LEASE_PROPERTY)
        return operations, base, value, parse_lease(value)

    def _write(self, operations, base, lease: Lease | None) -> bool:
        """Compare-and-swap the lease property over ``base``; False when the table changed meanwhile."""
        properties = self.spark.sparkContext._jvm.java.util.HashMap(base.properties())
        if lease is None:
            properties.remove(LEASE_PROPERTY)
        else:
            properties.put(LEASE_PROPERTY, lease.value())
        try:
            operations.commit(base, base.replaceProperties(properties))
        except Exception as exc:  # py4j wraps Iceberg's CommitFailedException
            if "CommitFailedException" in str(exc):
                return False
            raise
        return True

    def _write_mine(self, spec: StreamSpec, operations, base) -> bool:
        self.mine.renewed_at = time.time()
        self.mine.renewal += 1
        if not self._write(operations, base, self.mine):
            return False
        self.confirmed_at[spec.name] = time.monotonic()
        return True

    def _poll_seconds(self) -> float:
        return max(0.2, min(5.0, self.renew_seconds / 4))

    def _take(self, spec: StreamSpec) -> None:
        """Take the stream's lease: at once when it is free, this job's or its holder is gone; else
        after watching it stay unchanged for the lease time, on this job's monotonic clock."""
        watched: tuple[str, float] | None = None  # the other job's lease as first seen, and when
        for _ in range(COMMIT_ATTEMPTS):
            while True:
                operations, base, value, current = self._read(spec.bronze_table)
                if current is None or current.holder == self.mine.holder:
                    break
                if holder_gone(current):
                    log.warning("%s: taking over the lease of a job that is gone: %s", spec.name, current.text())
                    break
                now = time.monotonic()
                if watched is None:
                    watched = (value, now)
                    log.warning("%s: its lease is held by %s: watching it; taken over if not renewed for %.0f s "
                                "(by this job's clock), refused as soon as it is renewed", spec.name, current.text(),
                                self.lease_seconds)
                elif value != watched[0]:
                    raise LakehouseError(
                        f"stream {spec.name} is already being ingested by {current.text()}: its lease was renewed "
                        f"{now - watched[1]:.0f} s after this job first saw it: stop that job first (a job that "
                        f"is gone is taken over once its lease stays unchanged for {self.lease_seconds:.0f} s)")
                if now - watched[1] >= self.lease_seconds:
                    log.warning("%s: taking over the lease of %s: not renewed for %.0f s (by this job's clock)",
                                spec.name, current.text(), now - watched[1])
                    break
                time.sleep(self._poll_seconds())
            if self._write_mine(spec, operations, base):
                return
        raise LakehouseError(f"stream {spec.name}: could not write its lease to {spec.bronze_table} in "
                             f"{COMMIT_ATTEMPTS} attempts (the table changed every time); try again")

    def _renew(self, spec: StreamSpec) -> None:
        """Write the lease again; LeaseLost when it is no longer this job's (taken over, or released by
        the job that took it over: a free lease is not taken back, that job may have written since)."""
        for _ in range(COMMIT_ATTEMPTS):
            operations, base, _, current = self._read(spec.bronze_table)
            if current is None or current.holder != self.mine.holder:
                raise lease_lost(spec, current)
            if self._write_mine(spec, operations, base):
                return
        raise LakehouseError(f"stream {spec.name}: could not renew its lease on {spec.bronze_table} in "
                             f"{COMMIT_ATTEMPTS} attempts (the table changed every time)")

    def acquire(self) -> None:
        """Take every stream's lease, then read each back after SETTLE_SECONDS (module docstring)."""
        for spec in self.specs:
            self._take(spec)
        time.sleep(SETTLE_SECONDS)
        for spec in self.specs:
            self.confirm(spec, force=True)
        log.info("writer lease taken on %s", ", ".join(spec.bronze_table for spec in self.specs))

    def confirm(self, spec: StreamSpec, force: bool = False) -> None:
        """Before a batch: LeaseLost if another job holds the stream's lease; read from the catalog
        only when the lease was not confirmed lately (or ``force``). An early check only: the
        batch's commit is fenced by the catalog itself."""
        if not force and time.monotonic() - self.confirmed_at.get(spec.name, 0.0) < 2 * self.renew_seconds:
            return
        _, _, _, current = self._read(spec.bronze_table)
        if current is None or current.holder != self.mine.holder:
            raise lease_lost(spec, current)
        self.confirmed_at[spec.name] = time.monotonic()

    def refused(self, spec: StreamSpec, batch_id: int) -> LeaseLost:
        """The one line for a batch whose commit the catalog's fence refused, naming who holds the lease."""
        return LeaseLost(f"stream {spec.name} batch {batch_id}: commit refused, {self.holder_text(spec)}: this job "
                         "stops (another job took the stream over)")

    def holder_text(self, spec: StreamSpec) -> str:
        """Who holds the stream's lease now, for an error line."""
        try:
            current = self._read(spec.bronze_table)[3]
        except Exception:  # noqa: BLE001 - an error line is being written: say what is known
            return "its lease could not be read"
        if current is not None and current.holder == self.mine.holder:
            return "its lease is still this job's"
        return f"its lease is held by {current.text() if current else 'no job'}, not by this job"

    def renew_if_due(self) -> None:
        """Called by the job's wait loop (between and during batches): renews the leases every
        ``writer_renew_seconds``."""
        for spec in self.specs:
            if time.monotonic() - self.confirmed_at.get(spec.name, 0.0) >= self.renew_seconds:
                self._renew(spec)

    def release(self) -> None:
        """Give the leases up (a job that stops); a failure is only logged: the lease lapses."""
        for spec in self.specs:
            try:
                for _ in range(COMMIT_ATTEMPTS):
                    operations, base, _, current = self._read(spec.bronze_table)
                    if current is None or current.holder != self.mine.holder or self._write(operations, base, None):
                        break
            except Exception as exc:  # noqa: BLE001 - stopping anyway
                log.warning("%s: could not release its writer lease (%s); it lapses by itself", spec.name,
                            str(exc).splitlines()[0][:200])
