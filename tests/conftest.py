"""Session-scoped fixtures: one state folder, one Spark session, one real Kafka broker.

The state folder is a temporary directory; the jars fetched by `make setup` are linked
into it, so tests never download anything and never touch the user's .lakehouse/.
"""

from __future__ import annotations

import os
from pathlib import Path

import hypothesis
import pytest

from lakehouse.core.settings import Settings, default_home

REPO_ROOT = Path(__file__).resolve().parent.parent

# Hypothesis profiles (docs/testing.md). `ci`, the default: the same examples every run (the
# seed derives from the test), few of them where a test leaves the number to the profile (the
# CDC mirror property runs dbt per increment). `deep`: fresh random examples, many more;
# HYPOTHESIS_PROFILE=deep selects it (or pytest's --hypothesis-profile=deep).
hypothesis.settings.register_profile("ci", derandomize=True, max_examples=20, print_blob=True)
hypothesis.settings.register_profile("deep", derandomize=False, max_examples=150, print_blob=True)
hypothesis.settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# Every JVM the tests start (the Spark sessions of the tests, jobs and dbt; the brokers) compiles
# with C1 only. These JVMs live seconds to minutes on small data, where C2's compilations cost
# more CPU than their faster code saves: on the fault-point tests, a third less CPU for the same
# or a shorter wall time (benchmarks/RESULTS.md, "The test run"), which the two pytest workers of
# `make test` then share. C1 alone gets a 48 MB code cache, which the Spark session a pytest
# worker keeps for the whole run fills with Spark's generated classes: at ~16 min of the
# fresh-clone run of 1e9c852 "CodeCache is full", then "VirtualMachineError: Out of space in
# CodeCache for adapters" killed that JVM and every later test of its worker failed (Connection
# refused). So the code cache is the size tiered compilation has by default (240 MB).
# Subprocesses inherit it; LAKEHOUSE_JVM_OPTIONS set outside wins.
JVM_OPTIONS = os.environ.setdefault("LAKEHOUSE_JVM_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m")


def jars_source() -> Path:
    """The jars the tests run with: LAKEHOUSE_TEST_JARS, else the default home's (`make setup`).
    Fails the calling test, saying what is missing, when they are not there."""
    jars = Path(os.environ.get("LAKEHOUSE_TEST_JARS", Path(default_home()) / "jars"))
    if not (jars / "spark").is_dir():
        pytest.fail(f"jars not found in {jars}: run `make setup` first (or set LAKEHOUSE_TEST_JARS)")
    return jars


@pytest.fixture(scope="session")
def settings(tmp_path_factory) -> Settings:
    home = tmp_path_factory.mktemp("lakehouse-home")
    jars = jars_source()
    (home / "jars").symlink_to(jars.resolve())
    from lakehouse.core.local_kafka import free_port

    return Settings.from_env({
        "LAKEHOUSE_HOME": str(home),
        "LAKEHOUSE_KAFKA_PORT": str(free_port()),
        "LAKEHOUSE_SHUFFLE_PARTITIONS": "2",
        "LAKEHOUSE_JVM_OPTIONS": JVM_OPTIONS,
        # the tests' lakehouses hold synthetic rows the project's quality suites do not accept: the
        # gate is on where a test is about publication (tests/integration/own_lakehouse.py)
        "LAKEHOUSE_PUBLICATION_GATE": "off",
    })


@pytest.fixture(scope="session")
def spark(settings):
    from lakehouse.core.spark import ensure_namespaces, get_spark

    session = get_spark(settings, app_name="lakehouse-tests")
    ensure_namespaces(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka(settings):
    """A real single-node KRaft broker on a free port, stopped at the end of the session."""
    from lakehouse.core import local_kafka

    local_kafka.start(settings)
    yield settings.kafka_bootstrap_servers
    local_kafka.stop(settings)


# The longest files first. `make test`'s two workers take whole files (--dist loadfile), in
# collection order (--no-loadscope-reorder), each its next file when it has two tests or fewer
# left: a long file taken late can leave the other worker idle at the end. xdist's own order
# (files with most tests first) put the unit tests first and the chaos short form (one test,
# 10 minutes) late (benchmarks/RESULTS.md, "The test run"). Ordered by the first two-worker
# run's times; every other file keeps its place after these.
LONGEST_FILES = (
    # alone, loaded (2026-12-02): 9.5 min with dbt in process (15.5 min before), half of it the fixture
    "tests/integration/test_incremental_models.py",
    # 6 min alone, loaded (7.5 before its feeds were cut to 1,000 events); one test: its worker takes the next file too
    "tests/chaos/test_chaos_short.py",
    "tests/integration/test_demo.py",  # 6 min alone, loaded
    "tests/integration/test_fault_points.py",  # 5-6 min
    "tests/integration/test_cdc_mirror.py",  # 2 min alone with dbt in process (4-6 min before)
    "tests/integration/test_cdc_mirror_property.py",
    "tests/integration/test_dlq_replay.py",
    "tests/integration/test_end_to_end.py",
    # 3-4 min each in the loaded fresh-clone run of 2026-12-03: two real drivers or dbt processes at once
    "tests/integration/test_plain_dbt.py",
    "tests/integration/test_single_writer.py",
    "tests/integration/test_new_checkpoint.py",
    "tests/integration/test_producer_type_changes.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {path: number for number, path in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest in order
