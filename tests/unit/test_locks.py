"""The file locks (lakehouse/core/locks.py): the dbt-tables lock between dbt runs and maintenance,
and a lock that refuses a second run of a command."""

import threading
import time

import pytest

from lakehouse.core.errors import LakehouseError
from lakehouse.core.locks import dbt_run_lock, dbt_tables_lock, lock_or_refuse
from lakehouse.core.settings import Settings


def test_back_to_back_dbt_runs_do_not_starve_a_waiting_maintenance_pass(tmp_path):
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)})
    stop, runs = threading.Event(), []

    def dbt_loop():  # a scheduler that starts the next run the moment one ends
        while not stop.is_set():
            with dbt_run_lock(settings):
                runs.append(time.monotonic())
                time.sleep(0.3)

    loop = threading.Thread(target=dbt_loop)
    loop.start()
    try:
        time.sleep(0.1)
        with dbt_tables_lock(settings, wait_seconds=10) as held:
            assert held
            during = len(runs)
            time.sleep(0.5)
            assert len(runs) == during  # no dbt run started while maintenance held the lock
    finally:
        stop.set()
        loop.join()
    assert len(runs) >= 2


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
