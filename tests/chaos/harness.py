"""What every chaos scenario shares: a lakehouse of its own, producers with faults on, the
ingestion job as a separate process, dbt as a separate process (or in the test's, `dbt_in_process`),
and the invariants.

The invariants, checked after each scenario (`check_invariants`):
- for every topic partition, bronze plus dead letters hold every produced offset exactly once,
  their total is what the producers had acknowledged, and the dead letters are exactly the
  records the producers made unreadable, with the reason the fault calls for;
- after `dbt run`, every CDC mirror equals its simulator's source database, row for row;
- the quality gates (every Great Expectations suite of the project) pass: no critical failure.

Each check returns counts; `record` prints them and, when LAKEHOUSE_CHAOS_RESULTS names a
file, appends them to it as one JSON line (docs/reliability.md quotes those figures).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ingestion import job
from ingestion.invariant import check_every_offset_once, offset_ranges
from lakehouse.contracts.streams import get_stream
from lakehouse.core.kafka_admin import end_offsets
from lakehouse.core.settings import Settings
from producers.delivery import DeliveryReport
from producers.faults import FaultRates
from producers.run import produce
from tests.integration.own_lakehouse import cli_env

EVENT_STREAMS = ("employees", "purchases", "user_events")
CDC_STREAMS = ("customers", "accounts")
STREAMS = EVENT_STREAMS + CDC_STREAMS
# Faults on in every scenario: every kind the producers inject, a few percent of the records.
FAULTS = FaultRates(duplicate=0.02, late=0.01, out_of_order=0.03, corrupt=0.01, invalid=0.01, unknown_schema_id=0.005)
# Small key space: updates and deletes keep hitting the same keys, so order matters.
KEY_SPACE = 150


def lakehouse_command() -> str:
    return str(Path(sys.executable).with_name("lakehouse"))


@dataclass
class Lake:
    """A chaos scenario's own lakehouse: settings, a Spark session on its catalog, dbt folder."""

    settings: Settings
    session: object
    dbt_target: Path
    logs: Path
    disk: object = None  # the checkpoints' disk (tests/chaos/conftest.py CheckpointDisk)
    # `dbt` in the test's process (tests/integration/dbt_in_process.py: the same project and SQL
    # on the warm Spark session) instead of a `lakehouse dbt` process with a cold JVM each: the
    # short form, whose claims are about what dbt does, not how it starts; a dbt run a scenario
    # kills is a process of its own either way
    dbt_in_process: bool = False
    ledger: dict[str, DeliveryReport] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def env(self, **extra: str) -> dict[str, str]:
        return {**cli_env(self.settings), "DBT_LOG_PATH": str(self.dbt_target / "logs"), **extra}

    # -- producing ---------------------------------------------------------------------------

    def produce(self, stream: str, count: int, faults: FaultRates = FAULTS, seed: int = 1,
                rate: float | None = None) -> DeliveryReport:
        """Produce with faults; every delivery report goes into the ledger the invariants use."""
        options = {"key_space": KEY_SPACE} if stream in CDC_STREAMS else {}
        report = produce(self.settings, stream, count, rate=rate, faults=faults, seed=seed, progress=False, **options)
        self.add_report(stream, report)
        return report

    def add_report(self, stream: str, report: DeliveryReport) -> None:
        with self._lock:
            self.ledger[stream] = self.ledger[stream].merge(report) if stream in self.ledger else report

    def produce_in_background(self, plan: list[tuple], errors: list) -> list[threading.Thread]:
        """One thread per (stream, count, faults, seed, rate); failures are collected in ``errors``."""
        def one(stream, count, faults, seed, rate):
            try:
                self.produce(stream, count, faults, seed, rate)
            except Exception as exc:  # noqa: BLE001 - the scenario asserts errors is empty
                errors.append(f"{stream}: {exc!r}")
        threads = [threading.Thread(target=one, args=args, daemon=True) for args in plan]
        for thread in threads:
            thread.start()
        return threads

    def baseline(self, events: int = 1500, changes: int = 150, seed: int = 1) -> None:
        """A little of every stream, ingested, so every model and every quality suite has its
        tables whichever streams a scenario then runs (dbt fails on a missing bronze table)."""
        for stream in STREAMS:
            self.produce(stream, changes if stream in CDC_STREAMS else events, seed=seed)
        self.drain()
        self.dbt("seed")  # the gold models' reference data

    # -- ingestion and dbt ---------------------------------------------------------------------

    def ingest_process(self, streams: list[str], *options: str, env: dict | None = None) -> subprocess.Popen:
        """`lakehouse ingest` in its own process group (its Python driver and Spark JVM)."""
        with open(self.logs / "ingest.log", "ab") as log:  # the process keeps its own copy of the handle
            log.write(f"\n=== {datetime.now(UTC):%H:%M:%S} ingest {' '.join(streams)} {' '.join(options)}\n".encode())
            log.flush()
            return subprocess.Popen([lakehouse_command(), "ingest", *streams, *options], env=env or self.env(),
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def ingest_log(self, tail: int = 4000) -> str:
        path = self.logs / "ingest.log"
        return path.read_text(errors="replace")[-tail:] if path.exists() else ""

    def drain(self, streams: list[str] | None = None) -> None:
        """Read every topic to its end, in this process's Spark session (available-now)."""
        job.run(self.session, self.settings, list(streams or self.ledger), available_now=True)

    def dbt(self, *args: str) -> None:
        """`lakehouse dbt <args>` as a user runs it (it takes the lock maintenance respects), or
        the same in this process (``dbt_in_process``, the same lock); raises if it fails."""
        if self.dbt_in_process:
            from tests.integration.dbt_in_process import run_dbt

            run_dbt(self.settings, list(args), target_dir=self.dbt_target)
            return
        result = subprocess.run([lakehouse_command(), "dbt", *args], env=self.env(DBT_TARGET_PATH=str(self.dbt_target)),
                                capture_output=True, text=True)
        assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]


def kill_group(process: subprocess.Popen) -> bool:
    """SIGKILL a process group; whether it was still running."""
    alive = process.poll() is None
    if alive:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    return alive


def checkpoint_batches(settings: Settings, stream: str, kind: str = "offsets") -> int:
    folder = Path(job.checkpoint_location(settings, get_stream(stream))) / kind
    try:
        return sum(1 for p in folder.iterdir() if p.name.isdigit())
    except OSError:
        return 0


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 180, process=None, log=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"{what}: the process exited ({process.returncode})\n{log()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f}s\n{log()}")
        time.sleep(0.2)


# -- the invariants -------------------------------------------------------------------------------


def assert_every_offset_once(lake: Lake, stream: str) -> dict:
    """The stream's bronze table holds each offset of each partition exactly once, good or dead,
    nothing outside the topic's offsets, and the dead rows are the injected faults; counts."""
    spec = get_stream(stream)
    session, report = lake.session, lake.ledger[stream]
    assert report.failed == 0, f"{stream}: the producers could not deliver {report.failed}: {report.errors}"
    check = check_every_offset_once(session, spec, offset_ranges({}, end_offsets(lake.settings, spec.topic)),
                                   settings=lake.settings)
    assert check.holds, f"{stream}: {check.describe()}"
    bronze_rows = session.table(spec.bronze_table).where("_error_code is null").count()
    dead = {(r._kafka_partition, r._kafka_offset): r._error_code for r in session.table(spec.bronze_table)
            .where("_error_code is not null").select("_kafka_partition", "_kafka_offset", "_error_code").collect()}
    assert (bronze_rows, len(dead)) == (check.bronze, check.dead_letters), \
        f"{stream}: {bronze_rows - check.bronze} bronze rows and {len(dead) - check.dead_letters} dead letters " \
        "outside the topic's offsets (or replayed)"
    assert check.expected == report.delivered, \
        f"{stream}: the topic holds {check.expected} records, the producers had {report.delivered} acknowledged"
    expected = {(d["partition"], d["offset"]): d["error_code"] for d in report.manifest()["dead_letters"]}
    assert dead == expected, (f"{stream}: dead letters differ from the injected faults: "
                              f"{len(dead.keys() - expected.keys())} unexpected, {len(expected.keys() - dead.keys())} "
                              f"missing, {sum(dead[k] != expected[k] for k in dead.keys() & expected.keys())} "
                              "with another reason")
    return {"produced": report.delivered, "bronze": check.bronze, "dead_letters": check.dead_letters}


def assert_offsets(lake: Lake) -> dict:
    return {stream: assert_every_offset_once(lake, stream) for stream in sorted(lake.ledger)}


def check_invariants(lake: Lake, scenario: str, facts: dict | None = None) -> dict:
    """Drain, then every invariant; the counts, recorded (see the module docstring)."""
    from expectations.mirror import check_mirror
    from expectations.runner import format_summary, run_quality
    from producers.cdc.stream import simulator_source, simulator_sources

    lake.drain()
    counts = {"offsets": assert_offsets(lake)}
    lake.dbt("run")
    mirrors = {}
    for stream in CDC_STREAMS:
        if stream in lake.ledger:
            check = check_mirror(lake.session, simulator_source(lake.settings, stream))
            assert check.equal, f"silver.{stream} differs from its source database: {check}"
            mirrors[stream] = check.mirror_rows
    counts["mirror_rows_equal_to_source"] = mirrors
    report = run_quality(lake.session, lake.settings, sources=simulator_sources(lake.settings))
    assert report.passed, format_summary(report)
    counts["quality"] = {"suites": len(report.suites), "critical_failures": report.critical_failures,
                         "warning_failures": report.warning_failures}
    record(scenario, {**(facts or {}), **counts})
    return counts


def record(scenario: str, figures: dict) -> None:
    line = json.dumps({"scenario": scenario, "at": datetime.now(UTC).isoformat(timespec="seconds"), **figures})
    print(f"CHAOS {line}")
    target = os.environ.get("LAKEHOUSE_CHAOS_RESULTS")
    if target:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        with open(target, "a") as out:
            out.write(line + "\n")
