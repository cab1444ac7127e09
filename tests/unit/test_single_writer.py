"""A writer lease's holder (ingestion/single_writer.py): a holder of this host that is gone is
known gone at once (a `kill -9`, taken over by the next job); no other holder is judged by a
clock of another host (a taker watches it on its own clock: tests/integration/test_single_writer.py).
`lakehouse status`'s estimate, which reads once, and the lease's value, which the catalog's fence
reads in Java."""

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

from ingestion.single_writer import FENCE_REFUSED, Lease, holder_gone, looks_live, parse_lease

LEASE_SECONDS = 120.0
FENCE_SOURCE = Path(__file__).parents[2] / "jvm/catalog/src/main/java/io/github/lakehouse/catalog/WriterFence.java"


def lease(host: str, pid: int, process_started: float, renewed_at: float) -> Lease:
    return Lease("holder", host, pid, process_started, "/state", "2026-12-01T00:00:00+00:00", renewed_at)


def test_a_holder_of_this_host_is_gone_when_its_process_is():
    me = psutil.Process()
    assert not holder_gone(lease(socket.gethostname(), me.pid, me.create_time(), 0.0))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    started = psutil.Process(gone.pid).create_time()
    gone.wait()
    assert holder_gone(lease(socket.gethostname(), gone.pid, started, time.time()))
    # a pid in use again by another process is not the holder
    assert holder_gone(lease(socket.gethostname(), me.pid, me.create_time() - 100, time.time()))
    # of another host: never known gone (however old its renewal looks): it is watched instead
    assert not holder_gone(lease("elsewhere", gone.pid, started, 0.0))


def test_status_estimates_a_lease_of_another_host_by_its_renewal():
    now = time.time()
    assert looks_live(lease("elsewhere", os.getpid(), 0.0, now - LEASE_SECONDS + 5), now, LEASE_SECONDS)
    assert not looks_live(lease("elsewhere", os.getpid(), 0.0, now - LEASE_SECONDS - 1), now, LEASE_SECONDS)
    me = psutil.Process()
    assert looks_live(lease(socket.gethostname(), me.pid, me.create_time(), now - 10 * LEASE_SECONDS), now,
                      LEASE_SECONDS)


def test_a_lease_value_round_trips_and_an_unreadable_one_is_free(caplog):
    value = lease("h", 12, 3.5, 100.0)
    assert parse_lease(value.value()) == value
    assert parse_lease(None) is None and parse_lease("") is None
    assert not caplog.records, "no lease is not an unreadable one"
    for unreadable in ("not json", "{}", json.dumps({"holder": "x"}), "[1, 2]"):
        caplog.clear()
        assert parse_lease(unreadable) is None
        assert [r.levelname for r in caplog.records] == ["WARNING"], unreadable
        assert "cannot be read" in caplog.records[0].getMessage()
    assert value.text() == "pid 12 on h (state folder /state, started 2026-12-01T00:00:00+00:00)"
    # a lease of the version before the renewal count reads as renewal 0
    older = {k: v for k, v in value.__dict__.items() if k != "renewal"}
    assert parse_lease(json.dumps(older)) == value


def test_the_fence_reads_the_holder_the_job_writes_and_the_job_knows_its_refusal():
    """The Java fence finds the holder with a pattern (WriterFence.HOLDER); the value the job writes
    must match it, and the refusal's words must be the ones the job looks for."""
    source = FENCE_SOURCE.read_text()
    pattern = re.search(r'Pattern\.compile\("(.*)"\);', source).group(1)
    java_regex = pattern.encode().decode("unicode_escape")  # the Java string literal's text
    value = Lease("4f1c", "h", 1, 0.0, "/s", "then", 1.0, 3).value()
    assert re.search(java_regex, value).group(1) == "4f1c"
    assert f'REFUSED = "{FENCE_REFUSED}"' in source
