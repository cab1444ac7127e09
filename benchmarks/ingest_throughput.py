"""Bronze ingestion throughput per stream format: Kafka -> ingestion.job (availableNow) -> Iceberg.

For each stream: N messages (1% unreadable by default) are loaded into a fresh topic first
(not measured), then the real ingestion job (``ingestion.job.run``, in this process, one
stream at a time) reads the whole topic with ``availableNow`` into bronze (good and dead rows).
Prints a table, where the time goes, and a final ``RESULT {json}`` line.

    .venv/bin/python benchmarks/ingest_throughput.py [--messages 1000000] [--streams employees purchases ...]
    .venv/bin/python benchmarks/ingest_throughput.py --ceiling [--steps] --messages 1000000 [--repeat 3]
    .venv/bin/python benchmarks/ingest_throughput.py --whole-bad-batch [--streams purchases] [--messages 1000000]
    .venv/bin/python benchmarks/ingest_throughput.py --steady-state --streams employees

``--ceiling`` also runs, in the same JVM and on each stream's topic, the raw append: the job's
own Kafka source appending the value bytes with the Kafka metadata bronze keeps (key, topic,
partition, offset, timestamp, in bronze's columns) to an Iceberg table (bronze's table
properties) by Iceberg's streaming sink, no decoding; each stream is reported beside it
(``ratio_to_ceiling``). ``--steps`` adds two appends by the same sink: the records decoded
alone (the design documents' Java sample: decode, append), and decoded and checked (the job
without its exactly-once protocol), so that the gap splits into layout, checks and protocol;
``ratio_to_checked_append`` is the job's median over the checked append's.

Every run spans at least ``--batches`` (10) micro-batches: the job, the ceiling and each step
read with the same ``maxOffsetsPerTrigger``, the topic's records divided by ``--batches`` (or
``--max-offsets-per-trigger`` if smaller), so a batch's fixed cost counts as in a long stream.
Within each repeat the ceiling, the steps and the job run in an order of their own (a balanced
Latin square over a seeded shuffle, ``run_orders``), printed with the runs.

``--whole-bad-batch`` instead loads topics whose every record fails (Avro purchases: framed with
a schema id no registry knows; the other formats: corrupt bytes) and runs the real job once on
each, in batches of the job's own default size (one batch up to a million records) at the
driver memory of the settings (2g unless LAKEHOUSE_SPARK_DRIVER_MEMORY says otherwise): whether
it completes, its time, the driver's peak memory, and every offset once in bronze (as dead
rows). ``--steady-state`` instead produces at fixed rates while the job runs with a
processing-time trigger, and finds the highest rate at which the lag stays bounded.

What is timed: for the job, ``ingestion.job._run_queries`` (wrapped at run time), from the
start of its query to its end; the topic check, the state-folder lock, the creation or
evolution of the bronze table (and the dead-letter view) and the writer lease's taking and release
(``ingestion.job.run`` around it) are outside the timer, and reported apart as
``startup_seconds``. For the ceiling and each step, from the query's start to its end; the
table is dropped and created before the timer. msgs/s and MB/s are messages in the topic
(bronze rows, good and dead) and the bytes of their values, divided by that time. Everything runs
under a temporary state folder (jars linked from .lakehouse/jars, i.e. after ``make setup``)
with its own Kafka broker on a free port, on the same machine.

Where the time goes comes from three sources: Spark's own per-trigger ``durationMs`` (a
StreamingQueryListener); timers this script wraps around the job's functions at run time
(decoder refresh, exactly-once commit checks, the bronze append, lag; no project
file is changed); and, with ``--probe`` (default), the same topic read in batch mode alone
and read plus decoded, both into Spark's ``noop`` sink.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import platform
import random
import resource
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._machine import cmdline as _cmdline  # noqa: E402
from benchmarks._machine import cpu_model, mem_total_gb, process_tree  # noqa: E402
from benchmarks._machine import cpu_seconds as _cpu_seconds  # noqa: E402
from benchmarks._machine import machine_busy_seconds as _machine_busy_seconds  # noqa: E402
from benchmarks._machine import status_kb as _status_kb  # noqa: E402
from lakehouse.core import local_kafka, logs  # noqa: E402
from lakehouse.core.errors import LakehouseError  # noqa: E402
from lakehouse.core.settings import Settings, default_home  # noqa: E402
from producers.faults import FaultRates  # noqa: E402

DEFAULT_STREAMS = ("employees", "purchases", "user_events")
WHOLE_BAD_STREAMS = ("purchases",)  # Avro framed with an unregistered schema id: the case
ALL_STREAMS = ("employees", "purchases", "user_events", "customers", "accounts")
CDC_STREAMS = ("customers", "accounts")
TARGET = {"employees": 100_000}  # msg/s asked for by the issue
SPARK_PHASES = ("latestOffset", "getBatch", "queryPlanning", "walCommit", "addBatch", "commitOffsets")
# Timed from inside addBatch (the foreachBatch function of ingestion/job.py). The bronze append
# reads and decodes the whole batch and writes it, good and dead rows, in one commit.
BATCH_PHASES = ("decoder_refresh", "commit_checks", "plan_in_python", "bronze_pass_and_append", "rest")

log = logging.getLogger("bench")


# --- fault mix ------------------------------------------------------------------------------

def fault_rates(stream: str, rate: float) -> FaultRates:
    """``rate`` of unreadable messages, split over the kinds the stream's producer can inject."""
    if stream == "purchases":  # Avro has no "invalid" hook: corrupt bytes and unknown schema ids
        return FaultRates(corrupt=rate / 2, unknown_schema_id=rate / 2)
    return FaultRates(corrupt=rate / 2, invalid=rate / 2)


def whole_bad_rates(stream: str) -> FaultRates:
    """Every message unreadable (``--whole-bad-batch``): for Avro a producer framing its records
    with a schema id no registry knows (the issue's case), for the other formats corrupt bytes."""
    if stream == "purchases":
        return FaultRates(unknown_schema_id=1.0)
    return FaultRates(corrupt=1.0)


# --- the order of the runs, and their batches -------------------------------------------------

def run_orders(names: list[str], repeats: int, seed: int) -> list[list[str]]:
    """The order of ``names`` in each of ``repeats`` rounds: the rows of a balanced Latin square
    (a Williams design) over a seeded shuffle of the names, from the first row again when the
    rounds outnumber them. Over len(names) rounds (twice that for an odd count), each name runs
    once in every position and directly after every other name as often, so neither the JVM
    warming up, the machine drifting, nor what the previous run left behind (caches, garbage)
    favours one of them; two consecutive rounds never share an order (two names or more)."""
    count = len(names)
    if count == 0:
        return [[] for _ in range(repeats)]
    first, low, high = [0], 1, count - 1
    for position in range(1, count):
        if position % 2:
            first.append(low)
            low += 1
        else:
            first.append(high)
            high -= 1
    square = [[(index + shift) % count for index in first] for shift in range(count)]
    if count % 2:
        square += [list(reversed(row)) for row in square]
    shuffled = list(names)
    random.Random(seed).shuffle(shuffled)
    return [[shuffled[index] for index in square[number % len(square)]] for number in range(repeats)]


def records_per_batch(records: int, batches: int, cap: int | None = None) -> int:
    """``maxOffsetsPerTrigger`` for a run over ``records`` that spans at least ``batches``
    micro-batches: records // batches, or ``cap`` if smaller (at least 1). Spark's Kafka source
    shares the limit out over the partitions rounding down (up only under one record), so a
    batch reads no more, and a run often ends with one small batch more."""
    size = max(1, records // max(1, batches))
    return max(1, min(size, cap)) if cap else size


# --- timers around the job's functions (monkeypatched in this process only) -----------------

class BatchTimers:
    """Exclusive wall time of nested calls inside one foreachBatch call, summed per phase."""

    def __init__(self):
        self.totals: dict[str, float] = defaultdict(float)
        self._stack: list[list] = []  # [phase, started, child seconds]
        self._local = threading.local()

    def reset(self) -> dict[str, float]:
        totals, self.totals = dict(self.totals), defaultdict(float)
        return totals

    def wrap(self, phase, function, only_in_batch: bool = True):
        timers = self

        def timed(*args, **kwargs):
            if only_in_batch and not timers._stack:
                return function(*args, **kwargs)
            name = phase(*args, **kwargs) if callable(phase) else phase
            timers._stack.append([name, time.perf_counter(), 0.0])
            try:
                return function(*args, **kwargs)
            finally:
                name, started, children = timers._stack.pop()
                took = time.perf_counter() - started
                timers.totals[name] += took - children
                if timers._stack:
                    timers._stack[-1][2] += took

        timed.__wrapped__ = function
        return timed


def instrument(timers: BatchTimers) -> list[str]:
    """Wrap timers around the job's functions, by name; the names not found (the job's code
    moves on) are returned, and their time falls into ``rest``."""
    from ingestion import bronze, decoders, job

    targets = [  # (module or class, attribute, phase)
        (bronze, "last_committed_batch", "commit_checks"),
        (bronze, "append", "bronze_pass_and_append"),
        (decoders.StreamDecoder, "refresh", "decoder_refresh"),
        # the batch's plan built in Python (py4j calls, no Spark job): the decoding, the
        # observation, bronze's columns, the table's column order
        (decoders.StreamDecoder, "decode", "plan_in_python"),
        (job, "_observed", "plan_in_python"),
        (job, "to_bronze", "plan_in_python"),
        (bronze, "conform_to_schema", "plan_in_python"),
    ]
    missing = []
    for owner, attribute, phase in targets:
        function = getattr(owner, attribute, None)
        if function is None:
            missing.append(f"{owner.__name__}.{attribute}")
            continue
        setattr(owner, attribute, timers.wrap(phase, function))
    original_writer = job.batch_writer

    def batch_writer(*args, **kwargs):
        return timers.wrap("rest", original_writer(*args, **kwargs), only_in_batch=False)

    job.batch_writer = batch_writer
    return missing


def add_source_options(options: dict[str, str]) -> None:
    """Extra Kafka source options for every streaming read (an experiment: job.py sets none)."""
    if not options:
        return
    from pyspark.sql.streaming.readwriter import DataStreamReader

    original_load = DataStreamReader.load

    def load(self, *args, **kwargs):
        for key, value in options.items():
            self.option(key, value)
        return original_load(self, *args, **kwargs)

    DataStreamReader.load = load


# --- Spark's own progress, per trigger ------------------------------------------------------

def progress_listener():
    from pyspark.sql.streaming import StreamingQueryListener

    class Recorder(StreamingQueryListener):
        def __init__(self):
            self.progress: dict[str, list[dict]] = defaultdict(list)
            self.terminated: set[str] = set()
            self.lock = threading.Lock()

        def onQueryStarted(self, event):
            pass

        def onQueryProgress(self, event):
            p = event.progress
            with self.lock:
                self.progress[p.name].append({"batch_id": p.batchId, "rows": p.numInputRows,
                                              "duration_ms": dict(p.durationMs)})

        def onQueryIdle(self, event):
            pass

        def onQueryTerminated(self, event):
            with self.lock:
                self.terminated.add(str(event.id))

        def wait_for_termination(self, known: set[str], timeout_s: float = 30.0) -> bool:
            """Wait until a query not in ``known`` has terminated: the bus delivers events in
            order, so every progress event of that query has been recorded by then."""
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                with self.lock:
                    if self.terminated - known:
                        return True
                time.sleep(0.1)
            return False

    return Recorder()


# --- machine facts and resource use ---------------------------------------------------------

def peak_memory(broker_pid: int | None) -> dict[str, int]:
    """Peak resident MB (VmHWM) of this Python process, the Spark JVM and the Kafka broker."""
    peaks = {"python_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}
    for pid in process_tree(os.getpid())[1:]:
        command = _cmdline(pid)
        if "java" in command and "SparkSubmit" in command:
            peaks["spark_jvm_mb"] = max(peaks.get("spark_jvm_mb", 0), _status_kb(pid, "VmHWM") // 1024)
    if broker_pid:
        peaks["kafka_broker_mb"] = _status_kb(broker_pid, "VmHWM") // 1024
    return peaks


def reset_peak_rss(pids: list[int]) -> bool:
    """Reset the peak resident size (VmHWM) of ``pids`` to their current size (Linux: ``5`` to
    /proc/<pid>/clear_refs), so a later VmHWM is the peak of what ran in between."""
    try:
        for pid in pids:
            Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError as exc:
        log.warning("peak memory not reset (%s): the peaks include what ran before", exc)
        return False
    return True


def jvm_memory(spark, reset: bool = False) -> dict:
    """The Spark JVM's heap: its maximum, each heap pool's peak since the last reset (their sum
    bounds the heap's peak from above: pools peak at different moments), and garbage collection
    time; ``reset`` starts the pools' peaks afresh. Empty when the JVM does not answer."""
    try:
        management = spark._jvm.java.lang.management.ManagementFactory
        pools = [pool for pool in management.getMemoryPoolMXBeans() if str(pool.getType()) == "Heap memory"]
        if reset:
            for pool in pools:
                pool.resetPeakUsage()
        peaks = {str(pool.getName()): round(pool.getPeakUsage().getUsed() / 2**20) for pool in pools}
        return {"heap_max_mb": round(management.getMemoryMXBean().getHeapMemoryUsage().getMax() / 2**20),
                "heap_pool_peaks_mb": peaks, "heap_peak_mb_at_most": sum(peaks.values()),
                "gc_seconds": round(sum(gc.getCollectionTime() for gc in management.getGarbageCollectorMXBeans())
                                    / 1000, 2)}
    except Exception as exc:  # the JVM is gone (an OutOfMemoryError killed it) or refuses
        log.warning("JVM memory not read: %s", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return {}


class CpuWindow:
    """CPU seconds used by this benchmark (Python, Spark JVM, broker) and by anything else."""

    def __init__(self, broker_pid: int | None):
        self.pids = process_tree(os.getpid()) + ([broker_pid] if broker_pid else [])
        self.broker_pid = broker_pid
        self.ours, self.busy = _cpu_seconds(self.pids), _machine_busy_seconds()
        self.broker = _cpu_seconds([broker_pid]) if broker_pid else 0.0

    def close(self) -> dict[str, float]:
        ours = _cpu_seconds(self.pids) - self.ours
        busy = _machine_busy_seconds() - self.busy
        broker = (_cpu_seconds([self.broker_pid]) - self.broker) if self.broker_pid else 0.0
        return {"benchmark_cpu_s": round(ours, 1), "broker_cpu_s": round(broker, 1),
                "other_cpu_s": round(max(busy - ours, 0.0), 1)}


# --- a JVM profile of the Spark driver (JDK Flight Recorder) --------------------------------

# Where a sampled stack burns its CPU: the first rule matching a frame, read from the leaf up.
PROFILE_RULES = (
    ("decode: protobuf (project UDF)", ("io.github.lakehouse.protobuf.", "com.google.protobuf.")),
    ("decode: UDF result conversion (Row -> InternalRow)", ("CatalystTypeConverters",)),
    ("decode: avro", ("org.apache.spark.sql.avro.", "org.apache.avro.")),
    ("decode: json", ("org.apache.spark.sql.catalyst.json.", "com.fasterxml.jackson.")),
    ("kafka fetch", ("org.apache.kafka.", "org.apache.spark.sql.kafka010.")),
    ("parquet/iceberg write", ("org.apache.parquet.", "org.apache.iceberg.", "shaded.parquet.",
                               "com.github.luben.zstd.", "io.airlift.compress.")),
    ("in-memory cache (build/read)", ("org.apache.spark.sql.execution.columnar.",)),
    ("generated code (projections, filters)", ("GeneratedClass", "GeneratedIterator")),
    ("shuffle/sort", ("org.apache.spark.shuffle.", "org.apache.spark.util.collection.")),
    ("spark sql row/expression helpers", ("org.apache.spark.sql.catalyst.",)),
)


def jvm_pid() -> int | None:
    for pid in process_tree(os.getpid())[1:]:
        command = _cmdline(pid)
        if "java" in command and "SparkSubmit" in command:
            return pid
    return None


class JvmProfile:
    """JFR ExecutionSample events of the Spark JVM over a window, grouped by the rules above."""

    def __init__(self, folder: Path, label: str):
        self.pid, self.file = jvm_pid(), folder / f"{label}.jfr"
        self.name = f"bench-{label}"
        self.started = bool(self.pid and shutil.which("jcmd")) and self._jcmd(
            "JFR.start", f"name={self.name}", "settings=profile", f"filename={self.file}")

    def _jcmd(self, *args) -> bool:
        import subprocess

        done = subprocess.run(["jcmd", str(self.pid), *args], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            log.warning("jcmd %s failed: %s", " ".join(args), (done.stdout + done.stderr).strip()[-300:])
        return done.returncode == 0

    def close(self, keep_in: Path | None = None) -> dict | None:
        import subprocess

        if not self.started or not self._jcmd("JFR.stop", f"name={self.name}"):
            return None
        done = subprocess.run(["jfr", "print", "--events", "jdk.ExecutionSample", "--stack-depth", "200",
                               str(self.file)], capture_output=True, text=True, timeout=600)
        if keep_in is not None:
            keep_in.mkdir(parents=True, exist_ok=True)
            shutil.move(self.file, keep_in / self.file.name)
            log.info("JFR recording kept: %s (open with `jfr print` or JDK Mission Control)",
                     keep_in / self.file.name)
        self.file.unlink(missing_ok=True)
        return summarize_samples(done.stdout) if done.returncode == 0 else None


def summarize_samples(text: str) -> dict:
    categories: dict[str, int] = defaultdict(int)
    leaves: dict[str, int] = defaultdict(int)
    total = tasks = 0
    thread, frames = "", []

    def flush():
        nonlocal total, tasks
        if not frames:
            return
        total += 1
        if "Executor task launch worker" not in thread:
            categories["not in a Spark task (driver, planning, commits, GC helpers)"] += 1
            return
        tasks += 1
        leaves[frames[0]] += 1
        for frame in frames:
            category = next((name for name, markers in PROFILE_RULES if any(m in frame for m in markers)), None)
            if category:
                categories[category] += 1
                return
        categories["other in tasks"] += 1

    in_stack = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("jdk.ExecutionSample"):
            flush()
            thread, frames, in_stack = "", [], False
        elif stripped.startswith("sampledThread = "):
            thread = stripped
        elif stripped.startswith("stackTrace = ["):
            in_stack = True
        elif in_stack and stripped == "]":
            in_stack = False
        elif in_stack and "(" in stripped:
            frames.append(stripped.split(" line:")[0])
    flush()
    share = {name: round(100 * count / max(total, 1), 1)
             for name, count in sorted(categories.items(), key=lambda item: -item[1])}
    top = [[frame[:160], round(100 * count / max(tasks, 1), 1)]
           for frame, count in sorted(leaves.items(), key=lambda item: -item[1])[:12]]
    return {"samples": total, "share_percent": share, "top_leaf_frames_in_tasks_percent": top}


# --- the benchmark --------------------------------------------------------------------------

def load_topic(settings: Settings, stream: str, count: int, faults: FaultRates, processes: int, seed: int) -> dict:
    from producers.run import produce

    processes = 1 if stream in CDC_STREAMS else processes
    started = time.perf_counter()
    report = produce(settings, stream, count, faults=faults, seed=seed, processes=processes, progress=True)
    seconds = time.perf_counter() - started
    if report.failed:
        raise LakehouseError(f"{stream}: {report.failed} messages not delivered: {report.errors}")
    # The coordinates and reason of every record that must end in dead letters (the producer's
    # fault manifest): the run's check compares them one by one, not only their count.
    expected_dead = {(d["partition"], d["offset"]): d["error_code"] for d in report.manifest()["dead_letters"]}
    dead_count, codes = len(expected_dead), set(expected_dead.values())
    if dead_count == report.delivered and len(codes) == 1:
        # Every record fails, for one reason (--whole-bad-batch): the reason stands for them all,
        # and the check runs in Spark rather than against a million coordinates in Python.
        expected_dead = codes.pop()
    return {"produced": report.delivered, "value_bytes": report.bytes, "load_seconds": round(seconds, 2),
            "load_msgs_per_s": round(report.delivered / seconds), "expected_dead_letters": dead_count,
            "expected_dead_coordinates": expected_dead,
            "processes": processes, "fault_rates": {k: v for k, v in faults.as_dict().items() if v}}


def probe(spark, settings: Settings, stream: str, source_options: dict[str, str]) -> dict:
    """The topic read in batch mode into the noop sink: alone, then decoded (no Iceberg)."""
    from pyspark.sql import functions as F

    from ingestion.decoders import decoder_for
    from lakehouse.contracts.streams import get_stream

    spec = get_stream(stream)
    reader = (spark.read.format("kafka").option("kafka.bootstrap.servers", settings.kafka_bootstrap_servers)
              .option("subscribe", spec.topic).option("startingOffsets", "earliest")
              .option("endingOffsets", "latest"))
    for key, value in source_options.items():
        reader = reader.option(key, value)
    raw = reader.load()
    decoder = decoder_for(spark, settings, spec)
    decoder.refresh()

    def timed(frame) -> float:
        started = time.perf_counter()
        frame.write.format("noop").mode("overwrite").save()
        return time.perf_counter() - started

    # The read is timed before and after the decode, the faster counted: the first read of a
    # fresh JVM pays for class loading and JIT compilation.
    first_read = timed(raw)
    decode_s = timed(decoder.decode(raw))
    read_s = min(first_read, timed(raw))
    stats = raw.agg(F.count(F.lit(1)).alias("n"), F.sum(F.length("value")).alias("b")).collect()[0]
    return {"kafka_read_s": round(read_s, 2), "kafka_read_decode_s": round(decode_s, 2),
            "decode_only_s": round(decode_s - read_s, 2), "kafka_messages": stats.n, "kafka_value_bytes": stats.b}


def every_offset_once(spark, settings: Settings, spec, expected_dead: dict[tuple[int, int], str] | str) -> dict:
    """The bronze table against the topic, offset for offset: each (partition, offset) of the
    topic once, a good row or a dead one, and the dead rows exactly the injected faults'
    coordinates with their reason codes. Counts alone would let a loss and a duplicate cancel out.
    ``expected_dead`` a reason code alone: every record of the topic fails, for that reason.

    Per partition, coordinates that are distinct, all within [0, end) and as many as ``end`` are
    exactly the offsets 0..end-1; Spark computes that without bringing a million rows to Python.
    """
    from pyspark.sql import functions as F

    from lakehouse.core.kafka_admin import end_offsets

    ends = end_offsets(settings, spec.topic)
    rows = spark.table(spec.bronze_table).select(F.col("_kafka_partition").cast("int").alias("partition"),
                                                 F.col("_kafka_offset").cast("long").alias("offset"),
                                                 F.col("_error_code").alias("error_code"))
    bronze = rows.where(F.col("error_code").isNull()).select("partition", "offset")
    dead_letters = rows.where(F.col("error_code").isNotNull())
    per_partition = {r.partition: r for r in (
        bronze.union(dead_letters.select("partition", "offset"))
        .groupBy("partition")
        .agg(F.count(F.lit(1)).alias("n"), F.countDistinct("offset").alias("distinct"),
             F.min("offset").alias("low"), F.max("offset").alias("high"))
        .collect())}
    bronze_rows = bronze.count()
    problems = []
    for partition in sorted(set(ends) | set(per_partition)):
        end, row = ends.get(partition, 0), per_partition.get(partition)
        if row is None:
            if end:
                problems.append(f"partition {partition}: all {end:,} offsets missing")
            continue
        if row.n != row.distinct:
            problems.append(f"partition {partition}: {row.n - row.distinct:,} offsets twice (bronze, dead "
                            "letters or both)")
        if row.low < 0 or row.high >= end or row.distinct != end:
            problems.append(f"partition {partition}: {row.distinct:,} distinct offsets in [{row.low}, {row.high}], "
                            f"the topic has 0..{end - 1}")
    if isinstance(expected_dead, str):  # every record fails (--whole-bad-batch): checked in Spark
        dead_count, distinct, other_reason = dead_letters.agg(
            F.count(F.lit(1)), F.count_distinct("partition", "offset"),
            F.count(F.when(F.col("error_code") != expected_dead, 1))).first()
        if dead_count != distinct:
            problems.append(f"{dead_count - distinct:,} dead letters twice")
        if bronze_rows or other_reason:
            problems.append(f"dead letters against the injected faults (every record {expected_dead}): "
                            f"{bronze_rows:,} records in bronze instead, {other_reason:,} with another reason")
        return {"bronze_rows": bronze_rows, "dead_letters": dead_count, "correct": not problems,
                "topic_offsets": sum(ends.values()), "problems": problems}
    dead_rows = dead_letters.collect()
    dead = {(r.partition, r.offset): r.error_code for r in dead_rows}
    if len(dead) != len(dead_rows):
        problems.append(f"{len(dead_rows) - len(dead):,} dead letters twice")
    unexpected = dead.keys() - expected_dead.keys()
    missing = expected_dead.keys() - dead.keys()
    other_reason = [k for k in dead.keys() & expected_dead.keys() if dead[k] != expected_dead[k]]
    if unexpected or missing or other_reason:
        problems.append(f"dead letters against the injected faults: {len(unexpected):,} unexpected, "
                        f"{len(missing):,} missing, {len(other_reason):,} with another reason "
                        f"(e.g. {sorted(unexpected or missing or other_reason)[:3]})")
    return {"bronze_rows": bronze_rows, "dead_letters": len(dead_rows), "correct": not problems,
            "topic_offsets": sum(ends.values()), "problems": problems}


STREAMING_PART = "_run_queries"  # the function of ingestion/job.py the job's timer wraps


@contextlib.contextmanager
def streaming_part(job, start, stop):
    """``start()`` and ``stop()`` called around the job's streaming part, its ``_run_queries``
    (patched in for the block): the queries started, run to their end and stopped. What
    ``ingestion.job.run`` does before it (the topic check, the lock, the tables created or
    evolved, the writer lease taken) and after it (the lease released) stays outside. Yields
    False when the job has no such function (its code moved on): the caller times ``run``."""
    original = getattr(job, STREAMING_PART, None)
    if original is None:
        yield False
        return

    def run_queries(*args, **kwargs):
        start()
        try:
            return original(*args, **kwargs)
        finally:
            stop()

    setattr(job, STREAMING_PART, run_queries)
    try:
        yield True
    finally:
        setattr(job, STREAMING_PART, original)


def ingest(spark, settings: Settings, stream: str, loaded: dict, args, recorder, timers: BatchTimers,
           broker_pid: int | None, max_offsets: int | None, after_run=None) -> dict:
    """One run of the real job over the stream's whole topic (bronze and its dead letters are
    dropped first: reset_stream), timed over its streaming part only (``streaming_part``), at
    ``max_offsets`` records per batch (None: the job's own default); ``after_run()``, if given,
    is called as soon as the job returns, before the check, and its dict joins the result."""
    from ingestion import job
    from lakehouse.contracts.streams import get_stream
    from lakehouse.core.kafka_admin import end_offsets

    spec = get_stream(stream)
    reset_stream(spark, settings, stream)
    in_topic = sum(end_offsets(settings, spec.topic).values())
    known = set(recorder.terminated)
    timers.reset()
    window: dict = {}

    def start():
        window["profile"] = JvmProfile(settings.home, stream) if args.profile else None
        window["cpu"] = CpuWindow(broker_pid)
        window["started"] = time.perf_counter()

    def stop():
        window["seconds"] = time.perf_counter() - window["started"]
        window["cpu_use"] = window["cpu"].close()

    called = time.perf_counter()
    with streaming_part(job, start, stop) as found:
        if not found:
            log.warning("ingestion.job.%s not found: the job is timed whole, start-up included", STREAMING_PART)
            start()
        try:
            job.run(spark, settings, [stream], available_now=True, max_offsets_per_trigger=max_offsets)
        finally:
            if not found:
                stop()
            run_seconds = time.perf_counter() - called
            profiled = window["profile"].close(args.profile_dir) if window.get("profile") else None
    seconds, cpu_use = window["seconds"], window["cpu_use"]
    extra = after_run() if after_run else {}
    inside = timers.reset()
    if not recorder.wait_for_termination(known):
        log.warning("%s: no termination event from the listener within 30 s; phases may be incomplete", stream)
    triggers = recorder.progress.pop(job.query_name(spec), [])
    batches = [t for t in triggers if "addBatch" in t["duration_ms"]]

    phases = defaultdict(int)
    for trigger in triggers:
        for key, value in trigger["duration_ms"].items():
            phases[key] += value
    trigger_ms = phases.get("triggerExecution", 0)
    phases_ms = {key: phases.get(key, 0) for key in SPARK_PHASES}
    phases_ms["other_in_trigger"] = max(trigger_ms - sum(phases_ms.values()), 0)
    phases_ms["outside_triggers"] = max(round(seconds * 1000) - trigger_ms, 0)
    in_batch_ms = {key: round(inside.get(key, 0.0) * 1000) for key in BATCH_PHASES}

    check = every_offset_once(spark, settings, spec, loaded["expected_dead_coordinates"])
    bronze_rows, dead, correct = check.pop("bronze_rows"), check.pop("dead_letters"), check.pop("correct")
    if not correct:
        log.error("%s: bronze + dead letters differ from the topic: %s", stream, check)
    result = {
        "stream": stream, "format": spec.format, "messages": in_topic, "value_bytes": loaded["value_bytes"],
        "avg_message_bytes": round(loaded["value_bytes"] / max(in_topic, 1), 1),
        "seconds": round(seconds, 2),
        "timed": (f"ingestion.job.{STREAMING_PART}: the query's start to its end" if found
                  else "ingestion.job.run: start-up included"),
        "startup_seconds": round(run_seconds - seconds, 2), "max_offsets_per_trigger": max_offsets,
        "msgs_per_s": round(in_topic / seconds), "mb_per_s": round(loaded["value_bytes"] / seconds / 1e6, 2),
        "trigger_seconds": round(trigger_ms / 1000, 2),
        "msgs_per_s_in_triggers": round(in_topic / max(trigger_ms / 1000, 1e-9)),
        "triggers": len(triggers), "batches": len(batches), "rows_per_batch": [b["rows"] for b in batches][:50],
        "phases_ms": phases_ms, "add_batch_ms": in_batch_ms,
        "bronze_rows": bronze_rows, "dead_letters": dead, "expected_dead_letters": loaded["expected_dead_letters"],
        "correct": correct, "offset_check": check, **cpu_use,
        "cpu_us_per_msg": round(cpu_use["benchmark_cpu_s"] / max(in_topic, 1) * 1e6, 1),
        "load": {k: loaded[k] for k in ("load_seconds", "load_msgs_per_s", "processes", "fault_rates")},
        **extra,
    }
    if stream in TARGET:
        result["target_msgs_per_s"] = TARGET[stream]
        result["target_met"] = result["msgs_per_s"] >= TARGET[stream]
    if profiled:
        result["jvm_profile"] = profiled
    return result


# --- steady state: the highest production rate the job keeps up with --------------------------

def steady_step(spark, settings: Settings, stream: str, rate: int, args) -> dict:
    """Produce at ``rate`` msg/s for ``--steady-minutes`` while the job runs with a processing-time
    trigger from the topic's end; sample the lag (Kafka's end offsets, read by this script, minus
    what the query's progress says it read) every few seconds."""
    from ingestion import job
    from ingestion.checkpoint import lag
    from lakehouse.contracts.streams import get_stream
    from lakehouse.core.kafka_admin import end_offsets
    from producers.run import produce

    spec = get_stream(stream)
    reset_stream(spark, settings, stream)
    decoder = job.decoder_for(spark, settings, spec)
    job.ensure_tables(spark, spec, decoder)
    query = job.build_query(spark, settings, spec, trigger=args.steady_trigger, starting_offsets="latest",
                            decoder=decoder).start()
    seconds = args.steady_minutes * 60
    produced: dict = {}

    def producer():
        try:
            report = produce(settings, stream, duration=seconds, rate=rate, faults=fault_rates(stream, args.fault_rate),
                             processes=args.processes, progress=False)
            produced.update(delivered=report.delivered, seconds=report.seconds)
        except Exception as exc:  # reported with the step
            produced["error"] = f"{type(exc).__name__}: {exc}"

    while query.isActive and not query.lastProgress:
        time.sleep(0.5)  # the first (empty) trigger has fixed the starting offsets
    thread = threading.Thread(target=producer, daemon=True)
    started = time.monotonic()
    thread.start()
    samples = []
    try:
        while thread.is_alive() and query.isActive:
            time.sleep(5)
            progress = query.lastProgress or {}
            read = job._offsets((progress.get("sources") or [{}])[0].get("endOffset")) or {}
            ends = end_offsets(settings, spec.topic)
            samples.append((round(time.monotonic() - started, 1), lag(ends, read.get(spec.topic, {}))))
        thread.join()
    finally:
        while query.isActive and query.status["isTriggerActive"]:
            time.sleep(0.2)  # the batch in flight finishes: stopping it would only log its abort
        query.stop()
    if query.exception() is not None:
        raise RuntimeError(f"the job failed: {query.exception()}")
    achieved = produced.get("delivered", 0) / max(produced.get("seconds") or seconds, 1e-9)
    # Bounded: in the last third of the run the lag never exceeded what a few triggers' worth of
    # records (plus the batch in flight) leaves behind, and did not grow from the middle third.
    third = [lag for at, lag in samples if at > seconds * 2 / 3]
    middle = [lag for at, lag in samples if seconds / 3 < at <= seconds * 2 / 3]
    allowance = rate * (3 * _trigger_seconds(args.steady_trigger) + 10)
    bounded = bool(third) and max(third) <= allowance and (not middle or max(third) <= max(middle) * 1.5 + rate)
    return {"rate": rate, "achieved_rate": round(achieved), "bounded": bounded, "allowance": allowance,
            "max_lag_last_third": max(third) if third else None, "lag_samples": samples, **produced}


def _trigger_seconds(trigger: str) -> float:
    from ingestion.job import normalize_trigger

    number, unit = normalize_trigger(trigger).split()
    return int(number) * {"milliseconds": 0.001, "seconds": 1, "minutes": 60, "hours": 3600}[unit]


def steady_state(spark, settings: Settings, stream: str, args) -> dict:
    """Rates from ``--steady-start``, times ``--steady-factor`` while the lag stays bounded."""
    steps, rate = [], args.steady_start
    while len(steps) < args.steady_max_steps:
        log.info("%s: steady state at %s msg/s for %s min", stream, f"{rate:,}", args.steady_minutes)
        step = steady_step(spark, settings, stream, rate, args)
        steps.append(step)
        log.info("%s: %s msg/s asked, %s produced, lag bounded: %s (max %s in the last third)", stream,
                 f"{rate:,}", f"{step['achieved_rate']:,}", step["bounded"], step["max_lag_last_third"])
        if not step["bounded"] or step["achieved_rate"] < 0.95 * rate:
            break  # the job fell behind, or the producer could not produce that fast
        rate = round(rate * args.steady_factor)
    kept_up = [s for s in steps if s["bounded"] and s["achieved_rate"] >= 0.95 * s["rate"]]
    return {"stream": stream, "trigger": args.steady_trigger, "minutes": args.steady_minutes,
            "highest_bounded_rate": max((s["achieved_rate"] for s in kept_up), default=None),
            "producer_limited": bool(steps) and steps[-1]["achieved_rate"] < 0.95 * steps[-1]["rate"],
            "steps": steps}


# --- the raw ceiling, and the job's steps appended alone -------------------------------------

CEILING_TABLE = "bronze.bench_raw_ceiling"
# What ``--steps`` appends, each by Iceberg's own streaming sink (no foreachBatch, no dead
# letters, no commit markers), so that the gap between the raw ceiling and the job splits
# into the cost of bronze's layout, of the checks, and of the exactly-once protocol.
STEPS = {  # name: (label, what it appends)
    "decode_only": ("decode only", "the format's decoding alone (no checks), the decoded fields with bronze's Kafka "
                    "metadata, unpartitioned: the reference Java sample's from_protobuf -> Iceberg"),
    "checked": ("decode + checks", "the job's decoding and checks, every record in bronze's columns and "
                "partitioning (failing ones as dead rows): the job without its exactly-once protocol"),
}


def _decode_only(spark, settings: Settings, spec, raw):
    """``raw`` decoded by the format's function alone, in bronze's columns: Protobuf and JSON by
    the project's JVM function (its payload); Avro by Spark's ``from_avro`` with the writer
    schema the record's header names (the topic holds two versions), each field from the
    writer that has it. No field is checked: every record is kept."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    from ingestion.decoders import decoder_for
    from ingestion.formats.avro import HEADER_SIZE, confluent_schema_id
    from ingestion.formats.bronze_shape import to_bronze
    from ingestion.formats.checks import ERROR_COLUMNS, KAFKA_COLUMNS
    from lakehouse.contracts.registry import registry_for

    if spec.format == "avro":
        writers = registry_for(settings).subject_schemas(spec.subject)
        schema_id, body = confluent_schema_id(F.col("value"), writers), F.expr(f"substring(value, {HEADER_SIZE + 1})")
        raw = raw.select(*KAFKA_COLUMNS, *[F.when(schema_id == writer, from_avro(body, text, {"mode": "PERMISSIVE"}))
                                           .alias(f"_writer_{writer}") for writer, text in writers.items()])
        fields: dict[str, list] = {}
        for writer in writers:
            for field in raw.schema[f"_writer_{writer}"].dataType.fields:
                fields.setdefault(field.name, []).append(F.col(f"_writer_{writer}")[field.name])
        payload = F.struct(*[F.coalesce(*columns).alias(name) for name, columns in fields.items()])
    else:
        decoder = decoder_for(spark, settings, spec)
        decoder.refresh()
        payload = F.call_function(decoder.function, F.col("value"))["payload"]
    decoded = raw.select(*KAFKA_COLUMNS, payload.alias("_payload")).select(
        "_payload.*", *KAFKA_COLUMNS, *[F.lit(None).cast("string").alias(name) for name in ERROR_COLUMNS])
    return to_bronze(decoded, 0, F.current_timestamp())


def _checked(spark, settings: Settings, spec, raw):
    """``raw`` through the job's own decoder and ``to_bronze``: every record as bronze holds it (a
    failing one as a dead row)."""
    from datetime import UTC, datetime

    from pyspark.sql import functions as F

    from ingestion.decoders import decoder_for
    from ingestion.formats.bronze_shape import to_bronze
    from ingestion.formats.checks import batch_instant

    now = datetime.now(UTC)
    # Observed, as the job's pass is (ingestion/job.py `_observed`): without it the optimizer
    # pushes the good-rows filter into the decoding, and each check decodes the record again.
    decoded = decoder_for(spark, settings, spec).decode(raw, now).observe(f"checked_{spec.name}", F.count(F.lit(1)))
    return to_bronze(decoded, 0, batch_instant(now))  # the job's expressions (ingestion/job.py `bronze_rows`)


def raw_rows(source):
    """The raw ceiling's rows: each record's value bytes, undecoded, with the Kafka metadata
    bronze keeps, in bronze's columns and types (``ingestion.formats.bronze_shape.to_bronze``)."""
    from pyspark.sql import functions as F

    return source.select(
        "value",
        F.col("topic").alias("_kafka_topic"),
        F.col("partition").cast("int").alias("_kafka_partition"),
        F.col("offset").cast("long").alias("_kafka_offset"),
        F.col("timestamp").alias("_kafka_timestamp"),
        F.col("key").cast("string").alias("_kafka_key"),
    )


def ceiling(spark, settings: Settings, stream: str, args, recorder, broker_pid: int | None,
            step: str | None = None, dead_letters: int = 0, max_offsets: int | None = None) -> dict:
    """The stream's topic read by the job's own Kafka source (``ingestion.job.kafka_source``,
    ``max_offsets`` records per batch) and appended to an Iceberg table with bronze's table
    properties by Iceberg's own streaming sink (availableNow), no Python in the batch. Without
    ``step``: the value bytes with bronze's Kafka metadata, no decoding (the raw ceiling,
    ``raw_rows``); with one of STEPS: what it names (``dead_letters``: the records the checks
    turn away, which "checked" leaves out). The table is dropped and created before the timer,
    which runs from the query's start to its end."""
    from pyspark.sql import functions as F

    from ingestion import bronze, job
    from lakehouse.contracts.streams import get_stream
    from lakehouse.core.kafka_admin import end_offsets

    spec = get_stream(stream)
    in_topic = sum(end_offsets(settings, spec.topic).values())
    spark.sql(f"drop table if exists {CEILING_TABLE} purge")
    source = job.kafka_source(spark, settings, spec, max_offsets).load()
    if step is None:
        rows, expected, partitioning = raw_rows(source), in_topic, ()
    elif step == "decode_only":
        # Every record, and unpartitioned: a damaged Avro body may decode to any event time,
        # and a partition per such day (fanout) would hold thousands of open files.
        rows, expected, partitioning = _decode_only(spark, settings, spec, source), in_topic, ()
    else:
        # every record, as the job writes them since one commit per batch: good rows decoded,
        # failing ones as dead rows beside them
        rows = _checked(spark, settings, spec, source)
        expected, partitioning = in_topic, spec.partitioning
    spark.sql(bronze.create_table_ddl(CEILING_TABLE, rows.schema, partitioning, bronze.STREAMING_TABLE_PROPERTIES))
    location = Path(tempfile.mkdtemp(prefix=f"ceiling-{stream}-", dir=settings.home))
    name = f"{step or 'raw_ceiling'}_{stream}"
    known = set(recorder.terminated)
    # The checked append is what the job is compared with: profiled like the job (same rules), so
    # the two profiles say where the job's extra time goes.
    profile = JvmProfile(settings.home, name) if args.profile and step == "checked" else None
    cpu = CpuWindow(broker_pid)
    started = time.perf_counter()
    query = (rows.writeStream.queryName(name).format("iceberg").outputMode("append").trigger(availableNow=True)
             .option("checkpointLocation", str(location)).toTable(CEILING_TABLE))
    try:
        query.awaitTermination()
    finally:
        seconds = time.perf_counter() - started
        cpu_use = cpu.close()
        shutil.rmtree(location, ignore_errors=True)
        profiled = profile.close(args.profile_dir) if profile else None
    recorder.wait_for_termination(known)
    triggers = recorder.progress.pop(name, [])
    trigger_ms = sum(t["duration_ms"].get("triggerExecution", 0) for t in triggers)
    batches = [t for t in triggers if "addBatch" in t["duration_ms"]]
    written = spark.table(CEILING_TABLE).count()
    correct = written == expected
    if step == "decode_only":  # decoded, not just written: every good record has its event time
        timed = spark.table(CEILING_TABLE).where(F.col(spec.event_time_column).isNotNull()).count()
        correct = correct and timed >= in_topic - dead_letters
    spark.sql(f"drop table if exists {CEILING_TABLE} purge")
    return {"messages": in_topic, "rows": written, "correct": correct, "seconds": round(seconds, 2),
            "batches": len(batches), "rows_per_batch": [b["rows"] for b in batches][:50],
            "max_offsets_per_trigger": max_offsets, "msgs_per_s": round(in_topic / seconds),
            "msgs_per_s_in_triggers": round(in_topic / max(trigger_ms / 1000, 1e-9)),
            "cpu_us_per_msg": round(cpu_use["benchmark_cpu_s"] / max(in_topic, 1) * 1e6, 1), **cpu_use,
            **({"jvm_profile": profiled} if profiled else {})}


def reset_stream(spark, settings: Settings, stream: str) -> None:
    """Drop what a run of the job left (its bronze table, good and dead rows, its checkpoint),
    so that the next run reads the whole topic again (the job creates the table again, and the
    dead-letter view over it)."""
    from ingestion import job
    from lakehouse.contracts.streams import get_stream

    spec = get_stream(stream)
    spark.sql(f"drop table if exists {spec.bronze_table} purge")
    shutil.rmtree(job.checkpoint_location(settings, spec), ignore_errors=True)


def median_run(runs: list[dict]) -> dict:
    """The run with the median msg/s (the lower middle one of an even count), with the spread."""
    ordered = sorted(runs, key=lambda r: r["msgs_per_s"])
    middle = dict(ordered[(len(ordered) - 1) // 2])
    middle["runs_msgs_per_s"] = [r["msgs_per_s"] for r in runs]
    middle["runs_cpu_us_per_msg"] = [r["cpu_us_per_msg"] for r in runs]
    middle["runs_batches"] = [r["batches"] for r in runs]
    middle["correct"] = all(r["correct"] for r in runs)
    return middle


RAW_CEILING, JOB = "raw_ceiling", "job"  # the names of a round's runs besides STEPS


def round_names(args) -> list[str]:
    """What one repeat runs: the raw ceiling (``--ceiling``), the steps (``--steps``), the job."""
    return [*([RAW_CEILING] if args.ceiling else []), *(STEPS if args.steps else ()), JOB]


def topic_records(settings: Settings, stream: str) -> int:
    from lakehouse.contracts.streams import get_stream
    from lakehouse.core.kafka_admin import end_offsets

    return sum(end_offsets(settings, get_stream(stream).topic).values())


def measure_stream(spark, settings: Settings, stream: str, loaded: dict, args, recorder, timers: BatchTimers,
                   broker_pid: int | None) -> dict:
    """``--repeat`` rounds on the stream's topic, each running the job and, with ``--ceiling``
    (``--steps``), the raw ceiling (and the steps) in an order of its own (``run_orders``), all
    at the same records per batch (``records_per_batch``); the median run of each, and the
    job's ratios to the median ceiling and to the median checked append."""
    max_offsets = records_per_batch(topic_records(settings, stream), args.batches, args.max_offsets_per_trigger)
    orders = run_orders(round_names(args), args.repeat, args.seed)
    runs, ceilings = [], []
    steps = {step: [] for step in (STEPS if args.steps else ())}
    for number, order in enumerate(orders):
        log.info("%s: round %d of %d, in this order: %s (%s records per batch)", stream, number + 1, args.repeat,
                 ", ".join(order), f"{max_offsets:,}")
        for name in order:
            if name == JOB:
                runs.append(ingest(spark, settings, stream, loaded, args, recorder, timers, broker_pid, max_offsets))
                run = runs[-1]
            elif name == RAW_CEILING:
                ceilings.append(ceiling(spark, settings, stream, args, recorder, broker_pid,
                                        max_offsets=max_offsets))
                run = ceilings[-1]
            else:
                steps[name].append(ceiling(spark, settings, stream, args, recorder, broker_pid, name,
                                           loaded["expected_dead_letters"], max_offsets))
                run = steps[name][-1]
            log.info("%s: %s %s msg/s in %d batches (round %d)", stream, name, f"{run['msgs_per_s']:,}",
                     run["batches"], number + 1)
            if run["batches"] < args.batches:
                log.warning("%s: %s ran %d batches, fewer than the %d asked for", stream, name, run["batches"],
                            args.batches)
    result = median_run(runs)
    result["orders"] = orders
    if ceilings:
        raw = median_run(ceilings)
        result["ceiling"] = raw
        result["ceiling_msgs_per_s"] = raw["msgs_per_s"]
        result["ratio_to_ceiling"] = round(result["msgs_per_s"] / max(raw["msgs_per_s"], 1), 3)
        result["correct"] = result["correct"] and raw["correct"]
    if steps:
        result["steps"] = {step: median_run(step_runs) for step, step_runs in steps.items()}
        # each step's median msg/s over the median raw ceiling's, the job's last
        base = max(result.get("ceiling_msgs_per_s", 0), 1)
        result["steps_ratio_to_ceiling"] = {
            **{step: round(r["msgs_per_s"] / base, 3) for step, r in result["steps"].items()},
            "job": round(result["msgs_per_s"] / base, 3)}
        # the job's median over the checked append's: what its exactly-once protocol costs
        result["ratio_to_checked_append"] = round(
            result["msgs_per_s"] / max(result["steps"]["checked"]["msgs_per_s"], 1), 3)
        result["correct"] = result["correct"] and all(r["correct"] for r in result["steps"].values())
    if args.probe:
        result["probe"] = probe(spark, settings, stream, args.source_option)
    return result


# --- a batch that fails whole ----------------------------------------------------------------

def whole_bad_batch(spark, settings: Settings, stream: str, loaded: dict, args, recorder, timers: BatchTimers,
                    broker_pid: int | None) -> dict:
    """The real job once over a topic whose every record fails (``whole_bad_rates``), in batches
    of the job's own default size unless ``--max-offsets-per-trigger`` says otherwise: whether it
    completes, its time, the driver's peak memory over the run (the peaks reset first: the Spark
    JVM's and this Python process's resident size, the JVM's heap pools), and every offset once
    in bronze, as dead rows. Nothing of a batch passes through the driver (ARCHITECTURE §8): the
    driver's peak is the evidence."""
    jvm = jvm_pid()
    pids = [os.getpid(), *([jvm] if jvm else [])]
    before = {"python_rss_mb": _status_kb(os.getpid(), "VmRSS") // 1024,
              "spark_jvm_rss_mb": _status_kb(jvm, "VmRSS") // 1024 if jvm else None}
    peaks_reset = reset_peak_rss(pids)
    gc_before = jvm_memory(spark, reset=True).get("gc_seconds", 0.0)

    def peaks() -> dict:
        heap = jvm_memory(spark)
        if "gc_seconds" in heap:
            heap["gc_seconds"] = round(heap["gc_seconds"] - gc_before, 2)
        return {"python_mb": _status_kb(os.getpid(), "VmHWM") // 1024,
                "spark_jvm_mb": _status_kb(jvm, "VmHWM") // 1024 if jvm else None, **heap}

    returned: dict = {}

    def after_run() -> dict:
        returned["peaks"] = peaks()
        return {"driver_peak": returned["peaks"]}

    started = time.perf_counter()
    try:
        result = ingest(spark, settings, stream, loaded, args, recorder, timers, broker_pid,
                        args.max_offsets_per_trigger, after_run)
        result["completed"] = True
    except Exception as exc:  # the job failed (an OutOfMemoryError, a JVM gone): that is the finding
        log.exception("%s: the job failed on the whole bad batch, or its check did", stream)
        result = {"stream": stream, "completed": "peaks" in returned, "correct": False,
                  "error": f"{type(exc).__name__}: {str(exc)[:2000]}", "traceback": traceback.format_exc()[-4000:],
                  "seconds_until_failure": round(time.perf_counter() - started, 2),
                  "driver_peak": returned.get("peaks") or peaks()}
    result.update({
        "driver_memory": settings.spark_driver_memory, "rss_before_mb": before, "peaks_reset": peaks_reset,
        "faults": {k: v for k, v in whole_bad_rates(stream).as_dict().items() if v},
    })
    return result


def print_whole_bad(results: list[dict]) -> None:
    for r in results:
        faults = ", ".join(f"{name}={rate}" for name, rate in r["faults"].items())
        print(f"\n{r['stream']}: whole bad batch ({faults}), driver memory {r['driver_memory']}")
        if "error" not in r:
            print(f"  completed in {r['seconds']} s ({r['msgs_per_s']:,} msg/s; {r['startup_seconds']} s more "
                  f"untimed), {r['batches']} batch(es) of {', '.join(f'{n:,}' for n in r['rows_per_batch'])} records")
            print(f"  every offset once: {r['correct']} (bronze {r['bronze_rows']:,}, dead letters "
                  f"{r['dead_letters']:,}, topic {r['messages']:,})" + (f": {r['offset_check']['problems']}"
                                                                      if not r["correct"] else ""))
        else:
            print(f"  {'completed, then' if r['completed'] else 'NOT completed:'} failed after "
                  f"{r['seconds_until_failure']} s: {r['error'][:400]}")
        peak = r["driver_peak"]
        print(f"  peak resident: Spark JVM {_figure(peak.get('spark_jvm_mb'))} MB, Python {peak['python_mb']:,} MB "
              f"(before: {_figure(r['rss_before_mb']['spark_jvm_rss_mb'])} and {r['rss_before_mb']['python_rss_mb']:,}"
              f" MB{'' if r['peaks_reset'] else '; peaks not reset'}); JVM heap at most "
              f"{_figure(peak.get('heap_peak_mb_at_most'))} MB of {_figure(peak.get('heap_max_mb'))} "
              f"(sum of the pools' peaks), GC {_figure(peak.get('gc_seconds'))} s")


SUMMARY_KEYS = ("msgs_per_s", "runs_msgs_per_s", "runs_batches", "max_offsets_per_trigger", "cpu_us_per_msg",
                "ceiling_msgs_per_s", "ratio_to_ceiling", "ratio_to_checked_append", "target_ratio",
                "steps_ratio_to_ceiling", "orders", "correct")
WHOLE_BAD_KEYS = ("completed", "correct", "seconds", "seconds_until_failure", "messages", "batches",
                  "rows_per_batch", "bronze_rows", "dead_letters", "driver_memory", "driver_peak", "error")
# Share of the raw ceiling each format should reach (the issue "Ingestion at the machine's limit").
TARGET_RATIO = {"protobuf": 0.8, "avro": 0.65, "json": 0.5}


def jvm_facts(spark) -> tuple[str | None, str | None]:
    """Spark's and Java's versions, or None each when the JVM is gone (a whole bad batch can kill
    it with an OutOfMemoryError: the run is still reported)."""
    try:
        return spark.version, spark._jvm.java.lang.System.getProperty("java.version")
    except Exception:  # noqa: BLE001 - py4j raises whatever the dead gateway gives
        return None, None


def job_read_tasks_per_core() -> int:
    from ingestion.job import READ_TASKS_PER_CORE

    return READ_TASKS_PER_CORE


def print_summary(results: list[dict], machine: dict) -> None:
    """The headline: each stream beside the raw ceiling on its topic, and the machine."""
    print(f"\nmachine: {machine.get('cpus')} cores ({machine.get('cpu_model')}), {machine.get('memory_gb')} GB, "
          f"Spark {machine.get('spark')} {machine.get('spark_master')}, Java {machine.get('java')}, "
          f"load average at the end {machine.get('load_average_end')}")
    print(f"{'stream':<12} {'format':<9} {'messages':>10} {'batches':>8} {'msg/s':>9} {'runs (msg/s)':<26} "
          f"{'CPU us/msg':>10} {'ceiling msg/s':>13} {'ceiling us/msg':>14} {'ratio':>6} {'target':>6} "
          f"{'other CPU s':>11}  correct")
    for r in results:
        if "error" in r:
            print(f"{r['stream']:<12} FAILED: {r['error'][:200]}")
            continue
        raw = r.get("ceiling", {})
        runs = ", ".join(f"{x:,}" for x in r.get("runs_msgs_per_s", [r["msgs_per_s"]]))
        target = TARGET_RATIO.get(r["format"])
        r["target_ratio"] = target
        print(f"{r['stream']:<12} {r['format']:<9} {r['messages']:>10,} {r['batches']:>8} {r['msgs_per_s']:>9,} "
              f"{runs:<26} {r['cpu_us_per_msg']:>10} {_figure(raw.get('msgs_per_s')):>13} "
              f"{_figure(raw.get('cpu_us_per_msg')):>14} "
              f"{_figure(r.get('ratio_to_ceiling')):>6} {_figure(target):>6} {r['other_cpu_s']:>11}  "
              f"{r['correct']}")
    print("(ratio: the stream's median msg/s over the median raw ceiling on the same topic; batches: the median "
          "run's micro-batches; other CPU s: CPU time used meanwhile by processes outside the benchmark, which "
          "makes the figures noisy)")
    for r in results:
        if r.get("orders") and len(r["orders"][0]) > 1:
            print(f"{r['stream']}: order of the runs in each round: "
                  + "; ".join(", ".join(order) for order in r["orders"]))
    stepped = [r for r in results if "steps" in r]
    if stepped:
        print(f"\n{'stream':<12} {'appended by Iceberg sink alone':<38} {'msg/s':>9} {'runs (msg/s)':<26} "
              f"{'batches per run':<16} {'CPU us/msg':>10} {'ratio':>6}")
        for r in stepped:
            ratios = r["steps_ratio_to_ceiling"]
            rows = [("raw value + Kafka metadata (ceiling)", r["ceiling"], 1.0),
                    *[(label, r["steps"][step], ratios[step]) for step, (label, _) in STEPS.items()],
                    ("the job", r, ratios["job"])]
            for label, run, ratio in rows:
                runs = ", ".join(f"{x:,}" for x in run["runs_msgs_per_s"])
                batches = ", ".join(str(x) for x in run["runs_batches"])
                print(f"{r['stream']:<12} {label:<38} {run['msgs_per_s']:>9,} {runs:<26} {batches:<16} "
                      f"{run['cpu_us_per_msg']:>10} {ratio:>6}")
            print(f"{r['stream']:<12} the job over decode + checks: {r['ratio_to_checked_append']} "
                  f"(ratio_to_checked_append)")
        for label, what in STEPS.values():
            print(f"({label}: {what})")


def _figure(value) -> str:
    return "-" if value is None else f"{value:,}"


def print_report(results: list[dict]) -> None:
    failed = [r for r in results if "error" in r]
    results = [r for r in results if "error" not in r]
    for r in failed:
        print(f"\n{r['stream']}: FAILED: {r['error']}")
    print()
    print(f"{'stream':<12} {'format':<9} {'messages':>10} {'B/msg':>6} {'seconds':>8} {'msg/s':>9} "
          f"{'MB/s':>6} {'batches':>7} {'bronze':>10} {'dead':>7} {'CPU us/msg':>10} {'other CPU s':>11}  correct")
    for r in results:
        print(f"{r['stream']:<12} {r['format']:<9} {r['messages']:>10,} {r['avg_message_bytes']:>6} "
              f"{r['seconds']:>8} {r['msgs_per_s']:>9,} {r['mb_per_s']:>6} {r['batches']:>7} "
              f"{r['bronze_rows']:>10,} {r['dead_letters']:>7,} {r['cpu_us_per_msg']:>10} {r['other_cpu_s']:>11}  "
              f"{r['correct']}")
    for r in results:
        total = sum(r["phases_ms"].values()) or 1
        print(f"\n{r['stream']}: where the {r['seconds']} s go (timed: {r['timed']}; Spark durationMs summed "
              f"over {r['batches']} trigger(s) of at most {_figure(r['max_offsets_per_trigger'])} records, plus "
              f"time outside triggers; {r['startup_seconds']} s before and after, untimed: topic check, "
              "tables, lock and lease)")
        for key, value in r["phases_ms"].items():
            print(f"  {key:<26} {value / 1000:>8.2f} s  {100 * value / total:5.1f}%")
        inside = r["add_batch_ms"]
        add_batch = r["phases_ms"]["addBatch"] or 1
        print("  inside addBatch (ingestion/job.py batch_writer; the bronze pass reads and decodes the batch):")
        for key, value in inside.items():
            print(f"    {key:<24} {value / 1000:>8.2f} s  {100 * value / add_batch:5.1f}% of addBatch")
        profiles = [("the job", r.get("jvm_profile")),
                    ("the checked append (median run)", r.get("steps", {}).get("checked", {}).get("jvm_profile"))]
        for whose, prof in profiles:
            if not prof:
                continue
            print(f"  JVM profile of {whose} (JFR, {prof['samples']:,} CPU samples of the Spark JVM; broker not "
                  "included):")
            for name, share in prof["share_percent"].items():
                print(f"    {name:<58} {share:5.1f}%")
            print("    top leaf frames in tasks:")
            for frame, share in prof["top_leaf_frames_in_tasks_percent"][:8]:
                print(f"      {share:5.1f}%  {frame}")
        if "probe" in r:
            p = r["probe"]
            print(f"  probe, batch read into noop sink: Kafka read {p['kafka_read_s']} s "
                  f"({p['kafka_messages'] / max(p['kafka_read_s'], 1e-9):,.0f} msg/s); read + decode "
                  f"{p['kafka_read_decode_s']} s ({p['kafka_messages'] / max(p['kafka_read_decode_s'], 1e-9):,.0f}"
                  f" msg/s); {p['kafka_value_bytes']:,} value bytes in Kafka")
        if "target_met" in r:
            print(f"  target {r['target_msgs_per_s']:,} msg/s: {'met' if r['target_met'] else 'NOT met'}")


def snapshot_jars(home: Path) -> dict[str, str]:
    """The project's jars in the state folder: Spark's copied (a rebuild of the project's own
    decoder jar during a run would break the running JVM), the others linked. Returns the
    sha256 prefix of each project-built jar, so a figure can be tied to the decoder it ran."""
    source = (Path(default_home()) / "jars").resolve()
    if not (source / "spark").is_dir():
        raise SystemExit(f"jars not found in {source}: run `make setup` first")
    (home / "jars").mkdir()
    for entry in source.iterdir():
        if entry.name == "spark":
            shutil.copytree(entry, home / "jars" / "spark")
        else:
            (home / "jars" / entry.name).symlink_to(entry)
    return {jar.name: hashlib.sha256(jar.read_bytes()).hexdigest()[:12]
            for jar in sorted((home / "jars" / "spark").glob("lakehouse-*.jar"))}


def key_values(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--streams", nargs="+", default=None, choices=ALL_STREAMS,
                        help=f"streams to measure, one after the other (default: {' '.join(DEFAULT_STREAMS)}; with "
                             f"--whole-bad-batch: {' '.join(WHOLE_BAD_STREAMS)}); the CDC streams (customers, "
                             "accounts) load slowly: their simulator makes ~1,600 changes/s")
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages per stream (default: %(default)s)")
    parser.add_argument("--messages-per-stream", type=key_values, action="append", default=[], metavar="NAME=N",
                        help="a different message count for one stream (CDC: changes; tombstones come on top)")
    parser.add_argument("--fault-rate", type=float, default=0.01,
                        help="share of unreadable messages, split over the stream's fault kinds (default: 0.01)")
    parser.add_argument("--batches", type=int, default=10, metavar="N",
                        help="micro-batches each run spans at least: the job, the ceiling and the steps read the "
                             "topic's records / N per batch (default: %(default)s; 1: the whole topic in one batch "
                             "up to the job's default batch size)")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None, metavar="N",
                        help="records per micro-batch, if fewer than the topic's records / --batches; with "
                             "--whole-bad-batch, instead of the job's own default")
    parser.add_argument("--processes", type=int, default=2, help="producer processes for loading (default: 2)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--spark-conf", type=key_values, action="append", default=[], metavar="KEY=VALUE",
                        help="runtime SQL conf set with spark.conf.set after the session starts (repeatable)")
    parser.add_argument("--source-option", type=key_values, action="append", default=[], metavar="KEY=VALUE",
                        help="EXPERIMENT: extra Kafka source option added to the job's reader at run time, "
                             "e.g. minPartitions=6 (overrides the job's own minPartitions)")
    parser.add_argument("--ceiling", action="store_true",
                        help="also measure the raw ceiling on each stream's topic, in the same JVM: the job's Kafka "
                             "source appending the value bytes to an Iceberg table, no decoding (ratio_to_ceiling)")
    parser.add_argument("--steps", action="store_true",
                        help="with --ceiling: also append, by Iceberg's sink alone, the decoded records without "
                             "checks, then the checked good rows (the job without its exactly-once protocol), to "
                             "show where the gap to the ceiling goes (steps_ratio_to_ceiling)")
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="rounds per stream, each running the job (and the ceiling and steps) in an order of its "
                             "own; the median of each is reported, with every run (default: 1)")
    parser.add_argument("--no-warm-up", dest="warm_up", action="store_false",
                        help="with --ceiling: skip the uncounted ceiling run that warms the JVM up first")
    parser.add_argument("--table-property", type=key_values, action="append", default=[], metavar="KEY=VALUE",
                        help="EXPERIMENT: a property of the bronze (and ceiling) tables this run creates, on top of "
                             "ingestion.bronze.STREAMING_TABLE_PROPERTIES, e.g. write.parquet.compression-codec=snappy")
    parser.add_argument("--whole-bad-batch", action="store_true",
                        help="instead of the throughput runs: topics whose every record fails (purchases: an "
                             "unregistered schema id; others: corrupt bytes), each ingested once by the real job at "
                             "its own batch size and the settings' driver memory: completed, time, peak driver "
                             "memory, every offset once (--fault-rate, --ceiling and --repeat do not apply)")
    steady = parser.add_argument_group("steady state (instead of the availableNow runs)")
    steady.add_argument("--steady-state", action="store_true",
                        help="produce at a fixed rate while the job runs with a processing-time trigger, raising the "
                             "rate while the lag stays bounded; reports the highest such rate per stream")
    steady.add_argument("--steady-start", type=int, default=20_000, metavar="MSG_PER_S",
                        help="first rate (default: %(default)s)")
    steady.add_argument("--steady-factor", type=float, default=1.25, help="rate step (default: %(default)s)")
    steady.add_argument("--steady-minutes", type=float, default=3.0, help="minutes per rate (default: %(default)s)")
    steady.add_argument("--steady-trigger", default="5 seconds", help="trigger interval (default: %(default)s)")
    steady.add_argument("--steady-max-steps", type=int, default=8, help="rates tried at most (default: %(default)s)")
    parser.add_argument("--no-profile", dest="profile", action="store_false",
                        help="skip the JDK Flight Recorder profile of the Spark JVM during ingestion")
    parser.add_argument("--profile-dir", type=Path, metavar="DIR",
                        help="keep each stream's JFR recording (<stream>.jfr) in DIR")
    parser.add_argument("--no-probe", dest="probe", action="store_false",
                        help="skip the batch read/decode probe after each stream")
    args = parser.parse_args(argv)
    args.messages_per_stream = {name: int(n) for name, n in args.messages_per_stream}
    args.spark_conf = dict(args.spark_conf)
    args.source_option = dict(args.source_option)
    args.table_property = dict(args.table_property)
    if unknown := set(args.messages_per_stream) - set(ALL_STREAMS):
        parser.error(f"unknown stream(s) in --messages-per-stream: {', '.join(sorted(unknown))}")
    if not 0 <= args.fault_rate <= 1 or args.messages < 1 or args.processes < 1 or args.repeat < 1:
        parser.error("--fault-rate must be within 0..1, --messages, --processes and --repeat at least 1")
    if args.steps and not args.ceiling:
        parser.error("--steps needs --ceiling: its ratios are to the raw ceiling")
    if args.batches < 1 or (args.max_offsets_per_trigger is not None and args.max_offsets_per_trigger < 1):
        parser.error("--batches and --max-offsets-per-trigger must be at least 1")
    if args.whole_bad_batch and (args.ceiling or args.steady_state):
        parser.error("--whole-bad-batch runs the job alone: not with --ceiling or --steady-state")
    if args.whole_bad_batch and set(args.streams or ()) & set(CDC_STREAMS):
        parser.error("--whole-bad-batch: not for the CDC streams (their tombstones are readable)")
    if args.streams is None:
        args.streams = list(WHOLE_BAD_STREAMS if args.whole_bad_batch else DEFAULT_STREAMS)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    logs.configure(level=logging.WARNING)  # the project's lines (LAKEHOUSE_LOG_FORMAT), warnings only but ours
    logging.getLogger("lakehouse").setLevel(logging.INFO)
    logging.getLogger("bench").setLevel(logging.INFO)

    home = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    jars = snapshot_jars(home)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEHOUSE_")}
    env.update({k: v for k, v in os.environ.items()
                if k in ("LAKEHOUSE_SPARK_MASTER", "LAKEHOUSE_SPARK_DRIVER_MEMORY", "LAKEHOUSE_SHUFFLE_PARTITIONS")})
    settings = Settings.from_env({**env, "LAKEHOUSE_HOME": str(home),
                                  "LAKEHOUSE_KAFKA_PORT": str(local_kafka.free_port())})
    spark = broker_pid = None
    results, loads = [], {}
    try:
        broker_pid = local_kafka.start(settings, log=log.info)
        for number, stream in enumerate(args.streams):
            count = args.messages_per_stream.get(stream, args.messages)
            if args.steady_state:
                count = min(count, 10_000)  # creates the topic; the steady runs start from its end
            faults = whole_bad_rates(stream) if args.whole_bad_batch else fault_rates(stream, args.fault_rate)
            log.info("loading %s: %s messages, faults %s", stream, f"{count:,}",
                     {k: v for k, v in faults.as_dict().items() if v})
            loads[stream] = load_topic(settings, stream, count, faults, args.processes, args.seed * 100 + number)
            log.info("loaded %s: %s", stream,
                     {k: v for k, v in loads[stream].items() if k != "expected_dead_coordinates"})

        from lakehouse.core.spark import ensure_namespaces, get_spark

        timers = BatchTimers()
        missing = instrument(timers)
        if missing:
            log.info("not timed (not found in the job's code): %s", ", ".join(missing))
        add_source_options(args.source_option)
        if args.table_property:
            from ingestion import bronze

            bronze.STREAMING_TABLE_PROPERTIES.update(args.table_property)
        spark = get_spark(settings, "bench-ingest")
        for key, value in args.spark_conf.items():
            spark.conf.set(key, value)
        ensure_namespaces(spark)
        recorder = progress_listener()
        spark.streams.addListener(recorder)
        if args.steady_state:
            steady = [steady_state(spark, settings, stream, args) for stream in args.streams]
        elif args.whole_bad_batch:
            for stream in args.streams:
                log.info("ingesting %s: %s messages, every one failing", stream, f"{loads[stream]['produced']:,}")
                results.append(whole_bad_batch(spark, settings, stream, loads[stream], args, recorder, timers,
                                               broker_pid))
        elif args.ceiling and args.warm_up:
            # Class loading and JIT of the Kafka read and the Iceberg write, paid by neither side.
            log.info("warming up: the raw ceiling on %s, not counted", args.streams[0])
            ceiling(spark, settings, args.streams[0], args, recorder, broker_pid, max_offsets=records_per_batch(
                topic_records(settings, args.streams[0]), args.batches, args.max_offsets_per_trigger))
        for stream in [] if args.steady_state or args.whole_bad_batch else args.streams:
            log.info("ingesting %s (%s messages)", stream, f"{loads[stream]['produced']:,}")
            try:
                result = measure_stream(spark, settings, stream, loads[stream], args, recorder, timers, broker_pid)
            except Exception as exc:  # a failing job: report it, go on with the other streams
                log.exception("%s: ingestion failed", stream)
                results.append({"stream": stream, "correct": False, "error": f"{type(exc).__name__}: {exc}",
                                "traceback": traceback.format_exc()[-4000:]})
                continue
            results.append(result)
            log.info("%s: %s msg/s, %s MB/s, correct=%s", stream, f"{result['msgs_per_s']:,}",
                     result["mb_per_s"], result["correct"])
        spark_version, java_version = jvm_facts(spark)
        machine = {
            "cpus": os.cpu_count(), "cpu_model": cpu_model(), "memory_gb": mem_total_gb(),
            "python": platform.python_version(), "spark": spark_version, "java": java_version,
            "spark_master": settings.spark_master, "driver_memory": settings.spark_driver_memory,
            "platform": platform.platform(), "project_jars": jars,
            "load_average_end": [round(x, 2) for x in os.getloadavg()],
            **peak_memory(broker_pid),
        }
    finally:
        try:
            if spark is not None:
                spark.stop()
        except Exception as exc:  # noqa: BLE001 - the JVM is gone (an OutOfMemoryError killed it): report anyway
            log.warning("Spark did not stop cleanly: %s", str(exc).splitlines()[0][:200])
        finally:  # so the broker stops, and the state folder goes, either way
            if broker_pid is not None:
                local_kafka.stop(settings, log=log.info)
            shutil.rmtree(home, ignore_errors=True)

    if args.steady_state:
        for s in steady:
            print(f"\n{s['stream']}: steady state, trigger {s['trigger']}, {s['minutes']} min per rate")
            print(f"  {'asked msg/s':>12} {'produced msg/s':>14} {'max lag, last third':>20} {'allowed':>10}  bounded")
            for step in s["steps"]:
                print(f"  {step['rate']:>12,} {step['achieved_rate']:>14,} {_figure(step['max_lag_last_third']):>20} "
                      f"{step['allowance']:>10,}  {step['bounded']}")
            print(f"  highest rate with a bounded lag: {_figure(s['highest_bounded_rate'])} msg/s"
                  + (" (the producer could not go faster)" if s["producer_limited"] else ""))
        print("RESULT " + json.dumps({"benchmark": "ingest_throughput", "mode": "steady_state", "machine": machine,
                                      "steady_state": steady}))
        return 0
    if args.whole_bad_batch:
        print_whole_bad(results)
        print("RESULT " + json.dumps({
            "benchmark": "ingest_throughput", "mode": "whole_bad_batch",
            "options": {"messages": args.messages, "messages_per_stream": args.messages_per_stream,
                        "max_offsets_per_trigger": args.max_offsets_per_trigger, "spark_conf": args.spark_conf},
            "machine": machine,
            "streams": {r["stream"]: {key: r.get(key) for key in WHOLE_BAD_KEYS} for r in results},
            "results": results}))
        failed = [r["stream"] for r in results if not (r["completed"] and r["correct"])]
        if failed:
            print(f"INCORRECT: the whole bad batch did not complete with every offset once for "
                  f"{', '.join(failed)}", file=sys.stderr)
            return 1
        return 0
    print_report(results)
    print_summary(results, machine)
    options = {"messages": args.messages, "messages_per_stream": args.messages_per_stream,
               "fault_rate": args.fault_rate, "batches": args.batches,
               "max_offsets_per_trigger": args.max_offsets_per_trigger,
               "spark_conf": args.spark_conf, "source_options": args.source_option,
               "table_properties": args.table_property,
               "load_processes": args.processes, "ceiling": args.ceiling, "steps": args.steps, "repeat": args.repeat,
               "read_tasks_per_core": job_read_tasks_per_core()}
    summary = {"benchmark": "ingest_throughput", "options": options, "machine": machine}
    ceilings = [r for r in results if "ceiling_msgs_per_s" in r]
    if ceilings:
        # Each stream is compared with the ceiling on its own topic; the top-level figure is the
        # first stream's (employees by default, the reference).
        summary["ceiling_msgs_per_s"] = ceilings[0]["ceiling_msgs_per_s"]
        summary["ceiling_stream"] = ceilings[0]["stream"]
    summary["streams"] = {r["stream"]: {key: r.get(key) for key in SUMMARY_KEYS} for r in results}
    summary["results"] = results
    print("RESULT " + json.dumps(summary))
    failed = [r["stream"] for r in results if not r["correct"]]
    if failed:
        print(f"INCORRECT: ingestion failed, or bronze + dead letters do not match the topic, for "
              f"{', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
