"""The preflight checks that run the machine's real `java -version` (the project's Java, a
newer JDK for Debezium Server): each starts a JVM, so they are not in tests/unit, where the
checks without one are (tests/unit/test_preflight_and_cli.py)."""

import os
from pathlib import Path

import pytest

from tests.unit.test_preflight_and_cli import run_preflight

pytestmark = pytest.mark.integration  # real JVMs (`java -version`); tests/unit starts none


def test_java_present_passes():
    assert run_preflight("java").returncode == 0


def fake_jdk(folder: Path, major: int) -> Path:
    java = folder / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f'#!/bin/sh\necho \'openjdk version "{major}.0.1" 2031-01-01\' >&2\n')
    java.chmod(0o755)
    return folder


def test_java_home_finds_a_newer_jdk_beside_the_one_in_use(tmp_path):
    """Debezium Server needs Java 21+ where the project runs on 17: the newest JDK found wins."""
    home = fake_jdk(tmp_path / "jdk-99", 99)
    found = run_preflight("java-home", "21", env={**os.environ, "JAVA_HOME": str(home)})
    assert (found.returncode, found.stdout.strip()) == (0, str(home))
    missing = run_preflight("java-home", "100", env={**os.environ, "JAVA_HOME": str(home)})
    lines = missing.stderr.strip().splitlines()
    assert missing.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: Debezium Server needs Java 100+")
