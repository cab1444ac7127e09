"""Whether a writer lease's holder may still run (ingestion/single_writer.py): the rule that lets
a job take over a stream at once after a crash on this host, and only after the lease lapsed
from another host."""

import json
import os
import socket
import subprocess
import sys
import time

import psutil

from ingestion.single_writer import LEASE_SECONDS, Lease, is_live, parse_lease


def lease(host: str, pid: int, process_started: float, renewed_at: float) -> Lease:
    return Lease("holder", host, pid, process_started, "/state", "2026-12-01T00:00:00+00:00", renewed_at)


def test_a_lease_of_this_host_lives_as_long_as_its_process():
    me = psutil.Process()
    now = time.time()
    assert is_live(lease(socket.gethostname(), me.pid, me.create_time(), now - 10 * LEASE_SECONDS), now)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    started = psutil.Process(gone.pid).create_time()
    gone.wait()
    # the process is gone: the lease is lapsed however fresh it is (a `kill -9`, restarted at once)
    assert not is_live(lease(socket.gethostname(), gone.pid, started, now), now)
    # a pid in use again by another process is not the holder
    assert not is_live(lease(socket.gethostname(), me.pid, me.create_time() - 100, now), now)


def test_a_lease_of_another_host_lives_until_it_is_not_renewed_for_the_lease_time():
    now = time.time()
    assert is_live(lease("elsewhere", os.getpid(), 0.0, now - LEASE_SECONDS + 5), now)
    assert not is_live(lease("elsewhere", os.getpid(), 0.0, now - LEASE_SECONDS - 1), now)


def test_a_lease_value_round_trips_and_an_unreadable_one_is_free(caplog):
    value = lease("h", 12, 3.5, 100.0)
    assert parse_lease(json.dumps(value.__dict__)) == value
    assert parse_lease(None) is None and parse_lease("") is None
    assert not caplog.records, "no lease is not an unreadable one"
    for unreadable in ("not json", "{}", json.dumps({"holder": "x"}), "[1, 2]"):
        caplog.clear()
        assert parse_lease(unreadable) is None
        assert [r.levelname for r in caplog.records] == ["WARNING"], unreadable
        assert "cannot be read" in caplog.records[0].getMessage()
    assert "pid 12 on h (state folder /state" in value.text()
