"""Write-audit-publish (macros/audit_publish.sql): readers of main never see a failed build.

On a lakehouse of its own (real Kafka, Spark, Iceberg, dbt through `lakehouse dbt`): purchases
ingested and silver.purchases built; then 3,000 new purchases ingested, and a duplicated
transaction id planted in silver.purchases (one row appended again to main, as a bad writer
would). `lakehouse dbt build --select purchases` builds the increment on the run's audit branch,
its `unique` test fails there, and the run publishes nothing: main of every silver and gold
table is the snapshot it was, and Spark, pyiceberg and DuckDB read the rows they read before; the
run names the failed test and the branch, which holds its rows. With the plant removed, the next
build publishes, and silver holds every purchase once: the failed run's increment was not lost
(the bronze snapshot it read was staged on the branch, never recorded on main). The failed run's
branch is kept for a week; `lakehouse maintain` on a clock a week later drops it.

Seen failing on the code before write-audit-publish: the failed build exited 1, but had moved
main of silver.purchases (dbt appends the model's rows before its tests run).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lakehouse.core.settings import PROJECT_ROOT
from tests.integration.own_lakehouse import cli_env, ingest_purchases, lakehouse_fixture
from tests.integration.processes import faketime

pytestmark = pytest.mark.integration

FIRST, NEW = 500, 3_000
RETENTION_HOURS = 168  # dbt_project.yml, vars: audit_branch_retention_hours
LAKEHOUSE = str(Path(sys.executable).with_name("lakehouse"))

lake = lakehouse_fixture("audit-publish")


def build(own, target: Path) -> tuple[int, str]:
    done = subprocess.run([LAKEHOUSE, "dbt", "build", "--select", "purchases"], cwd=PROJECT_ROOT,
                          env={**cli_env(own), "DBT_TARGET_PATH": str(target)}, capture_output=True, text=True,
                          timeout=900)
    return done.returncode, done.stdout + done.stderr


def main_heads(session) -> dict[str, int | None]:
    """{table: main's snapshot id} of every silver and gold table."""
    heads = {}
    for namespace in ("silver", "gold"):
        views = {row.viewName for row in session.sql(f"show views in {namespace}").collect()}
        for row in session.sql(f"show tables in {namespace}").collect():
            if row.tableName not in views:
                name = f"{namespace}.{row.tableName}"
                found = session.sql(f"select snapshot_id from {name}.refs where name = 'main'").collect()
                heads[name] = found[0].snapshot_id if found else None
    return heads


def counts_by_engine(own, session, name: str) -> dict[str, tuple[int, int]]:
    """(rows, distinct transaction ids) of `name`'s main, read by Spark, pyiceberg and DuckDB."""
    import duckdb
    from pyiceberg.catalog.sql import SqlCatalog

    rows = session.table(name)
    catalog = SqlCatalog("lake", uri="sqlite:///" + own.catalog_uri.removeprefix("jdbc:sqlite:"),
                         warehouse=own.warehouse)
    arrow = catalog.load_table(name).scan(selected_fields=("transaction_id",)).to_arrow()
    connection = duckdb.connect()
    connection.register("purchases", arrow)
    [duck] = connection.sql("select count(*), count(distinct transaction_id) from purchases").fetchall()
    return {"spark": (rows.count(), rows.select("transaction_id").distinct().count()),
            "pyiceberg": (arrow.num_rows, len(set(arrow.column("transaction_id").to_pylist()))),
            "duckdb": tuple(duck)}


def test_a_build_whose_test_fails_publishes_nothing_and_the_next_one_loses_nothing(lake, tmp_path):
    own, session, _ = lake
    ingest_purchases(own, session, FIRST, seed=1)
    code, output = build(own, tmp_path / "target-1")
    assert code == 0, output[-3000:]
    assert session.table("silver.purchases").count() == FIRST

    ingest_purchases(own, session, NEW, seed=2)
    [planted] = session.table("silver.purchases").orderBy("transaction_id").limit(1).collect()
    session.table("silver.purchases").where(f"transaction_id = '{planted.transaction_id}'") \
        .writeTo("silver.purchases").append()
    before, read_before = main_heads(session), counts_by_engine(own, session, "silver.purchases")
    assert read_before["spark"] == (FIRST + 1, FIRST)

    code, output = build(own, tmp_path / "target-2")
    assert code != 0, output[-3000:]
    assert main_heads(session) == before, "a failed build moved main"
    assert counts_by_engine(own, session, "silver.purchases") == read_before
    [line] = [line for line in output.splitlines() if "not published: " in line]
    assert "unique_purchases_transaction_id" in line and "main of every table is unchanged" in line, line
    branch = line.split("stays on branch ")[1].split()[0]
    # the failed build's rows are on its branch, for inspection
    kept = session.sql(f"select count(*) as n from silver.purchases version as of '{branch}'").collect()[0].n
    assert kept == FIRST + NEW + 1
    [retention] = session.sql(f"select max_reference_age_in_ms from silver.purchases.refs where name = '{branch}'") \
        .collect()
    assert retention[0] == RETENTION_HOURS * 3600 * 1000
    status = subprocess.run([LAKEHOUSE, "status"], env=cli_env(own), capture_output=True, text=True, timeout=300)
    assert f"select * from silver.purchases version as of '{branch}'" in status.stdout, status.stdout[-3000:]

    # the plant removed (the duplicate's two rows deleted, one appended back): the next build
    # publishes, with the increment the failed one read
    duplicate = session.table("silver.purchases").where(f"transaction_id = '{planted.transaction_id}'").limit(1) \
        .localCheckpoint()
    session.sql(f"delete from silver.purchases where transaction_id = '{planted.transaction_id}'")
    duplicate.writeTo("silver.purchases").append()
    code, output = build(own, tmp_path / "target-3")
    assert code == 0, output[-3000:]
    assert "published 1 table(s)" in output, output[-3000:]
    good = FIRST + NEW
    for engine, found in counts_by_engine(own, session, "silver.purchases").items():
        assert found == (good, good), engine
    refs = {row.name for row in session.sql("select name from silver.purchases.refs").collect()}
    assert refs == {"main", branch}, "the published branch is dropped, the failed one kept"
    bronze_head = session.sql("select snapshot_id from bronze.purchases.refs where name = 'main'").collect()[0][0]
    recorded = session.sql("show tblproperties silver.purchases ('lakehouse.input-snapshot.bronze.purchases')") \
        .collect()[0].value
    assert recorded == str(bronze_head)

    # maintenance on a clock past the retention (a real process under faketime) expires the branch
    maintained = subprocess.run([*faketime((RETENTION_HOURS + 1) * 3600), LAKEHOUSE, "maintain", "--table",
                                 "silver.purchases"], env=cli_env(own), capture_output=True, text=True, timeout=600)
    assert maintained.returncode == 0, (maintained.stdout + maintained.stderr)[-3000:]
    assert {row.name for row in session.sql("select name from silver.purchases.refs").collect()} == {"main"}
    assert counts_by_engine(own, session, "silver.purchases")["spark"] == (good, good)
