"""`lakehouse demo` as a user runs it (what `make demo` calls after setup), in its own state folder."""

import os
import re
import subprocess
from pathlib import Path

import pytest

from lakehouse.local_kafka import free_port
from lakehouse.preflight import port_is_free
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.integration


def processes_mentioning(text: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            command = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in command:
            found.append(f"{cmdline.parent.name}: {command[:120]}")
    return found


def test_demo_runs_the_chain_reports_it_and_stops_what_it_started(settings, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "jars").symlink_to(settings.jars_dir.resolve())
    port = free_port()
    env = {
        **os.environ,
        "LAKEHOUSE_HOME": str(home),
        "LAKEHOUSE_KAFKA_PORT": str(port),
        "DBT_TARGET_PATH": str(tmp_path / "target"),
        "DBT_LOG_PATH": str(tmp_path / "logs"),
    }
    lakehouse = str(Path(os.sys.executable).parent / "lakehouse")
    result = subprocess.run([lakehouse, "demo", "--events", "2000"],
                            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout

    rows = {m.group(1): int(m.group(2).replace(",", ""))
            for m in re.finditer(r"^\s+(\w+\.\w+)\s+([\d,]+) rows$", out, re.M)}
    assert rows["bronze.user_events"] > 0 and rows["silver.user_events"] > 0
    assert rows["gold.events_by_type_daily"] > 0
    dead = re.search(r"dead letters this run: ([\d,]+); unreadable messages produced: ([\d,]+) "
                     r"-> match, record for record", out)
    assert dead and dead.group(1) == dead.group(2) and int(dead.group(1)) > 0
    assert rows["bronze.dead_letters"] == int(dead.group(1))
    delivered = int(re.search(r"delivered ([\d,]+);", out).group(1).replace(",", ""))
    assert delivered > 2000  # the demo's faults re-send some events
    assert rows["bronze.user_events"] + rows["bronze.dead_letters"] == delivered
    assert "quality: PASSED" in out
    report = re.search(r"report: (\S+)", out)
    assert report and Path(report.group(1)).is_file()

    # Nothing it started is still running: broker down, port free, no JVM on this state folder.
    assert port_is_free(port)
    assert not (home / "kafka" / "broker.pid").exists()
    assert processes_mentioning(str(home)) == []
