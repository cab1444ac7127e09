"""File locks between processes of one lakehouse (filelock: a kernel flock on Unix).

The kernel releases a flock when its holder dies, so a killed process never leaves a lock
stuck. The locks are exclusive only: filelock has no shared (read) mode, and none of the
locks here needs one. ``file_lock`` and ``lock_or_refuse`` are the building blocks for any
command that must run alone (e.g. one `lakehouse dlq replay` at a time).

The dbt-tables lock keeps `lakehouse maintain` from rewriting a dbt table while dbt merges
into it, and two dbt runs from writing the same tables at once. Iceberg's optimistic commits
make most concurrent work safe, but not these: a MERGE that writes position deletes against
data files a compaction has just replaced fails at commit ("missing data files"), and two runs
of an append model that read the same increment both append it (macros/first_occurrences.sql
drops only the ids already committed). So every dbt run that writes (`lakehouse dbt`, its loop,
the demo, the tests) and maintenance of silver and gold tables take one file lock in the state
folder; ingestion never needs it (appends do not conflict with compaction).

The lock is one state folder's, so one host's. dbt runs of several hosts on one catalog are
fenced in the catalog's commit instead (macros/dbt_fence.sql, jvm/catalog WriterFence): of two
runs that read the same state of a table, the second to commit is refused. A refused model
fails its run (dbt's error names it). Maintenance needs no fence there: when a MERGE and a
compaction of two hosts overlap, Iceberg's own conflict check fails one of the two commits.

A `dbt` started by hand cannot take it: dbt's Jinja has no file access, and a lock taken from
SQL in dbt's Spark JVM (Java's FileChannel.lock, an fcntl lock) never meets this flock on Linux.
So the holder tells the dbt it starts, by the variable ``DBT_LOCK_HOLDER``, and the project's
`on-run-start` hook (macros/lakehouse_dbt_only.sql) refuses a run, build, seed or snapshot
without it, in one line naming `lakehouse dbt` with the same arguments (ARCHITECTURE §4).

dbt runs back to back (a scheduler loop) would re-take the lock the moment they release
it, starving a maintenance pass that waits for it. A second lock, the turnstile, prevents
that: maintenance holds the turnstile while it waits, and a dbt run passes through the
turnstile before it takes the lock, so the next dbt run queues behind the waiting pass.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from filelock import FileLock, Timeout

from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings

POLL_SECONDS = 0.2
# Set by a holder of the dbt-tables lock in the environment of the dbt it runs: the project's
# on-run-start hook refuses a writing dbt command without it (macros/lakehouse_dbt_only.sql).
DBT_LOCK_HOLDER = "LAKEHOUSE_DBT_LOCK_HOLDER"


def file_lock(path: Path, timeout: float = -1) -> FileLock:
    """An exclusive lock on ``path`` (created, with its folder, if missing); ``timeout`` -1 waits
    as long as it takes. Use it as a context manager; acquiring past the timeout raises Timeout."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(path, timeout=timeout, poll_interval=POLL_SECONDS)


@contextmanager
def lock_or_refuse(path: Path, busy: str) -> Iterator[None]:
    """Hold ``path``'s lock, or fail at once with ``busy`` (a user error) if another process holds it."""
    lock = file_lock(path)
    try:
        lock.acquire(blocking=False)
    except Timeout:
        raise LakehouseError(busy) from None
    try:
        yield
    finally:
        lock.release()


def dbt_lock_path(settings: Settings) -> Path:
    return settings.home / "locks" / "dbt-tables.lock"


def _turnstile(settings: Settings, timeout: float = -1) -> FileLock:
    return file_lock(dbt_lock_path(settings).with_suffix(".turnstile"), timeout)


@contextmanager
def dbt_run_lock(settings: Settings) -> Iterator[dict[str, str]]:
    """Held by a dbt run for its whole length; waits behind a maintenance pass that asked first.
    Yields the variable to put in that dbt's environment: the sign the hook asks for."""
    with _turnstile(settings):
        pass
    with file_lock(dbt_lock_path(settings)):
        # named in every snapshot the run commits (macros/dbt_fence.sql): a refusal names the other run by it
        yield {DBT_LOCK_HOLDER: f"pid {os.getpid()} on {socket.gethostname()}"}


@contextmanager
def dbt_tables_lock(settings: Settings, wait_seconds: float | None = None) -> Iterator[bool]:
    """Held by maintenance of a dbt table; yields False (not holding it) if ``wait_seconds``
    ran out while a dbt run held it. ``None`` waits as long as it takes."""
    deadline = None if wait_seconds is None else time.monotonic() + wait_seconds

    def left() -> float:  # one wait for both locks, not one each
        return -1 if deadline is None else max(0.0, deadline - time.monotonic())

    lock = file_lock(dbt_lock_path(settings))
    with suppress(Timeout), _turnstile(settings, left()):
        lock.acquire(left())  # dbt runs may queue again behind the lock once the turnstile is let go
    if not lock.is_locked:
        yield False
        return
    try:
        yield True
    finally:
        lock.release()
