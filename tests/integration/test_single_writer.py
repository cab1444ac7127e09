"""One writer per stream (ingestion/single_writer.py, ARCHITECTURE §8), with real drivers.

A `lakehouse ingest` job streams; a second one started on the same stream must be refused with
one `error:` line naming the running one: from the same state folder by the folder's lock
(before Spark starts), from another state folder sharing the catalog and the checkpoints (as
drivers on two machines of a cluster do) by the lease in the bronze table's properties, as soon
as it sees the running job renew it. The first killed with SIGKILL, the second takes the stream
over at once (the holder's process is gone) and finishes it: every offset of the topic once in
bronze or the dead letters. A job whose lease another job took over stops instead of writing
beside it. The fence: a driver stopped (SIGSTOP) inside its append, its lease taken over once it
stayed unchanged for the lease time by the taker's clock, the taker's batches committed, then
resumed (SIGCONT): its commit is refused by the catalog, one line, every offset once.

The lease times are a few seconds here (LAKEHOUSE_WRITER_LEASE_SECONDS, ..._RENEW_SECONDS).

The catalog is JDBC (SQLite) in the default run; the same drivers on the Iceberg REST catalog
of the cluster profile are in the `cluster` run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import yaml

from ingestion import bronze, job, single_writer
from lakehouse.contracts.protobuf import SCHEMAS_DIR
from lakehouse.contracts.streams import get_stream
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings
from producers import employees
from producers.delivery import produce_to_topic
from producers.faults import FaultRates
from tests.integration.own_lakehouse import cli_env, lakehouse_fixture, own_lakehouse
from tests.integration.processes import process_group, resume
from tests.support.exactly_once import assert_every_offset_once

pytestmark = pytest.mark.integration

FAULTS = FaultRates(duplicate=0.0, corrupt=0.01, invalid=0.01)
MESSAGES = 6_000
LEASE = {"LAKEHOUSE_WRITER_LEASE_SECONDS": "6", "LAKEHOUSE_WRITER_RENEW_SECONDS": "2"}


def write_pipeline(path: Path, stream: str) -> None:
    path.write_text(yaml.safe_dump({"schema_dir": str(SCHEMAS_DIR), "streams": {stream: {
        "format": "protobuf", "schema": "Employee.proto", "message": employees.MESSAGE_NAME,
        "event_time": "start_date", "identity": ["id", "start_date"]}}}))


def lakehouse_command() -> str:
    return str(Path(sys.executable).with_name("lakehouse"))


def committed_batches(checkpoint: Path) -> int:
    folder = checkpoint / "commits"
    return sum(1 for p in folder.glob("[0-9]*")) if folder.is_dir() else 0


def wait_for(condition, what: str, process: subprocess.Popen, log: Path, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert process.poll() is None, f"the job stopped ({process.returncode}) before {what}:\n" \
                                       f"{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {what} in {timeout_s:.0f} s:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]


def second_job_elsewhere(own, env: dict, home: Path) -> dict:
    """A driver of another machine: its own state folder, the same catalog, warehouse, broker
    and checkpoints (on object storage in a cluster; the same folder here)."""
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "jars").exists():
        (home / "jars").symlink_to(own.jars_dir.resolve())
    return {**env, "LAKEHOUSE_HOME": str(home), "LAKEHOUSE_CHECKPOINT_ROOT": str(own.checkpoint_root)}


def two_drivers(lake, tmp_path: Path, stream: str) -> None:
    own, session, _ = lake
    pipeline = tmp_path / "pipeline.yml"
    write_pipeline(pipeline, stream)
    report = produce_to_topic(own, stream, employees.messages(MESSAGES, FAULTS, 7), FAULTS,
                              total=MESSAGES, progress=False)
    assert report.failed == 0
    env = {**cli_env(own), "LAKEHOUSE_PIPELINE_FILE": str(pipeline), **LEASE}
    elsewhere = second_job_elsewhere(own, env, tmp_path / "other-machine")
    checkpoint = own.checkpoint_root / f"bronze_{stream}"
    log = tmp_path / "first.log"
    first = subprocess.Popen([lakehouse_command(), "ingest", stream, "--trigger", "1s",
                              "--max-offsets-per-trigger", "500"],
                             env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: committed_batches(checkpoint) >= 1, "a committed batch", first, log)
        batches_before = committed_batches(checkpoint)

        # the same state folder: refused by its lock, before Spark starts (one line, nothing else)
        same = subprocess.run([lakehouse_command(), "ingest", stream, "--available-now"], env=env,
                              capture_output=True, text=True, timeout=300)
        assert same.returncode == 1, same.stdout + same.stderr
        output = (same.stdout + same.stderr).strip().splitlines()
        assert len(output) == 1, output
        assert output[0].startswith(f"error: stream {stream} is already being ingested from this state folder")
        assert f"pid {first.pid} on {socket.gethostname()}" in output[0]

        # another state folder on the same catalog and checkpoints: refused by the catalog's lease,
        # once it saw the running job renew it (it watches the lease on its own clock)
        other = subprocess.run([lakehouse_command(), "ingest", stream, "--available-now"], env=elsewhere,
                               capture_output=True, text=True, timeout=300)
        assert other.returncode == 1, other.stdout + other.stderr
        (line,) = error_lines(other.stdout + other.stderr)
        assert line.startswith(f"error: stream {stream} is already being ingested by pid {first.pid} "
                               f"on {socket.gethostname()} (state folder {own.home},"), line
        assert "its lease was renewed" in line, line
        assert "watching it; taken over if not renewed for 6 s" in other.stdout + other.stderr
        assert first.poll() is None, "the running job stopped"
        # and the running job goes on: batches after the refusals
        wait_for(lambda: committed_batches(checkpoint) > batches_before + 1, "batches after the refusals", first, log)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)  # a crash: its lease stays behind
        first.wait()

    # the holder gone (same host, its process dead): the other machine's job takes over at once
    taken = subprocess.run([lakehouse_command(), "ingest", stream, "--available-now"], env=elsewhere,
                           capture_output=True, text=True, timeout=600)
    assert taken.returncode == 0, (taken.stdout + taken.stderr)[-3000:]
    assert "taking over the lease of a job that is gone" in taken.stdout + taken.stderr
    assert_every_offset_once(session, own, stream, report.delivered)
    lease = single_writer.parse_lease(
        session.sql(f"show tblproperties bronze.{stream} ('{single_writer.LEASE_PROPERTY}')").first().value)
    assert lease is None, "the job that stopped left its lease behind"


lake = lakehouse_fixture("single-writer")


def test_a_second_driver_on_a_running_stream_is_refused_and_takes_over_when_it_is_gone(lake, tmp_path):
    two_drivers(lake, tmp_path, "single_writer_jdbc")


@pytest.mark.cluster
def test_two_drivers_on_the_rest_catalog_of_a_cluster(spark, settings, tmp_path_factory, tmp_path):
    with own_lakehouse(spark, settings, tmp_path_factory, "single-writer-rest", rest=True) as rest_lake:
        two_drivers(rest_lake, tmp_path, "single_writer_rest")


def test_a_job_whose_lease_another_job_took_over_stops(lake, tmp_path, monkeypatch):
    """In this process: after the first committed batch, a lease of a job on another host is
    written over this job's, as a job that found it lapsed would; the job stops with one line
    and writes no batch after it learned of it."""
    own, session, _ = lake
    stream = "single_writer_lost"
    pipeline = tmp_path / "pipeline.yml"
    write_pipeline(pipeline, stream)
    monkeypatch.setenv("LAKEHOUSE_PIPELINE_FILE", str(pipeline))
    report = produce_to_topic(own, stream, employees.messages(MESSAGES, FAULTS, 8), FAULTS,
                              total=MESSAGES, progress=False)
    assert report.failed == 0
    own = dataclasses.replace(own, writer_renew_seconds=0.0)  # every batch reads its lease
    checkpoint = own.checkpoint_root / f"bronze_{stream}"
    spec = get_stream(stream)
    taken_over = threading.Event()

    def take_over():
        deadline = time.monotonic() + 300
        while committed_batches(checkpoint) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        leases = single_writer.CatalogLeases(session, own, [spec])
        stranger = single_writer.Lease("someone-else", "other-host", 4242, 0.0, "/elsewhere", "then", time.time())
        # Compare-and-swap: a batch the job commits between the read and the write refuses the
        # write (the table's metadata moved on); read again, as a job taking over would.
        for _ in range(20):
            operations, base, _, _ = leases._read(spec.bronze_table)
            if leases._write(operations, base, stranger):
                taken_over.set()
                return

    thread = threading.Thread(target=take_over, daemon=True)
    thread.start()
    with pytest.raises(LakehouseError, match=r"its lease is held by pid 4242 on other-host .*, not by this job"):
        job.run(session, own, [stream], available_now=True, max_offsets_per_trigger=200)
    thread.join(timeout=60)
    assert taken_over.is_set()
    written = session.table(f"bronze.{stream}").count()  # good rows and dead
    assert 0 < written < report.delivered, "the job went on after its lease was taken over"
    value = session.sql(f"show tblproperties bronze.{stream} ('{single_writer.LEASE_PROPERTY}')").first().value
    assert json.loads(value)["holder"] == "someone-else", "the job that lost its lease released the other's"


def test_a_driver_stalled_inside_its_append_cannot_commit_after_another_took_the_stream_over(lake, tmp_path):
    """The fence (ARCHITECTURE §8): the first job stops itself with SIGSTOP inside the catalog's
    commit of its first batch (the fault point: data files written, the commit's base read, the
    lease still its own). A job of another state folder watches its lease stay unchanged for the
    lease time (the holder alive but stalled, on this host) and takes the stream over: it replays
    that batch and ingests the topic. SIGCONT: the first job's commit, refused by the catalog,
    ends it with one line; every offset once in bronze."""
    stalled_driver(lake, tmp_path, "single_writer_fence")


@pytest.mark.cluster
def test_the_rest_catalog_server_fences_a_stalled_driver(spark, settings, tmp_path_factory, tmp_path):
    """The same on the REST catalog, whose server commits through the fence. The driver stops
    right before its append (its commit runs in the server); after the take-over, an append that
    names its lease, made through the REST catalog, is refused by the server (HTTP 400). Resumed,
    the driver stops with one line: its commit refused, or its renewal finding the lease lost (a
    job on a REST catalog stops its queries at once then, cancelling the batch's write)."""
    with own_lakehouse(spark, settings, tmp_path_factory, "single-writer-fence-rest", rest=True) as rest_lake:
        stalled_driver(rest_lake, tmp_path, "single_writer_fence_rest", rest=True)


def stalled_driver(lake, tmp_path: Path, stream: str, rest: bool = False) -> None:
    own, session, _ = lake
    pipeline = tmp_path / "pipeline.yml"
    write_pipeline(pipeline, stream)
    messages = 2_000
    report = produce_to_topic(own, stream, employees.messages(messages, FAULTS, 9), FAULTS,
                              total=messages, progress=False)
    assert report.failed == 0
    env = {**cli_env(own), "LAKEHOUSE_PIPELINE_FILE": str(pipeline), **LEASE}
    env.pop("LAKEHOUSE_FAULT_POINT", None)
    elsewhere = second_job_elsewhere(own, env, tmp_path / "other-machine")
    log = tmp_path / "first.log"
    command = [lakehouse_command(), "ingest", stream, "--trigger", "1s", "--max-offsets-per-trigger", "500"]
    with process_group(command, {**env, "LAKEHOUSE_FAULT_POINT": job.STOP_INSIDE_APPEND_COMMIT}, log) as first:
        wait_for(lambda: psutil.Process(first.pid).status() == psutil.STATUS_STOPPED,
                 "the driver stopped in its append", first, log)
        assert "fault point stop-inside-append-commit" in log.read_text()
        stalled = single_writer.parse_lease(
            session.sql(f"show tblproperties bronze.{stream} ('{single_writer.LEASE_PROPERTY}')").first().value)

        taken = subprocess.run([lakehouse_command(), "ingest", stream, "--available-now"], env=elsewhere,
                               capture_output=True, text=True, timeout=600)
        output = taken.stdout + taken.stderr
        assert taken.returncode == 0, output[-3000:]
        assert f"its lease is held by pid {first.pid} on {socket.gethostname()}" in output
        assert "watching it; taken over if not renewed for 6 s (by this job's clock)" in output
        assert f"taking over the lease of pid {first.pid} on {socket.gethostname()}" in output
        assert_every_offset_once(session, own, stream, report.delivered)
        if rest:  # the server's own check, without a race: an append under the stalled job's lease
            with pytest.raises(Exception, match=single_writer.FENCE_REFUSED):
                (session.table(f"bronze.{stream}").limit(1).writeTo(f"bronze.{stream}")
                 .option(f"snapshot-property.{bronze.LEASE_HOLDER_PROPERTY}", stalled.holder).append())

        resume(first)
    assert_every_offset_once(session, own, stream, report.delivered)  # the stalled batch did not land
    output = log.read_text()
    assert first.returncode == 1, output[-3000:]
    (line,) = error_lines(output)
    refused = f"error: query bronze_{stream} stopped: stream {stream} batch 0: commit refused, its lease is held " \
              "by no job, not by this job"
    renewal = f"error: stream {stream}: its lease is held by no job, not by this job"
    assert line.startswith(refused) or rest and line.startswith(renewal), line


def test_a_stalled_holder_lapses_on_the_takers_clock_and_a_renewing_one_is_refused(lake, tmp_path, monkeypatch):
    """The lapse (ARCHITECTURE §8), never by comparing clocks: a real job holds the stream; a taker
    of another state folder on this host (this test's process, through the job's own lease code)
    is refused as soon as it sees the job renew its lease. The job stopped with SIGSTOP (alive,
    not renewing), a taker watches the lease stay unchanged for the lease time on its own clock
    and takes it over; resumed, the job finds its lease lost and stops with one line."""
    own, session, _ = lake
    stream = "single_writer_lapse"
    pipeline = tmp_path / "pipeline.yml"
    write_pipeline(pipeline, stream)
    report = produce_to_topic(own, stream, employees.messages(1_000, FAULTS, 10), FAULTS, total=1_000,
                              progress=False)
    assert report.failed == 0
    env = {**cli_env(own), "LAKEHOUSE_PIPELINE_FILE": str(pipeline), **LEASE}
    env.pop("LAKEHOUSE_FAULT_POINT", None)
    checkpoint = own.checkpoint_root / f"bronze_{stream}"
    log = tmp_path / "holder.log"
    # another state folder on this host, on the same catalog, with the lease times of LEASE
    elsewhere = Settings.from_env({**env, "LAKEHOUSE_HOME": str(tmp_path / "other-machine")})
    monkeypatch.setenv("LAKEHOUSE_PIPELINE_FILE", str(pipeline))
    spec = get_stream(stream)
    with process_group([lakehouse_command(), "ingest", stream, "--trigger", "1s"], env, log) as holder:
        wait_for(lambda: committed_batches(checkpoint) >= 1, "a committed batch", holder, log)
        # renewing: refused at the first renewal it sees, well within the lease time
        started = time.monotonic()
        with pytest.raises(LakehouseError, match=rf"^stream {stream} is already being ingested by pid {holder.pid} "
                                                 rf"on {socket.gethostname()} .*: its lease was renewed \d+ s after"):
            single_writer.CatalogLeases(session, elsewhere, [spec]).acquire()
        assert time.monotonic() - started < 6.0, "refused only after the lease time: no renewal was seen"

        os.killpg(holder.pid, signal.SIGSTOP)  # alive, on this host, and renewing no more
        taker = single_writer.CatalogLeases(session, elsewhere, [spec])
        started = time.monotonic()
        taker.acquire()
        assert time.monotonic() - started >= 6.0, "taken over before the lease time"
        value = session.sql(f"show tblproperties bronze.{stream} ('{single_writer.LEASE_PROPERTY}')").first().value
        assert single_writer.parse_lease(value).holder == taker.holder

        resume(holder)
    output = log.read_text()
    assert holder.returncode == 1, output[-3000:]
    (line,) = error_lines(output)
    assert f"its lease is held by pid {os.getpid()} on {socket.gethostname()}" in line, line
    taker.release()
