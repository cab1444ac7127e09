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

Then the quality gate (lakehouse/operations/quality_gate.py): a purchase of a negative amount
planted in bronze passes dbt's tests, not the critical check on silver's amounts, which reads
the run's branch; the run publishes nothing and keeps its branch. Seen failing before the gate:
that build exited 0 and published the negative amount.

The published cut (gold.publications, `lakehouse published`): while builds publish purchases and
user events, ingested in equal numbers before each, a reader thread reads both tables at the
snapshots the cut names, and always finds the difference the first cut had (one publication);
Spark and DuckDB read the cut with the lines `lakehouse published` prints. A run of one model
publishes a cut that keeps the others' snapshots, even past an unaudited write to main; a run
with nothing new writes none; maintenance keeps (tags) a snapshot the cut names behind main.

Two hosts (state folders of their own, so dbt-tables locks that never meet; one catalog): the
first's run stops inside its cut's commit (SIGSTOP, a fault point), the second's run of another
model commits a cut made from the same one; resumed, the first's commit is refused in one line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from lakehouse.core.settings import PROJECT_ROOT
from lakehouse.operations.published import duckdb_python, read_cut, spark_sql
from lakehouse.operations.status import existing_table, pyiceberg_catalog
from tests.integration.own_lakehouse import cli_env, ingest, ingest_purchases, lakehouse_fixture
from tests.integration.processes import faketime, process_group, resume, wait_until

pytestmark = pytest.mark.integration

FIRST, NEW = 500, 3_000
RETENTION_HOURS = 168  # dbt_project.yml, vars: audit_branch_retention_hours
LAKEHOUSE = str(Path(sys.executable).with_name("lakehouse"))

lake = lakehouse_fixture("audit-publish", publication_gate=True)
# a lakehouse of its own: the first test's maintenance runs on a clock a week ahead, and Iceberg
# refuses a later commit stamped before it (the table's last snapshot-log entry)
cut_lake = lakehouse_fixture("published-cut", publication_gate=True)
fence_lake = lakehouse_fixture("published-cut-fence", publication_gate=True)

DBT_REFUSED = "commit refused: another dbt run wrote the table after this run read it"  # jvm/catalog WriterFence


def build(own, target: Path, models: tuple[str, ...] = ("purchases",)) -> tuple[int, str]:
    done = subprocess.run([LAKEHOUSE, "dbt", "build", "--select", *models], cwd=PROJECT_ROOT,
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
    cut_before = read_cut(pyiceberg_catalog(own))
    assert cut_before is not None and cut_before.tables == {"silver.purchases": main_heads(session)["silver.purchases"]}

    ingest_purchases(own, session, NEW, seed=2)
    [planted] = session.table("silver.purchases").orderBy("transaction_id").limit(1).collect()
    session.table("silver.purchases").where(f"transaction_id = '{planted.transaction_id}'") \
        .writeTo("silver.purchases").append()
    before, read_before = main_heads(session), counts_by_engine(own, session, "silver.purchases")
    assert read_before["spark"] == (FIRST + 1, FIRST)

    code, output = build(own, tmp_path / "target-2")
    assert code != 0, output[-3000:]
    assert main_heads(session) == before, "a failed build moved main"
    assert read_cut(pyiceberg_catalog(own)) == cut_before, "a failed build wrote a publication"
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
    # the fast-forward names the table with its catalog: no WARN and stack trace per table
    assert "Failed to load catalog" not in output, output[-3000:]
    good = FIRST + NEW
    for engine, found in counts_by_engine(own, session, "silver.purchases").items():
        assert found == (good, good), engine
    refs = {row.name for row in session.sql("select name from silver.purchases.refs").collect()}
    assert refs == {"main", branch}, "the published branch is dropped, the failed one kept"
    bronze_head = session.sql("select snapshot_id from bronze.purchases.refs where name = 'main'").collect()[0][0]
    recorded = session.sql("show tblproperties silver.purchases ('lakehouse.input-snapshot.bronze.purchases')") \
        .collect()[0].value
    assert recorded == str(bronze_head)

    # a critical quality check fails on the branch, dbt's tests pass: a purchase of a negative
    # amount reaches bronze (appended as a writer would, at a new offset), and silver's increment
    # carries it to the run's branch only. The quality gate reads the branch, finds it, and the
    # run publishes nothing; had it read main, it would have found nothing wrong.
    before = main_heads(session)
    cut_before = read_cut(pyiceberg_catalog(own))
    from pyspark.sql import functions as F
    session.table("bronze.purchases").where("transaction_id is not null").limit(1) \
        .withColumn("transaction_id", F.lit("planted-negative-amount")).withColumn("amount", F.lit(-5.0)) \
        .withColumn("_kafka_offset", F.lit(10**12)).writeTo("bronze.purchases").append()
    code, output = build(own, tmp_path / "target-4")
    assert code != 0, output[-3000:]
    assert main_heads(session) == before, "a build that failed a critical check moved main"
    assert read_cut(pyiceberg_catalog(own)) == cut_before, "a build that failed a critical check wrote a publication"
    assert session.table("silver.purchases").where("amount < 0").count() == 0
    [line] = [line for line in output.splitlines() if "not published: " in line]
    assert "critical quality check(s) failed" in line and "main of every table is unchanged" in line, line
    assert "silver.purchases: expect_column_values_to_be_between(amount)" in line, line
    held = line.split("stays on branch ")[1].split()[0]
    assert session.sql(f"select count(*) as n from silver.purchases version as of '{held}' where amount < 0") \
        .collect()[0].n == 1
    [retention] = session.sql(f"select max_reference_age_in_ms from silver.purchases.refs where name = '{held}'") \
        .collect()
    assert retention[0] == RETENTION_HOURS * 3600 * 1000
    status = subprocess.run([LAKEHOUSE, "status"], env=cli_env(own), capture_output=True, text=True, timeout=300)
    assert f"select * from silver.purchases version as of '{held}'" in status.stdout, status.stdout[-3000:]

    # maintenance on a clock past the retention (a real process under faketime) expires the branch
    maintained = subprocess.run([*faketime((RETENTION_HOURS + 1) * 3600), LAKEHOUSE, "maintain", "--table",
                                 "silver.purchases"], env=cli_env(own), capture_output=True, text=True, timeout=600)
    assert maintained.returncode == 0, (maintained.stdout + maintained.stderr)[-3000:]
    # ...and keeps (tags) the snapshot the cut names, once the pass's compaction moved main past it
    refs = {row.name: row.snapshot_id
            for row in session.sql("select name, snapshot_id from silver.purchases.refs").collect()}
    named = read_cut(pyiceberg_catalog(own)).tables["silver.purchases"]
    assert refs == {"main": refs["main"], **({"published_cut": named} if named != refs["main"] else {})}, refs
    assert counts_by_engine(own, session, "silver.purchases")["spark"] == (good, good)


def test_readers_of_the_published_cut_find_every_table_of_one_publication(cut_lake, tmp_path):
    """Each round ingests as many user events as purchases, then one build publishes both tables
    (two catalog commits, then the cut). A reader thread reading both at the snapshots of the cut
    always finds purchases - user events equal to what it was before the first round; reading
    each table's main instead, it may catch the first published and not the second (counted,
    not asserted: that takes a read between two commits)."""
    own, session, _ = cut_lake
    rounds, each = 3, 400
    # gold.events_by_type_daily too: a test of it names silver.user_events
    models = ("purchases", "user_events", "events_by_type_daily")
    purchases, events = "silver.purchases", "silver.user_events"
    catalog = pyiceberg_catalog(own)

    def count(name: str, snapshot: int | None = None) -> int:
        table = catalog.load_table(name)
        return table.scan(snapshot_id=snapshot, selected_fields=("_loaded_at",)).to_arrow().num_rows

    difference = 100  # purchases that have no user events beside them
    ingest(own, session, {"purchases": difference}, seed=10)

    reads, torn_main_reads, seen = [], [], set()
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            cut = read_cut(catalog)
            if cut is not None and events in cut.tables:
                reads.append(count(purchases, cut.tables[purchases]) - count(events, cut.tables[events]))
                seen.add(cut.publication)
            published = existing_table(catalog, events)
            if published is not None and published.current_snapshot() is not None:
                # user events first: the run publishes purchases first, so this order catches a
                # read that straddles the two
                main_difference = -count(events) + count(purchases)
                if main_difference != difference:
                    torn_main_reads.append(main_difference)

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        for round_ in range(rounds):
            ingest(own, session, {"purchases": each, "user_events": each}, seed=11 + round_)
            code, output = build(own, tmp_path / f"target-{round_}", models)
            assert code == 0, "\n".join(line[:2000] for line in output.splitlines()
                                         if "rror" in line and "\tat " not in line)[-6000:]
            assert "publication audit_" in output, output[-3000:]
    finally:
        stop.set()
        thread.join(timeout=120)
    print(f"{len(reads)} reads of the cut over {len(seen)} publications; reads of main that found the two tables "
          f"of different publications: {len(torn_main_reads)}")
    assert len(seen) >= 2 and len(reads) >= 10, (len(seen), len(reads))
    assert set(reads) == {difference}, "a read of the cut found the two tables of different publications"

    # the last cut names every table at its main, and the lines `lakehouse published` prints read it
    cut = read_cut(catalog)
    heads = main_heads(session)
    assert cut.tables == {name: head for name, head in heads.items() if name in cut.tables and head is not None}
    assert {purchases, events} <= cut.tables.keys()
    shown = subprocess.run([LAKEHOUSE, "published"], env=cli_env(own), capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr[-3000:]
    total = difference + rounds * each
    for query in spark_sql(cut):
        assert query in shown.stdout, shown.stdout
        if f".{purchases} " in query:
            assert session.sql(query.rstrip(";")).count() == total
    lines = duckdb_python(cut, own)
    assert all(line in shown.stdout for line in lines), shown.stdout
    scope: dict = {}
    exec("\n".join(lines), scope)  # noqa: S102 - the printed Python, run as a reader would
    found = scope["connection"].sql("select count(*) from silver_purchases").fetchall()
    assert found == [(total,)]

    # an unaudited write to purchases' main (an operator's delete), then a run of one model: the
    # next cut names that model's new snapshot, and keeps the previous cut's of the tables it did
    # not run, purchases too: its main head is no publication's
    removed = session.sql("select min(transaction_id) from silver.purchases").first()[0]
    session.sql(f"delete from silver.purchases where transaction_id = '{removed}'")
    ingest(own, session, {"user_events": each}, seed=20)
    code, output = build(own, tmp_path / "target-events", ("user_events",))
    assert code == 0, output[-3000:]
    after = read_cut(catalog)
    assert after.publication != cut.publication
    assert after.tables[events] != cut.tables[events] == heads[events]
    assert {name: snapshot for name, snapshot in after.tables.items() if name != events} == \
        {name: snapshot for name, snapshot in cut.tables.items() if name != events}
    assert main_heads(session)[purchases] != after.tables[purchases]
    assert count(events, after.tables[events]) == rounds * each + each
    assert count(purchases, after.tables[purchases]) == total

    # a run with nothing new: its model's empty commit (Iceberg commits an append of no files)
    # is not published, and the cut, naming what the last one did, is not written
    code, output = build(own, tmp_path / "target-nothing", ("user_events",))
    assert code == 0, output[-3000:]
    assert "publication audit_" not in output, [line[:500] for line in output.splitlines() if "publication" in line]
    assert f"nothing new, main left as it was: {events}" in output, output[-3000:]
    assert read_cut(catalog) == after
    assert main_heads(session)[events] == after.tables[events], "an empty commit published"

    # maintenance on a clock past a one-hour retention that keeps one snapshot: the snapshot the
    # cut names of purchases, behind main since the delete, stays (tagged) and readable
    policies = tmp_path / "maintenance.yml"
    policies.write_text("defaults:\n  snapshot_retention_hours: 1\n  snapshots_to_keep: 1\n")
    snapshots_before = len(catalog.load_table(purchases).snapshots())
    maintained = subprocess.run([*faketime(2 * 3600), LAKEHOUSE, "maintain", "--table", purchases],
                                env={**cli_env(own), "LAKEHOUSE_MAINTENANCE_FILE": str(policies)},
                                capture_output=True, text=True, timeout=600)
    assert maintained.returncode == 0, (maintained.stdout + maintained.stderr)[-3000:]
    assert "tag published_cut" in maintained.stdout + maintained.stderr, maintained.stdout[-3000:]
    table = catalog.load_table(purchases)
    assert len(table.snapshots()) < snapshots_before, "nothing expired: the test shows nothing"
    assert table.metadata.refs["published_cut"].snapshot_id == after.tables[purchases]
    assert count(purchases, after.tables[purchases]) == total


def test_of_two_hosts_cuts_made_from_the_same_cut_only_the_first_commits(fence_lake, tmp_path):
    """Host A's run of purchases publishes silver.purchases, then stops inside its cut's commit;
    host B's run of user events publishes them and commits its cut, made from the cut A's was.
    Resumed, A's commit is refused, in one line: B's cut stands, naming purchases at the snapshot
    the first cut named (A's publication never completed its cut). The next run's cut names both
    tables' heads. Without the fence, A's cut, written last, named user events at the snapshot
    B's run had replaced."""
    own, session, _ = fence_lake
    purchases, events = "silver.purchases", "silver.user_events"
    catalog = pyiceberg_catalog(own)
    ingest(own, session, {"purchases": 200, "user_events": 200}, seed=30)
    # gold.events_by_type_daily with user events: a test of it names silver.user_events
    code, output = build(own, tmp_path / "target-first", ("purchases", "user_events", "events_by_type_daily"))
    assert code == 0, output[-3000:]
    first = read_cut(catalog)
    ingest(own, session, {"purchases": 100, "user_events": 100}, seed=31)

    point = "stop-inside-publication-commit"
    stopping = {**cli_env(own), "DBT_TARGET_PATH": str(tmp_path / "target-a"),
                "LAKEHOUSE_JVM_OPTIONS": f"{os.environ.get('LAKEHOUSE_JVM_OPTIONS', '')} "
                                         f"-Dlakehouse.fault-point={point}".strip()}
    other_home = tmp_path / "host-b"
    other_home.mkdir()
    (other_home / "jars").symlink_to((own.home / "jars").resolve())
    other = {**cli_env(own), "LAKEHOUSE_HOME": str(other_home), "DBT_TARGET_PATH": str(tmp_path / "target-b")}
    log = tmp_path / "host-a.log"
    with process_group([LAKEHOUSE, "dbt", "build", "--select", "purchases"], stopping, log) as first_host:
        wait_until(lambda: f"fault point {point}" in log.read_text(errors="replace"),
                   "host A stopped inside its cut's commit", log, timeout_s=600, process=first_host)
        second = subprocess.run([LAKEHOUSE, "dbt", "build", "--select", "user_events", "events_by_type_daily"],
                                cwd=PROJECT_ROOT,
                                env=other, capture_output=True, text=True, timeout=900)
        assert second.returncode == 0, (second.stdout + second.stderr)[-3000:]
        assert "publication audit_" in second.stdout + second.stderr, second.stdout[-3000:]
        code = resume(first_host, timeout_s=600)
    output = log.read_text(errors="replace")
    assert code != 0, output[-3000:]
    assert f"gold.publications: {DBT_REFUSED}" in output, output[-3000:]

    heads = main_heads(session)
    cut = read_cut(catalog)
    assert cut.tables[events] == heads[events] != first.tables[events], "B's cut stands"
    assert cut.tables[purchases] == first.tables[purchases] != heads[purchases], "A's cut is not committed"

    code, output = build(own, tmp_path / "target-next", ("purchases",))
    assert code == 0, output[-3000:]
    last = read_cut(catalog)
    assert (last.tables[purchases], last.tables[events]) == (heads[purchases], heads[events])
