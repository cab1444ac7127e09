"""Processes of the integration tests: background JVMs (Spark master/worker, Thrift Server, REST
catalog, S3 store, jobs) started with their output in a log, waited for, always stopped; and
commands run with their clock moved (`faketime`)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def running(command: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    """The process, stopped at the end of the block (SIGTERM, then SIGKILL after 60 s)."""
    with open(log, "w") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def process_group(command: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    """A `lakehouse` command (a job and its JVM) in a process group of its own, its output in
    ``log``; the group killed at the end of the block unless it ended (`stop_cleanly`)."""
    with open(log, "wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            yield process
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)


def stop_cleanly(process: subprocess.Popen, log: Path) -> None:
    """SIGTERM, as an operator stops a job, and its exit status 0 within two minutes."""
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=120) == 0, log.read_text()[-3000:]


def resume(process: subprocess.Popen, timeout_s: float = 300) -> int:
    """SIGCONT to a process group stopped on purpose (SIGSTOP, a fault point), and its exit status."""
    os.killpg(process.pid, signal.SIGCONT)
    return process.wait(timeout=timeout_s)


def wait_until(check: Callable[[], object], what: str, log: Path, timeout_s: float = 180.0,
               process: subprocess.Popen | None = None):
    """The first truthy value of ``check``; fails with the log's tail on timeout or when
    ``process`` exits first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if process is not None and process.poll() is not None:
            pytest.fail(f"{what} exited (code {process.returncode}); log tail:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)
    pytest.fail(f"{what} not ready after {timeout_s:.0f}s; log tail:\n{log.read_text()[-3000:]}")


def http_answers(url: str) -> bool:
    """Whether an HTTP server answers there at all (an error status is an answer)."""
    try:
        urllib.request.urlopen(url, timeout=2).close()
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True


def faketime(offset_seconds: int) -> list[str]:
    """The command prefix that runs a process with its clock moved by `offset_seconds` (Debian's
    faketime, libfaketime preloaded into the process and its children: the JVM too)."""
    path = shutil.which("faketime")
    if path is None:
        pytest.fail("faketime is not installed: `make faketime` installs it (Debian package faketime)")
    return [path, "-f", f"{offset_seconds:+d}s"]
