"""The chaos suite's short form, in the default test run: every fault of the full suite
(test_chaos.py, `make test-chaos`) once, in one story on one lakehouse, then every invariant.

Two ingestion processes (the event streams, the CDC streams) are two writers on the one
SQLite catalog, both appending dead letters to the same table. While producers send with
faults on (5% corrupt payloads, unknown schema ids, invalid records among them):
1. the events' driver is killed with SIGKILL twice, at a random moment of a batch;
2. a maintenance pass (compaction and snapshot expiry, on partitions being written) runs;
3. the broker is stopped and started again; both jobs must carry on and read what is sent after;
4. a burst of a purchases schema registered mid-run arrives; the job evolves bronze;
5. the checkpoints' disk fills up: both jobs stop with one clear error line; freed, restarted;
6. after they caught up and stopped, `dbt run` is killed in the middle of a mirror's MERGE.
Then: every offset in bronze or dead letters exactly once, `dbt run`, mirrors equal to their
source databases, quality gates pass.
"""

from __future__ import annotations

import random
import threading
import time

import pytest
import yaml

from lakehouse.core import local_kafka
from lakehouse.operations import maintenance
from producers.faults import FaultRates
from tests.chaos import scenarios
from tests.chaos.harness import FAULTS, assert_offsets, check_invariants, checkpoint_batches, kill_group, wait_for

pytestmark = pytest.mark.integration

EVENTS = ["employees", "purchases", "user_events"]
CDC = ["customers", "accounts"]
POISON = FaultRates(duplicate=0.02, late=0.01, corrupt=0.05, invalid=0.02, unknown_schema_id=0.02)


def feed(lake, errors: list, seed: int, events: int = 1000, changes: int = 120,
         seconds: float = 15) -> list[threading.Thread]:
    """Producers in the background for about ``seconds``: poison in the events, faults in the changes.

    Small: what the faults need is batches under way while they strike (records arriving every
    trigger, ~70 events a second per stream) and every kind of poison among them (20 or more
    dead letters of each reason per stream and feed); size is what the full suite (`make
    test-chaos`) is for. 3,000 events a feed (and 1,000 in the baseline) made the two jobs, the
    final dbt run and the quality gates read ~10,000 records per stream, which no assertion
    here needs; it also kept the events' job behind the producers, which the kills of step 1
    relied on without saying so (they now send records of their own while they wait)."""
    return lake.produce_in_background(
        [*[(s, events, POISON, seed + n, events / seconds) for n, s in enumerate(EVENTS)],
         *[(s, changes, FAULTS, seed + 10 + n, changes / seconds) for n, s in enumerate(CDC)]], errors)


def test_every_fault_once_then_every_invariant(lake, tmp_path):
    lake.dbt_in_process = True  # but the dbt run step 6 kills, a process of its own (harness.Lake)
    lake.baseline(events=500, changes=100)
    errors: list = []
    rng = random.Random(5)
    facts = {"kills": 0}

    def start(streams):
        return lake.ingest_process(streams, "--trigger", "1s", "--max-offsets-per-trigger", "2000")

    events_job, cdc_job = start(EVENTS), start(CDC)
    producing = feed(lake, errors, 100)
    try:
        # 1. kill -9 of the events' driver, twice, once a new batch is under way. Records keep
        # arriving while it waits (a few hundred employees sent from now on): a restarted job
        # that caught up with the feed would plan no new batch to be killed in.
        for number in range(2):
            planned = checkpoint_batches(lake.settings, "employees")
            producing += lake.produce_in_background([("employees", 300, POISON, 150 + number, 30)], errors)
            wait_for(lambda planned=planned: checkpoint_batches(lake.settings, "employees") > planned,
                     "a new batch", 240, events_job, lake.ingest_log)
            time.sleep(rng.uniform(0.0, 3.0))  # the random moment of the kill, not a wait for something
            facts["kills"] += kill_group(events_job)
            events_job = start(EVENTS)
        assert facts["kills"] == 2, "the events' job was not running when it was to be killed\n" + lake.ingest_log()

        # 2. a maintenance pass, compacting partitions being written and expiring snapshots
        policy = tmp_path / "maintenance.yml"
        policy.write_text(yaml.safe_dump({"defaults": {
            "quiet_minutes": 0, "min_input_files": 2, "snapshot_retention_hours": 0, "snapshots_to_keep": 2}}))
        passes = maintenance.maintain(lake.session, lake.settings, policies=maintenance.load_policies(policy))
        failed = maintenance.failed_or_skipped(passes)
        assert not failed, failed
        facts["maintenance"] = {"files_rewritten": sum(r.files_rewritten for r in passes),
                                "snapshots_expired": sum(r.snapshots_expired for r in passes)}
        # Work there is, whatever the timing: since the baseline every bronze table has had more than
        # 2 commits (snapshots to expire), each adding files to the partition of the day (2+ to compact).
        assert facts["maintenance"]["files_rewritten"] > 0 and facts["maintenance"]["snapshots_expired"] > 0, facts
        scenarios.join(producing, errors)

        # 3. the broker stopped (SIGTERM, a clean shutdown) while producers send, then started again.
        # Waits on what can be seen, not on the clock: the broker stops once both jobs have read
        # some of the new feed; it is down from when its port refuses connections until it
        # answers again (start() waits for that); both jobs must then read what was sent after.
        marks = scenarios.topic_ends(lake, ["employees", "customers"])
        producing = feed(lake, errors, 200)
        wait_for(lambda: scenarios.read_past(lake, marks), "both jobs reading the new feed", 240, events_job,
                 lake.ingest_log)
        facts["producers_sending_at_broker_stop"] = any(thread.is_alive() for thread in producing)
        local_kafka.stop(lake.settings, log=lambda _: None)
        wait_for(lambda: scenarios.broker_refuses(lake), "the broker's port refusing connections", 60)
        down_at = time.monotonic()
        assert events_job.poll() is None and cdc_job.poll() is None, lake.ingest_log()
        local_kafka.start(lake.settings, log=lambda _: None)
        facts["broker_down_seconds"] = round(time.monotonic() - down_at, 1)

        # 4. a burst of a schema registered while the job runs (and changes, both sent after the restart)
        burst = scenarios.send_new_purchase_schema(lake, 500)
        lake.produce("customers", 30, seed=250)
        scenarios.join(producing, errors)
        sent = scenarios.topic_ends(lake, EVENTS + CDC)
        wait_for(lambda: scenarios.read_up_to(lake, sent), "both jobs reading what was sent after the restart",
                 300, events_job, lake.ingest_log)
        assert cdc_job.poll() is None, lake.ingest_log()

        # 5. the checkpoints' disk full (without root: unwritable): both jobs stop with one clear line
        name, breaks, repairs, expected = lake.disk.faults()[0]
        producing = feed(lake, errors, 300)
        committed = checkpoint_batches(lake.settings, "employees", "commits")
        wait_for(lambda: checkpoint_batches(lake.settings, "employees", "commits") > committed,
                 "a batch before the disk breaks", 240, events_job, lake.ingest_log)
        breaks()
        try:
            codes = [job.wait(timeout=240) for job in (events_job, cdc_job)]
        finally:
            repairs()
        assert codes == [1, 1], lake.ingest_log()
        lines = [line for line in lake.ingest_log(tail=1_000_000).splitlines()
                 if line.startswith("error: ") and expected in line]
        assert len(lines) >= 2 and all(str(lake.settings.checkpoint_root) in line for line in lines), lines
        facts[f"disk_{name}_error"] = lines[-1]
        scenarios.join(producing, errors)
        events_job, cdc_job = start(EVENTS), start(CDC)
        scenarios.stop_cleanly(lake, events_job, EVENTS)
        scenarios.stop_cleanly(lake, cdc_job, CDC)
    finally:
        for job in (events_job, cdc_job):
            kill_group(job)
    facts["offsets_before_dbt"] = assert_offsets(lake)
    assert lake.session.table("bronze.purchases").where("coupon_code is not null").count() > burst // 2

    # 6. dbt killed in the middle of a MERGE; the invariants' dbt run picks up
    facts.update(scenarios.kill_dbt_mid_merge(lake, kills=1, changes=100))
    assert facts["kills_while_a_merge_ran"] == 1, facts
    check_invariants(lake, "short form (default test run)", facts)
