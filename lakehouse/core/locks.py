"""A lock that keeps `lakehouse maintain` from rewriting a dbt table while dbt merges into it.

Iceberg's optimistic commits make most concurrent work safe, but not this pair: a MERGE
that writes position deletes against data files a compaction has just replaced fails at
commit ("missing data files"). So dbt runs started by the project (`lakehouse dbt`, the
demo, the tests) and maintenance of silver and gold tables take one file lock in the
state folder; ingestion never needs it (appends do not conflict with compaction).
A `dbt run` started by hand does not take it: schedule maintenance between such runs.

dbt runs back to back (a scheduler loop) would re-take the lock the moment they release
it, starving a maintenance pass that waits for it. A second lock, the turnstile, prevents
that: maintenance holds the turnstile while it waits, and a dbt run passes through the
turnstile before it takes the lock, so the next dbt run queues behind the waiting pass.
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from lakehouse.core.settings import Settings

POLL_SECONDS = 0.2


def dbt_lock_path(settings: Settings) -> Path:
    return settings.home / "locks" / "dbt-tables.lock"


def _open(path: Path) -> IO:
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "a+")


def _acquire(handle: IO, deadline: float | None) -> bool:
    """Take an exclusive flock; False if ``deadline`` (monotonic) passed first. None: wait."""
    if deadline is None:
        fcntl.flock(handle, fcntl.LOCK_EX)
        return True
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_SECONDS)


@contextmanager
def dbt_run_lock(settings: Settings) -> Iterator[None]:
    """Held by a dbt run for its whole length; waits behind a maintenance pass that asked first.

    The kernel releases a flock when its holder dies, so a killed dbt run never leaves it stuck.
    """
    path = dbt_lock_path(settings)
    with _open(path.with_suffix(".turnstile")) as turnstile:
        _acquire(turnstile, None)
        fcntl.flock(turnstile, fcntl.LOCK_UN)
        with _open(path) as handle:
            _acquire(handle, None)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def dbt_tables_lock(settings: Settings, wait_seconds: float | None = None) -> Iterator[bool]:
    """Held by maintenance of a dbt table; yields False (not holding it) if ``wait_seconds``
    ran out while a dbt run held it. ``None`` waits as long as it takes."""
    path = dbt_lock_path(settings)
    deadline = None if wait_seconds is None else time.monotonic() + wait_seconds
    with _open(path.with_suffix(".turnstile")) as turnstile, _open(path) as handle:
        if not _acquire(turnstile, deadline):
            yield False
            return
        try:
            held = _acquire(handle, deadline)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)  # dbt runs may queue again behind the lock
        if not held:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
