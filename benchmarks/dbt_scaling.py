"""dbt scaling: the same increment, run by the whole project's `dbt run`, on lakehouses whose
bronze history differs 10x, in two shapes.

What is measured: for each lakehouse ("1x", "10x-keys", "10x-versions"), after its history is built, one
increment lands in bronze and `dbt run` (the whole project, as `lakehouse dbt run` runs it, in
its own process, against a private state folder) applies it. Per model: its seconds (from
run_results.json, without dbt's and the JVM's start-up), the rows and data files it read per
table and the files Iceberg skipped (Spark's scan metrics, from the event log of the dbt
process: benchmarks/_spark_events.py), and the rows it wrote (the Iceberg snapshots it
committed). The run's statements are tied to a model by time: those that started while dbt
compiled or executed it (a model's bounds and touched days are queried when it compiles).

The lakehouses (`--shape` picks the 10x ones; both by default):

- 1x: `--scale` rows per event stream (user_events, purchases, employees) and per CDC changelog
  (customers, accounts: one snapshot row per key, so the key space is `--scale`).
- 10x-keys (shape `keys`): 10 x `--scale` rows per stream and 10 x `--scale` keys, one snapshot
  row each: a key space ten times larger.
- 10x-versions (shape `versions`): 10 x `--scale` rows per stream, but the same `--scale` keys
  with ten versions each in the changelogs (a snapshot read, then nine updates spread over the
  history), so the histories hold ten versions per key: a table whose history of versions grows
  while its keys do not, as years of running give. Events reference the same `--scale`
  customers.

  The daily rate is the same; a 10x history covers 10 x `--days` days. Written
  straight into bronze with Spark, in the bronze tables the ingestion creates (its own code:
  decoders' schemas, ingestion/bronze.py), ending at the start of today; not through Kafka,
  which would only make the setup slower. Then `dbt seed` and `dbt run` build silver and gold
  from it (reported, not the measurement).
- the increment: `--increment` events per event stream (event times in the last hour; a
  `--late-share` of them late, up to `--late-days` days back, as the demo's producers send
  them) and `--increment` changes per CDC stream (80% updates and 10% deletes of existing keys,
  10% new keys), ingested now; with `--patterns skewed`, most of the changes (`--hot-share`)
  update a few hot keys (`--hot-keys`) many times instead. `--rounds` increments, one `dbt run`
  each (default 2: the first incremental run after the build, then a steady one), taking the
  patterns in turn.

    .venv/bin/python benchmarks/dbt_scaling.py                        # 1M and 10M rows: the issue's sizes
    .venv/bin/python benchmarks/dbt_scaling.py --scale 100000 --days 3  # 100k and 1M: a check in minutes
    .venv/bin/python benchmarks/dbt_scaling.py --shape versions       # 1x and 10x-versions only
    .venv/bin/python benchmarks/dbt_scaling.py --shape keys --rounds 4 --patterns uniform skewed

Prints progress, a table per lakehouse and a comparison, then a final `RESULT {json}` line
with "keys_ratio" and "versions_ratio" (a 10x lakehouse's total model seconds over the 1x one's,
last round of uniform changes; "..._ratio_skewed" the last round of skewed ones, when
`--patterns` has them; "..._per_round" for every round) and, per model, "rows_read" (per table,
every lakehouse, each pattern's last round). Rows and files read do not depend on the
machine's load; seconds do: the CPU time other processes used during each run is reported
(`other_cpu_s`). Nothing asserts on time. Needs `make setup` (jars linked, never fetched).
State folders are temporary and removed at the end unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._bronze_rows import append_rows  # noqa: E402
from benchmarks._spark_events import event_log_env, newest_event_log, sql_breakdown  # noqa: E402
from benchmarks.merge_scaling import ProcessSampler, bench_settings, iso_text  # noqa: E402
from lakehouse.core.locks import dbt_run_lock  # noqa: E402
from lakehouse.core.settings import PROJECT_ROOT, Settings, default_home  # noqa: E402
from lakehouse.operations.dbt import dbt_env, dbt_executable  # noqa: E402

STREAMS = ("user_events", "purchases", "employees", "customers", "accounts")
EVENT_STREAMS = ("user_events", "purchases", "employees")
CHANGE_MIX = (("U", 0.8), ("D", 0.1), ("I", 0.1))
EVENT_TYPES = ("page_view", "search", "add_to_cart", "checkout", "login", "logout")
DEVICES = ("web", "ios", "android")
STORES = (("S-001", "EUR"), ("S-002", "EUR"), ("S-005", "GBP"), ("S-007", "USD"), ("S-009", "PLN"), ("S-010", "SEK"))
TEAMS = (("Payments", "Berlin"), ("Checkout", "Berlin"), ("Search", "Amsterdam"), ("Analytics", "Lisbon"),
         ("Mobile", "Warsaw"), ("Security", "Dublin"))
ROLES = ("DEVELOPER", "MANAGER", "ARCHITECT")
ACCOUNT_TYPES = ("checking", "savings", "credit")
STATUSES = ("active", "frozen", "closed")
CURRENCIES = ("EUR", "USD", "GBP")
TIERS = ("bronze", "silver", "gold")
COUNTRIES = ("DE", "US", "FR", "BR", "JP", "IN", "GB", "ES", "IT", "CA")  # the country_regions seed's
# a 10x lakehouse's model seconds over the 1x one's, per shape (issue 44)
TARGET_RATIOS = {"keys": 1.5, "versions": 1.15}
TARGET_READ_FACTOR = 3  # rows read from bronze and silver per row of increment, a model's own table aside


def progress(message: str) -> None:
    print(f"[{datetime.now():%H:%M:%S}] {message}", flush=True)


# --- bronze: the tables the ingestion creates -------------------------------------------------

def create_bronze(spark, settings: Settings) -> dict[str, str]:
    """Every stream's bronze table, created by the ingestion's own code; {stream: table}."""
    from ingestion import bronze
    from ingestion.decoders import decoder_for
    from lakehouse.contracts.streams import get_stream
    from lakehouse.core.spark import ensure_namespaces

    ensure_namespaces(spark)
    tables = {}
    for stream in STREAMS:
        spec = get_stream(stream)
        decoder = decoder_for(spark, settings, spec)
        decoder.refresh()
        bronze.ensure_table(spark, spec.bronze_table, decoder.bronze_schema(), spec.partitioning)
        tables[stream] = spec.bronze_table
    # purchases v2 (payment_method) as the ingestion adds it when the producer registers v2
    if "payment_method" not in spark.table(tables["purchases"]).columns:
        spark.sql(f"alter table {tables['purchases']} add column payment_method string")
    return tables


def pick(values, salt, column="id"):
    """A value of `values` chosen by a hash of `column`: deterministic, evenly spread."""
    from pyspark.sql import functions as F

    index = F.pmod(F.xxhash64(F.col(column), F.lit(salt)), F.lit(len(values))) + 1
    return F.element_at(F.array(*[F.lit(v) for v in values]), index.cast("int"))


def spread(column, low, high, salt):
    """An integer in [low, high) from a hash of `column`."""
    from pyspark.sql import functions as F

    return F.lit(low) + F.pmod(F.xxhash64(F.col(column), F.lit(salt)), F.lit(high - low))


def kafka_columns(topic: str, ingested_at, batch_id):
    from pyspark.sql import functions as F

    return [
        F.lit(topic).alias("_kafka_topic"),
        F.pmod(F.col("id"), F.lit(3)).cast("int").alias("_kafka_partition"),
        F.col("id").cast("bigint").alias("_kafka_offset"),
        (ingested_at - F.expr("interval 2 seconds")).alias("_kafka_timestamp"),
        F.col("id").cast("string").alias("_kafka_key"),
        ingested_at.alias("_ingested_at"),
        batch_id.cast("bigint").alias("_batch_id"),
    ]


def ingested_times(start: datetime, end: datetime, count: int):
    """Row `id` (0..count-1) ingested evenly between start and end, in whole seconds."""
    from pyspark.sql import functions as F

    span = max(1, int((end - start).total_seconds()))
    offset = (F.col("id") * F.lit(span) / F.lit(max(count, 1))).cast("bigint")
    return F.lit(start) + F.make_interval(secs=offset), (offset / 3600).cast("bigint")


def event_rows(spark, stream: str, ids, ingested_at, batch_id, keys: int, late_days):
    """Bronze rows of an event stream for the ids of DataFrame `ids` (column id)."""
    from pyspark.sql import functions as F

    # the event happened up to a minute before it landed; a late one `late_days` days before
    happened = ingested_at - F.make_interval(secs=spread("id", 1, 60, 11)) - F.make_interval(days=late_days)
    customer = spread("id", 1, keys + 1, 12)
    if stream == "user_events":
        columns = [
            F.concat(F.lit("e-"), F.col("id").cast("string")).alias("event_id"),
            customer.cast("bigint").alias("customer_id"),
            F.concat(F.lit("s-"), customer.cast("string"), F.lit("-"), spread("id", 1, 21, 13).cast("string"))
             .alias("session_id"),
            pick(EVENT_TYPES, 14).alias("event_type"),
            happened.alias("event_timestamp"),
            F.concat(F.lit("/products/P-"), spread("id", 1, 501, 15).cast("string")).alias("page"),
            pick(DEVICES, 16).alias("device"),
            spread("id", 5, 120_000, 17).cast("bigint").alias("duration_ms"),
            F.lit(None).cast("string").alias("_rescued"),
        ]
    elif stream == "purchases":
        store = spread("id", 0, len(STORES), 18).cast("int")
        price = (spread("id", 100, 20_000, 19) / F.lit(100.0))
        quantity = spread("id", 1, 6, 20).cast("int")
        columns = [
            F.concat(F.lit("t-"), F.col("id").cast("string")).alias("transaction_id"),
            customer.cast("bigint").alias("customer_id"),
            F.concat(F.lit("P-"), spread("id", 1, 501, 21).cast("string")).alias("product_id"),
            quantity.alias("quantity"),
            price.alias("unit_price"),
            F.round(price * quantity, 2).alias("amount"),
            F.element_at(F.array(*[F.lit(c) for _, c in STORES]), store + 1).alias("currency"),
            happened.alias("transaction_time"),
            F.element_at(F.array(*[F.lit(s) for s, _ in STORES]), store + 1).alias("store_id"),
            F.lit(2).alias("_schema_id"),
            pick(("card", "wallet", "cash", "voucher"), 22).alias("payment_method"),
        ]
    else:
        team = spread("id", 0, len(TEAMS), 23).cast("int")
        columns = [
            spread("id", 1, keys + 1, 24).cast("int").alias("id"),
            F.concat(F.lit("Employee "), F.col("id").cast("string")).alias("name"),
            F.concat(spread("id", 1, 200, 25).cast("string"), F.lit(" Main Street")).alias("address"),
            spread("id", 18, 66, 26).cast("int").alias("employee_age"),
            happened.alias("start_date"),
            F.struct(F.element_at(F.array(*[F.lit(t) for t, _ in TEAMS]), team + 1).alias("name"),
                     F.element_at(F.array(*[F.lit(loc) for _, loc in TEAMS]), team + 1).alias("location"))
             .alias("team"),
            pick(ROLES, 27).alias("role"),
        ]
    # `id` is the Kafka offset; the employees' own id column is computed above from it
    return ids.select(*columns, *kafka_columns(stream, ingested_at, batch_id))


def change_rows(stream: str, changes, ingested_at, batch_id):
    """Bronze rows of a CDC stream: `changes` has key, op, position (the change's sequence)."""
    from pyspark.sql import functions as F

    key = F.col("key")
    committed = ingested_at - F.expr("interval 30 seconds")
    if stream == "customers":
        columns = [
            F.col("op"),
            key.cast("bigint").alias("customer_id"),
            F.concat(F.lit("Customer "), key.cast("string")).alias("name"),
            F.concat(F.lit("c"), key.cast("string"), F.lit("-"), F.col("position").cast("string"),
                     F.lit("@example.com")).alias("email"),
            pick(COUNTRIES, 31, "position").alias("country"),  # an update may move the customer
            pick(("Berlin", "Paris", "Madrid", "Rome", "Lisbon"), 32, "key").alias("city"),
            pick(TIERS, 33, "position").alias("tier"),
            iso_text(F.lit(datetime(2026, 1, 1, tzinfo=UTC))).alias("created_at"),
            iso_text(committed).alias("updated_at"),
            committed.alias("_source_ts"),
            # a streamed PostgreSQL change's place (ingestion/formats.py debezium_seq)
            F.struct(F.lit(1).alias("phase"), F.col("position").cast("bigint").alias("commit_pos"),
                     F.col("position").cast("bigint").alias("change_pos")).alias("_seq"),
        ]
    else:
        from ingestion.formats import log_position_key

        position_text = F.format_string("mysql-bin-changelog.%06d:%d", F.floor(F.col("position") / 65536),
                                        (F.col("position") % 65536).cast("bigint"))
        columns = [
            F.col("op"),
            key.cast("bigint").alias("account_id"),
            # three accounts per customer (keys 1-3, 4-6, ...), so a customer may hold two in one
            # type, currency and status: account_balance_summary's distinct customers are then fewer
            # than its accounts
            ((key + F.lit(2)) / F.lit(3)).cast("bigint").alias("customer_id"),
            pick(ACCOUNT_TYPES, 35, "key").alias("account_type"),
            F.format_number(spread("position", 0, 1_000_000, 36) / F.lit(100.0), 2).alias("balance"),
            pick(CURRENCIES, 37, "key").alias("currency"),
            pick(STATUSES, 38, "position").alias("status"),
            iso_text(committed).alias("updated_at"),
            committed.alias("_source_ts"),
            # a DMS change's place (ingestion/formats.py decode_dms): the log position as DMS
            # writes a MySQL source's, and the form of it that sorts as text
            F.struct(log_position_key(position_text).alias("log_position"),
                     (F.unix_micros(committed) + F.col("position") % 1000).cast("bigint").alias("commit_us"),
                     position_text.alias("stream_position"),
                     F.col("position").cast("bigint").alias("transaction_id"),
                     F.lit(0).cast("bigint").alias("record_id")).alias("_seq"),
        ]
    return changes.withColumn("id", F.col("position")).select(
        *columns, F.lit(False).alias("_is_tombstone"), *kafka_columns(stream, ingested_at, batch_id))


def append(spark, table: str, rows) -> None:
    # `format_number` writes thousands separators: not in the source's decimal text
    if "balance" in rows.columns:
        from pyspark.sql import functions as F
        rows = rows.withColumn("balance", F.regexp_replace("balance", ",", ""))
    append_rows(spark, table, rows)


def history_slices(rows: int, start: datetime, end: datetime, recent: timedelta, batch: timedelta) -> list[tuple]:
    """Id ranges of the appends that write the history: the old part in a few large appends
    (as compaction leaves old data: files that cover hours or days), the `recent` part in one
    append per `batch` (as the streaming job's micro-batches leave it: one file per batch and
    partition), so the newest files are as small in time as they are in production."""
    span = (end - start).total_seconds()
    cut = int(rows * max(0.0, 1 - recent.total_seconds() / span))
    old = max(1, cut // 2_000_000)  # at most ~2M rows per append: bounded memory per write
    bounds = [cut * i // old for i in range(old)] if cut else []
    recent_batches = max(1, int(recent / batch))
    bounds += [cut + (rows - cut) * i // recent_batches for i in range(recent_batches)]
    bounds.append(rows)
    return [(low, high) for low, high in zip(bounds, bounds[1:], strict=False) if high > low]


def load_history(spark, tables: dict[str, str], rows: int, start: datetime, end: datetime,
                 keys: int | None = None) -> dict:
    """`rows` rows per stream ingested between start and end; returns seconds per stream.

    CDC changelogs: `keys` keys (default `rows`: one snapshot read each), each read once, then
    updated until the changelog holds `rows` changes: key k's versions are rows k, k + keys,
    k + 2 keys..., so every key's versions spread over the whole history."""
    from pyspark.sql import functions as F

    keys = keys or rows
    took = {}
    for stream in STREAMS:
        began = time.perf_counter()
        for low, high in history_slices(rows, start, end, timedelta(hours=2), timedelta(minutes=10)):
            ids = spark.range(low, high, 1, max(1, (high - low) // 500_000))
            ingested_at, hour = ingested_times(start, end, rows)
            if stream in EVENT_STREAMS:
                frame = event_rows(spark, stream, ids, ingested_at, hour, keys, F.lit(0))
            else:
                # keys 1..keys, a snapshot read each, then updates in the rows after them
                changes = ids.select((F.col("id") % keys + 1).alias("key"),
                                     F.when(F.col("id") < keys, F.lit("R")).otherwise(F.lit("U")).alias("op"),
                                     (F.col("id") + 1).alias("position"))
                frame = change_rows(stream, changes, ingested_at.cast("timestamp"), hour)
            append(spark, tables[stream], frame)
        took[stream] = round(time.perf_counter() - began, 1)
    return took


def hot_keys(keys: int, count: int) -> list[int]:
    """The skewed pattern's hot keys: `count` keys spread evenly over 1..keys (the few busy
    customers and accounts), the same in every round."""
    return [1 + i * max(1, keys // count) for i in range(min(count, keys))]


def load_increment(spark, tables: dict[str, str], size: int, count: int, round_number: int, ingested: datetime,
                   late_share: float, late_days: int, keys: int | None = None, pattern: str = "uniform",
                   hot: int = 100, hot_share: float = 0.9) -> None:
    """One increment: `count` events per event stream, `count` changes per CDC stream, on a
    history of `size` rows per stream and `keys` CDC keys (default `size`).

    CDC changes by `pattern`: "uniform", 80% updates and 10% deletes of distinct existing keys
    drawn evenly over the key space and 10% inserts of new keys; "skewed", a `hot_share` of the
    changes are updates of `hot` hot keys (each updated many times in one increment), the rest
    as in "uniform" (a hot key is never deleted)."""
    from pyspark.sql import functions as F

    keys = keys or size
    first_id = size + (round_number - 1) * count  # new offsets, event ids, transaction ids
    ids = spark.range(first_id, first_id + count, 1, 2)
    late = F.when(F.pmod(F.xxhash64(F.col("id"), F.lit(41)), F.lit(10_000)) < F.lit(int(late_share * 10_000)),
                  spread("id", 1, late_days + 1, 42)).otherwise(F.lit(0)).cast("int")
    for stream in EVENT_STREAMS:
        append(spark, tables[stream], event_rows(spark, stream, ids, F.lit(ingested), F.lit(10_000 + round_number),
                                                 keys, late))
    # CDC: updates and deletes of existing keys (hash-drawn, distinct), inserts of new keys
    hot_changes = round(count * hot_share) if pattern == "skewed" else 0
    rest = count - hot_changes
    updates, deletes = int(rest * CHANGE_MIX[0][1]), int(rest * CHANGE_MIX[1][1])
    inserts = rest - updates - deletes
    stride = max(1, keys // (updates + deletes))
    position = F.lit(10 * size * (round_number + 1)) + F.col("id")
    existing = spark.range(0, updates + deletes, 1, 2).select(
        ((F.col("id") * stride + round_number * 7) % keys + 1).alias("key"),
        F.when(F.col("id") < updates, F.lit("U")).otherwise(F.lit("D")).alias("op"),
        position.alias("position"))
    new = spark.range(updates + deletes, rest, 1, 1).select(
        (F.lit(keys + (round_number - 1) * inserts) + F.col("id") - (updates + deletes) + 1).alias("key"),
        F.lit("I").alias("op"), position.alias("position"))
    changes = existing.unionByName(new)
    if hot_changes:
        hot_list = hot_keys(keys, hot)
        changes = changes.where(~((F.col("op") == "D") & F.col("key").isin(hot_list))).unionByName(
            spark.range(rest, count, 1, 1).select(
                F.element_at(F.array(*[F.lit(k) for k in hot_list]),
                             (F.pmod(F.xxhash64(F.col("id"), F.lit(43)), F.lit(len(hot_list))) + 1).cast("int"))
                .cast("bigint").alias("key"),
                F.lit("U").alias("op"), position.alias("position")))
    for stream in ("customers", "accounts"):
        append(spark, tables[stream], change_rows(stream, changes, F.lit(ingested), F.lit(10_000 + round_number)))


# --- dbt, measured ----------------------------------------------------------------------------

def run_dbt(settings: Settings, args: list[str], home: Path) -> dict:
    """`dbt <args>` as `lakehouse dbt` runs it, with Spark's event log; models, statements, usage."""
    target = home / "dbt-target"
    events = home / "spark-events" / f"{int(time.time() * 1000)}"
    sampler = ProcessSampler()
    sampler.start()
    started = time.perf_counter()
    began = datetime.now(UTC)
    with dbt_run_lock(settings) as holder, \
            subprocess.Popen([dbt_executable(), *args], cwd=PROJECT_ROOT,
                             env={**dbt_env(settings, target), **event_log_env(events), **holder},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as process:
        sampler.dbt_pid = process.pid
        output, _ = process.communicate()
    wall = time.perf_counter() - started
    usage = sampler.finish()
    (home / "dbt-logs").mkdir(exist_ok=True)
    (home / "dbt-logs" / f"{args[0]}-{int(time.time())}.log").write_text(output)
    if process.returncode != 0:
        print(output[-6000:], file=sys.stderr)
        raise SystemExit(f"`dbt {' '.join(args)}` failed (exit {process.returncode})")
    results = json.loads((target / "run_results.json").read_text())["results"]
    log = newest_event_log(events)
    statements = sql_breakdown(log) if log else []
    return {"wall_s": round(wall, 2), "began": began, "results": results, "statements": statements, **usage}


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def per_model(run: dict) -> dict[str, dict]:
    """Seconds, scans and statements of each model of a run (statements tied by time)."""
    models = {}
    windows = []
    for result in run["results"]:
        name = result["unique_id"].rsplit(".", 1)[-1]
        if not result["unique_id"].startswith("model."):
            continue
        timing = {t["name"]: t for t in result.get("timing", [])}
        start = _ms(timing["compile"]["started_at"]) if "compile" in timing else None
        end = _ms(timing["execute"]["completed_at"]) if "execute" in timing else None
        models[name] = {"seconds": round(result["execution_time"], 2), "status": result["status"],
                        "reads": defaultdict(lambda: {"rows": 0, "data_files": 0, "skipped_data_files": 0,
                                                      "delete_files": 0, "scans": 0}),
                        "statements": 0}
        if start and end:
            windows.append((start, end, name))
    for statement in run["statements"]:
        owner = next((name for start, end, name in windows if start <= statement["start_ms"] <= end), None)
        if owner is None:
            continue
        models[owner]["statements"] += 1
        for scan in statement["scans"]:
            table = scan["table"].removeprefix("lake.")
            entry = models[owner]["reads"][table]
            entry["scans"] += 1
            for metric in ("rows", "data_files", "skipped_data_files", "delete_files"):
                entry[metric] += scan.get(metric) or 0
    for model in models.values():
        model["reads"] = dict(model["reads"])
    return models


def model_tables(spark) -> dict[str, str]:
    """{model name: its table} for the silver and gold tables dbt materializes."""
    tables = {}
    for namespace in ("silver", "gold"):
        for row in spark.sql(f"show tables in {namespace}").collect():
            if not row["isTemporary"]:
                tables[row["tableName"]] = f"{namespace}.{row['tableName']}"
    return tables


def rows_written(spark, tables: dict[str, str], since: datetime) -> dict[str, dict]:
    """Per model table: rows added, and rows deleted (by position or file), in snapshots since `since`."""
    written = {}
    for name, table in tables.items():
        try:
            snapshots = spark.sql(f"select operation, summary from {table}.snapshots where committed_at >= "
                                  f"timestamp'{since:%Y-%m-%d %H:%M:%S}'").collect()
        except Exception:  # a view (accounts, customers): writes nothing
            continue
        added = sum(int(s["summary"].get("added-records", 0)) for s in snapshots)
        deleted = sum(int(s["summary"].get("added-position-deletes", 0)) + int(s["summary"].get("deleted-records", 0))
                      for s in snapshots)
        written[name] = {"snapshots": len(snapshots), "rows_added": added, "rows_deleted": deleted}
    return written


# --- one lakehouse ----------------------------------------------------------------------------

def measure(label: str, rows: int, keys: int, days: int, root: Path, args: argparse.Namespace) -> dict:
    from lakehouse.core.spark import get_spark

    jars = (Path(default_home()) / "jars").resolve()
    home = root / label
    home.mkdir()
    (home / "jars").symlink_to(jars)
    settings = bench_settings(home, args.driver_memory)
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    result: dict = {"label": label, "rows": rows, "keys": keys, "days": days, "rounds": []}
    spark = get_spark(settings, f"bench-dbt-{label}")
    try:
        tables = create_bronze(spark, settings)
        progress(f"{label}: writing {rows:,} rows per stream ({keys:,} CDC keys) over {days} days into bronze")
        result["bronze_load_s"] = load_history(spark, tables, rows, today - timedelta(days=days), today, keys)
        progress(f"{label}: bronze loaded {result['bronze_load_s']}; dbt seed + dbt run (the build)")
        seed = run_dbt(settings, ["seed"], home)
        build = run_dbt(settings, ["run"], home)
        result["build"] = {"seed_wall_s": seed["wall_s"], "wall_s": build["wall_s"],
                           "model_s": {m: v["seconds"] for m, v in per_model(build).items()}}
        progress(f"{label}: built in {build['wall_s']} s")
        tables_of_models = model_tables(spark)
        for round_number in range(1, args.rounds + 1):
            landed = datetime.now(UTC).replace(microsecond=0)
            pattern = args.patterns[(round_number - 1) % len(args.patterns)]
            load_increment(spark, tables, rows, args.increment, round_number, landed, args.late_share, args.late_days,
                           keys, pattern, args.hot_keys, args.hot_share)
            progress(f"{label} round {round_number}: increment landed ({pattern} changes); dbt run")
            run = run_dbt(settings, ["run"], home)
            models = per_model(run)
            written = rows_written(spark, tables_of_models, run["began"])
            for name, model in models.items():
                model["written"] = written.get(name)
            total = round(sum(m["seconds"] for m in models.values()), 2)
            result["rounds"].append({"round": round_number, "pattern": pattern, "wall_s": run["wall_s"],
                                     "model_s_total": total, "dbt_cpu_s": run["dbt_cpu_s"],
                                     "other_cpu_s": run["other_cpu_s"], "peak_rss_mb": run["peak_rss_mb"],
                                     "models": models})
            progress(f"{label} round {round_number}: models {total} s, dbt wall {run['wall_s']} s, "
                     f"dbt CPU {run['dbt_cpu_s']} s, other CPU {run['other_cpu_s']} s")
    finally:
        spark.stop()
    return result


# --- report -----------------------------------------------------------------------------------

def layer_rows(model: dict, own_table: str | None) -> dict[str, int]:
    """Rows read per layer; the model's own table (a MERGE's target side) and metadata apart."""
    out = {"bronze": 0, "silver": 0, "gold": 0, "own table": 0, "metadata": 0}
    for table, read in model["reads"].items():
        parts = table.split(".")
        if len(parts) > 2:  # silver.customers_mirror.data_files, ...: metadata tables
            out["metadata"] += read["rows"]
        elif own_table and table == own_table:
            out["own table"] += read["rows"]
        elif parts[0] in out:
            out[parts[0]] += read["rows"]
    return out


def print_report(results: list[dict], increment: int) -> None:
    for r in results:
        for x in r["rounds"]:
            print(f"\n{r['label']} ({r['rows']:,} rows per stream, {r['keys']:,} CDC keys, {r['days']} days), "
                  f"round {x['round']} ({x['pattern']} changes): "
                  f"models {x['model_s_total']} s, dbt wall {x['wall_s']} s, other CPU {x['other_cpu_s']} s")
            print(f"  {'model':<26} {'s':>7}  {'bronze rows':>11} {'silver rows':>11} {'gold rows':>9} "
                  f"{'own table':>10} {'files read/skipped':>18}  {'written +/-':>14}")
            for name, m in sorted(x["models"].items()):
                rows = layer_rows(m, own_table_of(name))
                files = sum(v["data_files"] for t, v in m["reads"].items() if t.count(".") == 1)
                skipped = sum(v["skipped_data_files"] for t, v in m["reads"].items() if t.count(".") == 1)
                w = m.get("written") or {}
                print(f"  {name:<26} {m['seconds']:>7}  {rows['bronze']:>11,} {rows['silver']:>11,} "
                      f"{rows['gold']:>9,} {rows['own table']:>10,} {f'{files}/{skipped}':>18}  "
                      f"{w.get('rows_added', 0):>7,}/{w.get('rows_deleted', 0):<6,}")
    base = next((r for r in results if r["label"] == "1x"), None)
    for shape, large in ((shape, r) for r in results for shape in TARGET_RATIOS if r["label"] == f"10x-{shape}"):
        if base is None:
            break
        target = TARGET_RATIOS[shape]
        for a, b in zip(base["rounds"], large["rounds"], strict=False):
            ratio = b["model_s_total"] / a["model_s_total"] if a["model_s_total"] else None
            met = ratio is not None and ratio <= target
            shown = "n/a" if ratio is None else f"{ratio:.2f}"
            print(f"\nround {a['round']} ({a['pattern']} changes): {shape}_ratio {shown} "
                  f"(target <= {target} with uniform changes: {'met' if met else 'NOT met'})")
            for name in sorted(b["models"]):
                rows = layer_rows(b["models"][name], own_table_of(name))
                read = rows["bronze"] + rows["silver"]
                if read > TARGET_READ_FACTOR * increment:
                    print(f"  {name}: {read:,} rows read from bronze and silver at {large['label']} "
                          f"(> {TARGET_READ_FACTOR} x {increment:,})")


def own_table_of(model: str) -> str | None:
    for layer, names in (("silver", ("user_events", "purchases", "employees", "customers_mirror", "accounts_mirror",
                                     "customers_history", "accounts_history")),
                         ("gold", ("events_by_type_daily", "sales_by_region_daily", "customer_activity",
                                   "headcount_by_team_role", "account_balance_summary"))):
        if model in names:
            return f"{layer}.{model}"
    return None


def summary(results: list[dict]) -> dict:
    out: dict = {}
    base = next((r for r in results if r["label"] == "1x"), None)
    for shape in TARGET_RATIOS:
        large = next((r for r in results if r["label"] == f"10x-{shape}"), None)
        pairs = [(a["pattern"], round(b["model_s_total"] / a["model_s_total"], 3))
                 for a, b in zip(base["rounds"], large["rounds"], strict=False)
                 if a["model_s_total"]] if base and large else []
        # the issue's ratio is the uniform changes' (the last such round); skewed ones beside it
        for pattern, key in (("uniform", f"{shape}_ratio"), ("skewed", f"{shape}_ratio_skewed")):
            ratios = [ratio for kind, ratio in pairs if kind == pattern]
            if ratios or pattern == "uniform":
                out[key] = ratios[-1] if ratios else None
        out[f"{shape}_ratio_per_round"] = [ratio for _, ratio in pairs]
    out["rows_read"] = {}
    for r in results:
        # each pattern's last round: "10x-keys" (uniform), "10x-keys skewed"
        last = {x["pattern"]: x for x in r["rounds"]}
        for pattern, x in last.items():
            label = r["label"] if pattern == "uniform" else f"{r['label']} {pattern}"
            for name, m in x["models"].items():
                out["rows_read"].setdefault(name, {})[label] = {
                    **layer_rows(m, own_table_of(name)),
                    "tables": {t: v["rows"] for t, v in m["reads"].items()}}
    return out


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--scale", type=int, default=1_000_000,
                        help="history rows per stream (and CDC keys) of the 1x lakehouse; the other has 10x "
                             "(default: %(default)s)")
    parser.add_argument("--days", type=int, default=30, help="days the 1x history covers (default: %(default)s)")
    parser.add_argument("--increment", type=int, default=10_000,
                        help="events per event stream and changes per CDC stream per round (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=2, help="increments, one dbt run each (default: %(default)s)")
    parser.add_argument("--late-share", type=float, default=0.01,
                        help="share of the increment's events that are late (default: %(default)s)")
    parser.add_argument("--late-days", type=int, default=3, help="late events are up to this many days old "
                                                                 "(default: %(default)s)")
    parser.add_argument("--patterns", nargs="+", choices=["uniform", "skewed"], default=["uniform"],
                        help="the rounds' CDC change patterns, in turn: uniform (distinct keys spread over the key "
                             "space) or skewed (a --hot-share of the changes update --hot-keys hot keys); e.g. "
                             "--rounds 4 --patterns uniform skewed (default: %(default)s)")
    parser.add_argument("--hot-keys", type=int, default=100, help="hot keys of the skewed pattern "
                                                                  "(default: %(default)s)")
    parser.add_argument("--hot-share", type=float, default=0.9,
                        help="share of a skewed round's changes on the hot keys (default: %(default)s)")
    parser.add_argument("--shape", choices=["keys", "versions", "both"], default="both",
                        help="the 10x lakehouses beside the 1x one: 10x keys, 10x versions of the same keys, "
                             "or both (default: %(default)s)")
    parser.add_argument("--driver-memory", help="Spark driver memory of dbt and the setup session, e.g. 4g")
    parser.add_argument("--home-parent", type=Path, help="where to create the temporary state folders")
    parser.add_argument("--keep", action="store_true", help="keep the state folders")
    args = parser.parse_args(argv)
    if args.scale < args.increment or args.rounds < 1 or args.days < 1 or not 0 <= args.late_share <= 1:
        parser.error("--scale at least --increment, --rounds and --days at least 1, --late-share in [0, 1]")
    if not 0 <= args.hot_share <= 1 or args.hot_keys < 1:
        parser.error("--hot-share in [0, 1], --hot-keys at least 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="bench-dbt-", dir=args.home_parent))
    sizes = [("1x", args.scale, args.scale, args.days)]
    if args.shape in ("keys", "both"):
        sizes.append(("10x-keys", 10 * args.scale, 10 * args.scale, 10 * args.days))
    if args.shape in ("versions", "both"):
        sizes.append(("10x-versions", 10 * args.scale, args.scale, 10 * args.days))
    try:
        results = [measure(label, rows, keys, days, root, args) for label, rows, keys, days in sizes]
    finally:
        if args.keep:
            progress(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    print_report(results, args.increment)
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
               "load_average_end": [round(x, 2) for x in os.getloadavg()]}
    options = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    for r in results:
        for x in r["rounds"]:
            for m in x["models"].values():
                m.pop("statements", None)
    print("RESULT " + json.dumps({"benchmark": "dbt_scaling", "options": options, "machine": machine,
                                  "took_s": round(time.perf_counter() - started), **summary(results),
                                  "results": results}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
