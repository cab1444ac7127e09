"""The file locks (lakehouse/core/locks.py): the dbt-tables lock between dbt runs and maintenance,
and a lock that refuses a second run of a command."""

import threading
import time

import pytest

from lakehouse.core import locks
from lakehouse.core.errors import LakehouseError
from lakehouse.core.locks import dbt_lock_path, dbt_run_lock, dbt_tables_lock, lock_or_refuse
from lakehouse.core.settings import Settings

WAIT = 10  # bound of every wait on an event: only reached when the scenario breaks


def test_back_to_back_dbt_runs_do_not_starve_a_waiting_maintenance_pass(tmp_path, monkeypatch):
    """A scheduler asks for the next dbt run the moment one ends, while maintenance waits for
    the lock. The order is forced by observed events, not by sleeps, so a slow thread cannot
    skip the contest: a dbt run holds the lock until maintenance is inside its acquire, and
    maintenance tries for the lock only once the loop is back asking for its next run (the
    worst case: without the turnstile, the loop takes the lock again first)."""
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)})
    maintainer, lock_path = threading.current_thread(), dbt_lock_path(settings)
    first_run_holds, maintenance_waits, loop_came_back, loop_at_the_lock = (threading.Event() for _ in range(4))
    stop, runs, runs_before_maintenance = threading.Event(), [], []

    real_file_lock = locks.file_lock

    def observed_file_lock(path, timeout=-1):  # the locks, telling who asks for which
        lock = real_file_lock(path, timeout)
        acquire = lock.acquire

        def observed_acquire(*args, **kwargs):
            if threading.current_thread() is maintainer:
                if path == lock_path:
                    maintenance_waits.set()
                    assert loop_came_back.wait(WAIT), "the dbt loop never asked for its next run"
                    result = acquire(*args, **kwargs)
                    runs_before_maintenance.append(len(runs))
                    return result
                return acquire(*args, **kwargs)
            if runs:
                loop_came_back.set()
            if path != lock_path:
                return acquire(*args, **kwargs)
            loop_at_the_lock.set()
            try:
                return acquire(*args, **kwargs)
            finally:
                loop_at_the_lock.clear()
        lock.acquire = observed_acquire
        return lock

    monkeypatch.setattr(locks, "file_lock", observed_file_lock)

    def dbt_loop():  # a scheduler that asks for the next run the moment one ends
        while not stop.is_set():
            with dbt_run_lock(settings):
                started = time.monotonic()
                if not runs:
                    first_run_holds.set()
                    maintenance_waits.wait(WAIT)  # the first run lasts until maintenance waits for it
                else:
                    time.sleep(0.05)  # a run's work
                runs.append((started, time.monotonic()))

    loop = threading.Thread(target=dbt_loop)
    loop.start()
    try:
        assert first_run_holds.wait(WAIT), "the first dbt run never took the lock"
        with dbt_tables_lock(settings, wait_seconds=WAIT) as held:
            held_from = time.monotonic()
            assert held, f"maintenance starved: {len(runs)} dbt runs went first in {WAIT}s"
            # The next run waits behind maintenance now; let it poll the lock a few times: a lock
            # that let it in would show as a run inside maintenance's hold.
            assert loop_at_the_lock.wait(WAIT), "the dbt loop never came back for the lock"
            time.sleep(3 * locks.POLL_SECONDS)
            held_until = time.monotonic()
    finally:
        stop.set()
        loop.join()
    assert runs_before_maintenance == [1], "a dbt run asked after maintenance and went first"
    assert [run for run in runs if run[0] < held_until and run[1] > held_from] == []
    assert len(runs) >= 2  # the run that waited went ahead once maintenance let go


def test_maintenance_gives_up_after_its_wait_while_a_dbt_run_holds_the_lock(tmp_path):
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)})
    with dbt_run_lock(settings):
        with dbt_tables_lock(settings, wait_seconds=0.5) as held:
            assert not held
    with dbt_tables_lock(settings, wait_seconds=0.5) as held:  # free again once the run ended
        assert held


def test_a_command_that_must_run_alone_is_refused_while_another_holds_its_lock(tmp_path):
    path = tmp_path / "locks" / "alone.lock"
    with lock_or_refuse(path, "another one is running"):
        with pytest.raises(LakehouseError, match="^another one is running$"):
            with lock_or_refuse(path, "another one is running"):
                pass
    with lock_or_refuse(path, "another one is running"):  # free again once the first one ended
        pass
