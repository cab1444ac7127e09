"""End-to-end freshness: seconds from an event's production to its visibility in silver and gold.

The whole local chain runs at once, as a user runs it, against a private state folder:

1. the local Kafka broker (lakehouse.core.local_kafka), in the benchmark's state folder;
2. `lakehouse ingest user_events --trigger 20s`, a Spark application of its own (subprocess);
   20 s rather than the job's own default of 30 s: at 10,000 msg/s on 2 cores, 30 s misses the
   silver target below and 10 s and 20 s meet both (benchmarks/RESULTS.md, "The trigger");
   20 s makes half the bronze snapshots of 10 s;
3. a producer process sending user_events (JSON, no faults) at a steady --rate for --duration
   seconds (producers.run.produce; its achieved rate is checked and printed);
4. `lakehouse dbt loop --every <--dbt-every> run --select user_events events_by_type_daily`:
   dbt invoked again and again inside one process whose Spark session stays warm (no JVM start
   and no project parse per run), until producing has stopped and ingestion has caught up with
   Kafka and one more run has started after that; then the loop is stopped. `--dbt-mode
   process` runs `dbt run` as a process of its own each time instead, as before the loop existed.

Then, for EVERY event (read back with Spark once everything else has stopped), the latency
from its production (its Kafka timestamp: the producer's CreateTime) to:

- bronze: the commit of the Iceberg snapshot of bronze.user_events that added its row (a
  snapshot's commit time is its timestamp, `committed_at`, taken just before the catalog
  commit, which follows within a second);
- silver: the commit of the snapshot of silver.user_events (an append-only incremental model)
  that added its row. Rows are tied to snapshots through their `_file` metadata column and
  the table's `entries` metadata table (the snapshot that added each data file);
- gold: the commit of the first snapshot of gold.events_by_type_daily after that silver
  snapshot (dbt merges gold right after silver in the same run). The mapping is checked for
  every gold snapshot: its sum(event_count) must equal the row count of the silver snapshot
  current when it was committed. The benchmark fails loudly if one does not.

Only events produced after --warmup seconds (counted from the first event) are measured, so
start-up (JVMs, table creation) does not dominate. The targets (issue 22): p95 production ->
silver under 45 s, production -> gold under 60 s. Also reported: dbt runs and their durations,
ingestion batches, the producer's achieved rate, machine facts, and the peak resident memory
of each component (Kafka broker, ingestion = Python + Spark JVM, dbt = Python + Spark JVM (the
loop, or each run), producer, this process),
sampled every 0.5 s from /proc, with the largest sum of memory resident at the same time.

    .venv/bin/python benchmarks/freshness.py [--rate 10000] [--duration 300] [--warmup 60] [--trigger 20s]
    .venv/bin/python benchmarks/freshness.py --rate 500 --duration 90 --warmup 20 --trigger 10s   # a quick check

Prints progress lines, a report, and a final `RESULT {json}` line. Exit status 1 when a part
fails, when not every produced event reaches silver and gold, or when the gold mapping check
fails; a missed target or a producer that could not keep the rate is reported, not an error.
Needs `make setup` (jars in .lakehouse/jars, linked into the state folder, never fetched).
Everything it starts (broker, ingestion, dbt, producer) is stopped at the end, also on
failure or Ctrl-C; the temporary state folder is removed unless --keep or --home.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._machine import (  # noqa: E402
    MemorySampler,
    Proc,
    lakehouse_command,
    largest_process_lines,
    link_jars,
    machine_facts,
    progress,
    tree_of,
)
from lakehouse.core import local_kafka  # noqa: E402
from lakehouse.core.errors import LakehouseError  # noqa: E402
from lakehouse.core.settings import PREFIX, PROJECT_ROOT, Settings  # noqa: E402
from lakehouse.operations.dbt import interval_seconds  # noqa: E402

STREAM = "user_events"
TOPIC = "user_events"
SILVER = "silver.user_events"
GOLD = "gold.events_by_type_daily"
BRONZE = "bronze.user_events"
DBT_SELECT = ["user_events", "events_by_type_daily"]
TARGET_P95_SILVER_S = 45.0
TARGET_P95_GOLD_S = 60.0
RATE_TOLERANCE = 0.95  # the producer "kept the rate" when it reached at least this share of it
PASS_THROUGH = ("SPARK_MASTER", "SPARK_DRIVER_MEMORY", "SHUFFLE_PARTITIONS")  # LAKEHOUSE_* kept from the caller
# ingestion/job.py writes the counts with thousands separators ("read 12,000").
BATCH_LINE = re.compile(rf"{STREAM} batch (\d+): read ([\d,]+), good ([\d,]+), dead ([\d,]+), ([\d.]+)s")
READY_LINE = f"ingesting {STREAM} ("


class BenchmarkFailed(Exception):
    pass


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# --- state folder -----------------------------------------------------------------------------

def make_home(requested: Path | None) -> Path:
    if requested is None:
        home = Path(tempfile.mkdtemp(prefix="bench-freshness-"))
    else:
        home = requested.expanduser().resolve()
        if home.exists() and any(home.iterdir()):
            raise SystemExit(f"--home {home} is not empty: the benchmark needs a fresh state folder")
        home.mkdir(parents=True, exist_ok=True)
    link_jars(home)
    return home


def scrub_environment() -> None:
    """Nothing of the caller's LAKEHOUSE_* configuration leaks into the benchmark's parts (a
    state folder, a catalog or a port elsewhere), except the Spark sizing variables."""
    for key in [k for k in os.environ if k.startswith(PREFIX)]:
        if key.removeprefix(PREFIX) not in PASS_THROUGH:
            del os.environ[key]


def cli_env(settings: Settings) -> dict[str, str]:
    """The environment that points a `lakehouse` command at the benchmark's lakehouse."""
    return {**os.environ, PREFIX + "HOME": str(settings.home), PREFIX + "KAFKA_PORT": str(settings.kafka_port)}


def trigger_seconds(text: str) -> float:
    from ingestion.job import normalize_trigger

    number, unit = normalize_trigger(text).split()
    return int(number) * {"milliseconds": 0.001, "seconds": 1, "minutes": 60, "hours": 3600}[unit]


# --- the parts --------------------------------------------------------------------------------

def _produce_child(settings: Settings, rate: float, duration: float, processes: int, seed: int | None,
                   results) -> None:
    """The producer process: its own process group (its pool workers too), so the benchmark
    can stop all of it, and a terminal's Ctrl-C reaches only the benchmark."""
    os.setsid()
    from producers.run import produce

    started = time.time()
    try:
        report = produce(settings, STREAM, duration=duration, rate=rate, processes=processes, seed=seed,
                         progress=False)
    except BaseException as exc:
        results.put({"error": f"{type(exc).__name__}: {exc}"})
        raise
    results.put({"sent": report.sent, "delivered": report.delivered, "failed": report.failed,
                 "bytes": report.bytes, "seconds": round(report.seconds, 2), "errors": report.errors,
                 "started_at": round(started, 3), "ended_at": round(time.time(), 3)})


class Producer:
    def __init__(self, settings: Settings, rate: float, duration: float, processes: int, seed: int | None):
        context = multiprocessing.get_context("spawn")
        self.results = context.Queue()
        self.process = context.Process(target=_produce_child, name="freshness-producer",
                                       args=(settings, rate, duration, processes, seed, self.results))
        self.report: dict | None = None
        self.started: float | None = None

    def start(self) -> int:
        self.process.start()
        self.started = time.time()
        return self.process.pid

    def done(self) -> bool:
        """Whether producing is over (every message acknowledged or failed); fails loudly if it broke."""
        if self.report is None:
            try:
                self.report = self.results.get_nowait()
            except Exception:  # queue.Empty
                if self.process.exitcode is None:
                    return False
                try:  # it put its report just before it exited
                    self.report = self.results.get(timeout=5)
                except Exception:
                    raise BenchmarkFailed(f"the producer process exited ({self.process.exitcode}) "
                                          "without a report") from None
        if "error" in self.report:
            raise BenchmarkFailed(f"the producer failed: {self.report['error']}")
        self.process.join(timeout=30)
        return True

    def stop(self) -> None:
        if self.process.pid is None or self.process.exitcode is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        self.process.join(timeout=15)
        if self.process.exitcode is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.join(timeout=15)


class Ingestion:
    """`lakehouse ingest user_events --trigger ...` in its own session (process group)."""

    def __init__(self, settings: Settings, trigger: str):
        self.settings, self.trigger = settings, trigger
        self.log = settings.home / "ingest.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> int:
        command = [*lakehouse_command(), "ingest", STREAM, "--trigger", self.trigger]
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(command, cwd=PROJECT_ROOT, env=cli_env(self.settings), stdout=out,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)
        return self.process.pid

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise BenchmarkFailed(f"ingestion exited (code {self.process.returncode}); last lines of {self.log}:\n"
                                  + tail(self.log))

    def wait_ready(self, timeout_s: float = 300) -> float:
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            self.check_alive()
            if READY_LINE in self.log.read_text(errors="replace"):
                return time.monotonic() - started
            time.sleep(0.5)
        raise BenchmarkFailed(f"ingestion did not start its query within {timeout_s:.0f} s; see {self.log}")

    def lag(self) -> int | None:
        """Messages in Kafka that no committed micro-batch has read yet (None: no batch yet)."""
        from ingestion.checkpoint import lag, last_commit
        from lakehouse.core.kafka_admin import end_offsets

        commit = last_commit(self.settings.checkpoint_root / f"bronze_{STREAM}")
        if commit is None or TOPIC not in commit.offsets:
            return None
        return lag(end_offsets(self.settings, TOPIC), commit.offsets[TOPIC])

    def stop(self, timeout_s: float = 180) -> int | None:
        """SIGTERM to the `lakehouse` process: it finishes the running batch and stops its query."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            progress(f"ingestion did not stop within {timeout_s:.0f} s: killing its process group")
            kill_group(self.process)
            return None

    def batches(self) -> list[dict]:
        return parse_batch_lines(self.log.read_text(errors="replace"))


def parse_batch_lines(log_text: str) -> list[dict]:
    """The ingestion's per-batch lines ("user_events batch 7: read 12,000, good ...") as dicts."""
    found = []
    for match in BATCH_LINE.finditer(log_text):
        batch_id, read, good, dead, seconds = match.groups()
        found.append({"batch_id": int(batch_id), "read": _count(read), "good": _count(good),
                      "dead": _count(dead), "seconds": float(seconds)})
    return found


def _count(text: str) -> int:
    return int(text.replace(",", ""))


def kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


class DbtLoop:
    """`lakehouse dbt loop` in a session of its own: one process, one warm Spark session, one
    JSON line per run in its record file."""

    def __init__(self, settings: Settings, every: str):
        self.settings, self.every = settings, every
        self.log = settings.home / "dbt-loop.log"
        self.record = settings.home / "dbt-loop-runs.jsonl"
        self.process: subprocess.Popen | None = None

    def start(self) -> int:
        command = [*lakehouse_command(), "dbt", "loop", "--every", self.every, "--record", str(self.record),
                   "run", "--select", *DBT_SELECT]
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(command, cwd=PROJECT_ROOT, env=cli_env(self.settings), stdout=out,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)
        return self.process.pid

    def runs(self) -> list[dict]:
        """The runs the loop has finished, as run_dbt reports a run; fails loudly on a failed one."""
        try:
            lines = self.record.read_text().splitlines()
        except FileNotFoundError:
            return []
        runs = []
        for line in lines:
            record = json.loads(line)
            if not record["success"]:
                raise BenchmarkFailed(f"dbt loop run #{record['run']} failed: {record.get('error')}; see {self.log}")
            runs.append({"run": record["run"], "started": record["started"], "ended": record["ended"],
                         "wall_s": record["seconds"],
                         "model_s": {name: m["seconds"] for name, m in record["models"].items()},
                         "spark_application": record.get("spark_application"), "memory": {}})
        return runs

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise BenchmarkFailed(f"the dbt loop exited (code {self.process.returncode}); last lines of {self.log}:\n"
                                  + tail(self.log, 40))

    def stop(self, timeout_s: float = 600) -> None:
        """SIGTERM: the loop lets a running dbt invocation finish, then exits."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            progress(f"the dbt loop did not stop within {timeout_s:.0f} s: killing its process group")
            kill_group(self.process)


def run_dbt(settings: Settings, number: int, sampler: MemorySampler, roots: dict) -> dict:
    """One `dbt run --select ...` as lakehouse.operations.dbt.run_dbt runs it (same executable, working
    folder, environment and lock), with its own target folder and log; times and peak memory."""
    from lakehouse.core.locks import dbt_run_lock
    from lakehouse.operations.dbt import dbt_command_line, dbt_env

    target = settings.home / "dbt-target"
    log_path = settings.home / "dbt-logs" / f"run-{number:03d}.log"
    log_path.parent.mkdir(exist_ok=True)
    sampler.window("dbt")
    with dbt_run_lock(settings) as holder, open(log_path, "wb") as out:
        started = time.time()
        process = subprocess.Popen(dbt_command_line(["run", "--select", *DBT_SELECT]), cwd=PROJECT_ROOT,
                                   env={**dbt_env(settings, target), **holder}, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        roots["dbt"] = [process.pid]
        try:
            code = process.wait()
        except BaseException:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                kill_group(process)
            raise
        finally:
            ended = time.time()
            roots.pop("dbt", None)
    if code != 0:
        raise BenchmarkFailed(f"dbt run #{number} failed (exit {code}); last lines of {log_path}:\n"
                              + tail(log_path, 40))
    models = {}
    try:
        for result in json.loads((target / "run_results.json").read_text())["results"]:
            models[result["unique_id"].rsplit(".", 1)[-1]] = round(result["execution_time"], 2)
    except (OSError, KeyError, ValueError):
        pass
    return {"run": number, "started": round(started, 3), "ended": round(ended, 3),
            "wall_s": round(ended - started, 2), "model_s": models, "memory": sampler.window("dbt")}


# --- memory: which process belongs to which part ----------------------------------------------

def classifier(roots: dict[str, list[int]]):
    """{component: pids} from the process table: the parts' process trees (roots updated by the
    benchmark as parts start and stop), the Spark JVM of this process (the analysis, after the
    run), and this process with whatever else it started."""
    me = os.getpid()
    analysis_jvms: set[int] = set()

    def classify(table: dict[int, Proc]) -> dict[str, list[int]]:
        groups, taken = {}, set()
        for name, pids in list(roots.items()):
            tree = [pid for pid in tree_of(table, pids) if pid not in taken]
            taken.update(tree)
            groups[name] = tree
        rest = [pid for pid in tree_of(table, [me]) if pid not in taken]
        commands = {pid: table[pid].command for pid in rest if pid != me}
        # The broker (until local_kafka.start returns its pid) and its storage-format JVM, from this process
        groups.setdefault("broker", []).extend(
            pid for pid, c in commands.items() if "kafka.Kafka" in c or "kafka.tools." in c)
        analysis_jvms.update(pid for pid, c in commands.items() if "SparkSubmit" in c)  # kept while it exits
        jvm = tree_of(table, [pid for pid in commands if pid in analysis_jvms])
        groups["analysis_jvm"] = jvm
        groups["benchmark"] = [pid for pid in rest if pid not in jvm and pid not in groups["broker"]]
        return groups

    return classify


# --- reading visibility back ------------------------------------------------------------------

def snapshots(spark, table: str) -> list[dict]:
    rows = spark.sql(f"select snapshot_id, unix_millis(committed_at) as committed_ms, operation, summary "
                     f"from {table}.snapshots order by committed_at, snapshot_id").collect()
    return [{"snapshot_id": r.snapshot_id, "committed_ms": r.committed_ms, "operation": r.operation,
             "added_records": int((r.summary or {}).get("added-records", 0)),
             "total_records": int((r.summary or {}).get("total-records", -1))} for r in rows]


def rows_with_snapshot(spark, table: str):
    """Every row's Kafka coordinates and timestamp (ms) with the snapshot that added its data file."""
    return spark.sql(f"""
        select r._kafka_partition as kafka_partition, r._kafka_offset as kafka_offset,
               unix_millis(r._kafka_timestamp) as produced_ms, e.snapshot_id
        from {table} as r
        left join (select data_file.file_path as file_path, snapshot_id from {table}.entries where status <> 2) as e
          on r._file = e.file_path
    """)


def count_at(spark, table: str, snapshot_id: int, expression: str = "count(*)") -> int:
    return spark.sql(f"select coalesce({expression}, 0) from {table} version as of {snapshot_id}").collect()[0][0]


def gold_mapping(spark, silver_snaps: list[dict], gold_snaps: list[dict]) -> tuple[dict[int, int | None], list[dict]]:
    """silver snapshot -> commit (ms) of the first gold snapshot after it; and the check of every
    gold snapshot: sum(event_count) equals the rows of the silver snapshot current at its commit."""
    checks = []
    for gold in gold_snaps:
        before = [s for s in silver_snaps if s["committed_ms"] < gold["committed_ms"]]
        silver = before[-1] if before else None
        silver_rows = count_at(spark, SILVER, silver["snapshot_id"]) if silver else 0
        gold_sum = count_at(spark, GOLD, gold["snapshot_id"], "sum(event_count)")
        checks.append({"gold_snapshot": gold["snapshot_id"], "gold_committed_ms": gold["committed_ms"],
                       "gold_operation": gold["operation"],
                       "silver_snapshot": silver["snapshot_id"] if silver else None,
                       "silver_committed_ms": silver["committed_ms"] if silver else None,
                       "silver_rows": silver_rows, "gold_sum_event_count": gold_sum, "ok": silver_rows == gold_sum})
    mapping = {}
    for silver in silver_snaps:
        after = [g for g in gold_snaps if g["committed_ms"] > silver["committed_ms"]]
        mapping[silver["snapshot_id"]] = after[0]["committed_ms"] if after else None
    return mapping, checks


STAGES = {  # name -> (column expression in ms, label)
    "bronze": ("bronze_ms - produced_ms", "production -> bronze"),
    "silver": ("silver_ms - produced_ms", "production -> silver"),
    "gold": ("gold_ms - produced_ms", "production -> gold"),
    "bronze_to_silver": ("silver_ms - bronze_ms", "bronze -> silver"),
}


def latency_stats(frame) -> dict:
    from pyspark.sql import functions as F

    aggregates = []
    for name, (expression, _) in STAGES.items():
        value = F.expr(expression)
        aggregates += [F.count(value).alias(f"{name}_count"), F.min(value).alias(f"{name}_min"),
                       F.max(value).alias(f"{name}_max"), F.avg(value).alias(f"{name}_mean"),
                       F.percentile(value, F.array(F.lit(0.5), F.lit(0.95), F.lit(0.99))).alias(f"{name}_p")]
    row = frame.agg(*aggregates).collect()[0]
    stats = {}
    for name in STAGES:
        count = row[f"{name}_count"]
        if not count:
            stats[name] = {"count": 0}
            continue
        p50, p95, p99 = row[f"{name}_p"]
        stats[name] = {"count": count, "min_s": round(row[f"{name}_min"] / 1000, 2),
                       "p50_s": round(p50 / 1000, 2), "p95_s": round(p95 / 1000, 2), "p99_s": round(p99 / 1000, 2),
                       "max_s": round(row[f"{name}_max"] / 1000, 2), "mean_s": round(row[f"{name}_mean"] / 1000, 2)}
    return stats


def produce_rate_per_second(frame, cutoff_ms: int) -> dict:
    """Messages per second of Kafka timestamp in the measured window (first and last second left
    out: partial), and the seconds in it with no message at all."""
    from pyspark.sql import functions as F

    seconds = (frame.where(F.col("produced_ms") >= cutoff_ms)
               .groupBy(F.floor(F.col("produced_ms") / 1000).alias("second")).count())
    bounds = seconds.agg(F.min("second").alias("first"), F.max("second").alias("last")).collect()[0]
    if bounds.first is None or bounds.last - bounds.first < 2:
        return {}
    inner = seconds.where((F.col("second") > bounds.first) & (F.col("second") < bounds.last))
    row = inner.agg(F.min("count").alias("min"), F.percentile("count", F.lit(0.5)).alias("median"),
                    F.max("count").alias("max"), F.count(F.lit(1)).alias("seconds")).collect()[0]
    span = bounds.last - bounds.first - 1
    return {"min": row["min"], "median": round(row["median"]), "max": row["max"], "seconds": span,
            "seconds_without_messages": span - row["seconds"]}


def rows_per_snapshot_check(frame, snaps: list[dict]) -> dict:
    """The rows tied to each snapshot through `_file` and `entries` must be the records its
    summary says it added: otherwise the row -> snapshot mapping is wrong."""
    counted = {r.snapshot_id: r["count"] for r in frame.groupBy("snapshot_id").count().collect()}
    wrong = {str(s["snapshot_id"]): {"rows": counted.get(s["snapshot_id"], 0), "added_records": s["added_records"]}
             for s in snaps if counted.get(s["snapshot_id"], 0) != s["added_records"]}
    return {"snapshots": len(snaps), "ok": not wrong and None not in counted, "mismatches": wrong,
            "rows_without_snapshot": counted.get(None, 0)}


def analyse(settings: Settings, warmup_s: float, delivered: int) -> dict:
    from pyspark.sql import functions as F

    from lakehouse.core.spark import get_spark

    spark = get_spark(settings, "bench-freshness-analysis")
    try:
        bronze_snaps, silver_snaps, gold_snaps = (snapshots(spark, t) for t in (BRONZE, SILVER, GOLD))
        mapping, checks = gold_mapping(spark, silver_snaps, gold_snaps)
        bronze_map = spark.createDataFrame([(s["snapshot_id"], s["committed_ms"]) for s in bronze_snaps],
                                           "snapshot_id long, bronze_ms long")
        silver_map = spark.createDataFrame([(s["snapshot_id"], s["committed_ms"], mapping[s["snapshot_id"]])
                                            for s in silver_snaps],
                                           "snapshot_id long, silver_ms long, gold_ms long")
        file_checks = {"bronze": rows_per_snapshot_check(rows_with_snapshot(spark, BRONZE), bronze_snaps),
                       "silver": rows_per_snapshot_check(rows_with_snapshot(spark, SILVER), silver_snaps)}
        bronze_rows = (rows_with_snapshot(spark, BRONZE).join(bronze_map, "snapshot_id", "left")
                       .select("kafka_partition", "kafka_offset", "bronze_ms"))
        silver_rows = rows_with_snapshot(spark, SILVER).join(silver_map, "snapshot_id", "left")
        events = (silver_rows.join(bronze_rows, ["kafka_partition", "kafka_offset"], "left")
                  .select("produced_ms", "bronze_ms", "silver_ms", "gold_ms").cache())
        totals = events.agg(
            F.count(F.lit(1)).alias("silver_rows"), F.min("produced_ms").alias("first_ms"),
            F.max("produced_ms").alias("last_ms"),
            F.count(F.when(F.col("silver_ms").isNull(), 1)).alias("without_silver_snapshot"),
            F.count(F.when(F.col("bronze_ms").isNull(), 1)).alias("without_bronze_row"),
            F.count(F.when(F.col("gold_ms").isNull(), 1)).alias("without_gold_snapshot"),
        ).collect()[0].asDict()
        totals["bronze_rows"] = spark.table(BRONZE).count()
        if not totals["silver_rows"]:
            raise BenchmarkFailed("silver.user_events is empty after the run")
        cutoff_ms = totals["first_ms"] + round(warmup_s * 1000)
        measured = events.where(F.col("produced_ms") >= cutoff_ms)
        stats = latency_stats(measured)
        per_second = produce_rate_per_second(events, cutoff_ms)
        java = spark._jvm.java.lang.System.getProperty("java.version")
        events.unpersist()
        result = {
            "totals": totals, "delivered": delivered, "warmup_cutoff_ms": cutoff_ms,
            "measured_events": stats["silver"]["count"], "latency": stats, "produce_rate_per_second": per_second,
            "snapshots": {"bronze": len(bronze_snaps), "silver": len(silver_snaps), "gold": len(gold_snaps)},
            "last_bronze_commit_ms": max((s["committed_ms"] for s in bronze_snaps if s["added_records"]), default=None),
            "silver_snapshots": silver_snaps, "gold_checks": checks, "file_snapshot_checks": file_checks,
            "versions": {"spark": spark.version, "java": java},
        }
    finally:
        spark.stop()
    return result


# --- the run ----------------------------------------------------------------------------------

def run_benchmark(args: argparse.Namespace, settings: Settings, sampler: MemorySampler, roots: dict,
                  stack: list) -> dict:
    out: dict = {}
    broker_pid = local_kafka.start(settings, log=progress)
    stack.append(lambda: local_kafka.running_pid(settings) and local_kafka.stop(settings, log=progress))
    roots["broker"] = [broker_pid]

    from producers.delivery import ensure_topic
    from producers.user_events import PARTITIONS

    ensure_topic(settings, TOPIC, PARTITIONS)
    ingestion = Ingestion(settings, args.trigger)
    roots["ingestion"] = [ingestion.start()]
    stack.append(lambda: ingestion.stop())
    progress(f"ingestion started (pid {ingestion.process.pid}, trigger {args.trigger}); waiting for its query")
    out["ingestion_start_s"] = round(ingestion.wait_ready(), 1)
    progress(f"ingestion query running after {out['ingestion_start_s']} s; producing {args.rate:,.0f} msg/s for "
             f"{args.duration:.0f} s with {args.processes} process(es), dbt runs back to back")

    producer = Producer(settings, args.rate, args.duration, args.processes, args.seed)
    roots["producer"] = [producer.start()]
    stack.append(producer.stop)
    loop = None
    if args.dbt_mode == "loop":
        loop = DbtLoop(settings, args.dbt_every)
        roots["dbt"] = [loop.start()]
        stack.append(loop.stop)
        progress(f"dbt loop started (pid {loop.process.pid}, every {args.dbt_every})")
    runs: list[dict] = []
    caught_up_at = None
    while True:
        ingestion.check_alive()
        producing_done = producer.done()
        lag = ingestion.lag() if producing_done else None
        if producing_done and lag == 0 and caught_up_at is None:
            caught_up_at = time.time()
        final = caught_up_at is not None
        if producing_done and not final and time.time() - producer.report["ended_at"] > args.catchup_timeout:
            raise BenchmarkFailed(f"ingestion did not catch up within {args.catchup_timeout:.0f} s after producing "
                                  f"stopped (lag {lag})")
        if producing_done and roots.get("producer"):
            roots.pop("producer")
            progress(f"producing done: {producer.report['delivered']:,} delivered in {producer.report['seconds']} s "
                     f"({producer.report['delivered'] / max(producer.report['seconds'], 1e-9):,.0f} msg/s)")
        if loop is None:
            run = run_dbt(settings, len(runs) + 1, sampler, roots)
            runs.append(run)
            progress(f"dbt run #{run['run']}{' (the last)' if final else ''}: {run['wall_s']} s "
                     f"(models: {', '.join(f'{k} {v} s' for k, v in run['model_s'].items())}), "
                     f"peak RSS {run['memory']['peak_mb']} MB")
            if final:
                break
        else:
            loop.check_alive()
            for run in loop.runs()[len(runs):]:
                runs.append(run)
                progress(f"dbt loop run #{run['run']}: {run['wall_s']} s "
                         f"(models: {', '.join(f'{k} {v} s' for k, v in run['model_s'].items())})")
            # the last run is one that started once everything was in bronze
            if caught_up_at is not None and runs and runs[-1]["started"] > caught_up_at:
                loop.stop()
                roots.pop("dbt", None)
                runs += loop.runs()[len(runs):]  # a run it finished while stopping
                out["dbt_loop_memory"] = sampler.window("dbt")
                break
            time.sleep(1)
        if not producing_done and time.time() - producer.started > args.duration + 600:
            raise BenchmarkFailed("the producer has not finished 10 minutes after its duration")
    out["dbt_runs"] = runs
    out["producer"] = producer.report

    progress("stopping ingestion (it finishes its running batch)")
    out["ingestion_exit"] = ingestion.stop()
    roots.pop("ingestion", None)
    out["ingestion_batches"] = ingestion.batches()
    local_kafka.stop(settings, log=progress)
    roots.pop("broker", None)
    return out


def summarize(values: list[float]) -> dict:
    if not values:
        return {}
    ordered = sorted(values)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    def tidy(value):
        return int(value) if float(value).is_integer() else round(value, 2)

    return {"count": len(values), "median": tidy(median), "max": tidy(ordered[-1]), "min": tidy(ordered[0])}


COMPONENT_LABELS = {
    "broker": "Kafka broker (JVM)",
    "ingestion": "ingestion (lakehouse ingest + Spark JVM)",
    "dbt": "dbt (dbt + Spark JVM: the loop, or max over runs)",
    "producer": "producer process(es)",
    "benchmark": "this benchmark (Python)",
    "analysis_jvm": "analysis Spark JVM (after the run, alone)",
}


def print_report(result: dict) -> None:
    o, a, m = result["options"], result["analysis"], result["memory"]
    p = result["producer"]
    print()
    print("=" * 78)
    print(f"freshness: {STREAM} at {o['rate']:,.0f} msg/s for {o['duration']:.0f} s, trigger {o['trigger']}, "
          f"warm-up {o['warmup']:.0f} s")
    print("=" * 78)
    kept = "kept the rate" if p["kept_rate"] else "DID NOT KEEP THE RATE"
    print(f"producer:  target {o['rate']:,.0f} msg/s, achieved {p['achieved_msgs_per_s']:,.0f} msg/s "
          f"({p['delivered']:,} delivered, {p['failed']} failed, in {p['seconds']} s, {o['processes']} process(es))"
          f" -> {kept}")
    per_second = a["produce_rate_per_second"]
    if per_second:
        print(f"           per second of Kafka timestamp after the warm-up: min {per_second['min']:,}, median "
              f"{per_second['median']:,}, max {per_second['max']:,}; seconds without a message: "
              f"{per_second['seconds_without_messages']}")
    b = result["ingestion"]
    print(f"ingestion: {b['batches']} micro-batches with data ({b['bronze_snapshots']} bronze snapshots); "
          f"batch seconds median {b['batch_seconds'].get('median')}, max {b['batch_seconds'].get('max')}; "
          f"rows per batch median {b['batch_rows'].get('median')}; the last event was in bronze "
          f"{result['caught_up_after_producing_s']} s after producing stopped")
    d = result["dbt"]
    models = ", ".join(f"{k} median {v['median']} s / max {v['max']} s" for k, v in d["model_s"].items())
    print(f"dbt:       {d['runs']} runs of `dbt run --select {' '.join(DBT_SELECT)}`; wall s median "
          f"{d['wall_s']['median']}, max {d['wall_s']['max']}; {models}")
    t = a["totals"]
    print(f"events:    {p['delivered']:,} delivered, {t['bronze_rows']:,} in bronze, {t['silver_rows']:,} in silver; "
          f"measured {a['measured_events']:,} (produced after the first {o['warmup']:.0f} s)")
    print()
    print(f"  {'latency, seconds':<24} {'count':>10} {'min':>8} {'p50':>8} {'p95':>8} {'p99':>8} {'max':>8}")
    for name, (_, label) in STAGES.items():
        s = a["latency"][name]
        if not s["count"]:
            print(f"  {label:<24} {0:>10}")
            continue
        print(f"  {label:<24} {s['count']:>10,} {s['min_s']:>8} {s['p50_s']:>8} {s['p95_s']:>8} {s['p99_s']:>8} "
              f"{s['max_s']:>8}")
    print()
    print("  gold visibility check: each gold snapshot's sum(event_count) = rows of the silver snapshot current "
          "at its commit")
    print(f"  {'gold snapshot':>20} {'op':<10} {'silver snapshot':>20} {'silver rows':>12} {'gold sum':>12}  ok")
    for c in a["gold_checks"]:
        print(f"  {c['gold_snapshot']:>20} {c['gold_operation']:<10} {str(c['silver_snapshot']):>20} "
              f"{c['silver_rows']:>12,} {c['gold_sum_event_count']:>12,}  {'yes' if c['ok'] else 'NO'}")
    for name, check in a["file_snapshot_checks"].items():
        print(f"  {name} rows tied to the snapshot that added them (_file -> entries), per snapshot equal to its "
              f"added-records: {'yes' if check['ok'] else 'NO: ' + json.dumps(check['mismatches'])} "
              f"({check['snapshots']} snapshots)")
    print()
    s95 = a["latency"]["silver"].get("p95_s")
    g95 = a["latency"]["gold"].get("p95_s")
    print(f"targets: p95 production -> silver < {TARGET_P95_SILVER_S:.0f} s: "
          f"{'met' if result['target_met'] else 'NOT met'} (p95 {s95} s); production -> gold < "
          f"{TARGET_P95_GOLD_S:.0f} s: {'met' if result['target_gold_met'] else 'NOT met'} (p95 {g95} s)")
    print()
    print(f"  {'peak resident memory, MB (every 0.5 s)':<46} {'peak RSS':>9} {'VmHWM':>7} {'procs':>6} {'CPU s':>7}")
    for name, label in COMPONENT_LABELS.items():
        c = m["components"].get(name) if name != "analysis_jvm" else result["memory_analysis"]["analysis_jvm"]
        if c and (c["peak_mb"] or c["hwm_mb"]):
            print(f"  {label:<46} {c['peak_mb']:>9,} {c['hwm_mb']:>7,} {c['processes']:>6} {c['cpu_s']:>7}")
    parts = ", ".join(f"{k} {v:,}" for k, v in m["total_peak_parts_mb"].items() if v)
    print(f"  {'sum of the peaks of the parts running together':<46} {m['sum_of_component_peaks_mb']:>9,}")
    print(f"  {'peak of the concurrent sum':<46} {m['total_peak_mb']:>9,}   ({parts})")
    print("  (the parts above the analysis run together; the analysis runs alone afterwards. VmHWM: each "
          "process's own peak,\n   summed over a part's processes alive together: an upper bound of its peak)")
    print("  largest processes per part (their own peak VmHWM, MB):")
    for line in largest_process_lines({**m["components"], "analysis_jvm": result["memory_analysis"]["analysis_jvm"]},
                                      {k: v.split(" (")[0] for k, v in COMPONENT_LABELS.items()}):
        print(line)
    mach = result["machine"]
    print(f"\nmachine: {mach['cpus']} cores, {mach['cpu_model']}, {mach['memory_gb']} GB; Python {mach['python']}, "
          f"Spark {mach.get('spark')}, Java {mach.get('java')}; load average at the end {mach['load_average_end']}; "
          f"CPU used by processes outside the benchmark during the run: {m['other_cpu_s']} s")
    if not p["kept_rate"]:
        print(f"WARNING: the producer reached {p['achieved_msgs_per_s']:,.0f} msg/s, below "
              f"{RATE_TOLERANCE:.0%} of the {o['rate']:,.0f} msg/s asked for: the figures are for that lower rate")


def build_result(args, settings: Settings, run: dict, analysis: dict, memory: dict, memory_after: dict,
                 took: float) -> dict:
    producer = run["producer"]
    achieved = producer["delivered"] / max(producer["seconds"], 1e-9)
    batches = [b for b in run["ingestion_batches"] if b["read"] > 0]
    runs = run["dbt_runs"]
    model_names = sorted({name for r in runs for name in r["model_s"]})
    silver = analysis["latency"]["silver"]
    checks = analysis["gold_checks"]
    totals = analysis["totals"]
    problems = []
    if not all(c["ok"] for c in checks):
        problems.append("gold mapping check failed: a gold snapshot's sum(event_count) differs from the rows of "
                        "the silver snapshot current at its commit")
    if totals["silver_rows"] != producer["delivered"] or totals["bronze_rows"] != producer["delivered"]:
        problems.append(f"{producer['delivered']:,} delivered, but {totals['bronze_rows']:,} in bronze and "
                        f"{totals['silver_rows']:,} in silver")
    for key in ("without_silver_snapshot", "without_bronze_row", "without_gold_snapshot"):
        if totals[key]:
            problems.append(f"{totals[key]:,} silver rows {key.replace('_', ' ')}")
    for name, check in analysis["file_snapshot_checks"].items():
        if not check["ok"]:
            problems.append(f"{name}: rows tied to snapshots through _file do not match the snapshots' added-records")
    if producer["failed"]:
        problems.append(f"{producer['failed']:,} messages failed delivery")
    if not silver["count"]:
        problems.append("no event was produced after the warm-up: lower --warmup or raise --duration")
    return {
        "benchmark": "freshness",
        "options": {"stream": STREAM, "rate": args.rate, "duration": args.duration, "warmup": args.warmup,
                    "trigger": args.trigger, "trigger_s": trigger_seconds(args.trigger),
                    "dbt_mode": args.dbt_mode, "dbt_every": args.dbt_every,
                    "processes": args.processes, "seed": args.seed, "dbt_select": DBT_SELECT,
                    "driver_memory": settings.spark_driver_memory, "spark_master": settings.spark_master},
        "producer": {**producer, "achieved_msgs_per_s": round(achieved),
                     "kept_rate": achieved >= RATE_TOLERANCE * args.rate},
        "ingestion": {"batches": len(batches), "batches_logged": len(run["ingestion_batches"]),
                      "bronze_snapshots": analysis["snapshots"]["bronze"],
                      "batch_seconds": summarize([b["seconds"] for b in batches]),
                      "batch_rows": summarize([b["read"] for b in batches]),
                      "start_s": run["ingestion_start_s"], "exit_code": run["ingestion_exit"]},
        "caught_up_after_producing_s": round(analysis["last_bronze_commit_ms"] / 1000 - producer["ended_at"], 1)
        if analysis["last_bronze_commit_ms"] else None,
        "dbt": {"runs": len(runs), "wall_s": summarize([r["wall_s"] for r in runs]),
                "model_s": {name: summarize([r["model_s"][name] for r in runs if name in r["model_s"]])
                            for name in model_names},
                "peak_rss_mb_per_run": [r["memory"].get("peak_mb") for r in runs],
                "mode": args.dbt_mode, "every": args.dbt_every if args.dbt_mode == "loop" else None,
                "loop_memory": run.get("dbt_loop_memory"),
                "spark_applications": sorted({r["spark_application"] for r in runs if r.get("spark_application")}),
                "per_run": runs},
        "analysis": analysis,
        "latency": analysis["latency"],
        "measured_events": analysis["measured_events"],
        "target_p95_silver_s": TARGET_P95_SILVER_S,
        "target_met": bool(silver["count"]) and silver["p95_s"] < TARGET_P95_SILVER_S,
        "target_p95_gold_s": TARGET_P95_GOLD_S,
        "target_gold_met": bool(analysis["latency"]["gold"].get("count"))
        and analysis["latency"]["gold"]["p95_s"] < TARGET_P95_GOLD_S,
        "gold_check_ok": all(c["ok"] for c in checks) and bool(checks),
        "memory": memory,
        "memory_analysis": {"analysis_jvm": memory_after["components"].get("analysis_jvm"),
                            "benchmark_including_analysis": memory_after["components"].get("benchmark")},
        "machine": {**machine_facts(), **analysis["versions"],
                    "load_average_end": [round(x, 2) for x in os.getloadavg()], "state_folder": str(settings.home)},
        "took_s": round(took),
        "problems": problems,
    }


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--rate", type=float, default=10_000, help="messages per second produced (default: 10000)")
    parser.add_argument("--duration", type=float, default=300, help="seconds of producing (default: %(default)s)")
    parser.add_argument("--warmup", type=float, default=60,
                        help="events produced in the first SECONDS are not measured (default: %(default)s)")
    parser.add_argument("--trigger", default="20s",
                        help="processing-time trigger of `lakehouse ingest` (default: %(default)s)")
    parser.add_argument("--dbt-mode", choices=["loop", "process"], default="loop",
                        help="loop: `lakehouse dbt loop`, one process with a warm Spark session (default); "
                             "process: one `dbt run` process per run, each starting its own JVM")
    parser.add_argument("--dbt-every", default="1s",
                        help="loop mode: start-to-start interval of the dbt runs (default: %(default)s, i.e. back to "
                             "back)")
    parser.add_argument("--processes", type=int, default=1,
                        help="producer processes sharing the rate (default: 1; one JSON producer process made "
                             "22,000-25,000 msg/s alone on the development machine, benchmarks/RESULTS.md)")
    parser.add_argument("--seed", type=int, help="random seed of the events (default: none)")
    parser.add_argument("--catchup-timeout", type=float, default=900, metavar="SECONDS",
                        help="fail if ingestion has not caught up this long after producing stopped "
                             "(default: %(default)s)")
    parser.add_argument("--home", type=Path, help="state folder to use (new or empty; kept at the end) instead of "
                                                  "a temporary one")
    parser.add_argument("--keep", action="store_true", help="keep the temporary state folder (logs, tables)")
    args = parser.parse_args(argv)
    if args.rate <= 0 or args.duration <= 0 or args.warmup < 0 or args.processes < 1:
        parser.error("--rate and --duration must be > 0, --warmup >= 0, --processes >= 1")
    if args.warmup >= args.duration:
        parser.error("--warmup must be shorter than --duration: nothing would be measured")
    try:
        trigger_seconds(args.trigger)
        interval_seconds(args.dbt_every)
    except LakehouseError as exc:
        parser.error(str(exc))
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    began = time.perf_counter()
    scrub_environment()
    home = make_home(args.home)
    settings = Settings.from_env({**os.environ, PREFIX + "HOME": str(home),
                                  PREFIX + "KAFKA_PORT": str(local_kafka.free_port())})
    progress(f"state folder {home}, Kafka on {settings.kafka_bootstrap_servers}")

    def interrupted(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupted)  # cleanup on `kill` too, as on Ctrl-C
    roots: dict[str, list[int]] = {}
    sampler = MemorySampler(classifier(roots))
    sampler.start()
    stack: list = []  # what to stop, in reverse order, whatever happens
    failure = "unexpected error (traceback below)"
    run = analysis = run_memory = None
    try:
        run = run_benchmark(args, settings, sampler, roots, stack)
        progress("reading every event's visibility back (Spark, in this process)")
        run_memory = sampler.report()  # the parts that ran together; the analysis runs alone
        run_memory["components"].pop("analysis_jvm", None)
        analysis = analyse(settings, args.warmup, run["producer"]["delivered"])
        failure = None
    except (BenchmarkFailed, LakehouseError) as exc:
        failure = str(exc)
    except KeyboardInterrupt:
        failure = "interrupted"
    finally:
        for stop in reversed(stack):
            try:
                stop()
            except Exception as exc:  # keep stopping the others
                progress(f"while stopping: {type(exc).__name__}: {exc}")
        sampler.stop()
        signal.signal(signal.SIGTERM, previous)
        if failure is not None or args.keep or args.home:
            progress(f"state folder kept: {home} (ingest.log, dbt-logs/, kafka/logs/)")
        else:
            shutil.rmtree(home, ignore_errors=True)
    memory_after = sampler.report()
    if failure is not None:
        print(f"\nFAILED: {failure}", file=sys.stderr)
        print("RESULT " + json.dumps({"benchmark": "freshness", "error": failure, "memory": memory_after,
                                      "partial": run}, default=str))
        return 1
    result = build_result(args, settings, run, analysis, run_memory, memory_after, time.perf_counter() - began)
    print_report(result)
    for problem in result["problems"]:
        print(f"INCORRECT: {problem}", file=sys.stderr)
    print("RESULT " + json.dumps(result, default=str))
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    multiprocessing.freeze_support()
    sys.exit(main())
