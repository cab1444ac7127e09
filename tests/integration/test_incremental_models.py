"""The whole project's incremental runs: cost that follows the change, results that do not.

A lakehouse of its own gets a bronze history for every stream, written straight into the bronze
tables the ingestion creates (the generator of benchmarks/dbt_scaling.py), and `dbt run`
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
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from benchmarks._spark_events import event_log_env, newest_event_log, sql_breakdown
from benchmarks.dbt_scaling import create_bronze, load_history, load_increment
from lakehouse.operations.dbt import run_dbt
from tests.integration.own_lakehouse import cli_env, own_lakehouse

pytestmark = pytest.mark.integration

HISTORY = 4_000  # rows per stream, CDC keys
INCREMENT = 400  # events per event stream, changes per CDC stream
DAYS = 4
INCREMENTS = 3
GOLD = ("events_by_type_daily", "sales_by_region_daily", "customer_activity", "headcount_by_team_role",
        "account_balance_summary")
INCREMENTAL_GOLD = ("events_by_type_daily", "sales_by_region_daily", "customer_activity", "headcount_by_team_role")


@pytest.fixture(scope="module")
def lake(spark, settings, tmp_path_factory):
    with own_lakehouse(spark, settings, tmp_path_factory, "incremental") as lakehouse:
        yield lakehouse


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
    from lakehouse.core.settings import PROJECT_ROOT
    from lakehouse.operations.dbt import dbt_env, dbt_executable

    env = {**dbt_env(own, target), **event_log_env(events)}
    result = subprocess.run([dbt_executable(), *args], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:]
    return sql_breakdown(newest_event_log(events))


@pytest.fixture(scope="module")
def increments(lake):
    """The history built, then INCREMENTS increments applied one `dbt run` each; the last run
    with Spark's event log. Returns the last run's statements, the bronze tables, and per bronze
    table the files and rows its newest increment added (what the last run may read) and its
    total files and rows."""
    own, session, target = lake
    tables = create_bronze(session, own)
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    load_history(session, tables, HISTORY, today - timedelta(days=DAYS), today)
    run_dbt(own, ["seed"], target_dir=target, capture=True)
    run_dbt(own, ["run"], target_dir=target, capture=True)
    statements, newest, before = None, {}, {}
    for number in range(1, INCREMENTS + 1):
        if number == INCREMENTS:
            before = {table: last_commit(session, table) for table in tables.values()}
        # an hour apart, far more than the 10-minute overlap, which a run falls back to when it
        # has no record of the bronze snapshot its last run read: it would then re-read the
        # previous increment (its rows carry the mark)
        landed = today + timedelta(hours=number)
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
    return statements, tables, newest


def test_a_run_reads_only_the_newest_bronze_files(increments):
    statements, tables, newest = increments
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
    assert result.stdout.count("dbt loop run ") == 2


def test_a_late_commit_stamped_before_the_last_run_is_read(lake, increments):
    """A replay of dead letters, or a batch held up, can commit after a dbt run with `_ingested_at`
    stamps older than what that run read: an increment bounded by time (the newest stamp seen,
    less the overlap window) misses them; one bounded by the bronze snapshots committed since
    the last run does not."""
    from pyspark.sql import functions as F

    own, session, target = lake
    bronze = "bronze.employees"
    newest = session.sql(f"select max(_ingested_at) from {bronze}").first()[0]
    late = session.table(bronze).orderBy("_kafka_offset").limit(3) \
        .withColumn("id", F.col("id") + F.lit(900_000_000)) \
        .withColumn("_kafka_offset", F.col("_kafka_offset") + F.lit(900_000_000)) \
        .withColumn("_ingested_at", F.lit(newest - timedelta(hours=2)))
    ids = sorted(r.id for r in late.select("id").collect())
    late.writeTo(bronze).append()
    run_dbt(own, ["run", "--select", "employees"], target_dir=target, capture=True)
    found = session.sql(f"select employee_id from silver.employees where employee_id in ({', '.join(map(str, ids))})")
    assert sorted(r.employee_id for r in found.collect()) == ids


def test_a_run_whose_recorded_snapshot_was_expired_reads_by_sequence_number(lake, increments):
    """Maintenance can expire the bronze snapshot a model recorded, and the snapshots after it
    with it. The data sequence number recorded beside it still tells the files committed since:
    rows stamped two hours before the newest (a crashed batch completed later with its original
    instant) are read, where the overlap window back from the newest stamp would miss them."""
    from pyspark.sql import functions as F

    own, session, target = lake
    bronze = "bronze.employees"
    recorded = next(r.value for r in session.sql("show tblproperties silver.employees").collect()
                    if r.key == f"lakehouse.input-snapshot.{bronze}")
    newest = session.sql(f"select max(_ingested_at) from {bronze}").first()[0]
    landed = session.table(bronze).orderBy("_kafka_offset").limit(3) \
        .withColumn("id", F.col("id") + F.lit(800_000_000)) \
        .withColumn("_kafka_offset", F.col("_kafka_offset") + F.lit(800_000_000)) \
        .withColumn("_ingested_at", F.lit(newest - timedelta(hours=2)))
    ids = sorted(r.id for r in landed.select("id").collect())
    landed.writeTo(bronze).append()
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
    from pyspark.sql import functions as F

    own, session, target = lake
    bronze = "bronze.employees"
    newest = session.sql(f"select max(_ingested_at) from {bronze}").first()[0]
    stamp = (newest + timedelta(minutes=1)).replace(microsecond=0)
    landed = session.table(bronze).orderBy("_kafka_offset").limit(3) \
        .withColumn("id", F.col("id") + F.lit(700_000_000)) \
        .withColumn("_kafka_offset", F.col("_kafka_offset") + F.lit(700_000_000)) \
        .withColumn("_ingested_at", F.lit(stamp))
    ids = sorted(r.id for r in landed.select("id").collect())
    landed.writeTo(bronze).append()
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
    """The mirror reads a late CDC commit (its increment is the bronze snapshots since its last
    run); the gold models that follow customers' profiles must see it too, though its
    `_ingested_at` lies hours below what they last saw. Customers who bought move to a country
    the seed does not know (region null): each mart equals a full refresh after the run."""
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
    run_dbt(own, ["run", "--select", "customers_mirror", *marts], target_dir=target, capture=True)
    moved = session.sql("select count(*) from silver.customers where country_code = 'ZZ'").first()[0]
    assert moved == len(buyers)  # the mirror has them (the snapshot path)
    incremental = {model: content(session, f"gold.{model}") for model in marts}
    run_dbt(own, ["run", "--full-refresh", "--select", *marts], target_dir=target, capture=True)
    for model in marts:
        assert content(session, f"gold.{model}") == incremental[model], model
