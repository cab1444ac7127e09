"""dbt scaling: the same increment, run by the whole project's `dbt run`, on lakehouses whose
bronze history differs 10x, in two shapes.

What is measured: for each lakehouse ("1x", "10x-keys", "10x-versions"), after its history is built, one
increment lands in bronze and `dbt run` (the whole project, as `lakehouse dbt run` runs it, in
its own process, against a private state folder) applies it. Per model: its seconds (from
run_results.json, without dbt's and the JVM's start-up), the rows and data files it read per
table and the files Iceberg skipped (Spark's scan metrics, from the event log of the dbt
process: tests/support/spark_events.py), and the rows it wrote (the Iceberg snapshots it
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
  decoders' schemas, ingestion/bronze.py; tests/support/bronze_history.py writes the rows),
  ending at the start of today; not through Kafka,
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
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.merge_scaling import (  # noqa: E402
    ProcessSampler,
    add_pattern_arguments,
    bench_settings,
    check_pattern_arguments,
)
from lakehouse.core.locks import dbt_run_lock  # noqa: E402
from lakehouse.core.settings import PROJECT_ROOT, Settings, default_home  # noqa: E402
from lakehouse.operations.dbt import dbt_command_line, dbt_env  # noqa: E402

# the bronze history and increments, and the reading of a run's scans per model: shared with
# tests/integration/test_incremental_models.py, so they live in tests/support
from tests.support.bronze_history import create_bronze, load_history, load_increment  # noqa: E402
from tests.support.spark_events import (  # noqa: E402
    event_log_env,
    layer_rows,
    newest_event_log,
    own_table_of,
    per_model,
    sql_breakdown,
)

# a 10x lakehouse's model seconds over the 1x one's, per shape (issue 44)
TARGET_RATIOS = {"keys": 1.5, "versions": 1.15}
TARGET_READ_FACTOR = 3  # rows read from bronze and silver per row of increment, a model's own table aside


def progress(message: str) -> None:
    print(f"[{datetime.now():%H:%M:%S}] {message}", flush=True)


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
            subprocess.Popen(dbt_command_line(args), cwd=PROJECT_ROOT,
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
    add_pattern_arguments(parser)
    parser.add_argument("--shape", choices=["keys", "versions", "both"], default="both",
                        help="the 10x lakehouses beside the 1x one: 10x keys, 10x versions of the same keys, "
                             "or both (default: %(default)s)")
    parser.add_argument("--driver-memory", help="Spark driver memory of dbt and the setup session, e.g. 4g")
    parser.add_argument("--home-parent", type=Path, help="where to create the temporary state folders")
    parser.add_argument("--keep", action="store_true", help="keep the state folders")
    args = parser.parse_args(argv)
    if args.scale < args.increment or args.rounds < 1 or args.days < 1 or not 0 <= args.late_share <= 1:
        parser.error("--scale at least --increment, --rounds and --days at least 1, --late-share in [0, 1]")
    check_pattern_arguments(parser, args)
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
