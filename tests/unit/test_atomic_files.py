"""Files others read are replaced whole or not at all (lakehouse/core/files.py): the fault
manifest, the broker's server.properties and the maintenance log.

A write interrupted half-way is made real, not mocked: the writer runs in a child process
whose file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) stops a file growing past a few hundred
bytes, as a full disk would, so the write fails with EFBIG after part of the content went out.
The previous content must survive byte for byte, with no temporary file left beside it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lakehouse.core import files
from lakehouse.core.local_kafka import BrokerPaths
from lakehouse.operations import maintenance
from tests.conftest import REPO_ROOT

OLD = "the previous content\n"
LIMIT = 200  # bytes: more than OLD, less than any new content below


def write_under_size_limit(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a child whose files cannot grow past LIMIT bytes (a full disk, in effect)."""
    script = textwrap.dedent(f"""\
        import resource, signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, ({LIMIT}, resource.RLIM_INFINITY))
    """) + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-B", "-c", script], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120)


def assert_untouched(path: Path, result: subprocess.CompletedProcess) -> None:
    assert result.returncode != 0, "the write was expected to fail"
    assert "File too large" in result.stderr or "EFBIG" in result.stderr, result.stderr[-2000:]
    assert path.read_text() == OLD
    assert sorted(p.name for p in path.parent.iterdir()) == sorted(
        p for p in [path.name, f".{path.name}.lock"] if (path.parent / p).exists())


def test_an_interrupted_fault_manifest_leaves_the_previous_one(tmp_path):
    path = tmp_path / "manifest.json"
    path.write_text(OLD)
    result = write_under_size_limit(f"""
        from lakehouse.commands.cli import write_manifest
        write_manifest({str(path)!r}, [{{"stream": "purchases", "dead_letters": [[0, n] for n in range(500)]}}])
    """)
    assert_untouched(path, result)


def test_an_interrupted_server_properties_leaves_the_previous_one(tmp_path):
    paths = BrokerPaths(tmp_path)
    paths.config.write_text(OLD)
    result = write_under_size_limit(f"""
        from pathlib import Path
        from lakehouse.core.local_kafka import BrokerPaths, write_configs
        write_configs(BrokerPaths(Path({str(tmp_path)!r})), 9092, 9093)
    """)
    assert_untouched(paths.config, result)


def test_an_interrupted_maintenance_log_append_leaves_the_previous_log(tmp_path):
    home = tmp_path / "home"
    path = home / "maintenance" / "log.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(OLD)
    result = write_under_size_limit(f"""
        from types import SimpleNamespace
        from pathlib import Path
        from lakehouse.operations import maintenance as m
        results = [m.TableResult(f"bronze.t{{n}}", "streaming", False, m.TableStats()) for n in range(5)]
        m.append_log(SimpleNamespace(home=Path({str(home)!r})), results)
    """)
    assert_untouched(path, result)


def test_a_maintenance_log_entry_that_fails_to_serialize_appends_nothing(tmp_path, monkeypatch):
    home = tmp_path / "home"
    path = home / "maintenance" / "log.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(OLD)
    good = maintenance.TableResult("bronze.a", "streaming", False, maintenance.TableStats())
    bad = maintenance.TableResult("bronze.b", "streaming", False, maintenance.TableStats())
    bad.actions.append(object())  # not JSON
    settings = type("S", (), {"home": home})()
    with pytest.raises(TypeError):
        maintenance.append_log(settings, [good, bad])
    assert path.read_text() == OLD  # not bronze.a's line alone
    maintenance.append_log(settings, [good])
    lines = path.read_text().splitlines()
    assert lines[0] == OLD.strip() and json.loads(lines[1])["table"] == "bronze.a" and len(lines) == 2


def test_a_failed_rename_leaves_the_old_file_and_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "broker.pid"
    path.write_text(OLD)

    def refuse(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="No space left"):
        files.write_atomically(path, "12345")
    assert path.read_text() == OLD
    assert [p.name for p in tmp_path.iterdir()] == ["broker.pid"]


def test_a_write_replaces_the_whole_file_with_the_usual_permissions(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("a much longer previous content than the new one\n")
    files.write_atomically(path, "short\n")
    assert path.read_text() == "short\n"
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
    files.append_atomically(path, "more\n")
    assert path.read_text() == "short\nmore\n"
