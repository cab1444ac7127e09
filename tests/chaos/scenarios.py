"""The chaos scenarios: each breaks one thing while producers, ingestion (and dbt) run, then
recovers. Sizes are arguments: the default test run calls them small (test_chaos_short.py),
`make test-chaos` calls them in full (test_chaos.py). Each returns the facts it observed
(kills that hit, restarts, errors seen); the invariants are checked by the caller.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil
import yaml

from ingestion import checkpoint, job
from lakehouse.contracts.registry import registry_for
from lakehouse.contracts.streams import get_stream
from lakehouse.core import local_kafka
from lakehouse.core.kafka_admin import end_offsets
from lakehouse.operations import maintenance
from lakehouse.operations.status import broker_accepts_connections, stream_status
from producers import avro
from producers.delivery import produce_to_topic
from producers.faults import FaultRates
from producers.purchases import SCHEMAS, SUBJECT, TOPIC, key, make_purchase
from tests.chaos.harness import FAULTS, Lake, checkpoint_batches, kill_group, lakehouse_command, wait_for

# cdc_transactions first: the customers changes the producers write name their transaction, and
# the customers models apply whole published transactions only (macros/cdc_transactions.sql)
CDC_MODELS = ("cdc_transactions customers_changelog customers_mirror customers customers_history "
              "accounts_changelog accounts_mirror accounts accounts_history")


def caught_up(lake: Lake, streams: list[str]) -> bool:
    """Every stream's checkpoint has committed up to the topic's end."""
    return all(status.lag == 0 for status in stream_status(lake.settings, streams))


def stop_cleanly(lake: Lake, process: subprocess.Popen, streams: list[str], timeout: float = 300) -> None:
    """Wait until the job has read everything, then SIGTERM: it must exit 0."""
    wait_for(lambda: caught_up(lake, streams), "the ingestion catching up", timeout, process, lake.ingest_log)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=120) == 0, lake.ingest_log()


def join(threads: list[threading.Thread], errors: list) -> None:
    for thread in threads:
        thread.join()
    assert not errors, errors


def topic_ends(lake: Lake, streams: list[str]) -> dict[str, dict[int, int]]:
    """Per stream, its topic's end offsets now: a mark to compare what a job read with."""
    return {stream: end_offsets(lake.settings, get_stream(stream).topic) for stream in streams}


def committed_offsets(lake: Lake, stream: str) -> dict[int, int]:
    """Where the stream's last committed batch ended, per partition of its topic."""
    spec = get_stream(stream)
    commit = checkpoint.last_commit(job.checkpoint_location(lake.settings, spec))
    return {} if commit is None else commit.offsets.get(spec.topic, {})


def read_past(lake: Lake, marks: dict[str, dict[int, int]]) -> bool:
    """Every stream of ``marks`` has committed a batch that read records beyond its mark."""
    return all(sum(committed_offsets(lake, s).values()) > sum(mark.values()) for s, mark in marks.items())


def read_up_to(lake: Lake, marks: dict[str, dict[int, int]]) -> bool:
    """Every stream of ``marks`` has committed batches up to its mark, in every partition."""
    return all(all(committed_offsets(lake, s).get(p, 0) >= offset for p, offset in mark.items())
               for s, mark in marks.items())


def broker_refuses(lake: Lake) -> bool:
    return not broker_accepts_connections(lake.settings.kafka_bootstrap_servers)


# -- kill -9 of the ingestion driver -----------------------------------------------------------------


def kill_ingestion_driver(lake: Lake, kills: int, events: int, changes: int, seed: int = 11) -> dict:
    """SIGKILL `lakehouse ingest` (driver and JVM) at random moments of its batches, ``kills``
    times, while the producers still send; then the invariants' drain reads the rest.

    Each kill first freezes the job (SIGSTOP to its process group), so whether a batch was in
    flight (planned, not committed) is read off a checkpoint nothing writes any more, then
    kills it. Every second kill is inside a batch by construction: if the random moment fell
    between batches, the job runs on until the next batch is planned and is frozen there. So
    ``kills_during_a_batch`` is at least ``kills // 2``; the other kills fall anywhere."""
    streams = ["employees", "customers"]
    errors: list = []
    producers = lake.produce_in_background(
        [("employees", events, FAULTS, seed, None), ("customers", changes, FAULTS, seed, None)], errors)
    rng = random.Random(seed)
    hits = mid_batch = 0
    before = sum(checkpoint_batches(lake.settings, s, "commits") for s in streams)  # the baseline's

    def in_flight() -> bool:
        return any(checkpoint_batches(lake.settings, s) > checkpoint_batches(lake.settings, s, "commits")
                   for s in streams)

    for number in range(kills):
        planned = sum(checkpoint_batches(lake.settings, s) for s in streams)
        process = lake.ingest_process(streams, "--trigger", "1s", "--max-offsets-per-trigger", "15000")
        try:
            # Once a new batch is planned, a random moment later: decoding, writing bronze or
            # dead letters, or committing the checkpoint (or, past its commit, between batches).
            wait_for(lambda planned=planned: sum(checkpoint_batches(lake.settings, s) for s in streams) > planned,
                     "a new batch", 240, process, lake.ingest_log)
            time.sleep(rng.uniform(0.0, 4.0))
            freeze(process)
            while number % 2 and not in_flight():  # this kill must fall inside a batch
                thaw(process)
                wait_for(in_flight, "the next batch", 240, process, lake.ingest_log)
                freeze(process)
        finally:
            inside = in_flight()  # frozen, unless something above failed
            if kill_group(process):
                hits += 1
                mid_batch += inside
    join(producers, errors)
    return {"kills": hits, "kills_during_a_batch": mid_batch,
            "batches": sum(checkpoint_batches(lake.settings, s, "commits") for s in streams) - before}


def freeze(process: subprocess.Popen) -> None:
    """SIGSTOP the process group (driver and JVM): it writes nothing until thawed or killed."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGSTOP)


def thaw(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGCONT)


# -- the broker stopped and restarted ------------------------------------------------------------------


def restart_broker(lake: Lake, restarts: int, events: int, changes: int, down_seconds: float = 8,
                   seed: int = 21) -> dict:
    """Stop the broker (SIGTERM; every second time SIGKILL) while producers send at a steady
    rate and ingestion streams, leave it down, start it again; the job must carry on."""
    streams = ["user_events", "accounts"]
    errors: list = []
    before = {s: checkpoint_batches(lake.settings, s, "commits") for s in streams}  # the baseline's
    process = lake.ingest_process(streams, "--trigger", "2s")
    seconds = (restarts + 1) * (down_seconds + 10)
    producers = lake.produce_in_background(
        [("user_events", events, FAULTS, seed, events / seconds),
         ("accounts", changes, FAULTS, seed, changes / seconds)], errors)
    # The broker breaks only once the job runs: a job started against a stopped broker refuses
    # to start (a clear error), which is not this scenario. A batch needs new records.
    wait_for(lambda: any(checkpoint_batches(lake.settings, s, "commits") > before[s] for s in streams),
             "the job's first batch", 240, process, lake.ingest_log)
    rng = random.Random(seed)
    killed = 0
    for number in range(restarts):
        time.sleep(rng.uniform(3, 8))
        if number % 2:
            os.kill(running_broker(lake), signal.SIGKILL)
            killed += 1
        else:
            local_kafka.stop(lake.settings, log=lambda _: None)
        wait_for(lambda: broker_refuses(lake), "the broker's port refusing connections", 60)
        time.sleep(down_seconds)  # the outage itself, counted from the port refusing
        assert process.poll() is None, f"the ingestion stopped while the broker was down\n{lake.ingest_log()}"
        local_kafka.start(lake.settings, log=lambda _: None)
    at_last_restart = checkpoint_batches(lake.settings, "user_events", "commits")
    join(producers, errors)
    # Records certainly sent after the last restart: the job reading them to the end (below)
    # shows it resumed, rather than the invariants' own drain reading them.
    lake.produce("user_events", 2000, seed=seed + 1)
    stop_cleanly(lake, process, streams)
    at_end = checkpoint_batches(lake.settings, "user_events", "commits")
    return {"restarts": restarts, "broker_sigkills": killed, "seconds_down_each": down_seconds,
            "ingestion_restarts": 0, "user_events_batches": at_end - before["user_events"],
            "user_events_batches_after_last_restart": at_end - at_last_restart}


def running_broker(lake: Lake) -> int:
    """The pid of the broker the scenario restarted, or a failure saying why there is none: the
    full chaos run of 2026-12-04 once found none 6 s after a restart (a bare TypeError then)."""
    pid = local_kafka.running_pid(lake.settings)
    if pid is not None:
        return pid
    paths = local_kafka.BrokerPaths(lake.settings.kafka_dir)
    written = paths.pid.read_text().strip() if paths.pid.exists() else "no pid file"
    try:
        process = psutil.Process(int(written.split()[0]))
        seen = f"{process.status()}, command line {' '.join(process.cmdline())[-300:]}"
    except (ValueError, IndexError, psutil.Error) as exc:
        seen = f"not there ({type(exc).__name__})"
    log = paths.logs / "server.log"
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:]) if log.exists() else "(no server.log)"
    raise AssertionError(f"the restarted broker is not running: pid {written}, {seen}; its log ends:\n{tail}")


# -- dbt killed in the middle of a MERGE -----------------------------------------------------------


MERGE_STARTED = re.compile(r"merge into .*silver\.\w*_mirror", re.IGNORECASE)


def kill_dbt_mid_merge(lake: Lake, kills: int, changes: int, seed: int = 31) -> dict:
    """New changes land, then `lakehouse dbt run` is SIGKILLed once a mirror's MERGE has been
    sent to Spark, at a random moment after; ``kills`` times, the next run picks up."""
    rng = random.Random(seed)
    log = lake.dbt_target / "logs" / "dbt.log"
    hits = mid_merge = 0
    # The mirrors exist (a first run creates them; later runs MERGE into them).
    if not lake.session.catalog.tableExists("silver.customers_mirror"):
        lake.dbt("run", "--select", CDC_MODELS)
    for number in range(kills):
        for stream in ("customers", "accounts"):
            lake.produce(stream, changes, seed=seed + number)
        lake.drain(["customers", "accounts"])
        seen = log.read_text(errors="replace") if log.exists() else ""
        dbt = subprocess.Popen([lakehouse_command(), "dbt", "run", "--select", CDC_MODELS],
                               env=lake.env(DBT_TARGET_PATH=str(lake.dbt_target)), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)

        def merging(seen: str = seen) -> bool:
            text = log.read_text(errors="replace")[len(seen):] if log.exists() else ""
            return bool(MERGE_STARTED.search(text))
        try:
            wait_for(merging, "dbt starting a MERGE", 300, dbt)
            time.sleep(rng.uniform(0.0, 3.0))
        finally:
            text = log.read_text(errors="replace")[len(seen):] if log.exists() else ""
            merges = len(MERGE_STARTED.findall(text))
            done = len(re.findall(r"OK created sql cdc_mirror model silver\.\w+_mirror", text))
            if kill_group(dbt):
                hits += 1
                mid_merge += merges > done
    return {"dbt_kills": hits, "kills_while_a_merge_ran": mid_merge}


# -- maintenance while streaming and dbt run -------------------------------------------------------


def maintain_while_streaming(lake: Lake, changes: int, events: int, rate: float, tmp_path: Path) -> dict:
    """Compaction and snapshot expiry passes (every table, also partitions being written,
    snapshots expired down to 2) run over and over while producers send, ingestion streams
    and dbt merges the mirrors. No batch, dbt run or maintenance step may fail."""
    streams = ["customers", "accounts", "employees"]
    policy_file = tmp_path / "maintenance.yml"
    policy_file.write_text(yaml.safe_dump({"defaults": {
        "quiet_minutes": 0, "min_input_files": 2, "snapshot_retention_hours": 0, "snapshots_to_keep": 2}}))
    policies = maintenance.load_policies(policy_file)
    errors: list = []
    passes: list = []
    process = lake.ingest_process(streams, "--trigger", "2s")
    producers = lake.produce_in_background(
        [("customers", changes, FAULTS, 41, rate), ("accounts", changes, FAULTS, 42, rate),
         ("employees", events, FAULTS, 43, rate * events / changes)], errors)

    def maintain_repeatedly() -> None:
        try:
            while any(thread.is_alive() for thread in producers) or len(passes) < 2:
                passes.append(maintenance.maintain(lake.session, lake.settings, policies=policies))
        except Exception as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    maintainer = threading.Thread(target=maintain_repeatedly)
    maintainer.start()
    runs = 0
    try:
        while maintainer.is_alive() or runs < 2:
            assert process.poll() is None, lake.ingest_log()
            lake.dbt("run", "--select", CDC_MODELS)
            runs += 1
    finally:
        maintainer.join()
    join(producers, errors)
    stop_cleanly(lake, process, streams)
    results = [result for one_pass in passes for result in one_pass]
    failed = maintenance.failed_or_skipped(results)
    assert not failed, failed
    return {"maintenance_passes": len(passes), "dbt_runs": runs,
            "files_rewritten": sum(r.files_rewritten for r in results),
            "files_added": sum(r.files_added for r in results),
            "snapshots_expired": sum(r.snapshots_expired for r in results),
            "ingestion_batches": sum(checkpoint_batches(lake.settings, s, "commits") for s in streams)}


# -- several writers on the SQLite catalog ------------------------------------------------------------


CONTENTION = re.compile(r"database is locked|SQLITE_BUSY|CommitFailedException|Retrying task after failure",
                        re.IGNORECASE)


def contend_for_the_catalog(lake: Lake, writers: int, events: int, rate: float) -> dict:
    """One ingestion process per stream (separate Spark applications, one SQLite catalog),
    each committing its batches (good and dead rows) every second, plus a dbt run: every
    process keeps running and every batch commits."""
    streams = ["employees", "purchases", "user_events", "customers"][:writers]
    errors: list = []
    before = {s: checkpoint_batches(lake.settings, s, "commits") for s in streams}  # the baseline's
    processes = [lake.ingest_process([s], "--trigger", "1s", "--max-offsets-per-trigger", "500") for s in streams]
    producers = lake.produce_in_background(
        [(s, events // 10 if s == "customers" else events, FAULTS, 50 + n, rate / 10 if s == "customers" else rate)
         for n, s in enumerate(streams)], errors)
    try:
        for stream, process in zip(streams, processes, strict=True):
            wait_for(lambda s=stream: checkpoint_batches(lake.settings, s, "commits") > before[s],
                     f"{stream}'s first batch", 300, process, lake.ingest_log)
        lake.dbt("run", "--select", "silver")  # one more writer, and a reader of everything
        join(producers, errors)
        for stream, process in zip(streams, processes, strict=True):
            assert process.poll() is None, f"{stream}: {lake.ingest_log()}"
        # Four Spark applications on two cores, 500 records a batch: they need minutes to catch up.
        wait_for(lambda: caught_up(lake, streams), "the writers catching up", 900, processes[0], lake.ingest_log)
        for stream, process in zip(streams, processes, strict=True):
            stop_cleanly(lake, process, [stream])
    finally:
        for process in processes:
            kill_group(process)
    log = lake.ingest_log(tail=50_000_000).splitlines()
    commits = [c for s in streams for c in lake.session.sql(
        f"select committed_at, summary from {get_stream(s).bronze_table}.snapshots").collect()]
    batches = sum(checkpoint_batches(lake.settings, s, "commits") - before[s] for s in streams)
    # Commit retries are routine and not logged (log4j2-spark.properties quiets Iceberg's Tasks);
    # a busy catalog or a conflict that reaches the log is one the retries did not absorb.
    contention = [line for line in log if CONTENTION.search(line)]
    failed = [line for line in log if " failed" in line]
    assert not contention and not failed, ["contention:", *contention[:5], "failed:", *failed[:5]]
    return {"writers": writers, "batches": batches, "bronze_commits": len(commits),
            "busy_or_conflict_log_lines": len(contention), "failed_batches": len(failed)}


# -- poison input ----------------------------------------------------------------------------------


def new_purchase_schema(lake: Lake) -> tuple[int, dict]:
    """A purchases schema version registered now: v2 plus a field no reader has seen."""
    schema = json.loads(SCHEMAS[2].text)
    schema["fields"].append({"name": "coupon_code", "type": ["null", "string"], "default": None})
    text = json.dumps(schema)
    return registry_for(lake.settings).register(SUBJECT, text), avro.parsed(text)


def send_new_purchase_schema(lake: Lake, burst: int, seed: int = 61) -> int:
    """``burst`` purchases in a schema version registered just now; how many were sent."""
    schema_id, parsed = new_purchase_schema(lake)
    rng = random.Random(seed)

    def burst_messages():
        now = datetime.now(UTC)
        for _ in range(burst):
            purchase = {**make_purchase(rng, now, 2), "coupon_code": rng.choice(["SPRING", "VIP", None])}
            yield key(purchase), avro.encode(purchase, schema_id, parsed), None, None
    report = produce_to_topic(lake.settings, TOPIC, burst_messages(), FaultRates(), progress=False)
    lake.add_report("purchases", report)
    return report.delivered


def poison(lake: Lake, events: int, burst: int, seed: int = 61) -> dict:
    """5% corrupt payloads, unknown schema ids and invalid records on three formats while the
    job streams, then a burst of a purchases schema registered mid-run: the job never stops."""
    rates = FaultRates(duplicate=0.02, corrupt=0.05, invalid=0.02, unknown_schema_id=0.02)
    streams = ["purchases", "user_events", "employees"]
    errors: list = []
    process = lake.ingest_process(streams, "--trigger", "1s")
    producers = lake.produce_in_background([(s, events, rates, seed + n, events / 20) for n, s in enumerate(streams)],
                                           errors)
    join(producers, errors)
    send_new_purchase_schema(lake, burst, seed)
    stop_cleanly(lake, process, streams)
    columns = lake.session.table("bronze.purchases").columns
    assert "coupon_code" in columns, columns
    with_coupon = lake.session.table("bronze.purchases").where("coupon_code is not null").count()
    assert with_coupon > burst // 2, with_coupon
    dead = {r.error_code: r.n for r in lake.session.sql(
        "select error_code, count(*) as n from bronze.dead_letters group by error_code").collect()}
    return {"burst_of_new_schema": burst, "burst_rows_with_the_new_column": with_coupon, "dead_letters": dead}


# -- the checkpoint disk full, then read-only ------------------------------------------------------------


def break_the_checkpoint_disk(lake: Lake, events: int, seed: int = 71) -> dict:
    """The checkpoints' disk fills up, then turns read-only (without root: loses its write
    permission) while the job streams: each time it stops with one clear error line, and once
    repaired a restart resumes without loss."""
    streams = ["employees", "customers"]
    errors: list = []
    producers = lake.produce_in_background(
        [("employees", events, FAULTS, seed, events / 40), ("customers", events // 20, FAULTS, seed, events / 800)],
        errors)
    seen = {}
    for name, breaks, repairs, expected in lake.disk.faults():
        process = lake.ingest_process(streams, "--trigger", "1s")
        committed = checkpoint_batches(lake.settings, "employees", "commits")
        wait_for(lambda c=committed: checkpoint_batches(lake.settings, "employees", "commits") > c,
                 "a batch before the fault", 240, process, lake.ingest_log)
        try:
            breaks()
            code = process.wait(timeout=240)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the job kept running with its checkpoint disk {name}\n{lake.ingest_log()}") from None
        finally:
            kill_group(process)  # only if still running (the fault did not stop it, or breaking failed)
            repairs()
        last = [line for line in lake.ingest_log(tail=20_000).splitlines() if line.strip()][-1]
        assert code == 1, lake.ingest_log()
        assert last.startswith("error: ") and expected in last and str(lake.settings.checkpoint_root) in last, last
        assert "Traceback" not in lake.ingest_log(tail=20_000).split("=== ")[-1]
        seen[name] = last
    join(producers, errors)
    process = lake.ingest_process(streams, "--trigger", "1s")
    stop_cleanly(lake, process, streams)
    return {"faults": list(seen), "error_lines": seen}
