"""The chaos suite in full (`make test-chaos`, marker `chaos`): each scenario in a lakehouse of
its own, with a baseline of every stream, broken at full size, then every invariant
(tests/chaos/harness.py). The default test run has the short form: test_chaos_short.py."""

from __future__ import annotations

import pytest

from tests.chaos import scenarios
from tests.chaos.harness import check_invariants

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


def test_kill_9_the_ingestion_driver_ten_times(lake):
    lake.baseline()
    facts = scenarios.kill_ingestion_driver(lake, kills=12, events=600_000, changes=2000)
    assert facts["kills"] >= 10, facts
    assert facts["kills_during_a_batch"] >= 12 // 2, facts  # every second kill, by construction
    check_invariants(lake, "kill -9 ingestion driver", facts)


def test_broker_stopped_and_restarted_while_producing_and_ingesting(lake):
    lake.baseline()
    facts = scenarios.restart_broker(lake, restarts=4, events=60_000, changes=1500)
    assert facts["user_events_batches_after_last_restart"] > 0, facts  # the job itself resumed
    check_invariants(lake, "broker stop/restart", facts)


def test_dbt_killed_mid_merge_then_rerun_converges(lake):
    lake.baseline()
    facts = scenarios.kill_dbt_mid_merge(lake, kills=5, changes=300)
    assert facts["kills_while_a_merge_ran"] >= 3, facts
    check_invariants(lake, "dbt killed mid-MERGE", facts)


def test_maintenance_while_streaming_and_dbt(lake, tmp_path):
    lake.baseline()
    facts = scenarios.maintain_while_streaming(lake, changes=900, events=30_000, rate=8, tmp_path=tmp_path)
    assert facts["files_rewritten"] > facts["files_added"] and facts["snapshots_expired"] > 0, facts
    check_invariants(lake, "maintenance during streaming and dbt", facts)


def test_several_writers_on_the_sqlite_catalog(lake):
    lake.baseline()
    facts = scenarios.contend_for_the_catalog(lake, writers=4, events=40_000, rate=800)
    assert facts["failed_batches"] == 0 and facts["busy_or_conflict_log_lines"] == 0, facts  # also in the scenario
    check_invariants(lake, "catalog contention", facts)


def test_poison_input_never_stops_the_job(lake):
    lake.baseline()
    facts = scenarios.poison(lake, events=40_000, burst=5000)
    check_invariants(lake, "poison input", facts)


def test_checkpoint_disk_full_then_read_only(lake):
    lake.baseline()
    facts = scenarios.break_the_checkpoint_disk(lake, events=40_000)
    check_invariants(lake, "checkpoint disk full / read-only", facts)
