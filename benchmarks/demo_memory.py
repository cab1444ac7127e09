"""Peak resident memory of the whole demo: `lakehouse demo` with its Kafka broker, Spark, dbt and checks.

The resource budget: the whole demo (broker, Spark, dbt, quality checks) stays under 6 GB
resident at peak on the development machine (2 cores, 24 GB). This runs `lakehouse demo
[--events N]` as a user runs it, as a subprocess, in a fresh state folder of its own (jars
linked from .lakehouse/jars, a free Kafka port, dbt's target/ inside the state folder), and
samples every 0.5 s the resident memory (VmRSS, and each process's own peak VmHWM) of every
process of the demo: the demo's process tree (its Python process, its Spark JVM, the `dbt
build` process and dbt's own Spark JVM, the Kafka storage-format step) and the Kafka broker,
which the demo starts detached (found by its pid file, <state>/kafka/broker.pid, and by any
process whose command line names the state folder).

The budget figure is the peak of the SUM of the RSS of all those processes in one sample
(memory resident at the same time). Per component it reports its own peak, and which demo
step was running when the sum peaked.

    .venv/bin/python benchmarks/demo_memory.py [--events 20000]

Prints a table and a final `RESULT {json}` line. Exit status: 1 if the demo failed, 2 if it
passed but the peak was over the budget, 0 otherwise. Whatever the demo started is stopped at
the end, also on failure or Ctrl-C; the state folder is removed unless --keep.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _machine as machine  # noqa: E402
from lakehouse.core import local_kafka  # noqa: E402
from lakehouse.core.local_kafka import BrokerPaths  # noqa: E402
from lakehouse.core.settings import PREFIX, PROJECT_ROOT, Settings  # noqa: E402

PASS_THROUGH = ("SPARK_MASTER", "SPARK_DRIVER_MEMORY", "SHUFFLE_PARTITIONS")
STEP_LINE = re.compile(r"^==> \[(\d+)/(\d+)\] (.*)$")
COMPONENTS = {  # name -> label, in print order
    "broker": "Kafka broker (JVM, detached; + storage format)",
    "spark_jvm": "demo's Spark JVM (ingest, quality, maintain)",
    "dbt_jvm": "dbt's Spark JVM (dbt build)",
    "dbt_python": "dbt (Python)",
    "python": "demo (Python: producers, GX, CLI)",
    "other": "other processes of the demo",
}
GIB = 1024  # MiB


def demo_default_events() -> int:
    from lakehouse.commands import demo

    return inspect.signature(demo.main).parameters["events"].default


def make_home(parent: Path | None) -> Path:
    home = Path(tempfile.mkdtemp(prefix="bench-demo-memory-", dir=parent))
    machine.link_jars(home)
    return home


def demo_env(home: Path, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(PREFIX) or k.removeprefix(PREFIX) in PASS_THROUGH}
    env.update({PREFIX + "HOME": str(home), PREFIX + "KAFKA_PORT": str(port),
                # dbt's run results and logs in the state folder, not the repository's target/
                "DBT_TARGET_PATH": str(home / "dbt-target"), "DBT_LOG_PATH": str(home / "dbt-target" / "logs"),
                "PYTHONUNBUFFERED": "1"})
    return env


def is_dbt(command: str) -> bool:
    words = command.split()
    return any(Path(word).name == "dbt" for word in words[:2])


def is_java(command: str) -> bool:
    return bool(command) and Path(command.split()[0]).name == "java"


def classifier(state: dict, home: Path):
    """{component: pids}: the demo's process tree split into its parts, plus what outlives its
    place in the tree (the broker, started detached; a JVM whose Python parent exited a moment
    before it) and any other process whose command line names the state folder. A process is
    known by (pid, start time): pids are reused on a busy machine. A JVM keeps the part it was
    first seen in; a Python process is placed anew at every sample."""
    pid_file = BrokerPaths(home / "kafka").pid
    marker, me = str(home), os.getpid()
    known: dict[tuple[int, int], str] = {}  # JVMs and the broker: fixed once seen
    last: dict[tuple[int, int], str] = {}  # everything of the demo: the part it was last in
    dbt_roots: set[tuple[int, int]] = set()
    foreign: set[tuple[int, int]] = set()  # not the demo's: never looked at again

    def classify(table: dict[int, machine.Proc]) -> dict[str, list[int]]:
        groups: dict[str, list[int]] = {name: [] for name in COMPONENTS}
        demo = machine.tree_of(table, [state["demo_pid"]]) if state.get("demo_pid") else []
        in_demo = set(demo)
        commands: dict[int, str] = {}

        def command(pid: int) -> str:  # empty for a process that is exiting
            if pid not in commands:
                commands[pid] = table[pid].command
            return commands[pid]

        try:
            broker = int(pid_file.read_text().split()[0])  # a start token follows it
            if broker in table and "kafka.Kafka" in command(broker):
                known[table[broker].key] = "broker"
        except (OSError, ValueError, IndexError):
            pass
        dbt_roots.update(table[pid].key for pid in demo if is_dbt(command(pid)))
        dbt = set(machine.tree_of(table, [pid for pid, start in dbt_roots
                                          if pid in table and table[pid].start_ticks == start]))
        for pid in demo:
            key = table[pid].key
            kind = known.get(key)
            if kind is None:
                text = command(pid)
                if is_java(text):
                    kind = known[key] = "dbt_jvm" if pid in dbt else "broker" if "kafka." in text else "spark_jvm"
                elif pid in dbt:
                    kind = "dbt_python"
                elif pid == state["demo_pid"] or (text and "python" in Path(text.split()[0]).name):
                    kind = "python"
                else:
                    kind = "other"
            last[key] = kind
            groups[kind].append(pid)
        for pid, proc in table.items():
            if pid in in_demo or pid == me or proc.key in foreign:
                continue
            kind = known.get(proc.key) or last.get(proc.key)
            if kind is None:
                text = command(pid)
                if marker not in text:
                    foreign.add(proc.key)
                    continue
                kind = known[proc.key] = "broker" if "kafka.Kafka" in text else "other"
            groups[kind].append(pid)
        return groups

    return classify


class DemoOutput(threading.Thread):
    """Copies the demo's output to a log file (and the terminal with --show-output); records
    when each of its steps began."""

    def __init__(self, stream, log_path: Path, echo: bool):
        super().__init__(daemon=True, name="demo-output")
        self.stream, self.log_path, self.echo = stream, log_path, echo
        self.steps: list[dict] = []

    def run(self) -> None:
        with open(self.log_path, "w") as log:
            for line in self.stream:
                log.write(line)
                log.flush()
                if self.echo:
                    sys.stdout.write(line)
                    sys.stdout.flush()
                match = STEP_LINE.match(line.strip())
                if match:
                    self.steps.append({"step": int(match.group(1)), "of": int(match.group(2)),
                                       "text": match.group(3)[:90], "started": time.time()})


def step_at(steps: list[dict], moment: float) -> dict | None:
    current = None
    for step in steps:
        if step["started"] <= moment:
            current = step
    return current


def per_step_peaks(timeline, steps: list[dict], began: float) -> list[dict]:
    """For each demo step: the peak of the summed RSS while it ran, and its parts then."""
    marks = [{"step": 0, "text": "start-up (before step 1)", "started": began}, *steps]
    out = []
    for index, mark in enumerate(marks):
        end = marks[index + 1]["started"] if index + 1 < len(marks) else float("inf")
        samples = [(t, parts) for t, parts in timeline if mark["started"] <= t < end]
        if not samples:
            continue
        t, parts = max(samples, key=lambda sample: sum(sample[1].values()))
        out.append({"step": mark["step"], "text": mark["text"], "seconds": round(min(end, samples[-1][0])
                                                                                  - mark["started"], 1),
                    "peak_sum_mb": round(sum(parts.values()) / 1024),
                    "parts_mb": {k: round(v / 1024) for k, v in parts.items() if v}})
    return out


def stop_demo(process: subprocess.Popen, settings: Settings) -> None:
    """Ctrl-C as a terminal sends it (to the demo's whole process group: the demo, dbt, their
    JVMs), again if the demo goes on (a first one during ingestion only ends the ingestion),
    then force. The broker, in a session of its own, is stopped by the demo or, failing that, here."""
    for signum, wait_s in ((signal.SIGINT, 30), (signal.SIGINT, 60), (signal.SIGKILL, 30)):
        if process.poll() is not None:
            break
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            machine.progress(f"the demo is still running {wait_s} s after {signal.Signals(signum).name}")
    if local_kafka.running_pid(settings) is not None:
        machine.progress("the demo's broker is still running: stopping it")
        local_kafka.stop(settings, log=machine.progress)


def print_report(result: dict) -> None:
    m = result["memory"]
    print()
    print("=" * 78)
    verdict = "passed" if result["demo_exit"] == 0 else f"FAILED (exit {result['demo_exit']})"
    print(f"lakehouse demo --events {result['options']['events']:,}: {verdict} in {result['demo_wall_s']} s")
    print("=" * 78)
    print(f"  {'component':<48} {'peak RSS MiB':>12} {'VmHWM MiB':>10} {'procs':>6} {'CPU s':>7}")
    for name, label in COMPONENTS.items():
        c = m["components"].get(name)
        if c and (c["peak_mb"] or c["hwm_mb"]):
            print(f"  {label:<48} {c['peak_mb']:>12,} {c['hwm_mb']:>10,} {c['processes']:>6} {c['cpu_s']:>7}")
    print(f"  {'sum of the component peaks (not at one time)':<48} {m['sum_of_component_peaks_mb']:>12,}")
    parts = ", ".join(f"{k} {v:,}" for k, v in m["total_peak_parts_mb"].items() if v)
    peak_step = result["peak_step"]
    print(f"  {'PEAK OF THE CONCURRENT SUM (the budget figure)':<48} {m['total_peak_mb']:>12,}   "
          f"= {m['total_peak_mb'] / GIB:.2f} GiB = {m['total_peak_mb'] * 2**20 / 1e9:.2f} GB")
    print(f"      at {datetime.fromtimestamp(m['total_peak_at']):%H:%M:%S}, during step "
          f"{peak_step['step'] if peak_step else '?'} ({peak_step['text'] if peak_step else 'unknown'}): {parts}")
    print("  largest processes per component (their own peak VmHWM, MiB):")
    for line in machine.largest_process_lines(m["components"], COMPONENTS):
        print(line)
    print("\n  peak of the summed RSS per demo step (MiB):")
    for step in result["steps"]:
        parts = ", ".join(f"{k} {v:,}" for k, v in step["parts_mb"].items())
        print(f"    [{step['step']}] {step['text'][:60]:<60} {step['seconds']:>6} s  {step['peak_sum_mb']:>6,}  "
              f"({parts})")
    b = result["budget"]
    print(f"\nbudget {b['gib']} GiB ({b['mib']:,} MiB): {'under' if b['under'] else 'OVER'} "
          f"(margin {b['margin_mib']:,} MiB); by decimal GB ({b['decimal_mib']:,} MiB): "
          f"{'under' if b['under_decimal'] else 'OVER'}")
    mach = result["machine"]
    print(f"machine: {mach['cpus']} cores, {mach['cpu_model']}, {mach['memory_gb']} GB; Python {mach['python']}; "
          f"Spark driver memory {result['options']['driver_memory']}; CPU used by other processes during the "
          f"demo: {m['other_cpu_s']} s; load average at the end {mach['load_average_end']}")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--events", type=int, default=None,
                        help=f"events per stream, passed to `lakehouse demo --events` (default: the demo's own, "
                             f"{demo_default_events():,})")
    parser.add_argument("--budget-gib", type=float, default=6.0, help="the budget, GiB (default: %(default)s)")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between samples (default: %(default)s)")
    parser.add_argument("--show-output", action="store_true", help="echo the demo's own output while it runs")
    parser.add_argument("--home-parent", type=Path, help="where to create the temporary state folder")
    parser.add_argument("--keep", action="store_true", help="keep the state folder (demo.log, tables, reports)")
    args = parser.parse_args(argv)
    if args.events is not None and args.events < 1:
        parser.error("--events must be at least 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    events = args.events if args.events is not None else demo_default_events()
    home = make_home(args.home_parent)
    env = demo_env(home, local_kafka.free_port())
    settings = Settings.from_env(env)
    log_path = home / "demo.log"
    machine.progress(f"lakehouse demo --events {events:,} in {home} (Kafka port {settings.kafka_port}); "
                     f"output in {log_path}")

    state: dict = {"demo_pid": None}
    sampler = machine.MemorySampler(classifier(state, home), interval=args.interval, keep_timeline=True)

    def interrupted(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupted)
    process = None
    began = time.time()
    code, output, wall = None, None, 0.0
    try:
        command = [*machine.lakehouse_command(), "demo"] + (["--events", str(args.events)] if args.events else [])
        process = subprocess.Popen(command, cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                                   errors="replace", start_new_session=True)
        state["demo_pid"] = process.pid
        sampler.start()
        output = DemoOutput(process.stdout, log_path, args.show_output)
        output.start()
        last_step = 0
        while process.poll() is None:
            time.sleep(1)
            if output.steps and output.steps[-1]["step"] != last_step:
                last_step = output.steps[-1]["step"]
                machine.progress(f"demo step {last_step}/{output.steps[-1]['of']}: {output.steps[-1]['text']}")
        code = process.returncode
        wall = time.time() - began
        output.join(timeout=10)
        time.sleep(args.interval * 2)  # the broker may outlive the demo by a moment
    except KeyboardInterrupt:
        machine.progress("interrupted: stopping the demo")
        code, wall = "interrupted", time.time() - began
    finally:
        if process is not None:
            stop_demo(process, settings)
        sampler.stop()
        signal.signal(signal.SIGTERM, previous)

    memory = sampler.report()
    steps = per_step_peaks(sampler.timeline, output.steps if output else [], began)
    peak_step = step_at(output.steps if output else [], memory["total_peak_at"])
    budget_mib = round(args.budget_gib * GIB)
    decimal_mib = round(args.budget_gib * 1e9 / 2**20)
    result = {
        "benchmark": "demo_memory",
        "options": {"events": events, "interval_s": args.interval, "budget_gib": args.budget_gib,
                    "driver_memory": settings.spark_driver_memory, "broker_heap": local_kafka.BROKER_HEAP},
        "demo_exit": code, "demo_wall_s": round(wall, 1),
        "memory": memory,
        "peak_step": peak_step and {k: peak_step[k] for k in ("step", "text")},
        "steps": steps,
        "budget": {"gib": args.budget_gib, "mib": budget_mib, "under": memory["total_peak_mb"] < budget_mib,
                   "margin_mib": budget_mib - memory["total_peak_mb"], "decimal_mib": decimal_mib,
                   "under_decimal": memory["total_peak_mb"] < decimal_mib},
        "machine": {**machine.machine_facts(), "load_average_end": [round(x, 2) for x in os.getloadavg()]},
    }
    if code != 0:
        print(f"\nthe demo FAILED ({code}); last lines of {log_path}:", file=sys.stderr)
        try:
            print("\n".join(log_path.read_text(errors="replace").splitlines()[-40:]), file=sys.stderr)
        except OSError:
            pass
    print_report(result)
    if args.keep or code != 0:
        machine.progress(f"state folder kept: {home}")
    else:
        shutil.rmtree(home, ignore_errors=True)
    print("RESULT " + json.dumps(result, default=str))
    if code != 0:
        return 1
    return 0 if result["budget"]["under"] else 2


if __name__ == "__main__":
    sys.exit(main())
