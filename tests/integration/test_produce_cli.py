"""`lakehouse produce` as users run it: several processes, a duration, a rate cap, a manifest, a progress
bar on a terminal only."""

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios

import pytest

from producers.faults import FaultRates
from producers.run import produce
from tests.conftest import REPO_ROOT
from tests.integration.kafka_read import read_topic

pytestmark = pytest.mark.integration


def test_several_processes_share_the_count_and_send_distinct_events(kafka, settings):
    before = len(read_topic(kafka, "employees", missing_ok=True))
    report = produce(settings, "employees", count=5001, seed=8, processes=2, progress=False)
    assert (report.delivered, report.failed) == (5001, 0)
    new = read_topic(kafka, "employees")[before:] if before == 0 else None
    if new is not None:  # a fresh topic: every key (employee id) is distinct across processes
        assert len({m.key() for m in new}) == 5001


def test_duration_and_rate_cap(kafka, settings):
    report = produce(settings, "user_events", duration=2.0, rate=300, seed=9, progress=False)
    assert report.failed == 0
    # The cap: at most rate x elapsed time, plus one check interval (rate / 20 = 15 messages).
    assert 0 < report.delivered <= 300 * report.seconds + 15
    assert report.seconds < 2.0 + 5.0  # stopped once the duration was up (generous: a busy CI machine)


def test_cli_writes_a_manifest_and_refuses_bad_input(kafka, settings, tmp_path):
    env = {**os.environ, "LAKEHOUSE_HOME": str(settings.home), "LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS": kafka}
    manifest_path = tmp_path / "manifest.json"
    cli = [sys.executable, "-m", "lakehouse.commands.cli", "produce"]
    result = subprocess.run([*cli, "purchases", "--count", "2000", "--fault-unknown-schema-id", "0.02",
                             "--evolve-after", "0.5", "--seed", "4", "--manifest", str(manifest_path)],
                            capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    manifest = json.loads(manifest_path.read_text())
    # v2 from the middle on; a record given an unknown id instead is counted under that fault.
    assert manifest["produced"] == 2000 and 900 < manifest["faults"]["evolved"] <= 1000
    codes = {d["error_code"] for d in manifest["dead_letters"]}
    assert codes == {"UNKNOWN_SCHEMA_ID"} and manifest["faults"]["unknown_schema_id"] == len(manifest["dead_letters"])
    assert manifest["fault_rates"] == {**FaultRates().as_dict(), "unknown_schema_id": 0.02, "evolve_after": 0.5}

    for bad, message in [
        (["clicks", "--count", "1"], "unknown stream 'clicks'"),
        (["user_events", "--count", "10", "--fault-late", "2"], "fault rate late=2.0 is not within 0..1"),
        (["customers", "--count", "10", "--processes", "2"], "customers is produced by one process"),
    ]:
        result = subprocess.run([*cli, *bad], capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=60)
        assert result.returncode == 1
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], result.stderr


def test_cdc_key_space_is_configurable(kafka, tmp_path):
    from lakehouse.core.settings import Settings
    from producers.cdc.source import read_tables
    from producers.cdc.stream import source_path

    own = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS": kafka})
    report = produce(own, "accounts", count=300, seed=5, progress=False, key_space=40)
    assert report.failed == 0 and report.delivered >= 300
    keys = set(read_tables(source_path(own, "accounts"))["accounts"])
    assert keys and max(keys) <= 40
    with pytest.raises(Exception, match="applies to the CDC streams"):
        produce(own, "employees", count=1, key_space=40)


def _stderr_of_produce(env: dict, on_terminal: bool) -> str:
    """What `lakehouse produce` wrote to its standard error: a pseudo-terminal, or a pipe."""
    cli = [sys.executable, "-m", "lakehouse.commands.cli", "produce", "user_events", "--count", "20000", "--seed", "6"]
    if not on_terminal:
        result = subprocess.run(cli, capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=120)
        assert result.returncode == 0, result.stderr
        return result.stderr
    terminal, device = pty.openpty()
    fcntl.ioctl(device, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))  # rows, columns
    process = subprocess.Popen(cli, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=device, env=env,
                               cwd=REPO_ROOT)
    os.close(device)
    shown = b""
    try:
        while chunk := os.read(terminal, 65536):
            shown += chunk
    except OSError:  # EIO: the command exited and closed the terminal
        pass
    finally:
        os.close(terminal)
    assert process.wait(timeout=120) == 0, shown.decode(errors="replace")
    assert b"20,000 delivered" in process.stdout.read()
    process.stdout.close()
    return shown.decode(errors="replace")


def test_produce_draws_a_progress_bar_on_a_terminal_only(kafka, settings):
    env = {name: value for name, value in os.environ.items()
           if name not in ("CI", "NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")}
    env.update(LAKEHOUSE_HOME=str(settings.home), LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS=kafka, TERM="xterm-256color")
    bar = "produce user_events: delivered"
    drawn = _stderr_of_produce(env, on_terminal=True)
    assert bar in drawn and "\x1b[?25l" in drawn, drawn  # the description, and rich hiding the cursor
    for stderr in (_stderr_of_produce(env, on_terminal=False), _stderr_of_produce({**env, "CI": "1"}, True)):
        assert bar not in stderr and "\x1b[" not in stderr, stderr
