"""The whole project's incremental runs: cost that follows the change, results that do not.

A lakehouse of its own gets a bronze history for every stream, written straight into the bronze
tables the ingestion creates (tests/support/bronze_history.py, benchmarks/dbt_scaling.py's
generator too), and `dbt run`
builds silver and gold. Then increments land, each with late events, re-sent duplicates of
earlier events and CDC changes (updates that move customers, deletes, new keys), and `dbt run`
applies each. Checked:

- pruning: after several increments, a run reads from bronze only the files of the newest
  increment, every older file skipped (Spark's scan metrics of the dbt process, from its event
  log): each silver model remembers the bronze snapshot its last run read
  (macros/ingested_since_last_run.sql, "Exact increments");
- exactness: rows committed to bronze after a run, stamped long before it (a late replay), are
  read by the next run all the same;
- a run whose recorded bronze snapshot maintenance has expired reads by the data sequence number
  recorded beside it, and misses nothing, even rows stamped hours before the model's newest (a
  crashed batch completed later with its original instant);
- a run after compaction reads from what was appended since its last run, not from the start
  of every partition compaction rewrote;
- every incremental gold model equals what a full refresh computes from the same silver;
- the tables partitioned by event day write one file at a time (no fanout);
- the gold models that follow customers' profiles see a late CDC commit, as silver does;
- the daily reconciliations check the touched days by default (a late row's day among them)
  and every day with full=True;
- `lakehouse dbt loop` runs dbt repeatedly in one process, on one Spark application.

dbt runs in this process (tests/integration/dbt_in_process.py: the same project and SQL, on a
warm JVM), but for the runs whose Spark event log is read, which are dbt processes of their own
as users run them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.integration.dbt_in_process import run_dbt
from tests.integration.own_lakehouse import cli_env, lakehouse_fixture
from tests.support.bronze_history import create_bronze, load_history, load_increment
from tests.support.spark_events import (
    event_log_env,
    layer_rows,
    merge_target_reads,
    newest_event_log,
    own_table_of,
    per_model,
    sql_breakdown,
)

pytestmark = pytest.mark.integration

HISTORY = 4_000  # rows per stream, CDC keys
INCREMENT = 400  # events per event stream, changes per CDC stream
DAYS = 4
INCREMENTS = 3
GOLD = ("events_by_type_daily", "sales_by_region_daily", "customer_activity", "headcount_by_team_role",
        "account_balance_summary")
INCREMENTAL_GOLD = ("events_by_type_daily", "sales_by_region_daily", "customer_activity", "headcount_by_team_role")


lake = lakehouse_fixture("incremental")


def resend(session, table: str, share_mod: int, ingested: datetime) -> None:
    """Re-send (as a producer's retry would) every `share_mod`-th event of `table`: same
    identity and event time, a new offset and arrival."""
    from pyspark.sql import functions as F

    session.table(table).where(f"pmod(_kafka_offset, {share_mod}) = 0") \
        .withColumn("_kafka_offset", F.col("_kafka_offset") + F.lit(10_000_000 * share_mod)) \
        .withColumn("_ingested_at", F.lit(ingested)) \
        .withColumn("_batch_id", F.lit(999).cast("bigint")) \
        .writeTo(table).append()


def last_commit(session, table: str) -> datetime:
    return session.sql(f"select max(committed_at) from {table}.snapshots").first()[0]


def run_with_event_log(own, target: Path, events: Path, args: list[str]) -> list[dict]:
    """`dbt <args>` as run_dbt runs it, plus Spark's event log; the run's SQL statements."""
    from lakehouse.core.locks import dbt_run_lock
    from lakehouse.core.settings import PROJECT_ROOT
    from lakehouse.operations.dbt import dbt_command_line, dbt_env

    with dbt_run_lock(own) as holder:
        env = {**dbt_env(own, target), **event_log_env(events), **holder}
        result = subprocess.run(dbt_command_line(args), cwd=PROJECT_ROOT, env=env, capture_output=True,
                                text=True)
    assert result.returncode == 0, result.stdout[-4000:]
    return sql_breakdown(newest_event_log(events))


@pytest.fixture(scope="module")
def increments(lake):
    """The history built, then INCREMENTS increments applied one `dbt run` each; the last run
    with Spark's event log. Returns the last run's statements, the bronze tables, per bronze
    table the files and rows its newest increment added (what the last run may read) and its
    total files and rows, and the last run's reads per model (statements tied to models by
    time, as benchmarks/dbt_scaling.py ties them)."""
    own, session, target = lake
    tables = create_bronze(session, own)
    # the history ends, and the increments land an hour apart after it, all in the past: a row
    # stamped later than now would fall in every later run's increment (its bound is a time), and
    # the tests below land theirs now. Anchored at midnight, a run between 00:00 and 03:00 UTC
    # landed the increments in the future (CI, 2026-12-03, at 00:35: two history tests failed)
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=INCREMENTS + 1)
    load_history(session, tables, HISTORY, end - timedelta(days=DAYS), end)
    run_dbt(own, ["seed"], target_dir=target, capture=True)
    run_dbt(own, ["run"], target_dir=target, capture=True)
    statements, newest, before = None, {}, {}
    for number in range(1, INCREMENTS + 1):
        if number == INCREMENTS:
            before = {table: last_commit(session, table) for table in tables.values()}
        # an hour apart, far more than the 10-minute overlap, which a run falls back to when it
        # has no record of the bronze snapshot its last run read: it would then re-read the
        # previous increment (its rows carry the mark)
        landed = end + timedelta(hours=number)
        load_increment(session, tables, HISTORY, INCREMENT, number, landed, late_share=0.05, late_days=2)
        resend(session, tables["user_events"], 97, landed)
        resend(session, tables["purchases"], 89, landed)
        if number < INCREMENTS:
            run_dbt(own, ["run"], target_dir=target, capture=True)
            continue
        for table in tables.values():
            summaries = [r.summary for r in session.sql(f"select summary from {table}.snapshots "
                                                        "order by committed_at").collect()]
            added = [r.summary for r in session.sql(
                f"select summary from {table}.snapshots where committed_at > timestamp'{before[table]}'").collect()]
            newest[table] = {"files": sum(int(s["added-data-files"]) for s in added),
                             "rows": sum(int(s["added-records"]) for s in added),
                             "total_files": int(summaries[-1]["total-data-files"]),
                             "total_rows": int(summaries[-1]["total-records"])}
        statements = run_with_event_log(own, target, own.home / "spark-events", ["run"])
    results = json.loads((target / "run_results.json").read_text())["results"]
    return statements, tables, newest, per_model({"results": results, "statements": statements})


def test_a_run_reads_only_the_newest_bronze_files(increments):
    statements, tables, newest, _ = increments
    bronze_scans = {}
    for statement in statements:
        for scan in statement["scans"]:
            table = scan["table"].removeprefix("lake.")
            if table in tables.values():
                bronze_scans.setdefault(table, []).append(scan)
    # every bronze table was read, by every model that reads it
    assert set(bronze_scans) == set(tables.values())
    for table, scans in bronze_scans.items():
        new = newest[table]
        # the history is larger than the newest increment (re-sent duplicates make many small
        # files in the increments of purchases and user_events)...
        assert new["total_files"] > new["files"] and new["total_rows"] > 3 * new["rows"], new
        # Some scan nodes report no metrics in the event log. Why is not confirmed: a branch Spark
        # planned but never ran, or an aggregate answered from metadata; either way no file count
        # to check. Every table was read by at least one scan that reports them.
        executed = [scan for scan in scans if "data_files" in scan]
        increment = [scan for scan in executed if (scan["data_files"], scan.get("rows")) == (new["files"], new["rows"])]
        assert increment, (table, scans, new)
        for scan in executed:
            # ...and Iceberg planned their files only, every older one pruned (by partition, so
            # most never count as "skipped data files", which are files skipped inside a manifest).
            # A scan may also plan no file at all: the CDC mirror's lookup of a truncation in the
            # increment (`customer_id is null`) is answered by the files' null counts (such a scan
            # reports no rows metric: it produced none).
            assert (scan["data_files"], scan.get("rows", 0)) in ((new["files"], new["rows"]), (0, 0)), \
                (table, scan, new)


def test_a_silver_run_reads_at_most_three_times_its_increment(increments):
    """Each silver model that reads bronze reads, summed over all its scans (its planning queries
    included), at most 3x the rows of the bronze increment it applies, from bronze and silver (a
    mirror's changes table is silver; the model's own table aside: a MERGE's target). Spark
    reads a CTE or view once per use: the histories and mirrors read the increment four times
    before the accounts changelog read bronze once per use, the history's planning asked one
    question per scan, and the mirror's select joined its stored rows twice."""
    statements, tables, newest, models = increments
    reads_bronze = {name: model for name, model in models.items() if (own_table_of(name) or "").startswith("silver.")}
    assert len(reads_bronze) == 7, sorted(models)
    for name, model in reads_bronze.items():
        bronze = [table for table in model["reads"] if table in tables.values()]
        assert len(bronze) == 1, (name, model["reads"])
        rows = layer_rows(model, own_table_of(name))
        increment = newest[bronze[0]]["rows"]
        assert 0 < rows["bronze"] + rows["silver"] <= 3 * increment, (name, increment, model["reads"])
    # the mirror's select joins its changes with the mirror once, by broadcasting the changes:
    # the mirror is streamed, never shuffled
    for mirror, stream in (("customers_mirror", "customers"), ("accounts_mirror", "accounts")):
        selects = [s for s in statements if {f"lake.silver.{mirror}", f"lake.{tables[stream]}"}
                   <= {scan["table"] for scan in s["scans"]}]
        assert len(selects) == 1, (mirror, selects)
        assert "BroadcastHashJoin" in selects[0]["nodes"], selects[0]["nodes"]
        assert not {"SortMergeJoin", "ShuffledHashJoin"} & selects[0]["nodes"], selects[0]["nodes"]


def content(session, table: str) -> list[tuple]:
    """The table's rows without its bookkeeping columns (marks, sketches: `_`-prefixed)."""
    frame = session.table(table)
    columns = [c for c in frame.columns if not c.startswith("_")]
    return sorted(map(tuple, frame.select(*columns).collect()), key=repr)


# What the two marts that keep state other than rows compute, written plainly over silver.
PLAIN_MARTS = {
    "headcount_by_team_role": """
        select team_name, team_location, role, count(distinct employee_id) as headcount,
               avg(age) as average_age, min(started_at) as first_started_at, max(started_at) as last_started_at
        from silver.employees group by 1, 2, 3""",
    "account_balance_summary": """
        select account_type, currency, status, count(*) as account_count,
               count(distinct customer_id) as customer_count, sum(balance) as total_balance,
               cast(avg(balance) as decimal(18, 2)) as average_balance, min(balance) as min_balance,
               max(balance) as max_balance
        from silver.accounts group by 1, 2, 3""",
}
# Rows whose distinct count is below their row count, per mart: without them the plain
# comparison could not tell a distinct count from a count.
REPEATS = {
    "headcount_by_team_role": "select count(*) from (select 1 from silver.employees "
                              "group by team_name, team_location, role, employee_id having count(*) > 1)",
    "account_balance_summary": "select count(*) from (select 1 from silver.accounts "
                               "group by account_type, currency, status, customer_id having count(*) > 1)",
}


@pytest.mark.parametrize("model", sorted(PLAIN_MARTS))
def test_marts_with_bitmaps_equal_the_plain_aggregate(lake, increments, model):
    """headcount_by_team_role adds increments into bitmaps of employee ids, account_balance_summary
    counts its distinct customers with bitmaps and spells out Spark's avg: after the increments
    (re-hires, moved and deleted accounts among them), each equals the plain aggregate over
    silver, column for column and type for type (nullability aside: Iceberg
    stores every column as optional)."""
    _, session, _ = lake
    assert session.sql(REPEATS[model]).first()[0] > 0
    plain = session.sql(PLAIN_MARTS[model])
    mart = session.table(f"gold.{model}").select(*plain.columns)
    assert [(f.name, f.dataType) for f in mart.schema] == [(f.name, f.dataType) for f in plain.schema]
    assert sorted(map(tuple, mart.collect()), key=repr) == sorted(map(tuple, plain.collect()), key=repr)


def test_incremental_gold_equals_a_full_refresh(lake, increments):
    own, session, target = lake
    incremental = {model: content(session, f"gold.{model}") for model in GOLD}
    # the increments did change gold: customers moved and were deleted, late events arrived
    assert incremental["customer_activity"] and incremental["sales_by_region_daily"]
    run_dbt(own, ["run", "--full-refresh", "--select", *INCREMENTAL_GOLD], target_dir=target, capture=True)
    for model in GOLD:
        assert content(session, f"gold.{model}") == incremental[model], model


def test_event_day_tables_write_one_file_at_a_time(lake, increments):
    """A first build or a full refresh reads all of bronze. With Iceberg's fanout writer each
    write task keeps a file open for every event day it meets, which ran the 10M-row build of
    benchmarks/dbt_scaling.py out of heap (macros/clustered_write.sql). The tables partitioned by
    event day turn fanout off, so Iceberg has Spark sort each task's rows by day instead; the
    build and the increments above ran through that sorted path."""
    _, session, _ = lake
    for table in ("silver.employees", "silver.purchases", "silver.user_events"):
        properties = dict(map(tuple, session.sql(f"show tblproperties {table}").collect()))
        assert properties.get("write.spark.fanout.enabled") == "false", (table, properties)


def test_reconciliation_checks_touched_days_unless_full(lake, increments):
    from expectations.runner import run_quality

    own, session, _ = lake
    suite = "gold.events_by_type_daily.reconciliation"
    first = run_quality(session, own, layer="gold", stream="user_events")
    assert first.result(suite, "expect_column_values_to_be_null", "mismatch").success
    # an old day goes wrong in gold (no recent silver row on it): the default run, which looks at
    # the days touched since the suite last passed, does not see it; a full run does
    oldest, kind = session.sql("select event_date, event_type from gold.events_by_type_daily "
                               "order by event_date, event_type limit 1").first()
    # The touched days are those of the silver rows appended since the suite last passed, less
    # an hour; this lakehouse's silver was all appended minutes ago, so the old day's rows are
    # made to look appended two days ago, as they would be in a lakehouse that runs for days.
    session.sql(f"update silver.user_events set _loaded_at = _loaded_at - interval 2 days "
                f"where event_at >= timestamp'{oldest} 00:00:00' and event_at < timestamp'{oldest} 00:00:00' "
                "+ interval 1 day")
    session.sql(f"update gold.events_by_type_daily set event_count = event_count + 1 where event_date = "
                f"date'{oldest}' and event_type = '{kind}'")
    touched = run_quality(session, own, layer="gold", stream="user_events")
    full = run_quality(session, own, layer="gold", stream="user_events", full=True)
    assert touched.result(suite, "expect_column_values_to_be_null", "mismatch").success
    check = full.result(suite, "expect_column_values_to_be_null", "mismatch")
    assert not check.success and any("all days" in str(value) for value in check.unexpected_sample)
    session.sql(f"update gold.events_by_type_daily set event_count = event_count - 1 where event_date = "
                f"date'{oldest}' and event_type = '{kind}'")


def test_reconciliation_checks_the_day_of_a_late_silver_row(lake, increments):
    """A late bronze commit, stamped hours before the suite last passed, reaches silver in a later
    dbt run: its day is a touched day, found by when that run appended the row (`_loaded_at`),
    not by its bronze stamp. Here the row reaches silver and not gold, so the default
    reconciliation must see the difference on its day."""
    from pyspark.sql import functions as F

    from expectations.runner import run_quality

    own, session, _ = lake
    suite = "gold.events_by_type_daily.reconciliation"
    before = run_quality(session, own, layer="gold", stream="user_events")
    assert before.result(suite, "expect_column_values_to_be_null", "mismatch").success
    oldest = session.sql("select min(event_at) from silver.user_events").first()[0]
    session.table("silver.user_events").where(F.col("event_at") == F.lit(oldest)).limit(1) \
        .withColumn("event_id", F.concat(F.col("event_id"), F.lit("-late-silver"))) \
        .withColumn("_ingested_at", F.current_timestamp() - F.expr("interval 2 hours")) \
        .withColumn("_loaded_at", F.current_timestamp()) \
        .writeTo("silver.user_events").append()
    try:
        after = run_quality(session, own, layer="gold", stream="user_events")
        check = after.result(suite, "expect_column_values_to_be_null", "mismatch")
        assert not check.success, check
        assert not any("all days" in str(value) for value in check.unexpected_sample)  # the touched days only
    finally:
        session.sql("delete from silver.user_events where event_id like '%-late-silver'")


def test_dbt_loop_runs_in_one_warm_process(lake, increments, tmp_path):
    own, _, _ = lake
    record = tmp_path / "runs.jsonl"
    command = [str(Path(sys.executable).with_name("lakehouse")), "dbt", "loop", "--every", "1s", "--runs", "2",
               "--record", str(record), "run", "--select", "user_events", "events_by_type_daily"]
    result = subprocess.run(command, env=cli_env(own), capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    runs = [json.loads(line) for line in record.read_text().splitlines()]
    assert [r["run"] for r in runs] == [1, 2] and all(r["success"] for r in runs)
    assert all(set(r["models"]) == {"user_events", "events_by_type_daily"} for r in runs)
    # one Spark application served both runs: the session stayed warm
    assert runs[0]["spark_application"] and runs[0]["spark_application"] == runs[1]["spark_application"]
    assert result.stderr.count("dbt loop run ") == 2  # log lines, on standard error


def land_employee_copies(session, shift: int, ingested_at) -> list[int]:
    """Three rows of bronze.employees appended again as new records (ids and offsets shifted by
    ``shift``), stamped ``ingested_at``, as a late or crashed batch lands them: their ids."""
    from pyspark.sql import functions as F

    landed = session.table("bronze.employees").orderBy("_kafka_offset").limit(3) \
        .withColumn("id", F.col("id") + F.lit(shift)) \
        .withColumn("_kafka_offset", F.col("_kafka_offset") + F.lit(shift)) \
        .withColumn("_ingested_at", F.lit(ingested_at))
    ids = sorted(r.id for r in landed.select("id").collect())
    landed.writeTo("bronze.employees").append()
    return ids


def test_a_late_commit_stamped_before_the_last_run_is_read(lake, increments):
    """A replay of dead letters, or a batch held up, can commit after a dbt run with `_ingested_at`
    stamps older than what that run read: an increment bounded by time (the newest stamp seen,
    less the overlap window) misses them; one bounded by the bronze snapshots committed since
    the last run does not."""

    own, session, target = lake
    bronze = "bronze.employees"
    newest = session.sql(f"select max(_ingested_at) from {bronze}").first()[0]
    ids = land_employee_copies(session, 900_000_000, newest - timedelta(hours=2))
    run_dbt(own, ["run", "--select", "employees"], target_dir=target, capture=True)
    found = session.sql(f"select employee_id from silver.employees where employee_id in ({', '.join(map(str, ids))})")
    assert sorted(r.employee_id for r in found.collect()) == ids


def test_a_run_whose_recorded_snapshot_was_expired_reads_by_sequence_number(lake, increments):
    """Maintenance can expire the bronze snapshot a model recorded, and the snapshots after it
    with it. The data sequence number recorded beside it still tells the files committed since:
    rows stamped two hours before the newest (a crashed batch completed later with its original
    instant) are read, where the overlap window back from the newest stamp would miss them."""

    own, session, target = lake
    bronze = "bronze.employees"
    recorded = next(r.value for r in session.sql("show tblproperties silver.employees").collect()
                    if r.key == f"lakehouse.input-snapshot.{bronze}")
    newest = session.sql(f"select max(_ingested_at) from {bronze}").first()[0]
    ids = land_employee_copies(session, 800_000_000, newest - timedelta(hours=2))
    session.sql(f"call lake.system.expire_snapshots(table => '{bronze}', "
                f"older_than => timestamp'{datetime.now(UTC) + timedelta(minutes=1):%Y-%m-%d %H:%M:%S}', "
                "retain_last => 1)").collect()
    history = [r.snapshot_id for r in session.sql(f"select snapshot_id from {bronze}.history").collect()]
    assert int(recorded) not in history, (recorded, history)
    run_dbt(own, ["run", "--select", "employees"], target_dir=target, capture=True)
    found = session.sql(f"select employee_id from silver.employees where employee_id in ({', '.join(map(str, ids))})")
    assert sorted(r.employee_id for r in found.collect()) == ids


def test_a_run_after_compaction_reads_from_what_was_appended(lake, increments):
    """Compaction commits a `replace` snapshot whose files hold rows read long ago beside rows not
    read yet. The next run's bound comes from the files the appends added (their entries keep
    their bounds), not from the compacted files, which would re-read every partition compacted."""

    own, session, target = lake
    bronze = "bronze.employees"
    newest = session.sql(f"select max(_ingested_at) from {bronze}").first()[0]
    stamp = (newest + timedelta(minutes=1)).replace(microsecond=0)
    ids = land_employee_copies(session, 700_000_000, stamp)
    [compacted] = session.sql(f"call lake.system.rewrite_data_files(table => '{bronze}', "
                              "options => map('rewrite-all', 'true'))").collect()
    assert compacted.rewritten_data_files_count > 1, compacted
    run_dbt(own, ["run", "--select", "employees"], target_dir=target, capture=True)
    compiled = (target / "compiled" / "lakehouse" / "models" / "silver" / "employees.sql").read_text()
    assert f"_ingested_at >= timestamp'{stamp:%Y-%m-%d %H:%M:%S}'" in compiled, compiled
    found = session.sql(f"select employee_id from silver.employees where employee_id in ({', '.join(map(str, ids))})")
    assert sorted(r.employee_id for r in found.collect()) == ids


def test_daily_marts_count_a_late_commit_stamped_before_their_last_run(lake, increments):
    """Silver reads a late commit (the test above); the daily marts must count it too, though
    its `_ingested_at` lies hours below what they last counted. Each equals a full refresh
    after the run."""
    from pyspark.sql import functions as F

    own, session, target = lake
    marts = ("events_by_type_daily", "sales_by_region_daily")
    for table, key in (("bronze.user_events", "event_id"), ("bronze.purchases", "transaction_id")):
        newest = session.sql(f"select max(_ingested_at) from {table}").first()[0]
        session.table(table).orderBy("_kafka_offset").limit(20) \
            .withColumn(key, F.concat(F.col(key), F.lit("-late"))) \
            .withColumn("_kafka_offset", F.col("_kafka_offset") + F.lit(700_000_000)) \
            .withColumn("_ingested_at", F.lit(newest - timedelta(hours=2))) \
            .writeTo(table).append()
    run_dbt(own, ["run", "--select", "user_events", "purchases", *marts], target_dir=target, capture=True)
    late = session.sql("select count(*) from silver.user_events where event_id like '%-late'").first()[0]
    assert late == 20  # silver has them (the snapshot path)
    incremental = {model: content(session, f"gold.{model}") for model in marts}
    run_dbt(own, ["run", "--full-refresh", "--select", *marts], target_dir=target, capture=True)
    for model in marts:
        assert content(session, f"gold.{model}") == incremental[model], model


def test_gold_follows_a_late_customer_change_stamped_before_its_last_run(lake, increments):
    """The mirror and the history read a late CDC commit (their increment is the bronze
    snapshots since their last run); the gold models that follow customers' profiles must see
    it too, though its `_ingested_at` lies hours below what they last saw (customer_activity
    follows the mirror, sales_by_region_daily the history). Customers who bought move to a
    country the seed does not know (region null): each mart equals a full refresh after the run."""
    from pyspark.sql import functions as F

    own, session, target = lake
    marts = ("customer_activity", "sales_by_region_daily")
    bronze = "bronze.customers"
    buyers = [r.customer_id for r in session.sql(
        "select customer_id from gold.customer_activity where is_known_customer and purchase_count > 0 "
        "order by customer_id limit 10").collect()]
    assert len(buyers) == 10
    newest = session.sql(f"select max(_ingested_at) from {bronze}").first()[0]
    latest = session.sql(f"""
        select * from (select *, row_number() over (partition by customer_id order by _seq desc) as n
                       from {bronze} where customer_id in ({', '.join(map(str, buyers))}))
        where n = 1""").drop("n")
    latest.withColumn("op", F.lit("u")) \
        .withColumn("country", F.lit("ZZ")) \
        .withColumn("_seq", F.struct(F.col("_seq.phase").alias("phase"),
                                     (F.col("_seq.commit_pos") + F.lit(900_000_000)).alias("commit_pos"),
                                     (F.col("_seq.change_pos") + F.lit(900_000_000)).alias("change_pos"))) \
        .withColumn("_kafka_offset", F.col("_kafka_offset") + F.lit(900_000_000)) \
        .withColumn("_ingested_at", F.lit(newest - timedelta(hours=2))) \
        .writeTo(bronze).append()
    # `customers`, the live table, is a model of its own since it is a table (macros/cdc_live.sql)
    run_dbt(own, ["run", "--select", "customers_mirror", "customers", "customers_history", *marts], target_dir=target,
            capture=True)
    moved = session.sql("select count(*) from silver.customers where country_code = 'ZZ'").first()[0]
    assert moved == len(buyers)  # the mirror has them (the snapshot path), and the live table
    incremental = {model: content(session, f"gold.{model}") for model in marts}
    run_dbt(own, ["run", "--full-refresh", "--select", *marts], target_dir=target, capture=True)
    for model in marts:
        assert content(session, f"gold.{model}") == incremental[model], model


# --- sales_by_region_daily: each sale in the region of its customer's version of its time -------

# What the mart means, written plainly over silver: the type-2 join of every purchase with the
# version of customers_history valid when it was made (a delete or truncation: no customer), a
# customer's first version reaching back when it is a snapshot read.
PLAIN_SALES_BY_REGION = """
    select to_date(purchases.purchased_at) as sales_date,
           case when versions.customer_id is null then 'unknown customer' else regions.region end as region,
           purchases.currency, count(*) as purchase_count, count(distinct purchases.customer_id) as customer_count,
           sum(purchases.quantity) as units_sold, sum(purchases.amount) as revenue
    from silver.purchases as purchases
    left join (
        select * from (select *, op = 'R' and _seq = min(_seq) over (partition by customer_id) as reaches_back
                       from silver.customers_history)
        where op not in ('D', 'T')
    ) as versions
        on versions.customer_id = purchases.customer_id
        and (versions.reaches_back or versions.valid_from <= purchases.purchased_at)
        and (versions.valid_to is null or purchases.purchased_at < versions.valid_to)
    left join silver.country_regions as regions on regions.country_code = versions.country_code
    group by 1, 2, 3"""
MOVER, LATE_FIRST, SNAPSHOT = 8_000_001, 8_000_002, 8_000_003  # customer ids no generated row uses


class Landing:
    """Rows of two customers of our own, and their purchases, landed in bronze as the ingestion
    would land them: each a copy of a generated row with the fields that matter set."""

    def __init__(self, session):
        self.session, self.offset = session, 950_000_000

    def _next_offset(self) -> int:
        self.offset += 1
        return self.offset

    def changes(self, *changes: tuple) -> None:
        """(customer, op, position, committed at, country): `position` orders the changes of a
        customer (`_seq`), whatever order they land in and whatever their commit times say."""
        from pyspark.sql import functions as F

        template = self.session.table("bronze.customers").where("not _is_tombstone and customer_id is not null") \
            .limit(1)
        phase = template.schema["_seq"].dataType["phase"].dataType
        rows = None
        for customer, op, position, committed, country in changes:
            row = template.withColumn("customer_id", F.lit(customer).cast("bigint")) \
                .withColumn("op", F.lit(op)).withColumn("country", F.lit(country)) \
                .withColumn("_source_ts", F.lit(committed)) \
                .withColumn("_seq", F.struct(F.lit(1).cast(phase).alias("phase"),
                                             F.lit(2_000_000_000 + position).cast("bigint").alias("commit_pos"),
                                             F.lit(position).cast("bigint").alias("change_pos"))) \
                .withColumn("_kafka_offset", F.lit(self._next_offset()).cast("bigint")) \
                .withColumn("_ingested_at", F.current_timestamp())
            rows = row if rows is None else rows.unionByName(row)
        rows.writeTo("bronze.customers").append()

    def purchases(self, *purchases: tuple) -> None:
        """(transaction id, customer, purchased at, amount), one unit each, in EUR."""
        from pyspark.sql import functions as F

        template = self.session.table("bronze.purchases").where("_error_code is null").limit(1)  # a good row
        rows = None
        for transaction, customer, at, amount in purchases:
            row = template.withColumn("transaction_id", F.lit(transaction)) \
                .withColumn("customer_id", F.lit(customer).cast("bigint")) \
                .withColumn("transaction_time", F.lit(at)) \
                .withColumn("quantity", F.lit(1).cast("int")).withColumn("unit_price", F.lit(float(amount))) \
                .withColumn("amount", F.lit(float(amount))).withColumn("currency", F.lit("EUR")) \
                .withColumn("_kafka_offset", F.lit(self._next_offset()).cast("bigint")) \
                .withColumn("_ingested_at", F.current_timestamp())
            rows = row if rows is None else rows.unionByName(row)
        rows.writeTo("bronze.purchases").append()


def recomputed_days(target: Path) -> set:
    """The days the mart's last run recomputed: the day ranges inlined in its compiled query
    (macros/touched_days.sql)."""
    import re
    from datetime import date

    sql = (target / "compiled" / "lakehouse" / "models" / "gold" / "sales_by_region_daily.sql").read_text()
    days = set()
    ranges = r"purchased_at >= timestamp'(\S+) 00:00:00' and purchased_at < timestamp'(\S+) 00:00:00'"
    for start, end in re.findall(ranges, sql):
        day = date.fromisoformat(start)
        while day < date.fromisoformat(end):
            days.add(day)
            day += timedelta(days=1)
    return days


def test_sales_follow_the_customer_version_of_their_time(lake, increments):
    """A purchase counts in the region of its customer's history version valid when it was
    made. A customer moves: the sales before the move keep the old region, those after get the
    new one, and only the days of the sales after the move are recomputed. A late change lands
    between purchases already counted, another (a clock stepped back) before a customer's
    first version, a late snapshot read before a customer's first update (it holds the sales
    before it too); a delete sends the sales after it to 'unknown customer'; each run
    recomputes the days of the purchases whose version changed and no other. After each run the mart
    equals its plain definition over silver, every day, and is what a full refresh gives at the
    end; silver's totals still reconcile."""
    from expectations.runner import run_quality

    own, session, target = lake
    models = ["customers_mirror", "customers_history", "purchases", "sales_by_region_daily"]
    base = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=30)

    def at(day: int, hour: int, minute: int = 0) -> datetime:
        return base + timedelta(days=day, hours=hour, minutes=minute)

    def days(*numbers: int) -> set:
        return {base.date() + timedelta(days=n) for n in numbers}

    def run_and_check(expected_regions: dict[str, str]) -> set:
        run_dbt(own, ["run", "--select", *models], target_dir=target, capture=True)
        assert content(session, "gold.sales_by_region_daily") == sorted(
            map(tuple, session.sql(PLAIN_SALES_BY_REGION).collect()), key=repr)
        # our customers' days hold nothing else: each sale where the scenario says it belongs
        expected = {}
        for transaction, region in expected_regions.items():
            day = purchased[transaction][0].date()
            count, revenue = expected.get((day, region), (0, 0))
            expected[(day, region)] = (count + 1, revenue + purchased[transaction][1])
        rows = session.sql(f"select sales_date, region, purchase_count, revenue from gold.sales_by_region_daily "
                           f"where sales_date between date'{base.date()}' and date'{at(21, 0).date()}'").collect()
        assert {(r.sales_date, r.region): (r.purchase_count, r.revenue) for r in rows} == expected
        return recomputed_days(target)

    land = Landing(session)
    # what the other tests landed, applied first: from here on only our rows change
    run_dbt(own, ["run", "--select", *models], target_dir=target, capture=True)

    # MOVER: created in DE (Europe) on day 0 at 10:00, moved to JP (Asia-Pacific) on day 1 at
    # 18:00; a purchase a day from day 0 to 5 at noon, and one on day 0 before they existed.
    # LATE_FIRST: first known in DE on day 11; purchases on days 10, 11 and 12. SNAPSHOT: first
    # known in DE on day 20; purchases on days 19 and 21.
    purchased = {"pre": (at(0, 8), 1), **{f"p{d}": (at(d, 12), 10 + d) for d in range(6)},
                 **{f"q{d}": (at(d, 12), 10 + d) for d in (10, 11, 12)},
                 **{f"r{d}": (at(d, 12), 10 + d) for d in (19, 21)}}
    customer = {"p": MOVER, "q": LATE_FIRST, "r": SNAPSHOT}
    land.purchases(*((transaction, customer.get(transaction[0], MOVER), when, amount)
                     for transaction, (when, amount) in purchased.items()))
    land.changes((MOVER, "I", 10, at(0, 10), "DE"), (MOVER, "U", 20, at(1, 18), "JP"),
                 (LATE_FIRST, "U", 20, at(11, 0), "DE"), (SNAPSHOT, "U", 20, at(20, 0), "DE"))
    regions = {"pre": "unknown customer", "p0": "Europe", "p1": "Europe", "p2": "Asia-Pacific",
               "p3": "Asia-Pacific", "p4": "Asia-Pacific", "p5": "Asia-Pacific",
               "q10": "unknown customer", "q11": "Europe", "q12": "Europe",
               "r19": "unknown customer", "r21": "Europe"}
    run_and_check(regions)

    # MOVER moves to CA (Americas) on day 3 at 18:00: days 4 and 5 change region, and they are
    # the only days recomputed (the version the move closes is re-written, but it only ends)
    land.changes((MOVER, "U", 40, at(3, 18), "CA"))
    regions.update(p4="Americas", p5="Americas")
    assert run_and_check(regions) == days(4, 5)

    # Late changes. MOVER's change to BR (Americas) committed on day 0 at 20:00 lands between
    # the versions of day 0 and day 1 (by `_seq`): day 1's purchase, counted in Europe, moves;
    # day 0's stays, and is not recomputed. LATE_FIRST's change before its first one (lower
    # `_seq`), committed at the start of day 12 by a clock that went back: its versions start on
    # day 12 (valid_from never goes back), so day 11's purchase has no version any more: day 11
    # is recomputed (from the commit time of the version whose start rose), and day 10 (the new
    # first version restates what lies before it), day 12 is not. SNAPSHOT's snapshot read,
    # delivered after the update that followed it: a customer's first version, when a snapshot
    # read, holds the purchases before it too, so day 19's purchase is now in JP (Asia-Pacific).
    land.changes((MOVER, "U", 15, at(0, 20), "BR"), (LATE_FIRST, "I", 10, at(12, 0), "JP"),
                 (SNAPSHOT, "R", 10, at(19, 18), "JP"))
    regions.update(p1="Americas", q11="unknown customer", r19="Asia-Pacific")
    assert run_and_check(regions) == days(1, 10, 11, 19)

    # MOVER is deleted on day 4 at 18:00: day 5's purchase has no customer then.
    land.changes((MOVER, "D", 50, at(4, 18), "CA"))
    regions.update(p5="unknown customer")
    assert run_and_check(regions) == days(5)

    # A late change between the JP (day 1, 18:00) and CA versions, committed before the JP one by
    # the source clock (day 1, 06:00): it takes over from day 1 at 18:00 (the JP version is left
    # empty), and the days 2 and 3 go to US (Americas).
    land.changes((MOVER, "U", 30, at(1, 6), "US"))
    regions.update(p2="Americas", p3="Americas")
    assert run_and_check(regions) == days(2, 3)

    # the same rows from scratch, and silver's totals on every day
    incremental = content(session, "gold.sales_by_region_daily")
    run_dbt(own, ["run", "--full-refresh", "--select", "sales_by_region_daily"], target_dir=target, capture=True)
    assert content(session, "gold.sales_by_region_daily") == incremental
    quality = run_quality(session, own, layer="gold", stream="purchases", full=True)
    assert quality.result("gold.sales_by_region_daily.reconciliation", "expect_column_values_to_be_null",
                          "mismatch").success


# What each MERGE of a run reads of its target, besides the rows' positions: the columns its
# match needs (keys, sequence) and nothing its assignments could take from the change instead
# (docs/models.md, "What a MERGE reads"). All are merge-on-read: the target's read is a column-
# pruned join side, never a whole-file rewrite. A history's ordinary run (no late change, no
# truncation) matches open versions only: `valid_to is null` on the target is what lets Iceberg
# skip the closed versions' partitions, so that MERGE reads valid_to too.
MERGE_TARGET_READS = {
    "silver.customers_mirror": {"customer_id", "_seq"},
    "silver.accounts_mirror": {"account_id", "_seq"},
    "silver.customers_history": {"customer_id", "_seq", "valid_to"},
    "silver.accounts_history": {"account_id", "_seq", "valid_to"},
    # the live tables: matched by key, every column set from the mirror's row (macros/cdc_live.sql)
    "silver.customers": {"customer_id"},
    "silver.accounts": {"account_id"},
    "gold.events_by_type_daily": {"event_date", "event_type"},
    "gold.customer_activity": {"customer_id"},
    # silver.cdc_transactions (merge-on-read, matched by id) reads nothing of its target here: this
    # lakehouse has no transaction topic, so its MERGE has no rows and Spark plans no target read
}


def target_reads(statements: list[dict]) -> dict[str, list[set]]:
    reads: dict[str, list[set]] = {}
    for table, columns in merge_target_reads(statements):
        reads.setdefault(table.removeprefix("lake."), []).append(set(columns))
    return reads


def test_every_merge_reads_only_the_target_columns_it_needs(increments):
    """The plans Spark ran for the last incremental `dbt run` (its event log): every MERGE's
    read of its target table reads the match's columns only, and every MERGE of the run is
    listed here (a new one must say what it reads). On the CDC mirror, whose changes may leave
    a column out (`_unavailable`), this failed before the MERGE named only the columns some
    change lacks: it read every column of the row."""
    statements, _, _, _ = increments
    assert target_reads(statements) == {table: [columns] for table, columns in MERGE_TARGET_READS.items()}


def test_a_merge_reads_a_mirror_column_only_when_a_change_lacks_it(lake, increments):
    """A change that did not carry a column (`_unavailable`, still null: no earlier change of
    the increment had it) keeps the mirror's value: the MERGE reads that column, and no other
    beyond key and sequence. Runs after the module's other tests (it lands a change)."""
    from pyspark.sql import functions as F

    own, session, target = lake
    key, email = session.sql("select customer_id, email from silver.customers_mirror "
                             "where not _is_deleted and customer_id is not null order by customer_id limit 1").first()
    change = session.table("bronze.customers").where(F.col("customer_id") == key) \
        .orderBy(F.col("_seq").desc()).limit(1) \
        .withColumn("op", F.lit("U")).withColumn("tier", F.lit("platinum")) \
        .withColumn("email", F.lit(None).cast("string")).withColumn("_unavailable", F.array(F.lit("email"))) \
        .withColumn("_seq", F.struct(F.col("_seq.phase").alias("phase"),
                                     F.lit(3_000_000_000).cast("bigint").alias("commit_pos"),
                                     F.lit(0).cast("bigint").alias("change_pos"))) \
        .withColumn("_kafka_offset", F.lit(960_000_000).cast("bigint")) \
        .withColumn("_ingested_at", F.current_timestamp())
    change.writeTo("bronze.customers").append()
    statements = run_with_event_log(own, target, own.home / "spark-events-carried",
                                    ["run", "--select", "customers_mirror"])
    assert target_reads(statements) == {"silver.customers_mirror": [{"customer_id", "_seq", "email"}]}
    row = session.sql(f"select email, tier from silver.customers_mirror where customer_id = {key}").first()
    assert (row.email, row.tier) == (email, "platinum")


# --- the histories: a run reads the open versions, and gives what a full build gives -----------

HISTORIES = {"silver.customers_history": "customer_id", "silver.accounts_history": "account_id"}


def history_files(session, table: str) -> tuple[int, int]:
    """(live data files, those holding no open version: every row's valid_to set)."""
    row = session.sql(f"select count(*), count_if(readable_metrics.valid_to.null_value_count = 0) "
                      f"from {table}.files where content = 0").first()
    return row[0], row[1]


def test_an_ordinary_history_run_reads_no_closed_version(lake, increments):
    """An increment of updates, deletes and new keys, each later than every stored version of its
    key: the history's run reads, of its own table, the files of open versions only (the
    partition `valid_to is null`), in its planning query, its select and its MERGE; no file of
    closed versions, though the history has them. Before the histories were partitioned by
    years(valid_to), every run read every file of the table twice, and no file held closed
    versions only (each run's files mixed the new open versions with those it closed)."""
    own, session, target = lake
    _, tables, _, _ = increments
    run_dbt(own, ["run", "--select", *(t.split(".")[1] for t in HISTORIES)], target_dir=target, capture=True)
    files = {table: history_files(session, table) for table in HISTORIES}
    for table, (total, closed) in files.items():
        assert 0 < closed < total, (table, total, closed)  # closed versions have files of their own
    landed = datetime.now(UTC)
    load_increment(session, tables, HISTORY, INCREMENT, INCREMENTS + 1, landed, late_share=0, late_days=1)
    statements = run_with_event_log(own, target, own.home / "spark-events-history",
                                     ["run", "--select", *(t.split(".")[1] for t in HISTORIES)])
    for table, (total, closed) in files.items():
        scans = [scan for statement in statements for scan in statement["scans"]
                 if scan["table"] == f"lake.{table}"]
        assert len(scans) >= 3, (table, scans)  # the planning query, the select, the MERGE
        for scan in scans:
            assert scan["data_files"] <= total - closed, (table, scan, total, closed)
        compiled = (target / "compiled" / "lakehouse" / "models" / "silver" / f"{table.split('.')[1]}.sql").read_text()
        assert "where stored.valid_to is null" in compiled, table


# A dbt host whose clock is this many seconds ahead of this one: within the minute Iceberg accepts
# a commit stamped before its parent (this host's runs commit after that host's to the same tables)
OTHER_HOST_AHEAD = 55


def test_gold_and_a_live_table_count_the_rows_of_a_run_on_a_host_whose_clock_is_behind(lake, increments):
    """Two dbt hosts, this one 55 s behind the other (Debian's faketime runs `lakehouse dbt run`
    55 s ahead): the other runs silver, this one gold and a live table (their marks: the newest
    silver stamps they counted), then silver again after an increment, then gold and the live
    table. Stamped with this host's clock, that silver run's rows fell before what gold and the
    live table had counted, and they skipped them for good (headcount short, deleted customers
    live). The run stamp is later than every stamp its table holds, whatever the clock."""
    import shutil

    own, session, target = lake
    _, tables, _, _ = increments
    silver, marts = ["employees", "customers_mirror"], ["headcount_by_team_role", "customers"]
    faketime = shutil.which("faketime")
    if faketime is None:
        pytest.fail("faketime is not installed: `make faketime` installs it (Debian package faketime)")
    load_increment(session, tables, HISTORY, INCREMENT, 6, datetime.now(UTC), late_share=0, late_days=1)
    lakehouse = str(Path(sys.executable).with_name("lakehouse"))
    other_host = subprocess.run([faketime, "-f", f"+{OTHER_HOST_AHEAD}s", lakehouse, "dbt", "run", "--select", *silver],
                                env=cli_env(own), capture_output=True, text=True, timeout=1800)
    assert other_host.returncode == 0, other_host.stdout[-3000:] + other_host.stderr[-3000:]
    ahead = {table: session.sql(f"select max(_loaded_at) from silver.{table}").first()[0] for table in silver}
    run_dbt(own, ["run", "--select", *marts], target_dir=target, capture=True)
    load_increment(session, tables, HISTORY, INCREMENT, 7, datetime.now(UTC), late_share=0, late_days=1)
    run_dbt(own, ["run", "--select", *silver, *marts], target_dir=target, capture=True)
    plain = session.sql(PLAIN_MARTS["headcount_by_team_role"])
    mart = session.table("gold.headcount_by_team_role").select(*plain.columns)
    assert sorted(map(tuple, mart.collect()), key=repr) == sorted(map(tuple, plain.collect()), key=repr)
    live = session.table("silver.customers")
    mirrored = session.table("silver.customers_mirror").where("not _is_deleted").select(*live.columns)
    assert sorted(map(tuple, live.collect()), key=repr) == sorted(map(tuple, mirrored.collect()), key=repr)
    for table in silver:  # because this host's run stamped its rows after the other host's
        assert session.sql(f"select min(_loaded_at) from silver.{table} "
                           f"where _loaded_at > timestamp'{ahead[table]}'").first()[0] is not None, table


def versions(session, table: str) -> list[tuple]:
    """The history as its readers see it: every column but the run stamps."""
    frame = session.table(table).drop("_loaded_at", "_first_loaded_at")
    return sorted(map(tuple, frame.collect()), key=repr)


def test_an_incremental_history_equals_a_full_build(lake, increments):
    """Runs with late changes (between stored versions, and before a key's first one), changes
    landing out of order (a later one first, in the same and in separate increments), a
    truncation and changes after it, then an ordinary increment: the incremental history is,
    row for row, what a full refresh builds from the same changelog (valid_from, valid_to,
    is_current, op and values). The ordinary runs read open versions only, the others every
    version of the touched keys. Runs last in the module: the truncation ends every customer."""
    from pyspark.sql import functions as F

    own, session, target = lake
    land = Landing(session)
    base = datetime.now(UTC).replace(microsecond=0) - timedelta(days=3)
    compiled = target / "compiled" / "lakehouse" / "models" / "silver" / "customers_history.sql"
    A, B = MOVER + 100, MOVER + 101

    def run(reads_open_only: bool) -> None:
        run_dbt(own, ["run", "--select", "customers_history"], target_dir=target, capture=True)
        assert ("where stored.valid_to is null" in compiled.read_text()) == reads_open_only

    run(True)  # what the module's other tests landed
    land.changes((A, "I", 10, base, "DE"), (A, "U", 30, base + timedelta(hours=3), "FR"),
                 (B, "U", 20, base + timedelta(hours=2), "IT"))  # B: an update before its insert
    run(True)
    land.changes((A, "U", 40, base + timedelta(hours=4), "JP"))
    run(True)
    # late: A's change between 10 and 30 (its commit time before 10's: valid_from keeps order), B's insert
    land.changes((A, "U", 20, base - timedelta(hours=1), "BR"), (B, "I", 10, base + timedelta(hours=1), "US"))
    run(False)
    # a truncation (no key) after every stored change, then A comes back
    template = session.table("bronze.customers").where("not _is_tombstone and customer_id is not null").limit(1)
    phase = template.schema["_seq"].dataType["phase"].dataType
    template.withColumn("customer_id", F.lit(None).cast("bigint")).withColumn("op", F.lit("T")) \
        .withColumn("_source_ts", F.lit(base + timedelta(hours=5))) \
        .withColumn("_seq", F.struct(F.lit(1).cast(phase).alias("phase"),
                                     F.lit(2_100_000_000).cast("bigint").alias("commit_pos"),
                                     F.lit(0).cast("bigint").alias("change_pos"))) \
        .withColumn("_kafka_offset", F.lit(970_000_000).cast("bigint")) \
        .withColumn("_ingested_at", F.current_timestamp()).writeTo("bronze.customers").append()
    run(False)
    land.changes((A, "I", 100_000_000 + 50, base + timedelta(hours=6), "CA"))
    run(True)
    incremental = versions(session, "silver.customers_history")
    assert [(r[0], r[1]) for r in session.sql(
        f"select op, country_code from silver.customers_history where customer_id = {A} order by _seq").collect()] \
        == [("I", "DE"), ("U", "BR"), ("U", "FR"), ("U", "JP"), ("T", "JP"), ("I", "CA")]
    run_dbt(own, ["run", "--full-refresh", "--select", "customers_history"], target_dir=target, capture=True)
    assert versions(session, "silver.customers_history") == incremental
