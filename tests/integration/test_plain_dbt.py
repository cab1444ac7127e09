"""`dbt` started by hand at the project root, as the dbt docs show it, next to `lakehouse dbt`.

A plain `dbt run` takes no lock: two at once both append the same new purchases to
silver.purchases (macros/first_occurrences.sql drops only ids already committed). And a plain
`dbt` reads only the LAKEHOUSE_* variables profiles.yml names, never LAKEHOUSE_CONFIG_FILE or
LAKEHOUSE_PROFILE, so it would open another catalog than the configured one in silence.

Here, on a lakehouse of its own with purchases ingested and silver.purchases built once, then
new purchases ingested: two plain `dbt run --select purchases` started together (real
processes, real Spark and Iceberg) are both refused with one line naming `lakehouse dbt`, and
silver is unchanged; one given the lock's variable by hand runs, but publishes nothing (no
quality gate ran; its rows stay on its branch) and fails; a plain `dbt show` with
LAKEHOUSE_CONFIG_FILE set is refused the same way;
two `lakehouse dbt run --select purchases` started together, one configured by the environment
and one by a LAKEHOUSE_CONFIG_FILE alone, both succeed (one waits for the other's lock) and
silver holds every new purchase once.

Two hosts: two `lakehouse dbt run --select purchases` with state folders of their own (so
dbt-tables locks that never meet, as on two machines) on one catalog, on 3,000 new purchases.
The first stops inside its append's commit (SIGSTOP, a fault point), the second runs and commits,
the first is resumed: the catalog refuses its commit in one line (macros/dbt_fence.sql, jvm/catalog
WriterFence) and silver holds every purchase once. Without the fence it appended them again.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lakehouse.core.settings import PROJECT_ROOT
from lakehouse.operations.dbt import dbt_executable
from tests.integration.dbt_in_process import run_dbt
from tests.integration.own_lakehouse import cli_env, ingest_purchases, lakehouse_fixture
from tests.integration.processes import process_group, resume, wait_until

pytestmark = pytest.mark.integration

FIRST, NEW = 500, 3_000
LAKEHOUSE = str(Path(sys.executable).with_name("lakehouse"))
# The variables that point a process at the test's lakehouse; the config-file case leaves them out.
LOCATION = ("LAKEHOUSE_HOME", "LAKEHOUSE_CATALOG_URI", "LAKEHOUSE_WAREHOUSE", "LAKEHOUSE_CATALOG_TYPE",
            "LAKEHOUSE_S3_ENDPOINT", "LAKEHOUSE_KAFKA_PORT", "LAKEHOUSE_SHUFFLE_PARTITIONS")


lake = lakehouse_fixture("plain-dbt", publication_gate=True)


@pytest.fixture(scope="module")
def new_purchases(lake) -> int:
    """silver.purchases built from FIRST purchases; then NEW more in bronze, not yet in silver."""
    own, session, target = lake
    ingest_purchases(own, session, FIRST, seed=1)
    run_dbt(own, ["run", "--select", "purchases"], target_dir=target)
    assert session.table("silver.purchases").count() == FIRST
    ingest_purchases(own, session, NEW, seed=2)
    assert session.table("bronze.purchases").where("_error_code is null").count() == FIRST + NEW
    return NEW


def silver_counts(session) -> tuple[int, int]:
    rows = session.table("silver.purchases")
    return rows.count(), rows.select("transaction_id").distinct().count()


def start(command: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(command, cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def plain_dbt_env(own, target: Path) -> dict[str, str]:
    """What a user's shell holds when they run `dbt` at the root pointed at that lakehouse."""
    return {**cli_env(own), "PWD": str(PROJECT_ROOT), "DBT_TARGET_PATH": str(target),
            "DBT_LOG_PATH": str(target / "logs")}


def finish(process: subprocess.Popen) -> tuple[int, str]:
    output, _ = process.communicate(timeout=900)
    return process.returncode, output


def test_two_plain_dbt_runs_at_once_are_refused_and_append_nothing(lake, new_purchases, tmp_path):
    own, session, _ = lake
    before = silver_counts(session)
    command = [dbt_executable(), "run", "--select", "purchases"]
    runs = [start(command, plain_dbt_env(own, tmp_path / f"target-{n}")) for n in (1, 2)]
    results = [finish(run) for run in runs]
    rows, distinct = silver_counts(session)
    # what today's plain runs did: both "Completed successfully", every new purchase twice
    assert (rows - distinct, rows) == (0, before[0]), \
        f"{rows - distinct} duplicated purchases; exits {[code for code, _ in results]}"
    for code, output in results:
        assert code != 0, output[-3000:]
        assert "run it as `lakehouse dbt run --select purchases`" in output, output[-3000:]
        assert "Completed successfully" not in output


def test_a_plain_dbt_given_a_lock_holder_by_hand_publishes_nothing(lake, new_purchases, tmp_path):
    """The hook's variable set by hand gets dbt past the refusal, not past the quality gate: the
    run's rows stay on its branch, main is unchanged, and the run fails naming `lakehouse dbt`."""
    own, session, _ = lake
    before = session.sql("select snapshot_id from silver.purchases.refs where name = 'main'").first()[0]
    env = {**plain_dbt_env(own, tmp_path / "target"), "LAKEHOUSE_DBT_LOCK_HOLDER": "set by hand"}
    code, output = finish(start([dbt_executable(), "run", "--select", "purchases"], env))
    assert code != 0, output[-3000:]
    assert "not published: dbt was not started by `lakehouse dbt`" in output, output[-3000:]
    assert session.sql("select snapshot_id from silver.purchases.refs where name = 'main'").first()[0] == before
    assert silver_counts(session) == (FIRST, FIRST)
    branch = output.split("stays on branch ")[1].split()[0]
    assert session.sql(f"select count(*) from silver.purchases version as of '{branch}'").first()[0] == FIRST + NEW


def test_a_plain_dbt_with_a_config_file_is_refused_not_pointed_elsewhere(lake, new_purchases, tmp_path):
    own, _, _ = lake
    config = tmp_path / "lakehouse.env"
    config.write_text("".join(f"{key}={cli_env(own)[key]}\n" for key in LOCATION))
    env = {key: value for key, value in plain_dbt_env(own, tmp_path / "target").items() if key not in LOCATION}
    env["LAKEHOUSE_CONFIG_FILE"] = str(config)
    # read-only and without hooks: still never another catalog than the configured one
    shown = subprocess.run([dbt_executable(), "show", "--inline", "select count(*) as n from bronze.purchases"],
                           cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=600)
    output = shown.stdout + shown.stderr
    assert shown.returncode != 0, output[-3000:]
    assert "LAKEHOUSE_CONFIG_FILE is set" in output and "`lakehouse dbt show" in output, output[-3000:]


def test_two_lakehouse_dbt_runs_at_once_take_turns_and_append_each_purchase_once(lake, new_purchases, tmp_path):
    own, session, _ = lake
    config = tmp_path / "lakehouse.env"
    config.write_text("".join(f"{key}={cli_env(own)[key]}\n" for key in LOCATION))
    by_file = {key: value for key, value in cli_env(own).items() if key not in LOCATION}
    by_file["LAKEHOUSE_CONFIG_FILE"] = str(config)
    command = [LAKEHOUSE, "dbt", "run", "--select", "purchases"]
    runs = [start(command, {**cli_env(own), "DBT_TARGET_PATH": str(tmp_path / "target-env")}),
            start(command, {**by_file, "DBT_TARGET_PATH": str(tmp_path / "target-file")})]
    for code, output in [finish(run) for run in runs]:
        assert code == 0, output[-3000:]
    assert silver_counts(session) == (FIRST + new_purchases, FIRST + new_purchases)


DBT_REFUSED = "commit refused: another dbt run wrote the table after this run read it"  # jvm/catalog WriterFence


def test_dbt_runs_of_two_hosts_on_one_catalog_commit_each_purchase_once(lake, new_purchases, tmp_path):
    own, session, _ = lake
    ingest_purchases(own, session, NEW, seed=3)
    good = session.table("bronze.purchases").where("_error_code is null").select("transaction_id").distinct().count()
    assert silver_counts(session)[0] <= good - NEW  # at least the 3,000 new ones are for dbt to append
    command = [LAKEHOUSE, "dbt", "run", "--select", "purchases"]
    stopping = {**cli_env(own), "DBT_TARGET_PATH": str(tmp_path / "target-a"),
                "LAKEHOUSE_JVM_OPTIONS": f"{os.environ.get('LAKEHOUSE_JVM_OPTIONS', '')} "
                                         "-Dlakehouse.fault-point=stop-inside-dbt-commit".strip()}
    # another host: its own state folder (its own dbt-tables lock), the same catalog and warehouse
    other_home = tmp_path / "host-b"
    other_home.mkdir()
    (other_home / "jars").symlink_to((own.home / "jars").resolve())
    other = {**cli_env(own), "LAKEHOUSE_HOME": str(other_home), "DBT_TARGET_PATH": str(tmp_path / "target-b")}
    log = tmp_path / "host-a.log"
    with process_group(command, stopping, log) as first:
        wait_until(lambda: "fault point stop-inside-dbt-commit" in log.read_text(errors="replace"),
                   "the first run stopped inside its commit", log, timeout_s=600, process=first)
        second = subprocess.run(command, cwd=PROJECT_ROOT, env=other, capture_output=True, text=True, timeout=900)
        assert second.returncode == 0, (second.stdout + second.stderr)[-3000:]
        assert silver_counts(session) == (good, good)
        code = resume(first, timeout_s=600)
    output = log.read_text(errors="replace")
    rows, distinct = silver_counts(session)
    assert (rows, distinct) == (good, good), \
        f"{rows - distinct} purchases twice: the stalled run appended its increment again (exit {code})"
    assert code != 0, output[-3000:]
    assert f"silver.purchases: {DBT_REFUSED}" in output, output[-3000:]
