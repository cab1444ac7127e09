"""tests/unit starts no JVM (tests/unit/test_suite_layout.py checks its files; docs/testing.md,
"The suites"). The session's Spark session and broker are refused here, so a unit test that
reaches one through another fixture fails at once, naming where such a test belongs."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    pytest.fail("tests/unit starts no JVM: a test that needs Spark belongs in tests/integration")


@pytest.fixture(scope="session")
def kafka():
    pytest.fail("tests/unit starts no JVM: a test that needs the Kafka broker belongs in tests/integration")
