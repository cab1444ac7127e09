"""Machine facts and process resource use for the benchmarks, read from /proc (Linux only).

Shared by ingest_throughput.py, freshness.py and demo_memory.py: what the machine is (cores,
memory, CPU model), which processes belong to a process tree, their resident memory and CPU
time, and a sampler that follows the resident memory of named groups of processes over a run.
"""

from __future__ import annotations

import os
import platform
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
PF_FORKNOEXEC = 0x40  # flags of /proc/<pid>/stat: forked and not (yet) exec'd
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# --- what the machine is ----------------------------------------------------------------------

def mem_total_gb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return round(int(line.split()[1]) / 1024 / 1024, 1)
    return 0.0


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def machine_facts() -> dict:
    return {"cpus": os.cpu_count(), "cpu_model": cpu_model(), "memory_gb": mem_total_gb(),
            "python": platform.python_version(), "platform": platform.platform()}


# --- processes --------------------------------------------------------------------------------

def proc_stats():
    """(pid, command name, the fields of /proc/<pid>/stat after the name) of every process now;
    one that ends while it is read is left out."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        yield int(entry.name), text[text.index("(") + 1: text.rindex(")")], text[text.rindex(")") + 2:].split()


def children_map() -> dict[int, list[int]]:
    """parent pid -> child pids, for every process now."""
    tree: dict[int, list[int]] = defaultdict(list)
    for pid, _, fields in proc_stats():
        tree[int(fields[1])].append(pid)
    return tree


def descendants(children: dict[int, list[int]], root: int) -> list[int]:
    """``root`` and every process below it (``root`` first)."""
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def process_tree(root: int) -> list[int]:
    return descendants(children_map(), root)


def status_kb(pid: int, field: str) -> int:
    """A kB field of /proc/<pid>/status (VmRSS, VmHWM, ...); 0 when the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / CLOCK_TICKS


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy since boot (all but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / CLOCK_TICKS


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    rss_kb: int  # resident now
    hwm_kb: int  # the process's own peak resident so far (VmHWM)
    cpu_ticks: int  # utime + stime
    forked_no_exec: bool = False  # PF_FORKNOEXEC: a fork (or vfork) that has not exec'd
    start_ticks: int = 0  # start time since boot: (pid, start_ticks) names one process, pids are reused

    @property
    def key(self) -> tuple[int, int]:
        return self.pid, self.start_ticks

    @property
    def command(self) -> str:
        return cmdline(self.pid)


def short_command(command: str) -> str:
    """A process's program and what it runs, without long class paths: for reports."""
    words = command.split()
    if not words:
        return "?"
    if Path(words[0]).name == "java":
        main = next((w for w in words[1:] if not w.startswith("-") and "/" not in w and ":" not in w
                     and "=" not in w and "." in w), "?")
        return f"java {main}"
    return " ".join(Path(w).name if i < 2 else w for i, w in enumerate(words[:4]))[:80]


def proc_table() -> dict[int, Proc]:
    """Every process now: parent, resident memory now and at peak, CPU time, whether it is a fork
    that has not exec'd. stat is read before status: a process seen with the flag clear has
    exec'd, so the memory read after it is its own."""
    table = {}
    for pid, _, rest in proc_stats():
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        fields = {}
        for line in status.splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0])
        table[pid] = Proc(pid, int(rest[1]), fields.get("VmRSS", 0), fields.get("VmHWM", 0),
                          int(rest[11]) + int(rest[12]), bool(int(rest[6]) & PF_FORKNOEXEC), int(rest[19]))
    return table


def tree_of(table: dict[int, Proc], roots) -> list[int]:
    """The live processes of ``table`` at or below any of ``roots``."""
    children: dict[int, list[int]] = defaultdict(list)
    for proc in table.values():
        children[proc.ppid].append(proc.pid)
    found: list[int] = []
    for root in roots:
        if root in table:
            found += [pid for pid in descendants(children, root) if pid not in found]
    return found


# --- resident memory of groups of processes over a run ---------------------------------------

class MemorySampler(threading.Thread):
    """Samples, every ``interval`` seconds, the resident memory of named components.

    ``classify(table)`` maps the process table to {component: [pids]} at each sample (a pid in
    at most one component). A process between fork and exec (PF_FORKNOEXEC) is not counted:
    its resident pages are its parent's. Per component it keeps the peak of its
    summed RSS over the samples (``peak_mb``) and the peak of its summed VmHWM (``hwm_mb``: each
    process's own peak, so a spike between two samples is not missed, but processes that peaked
    at different times are added up: an upper bound). The budget figure is ``total_peak_mb``:
    the largest sum of RSS over all components in one sample, i.e. memory that was resident at
    the same time. ``window(name)`` returns the component's peaks since the last call (e.g. one
    dbt run); ``keep_timeline`` keeps every sample's RSS per component (kB) in ``timeline``.
    CPU: ticks of every process seen, and the machine's busy time, for the share used by
    processes outside the components (the machine may be shared).
    """

    def __init__(self, classify: Callable[[dict[int, Proc]], dict[str, list[int]]], interval: float = 0.5,
                 keep_timeline: bool = False):
        super().__init__(daemon=True, name="memory-sampler")
        self.classify, self.interval = classify, interval
        self.timeline: list[tuple[float, dict[str, int]]] | None = [] if keep_timeline else None
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.samples = 0
        self.forks_skipped = 0
        self.peak_kb: dict[str, int] = defaultdict(int)
        self.hwm_kb: dict[str, int] = defaultdict(int)
        self.window_kb: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        self.pids_seen: dict[str, set[tuple[int, int]]] = defaultdict(set)
        self.total_peak_kb = 0
        self.total_peak_at = 0.0
        self.total_peak_parts: dict[str, int] = {}
        # per process (pid, start): CPU ticks when first and last seen, its component; and
        # [component, command, peak RSS kB, peak VmHWM kB, first seen, last seen]
        self.cpu_first: dict[tuple[int, int], int] = {}
        self.cpu_last: dict[tuple[int, int], int] = {}
        self.cpu_component: dict[tuple[int, int], str] = {}
        self.process_peaks: dict[tuple[int, int], list] = {}
        self.started_at = time.time()
        self.busy_start = machine_busy_seconds()
        self.busy_end: float | None = None
        self.error: str | None = None

    def sample(self) -> None:
        table = proc_table()
        groups = self.classify(table)
        now_parts = {}
        commands: dict[int, str] = {}

        def command(pid: int) -> str:
            if pid not in commands:
                commands[pid] = cmdline(pid)
            return commands[pid]

        with self.lock:
            self.samples += 1
            for name, pids in groups.items():
                pids = [pid for pid in pids if pid in table]
                # A fork that has not exec'd shares its parent's pages (a vfork, as Java and Python
                # use to start programs, its whole address space) and shows the parent's RSS: the
                # pages are counted once, in the parent. (A long-lived fork's own dirty pages, e.g.
                # pyspark's forked Python workers, are left out too: a small undercount.)
                own = [pid for pid in pids if not table[pid].forked_no_exec]
                self.forks_skipped += len(pids) - len(own)
                rss = sum(table[pid].rss_kb for pid in own)
                hwm = sum(table[pid].hwm_kb for pid in own)
                now_parts[name] = rss
                self.peak_kb[name] = max(self.peak_kb[name], rss)
                self.hwm_kb[name] = max(self.hwm_kb[name], hwm)
                window = self.window_kb[name]
                window[0], window[1] = max(window[0], rss), max(window[1], hwm)
                self.pids_seen[name].update(table[pid].key for pid in own)
                now = time.time()
                for pid in own:
                    proc = table[pid]
                    seen = self.process_peaks.get(proc.key)
                    if seen is None or seen[0] != name:
                        seen = self.process_peaks[proc.key] = [name, "", 0, 0, now, now]
                    latest = command(pid)  # the latest: bash execs java; empty while exiting
                    seen[1] = short_command(latest) if latest else seen[1] or "?"
                    seen[2], seen[3], seen[5] = max(seen[2], proc.rss_kb), max(seen[3], proc.hwm_kb), now
                for pid in pids:
                    key = table[pid].key
                    self.cpu_first.setdefault(key, table[pid].cpu_ticks)
                    self.cpu_last[key] = table[pid].cpu_ticks
                    self.cpu_component[key] = name
            total = sum(now_parts.values())
            if self.timeline is not None:
                self.timeline.append((time.time(), now_parts))
            if total > self.total_peak_kb:
                self.total_peak_kb, self.total_peak_at = total, time.time()
                self.total_peak_parts = dict(now_parts)

    def run(self) -> None:
        while True:
            try:
                self.sample()
            except Exception as exc:  # a sampler must never take the benchmark down
                self.error = f"{type(exc).__name__}: {exc}"
            if self.stop_event.wait(self.interval):
                return

    def window(self, name: str) -> dict[str, int]:
        """Peak RSS and VmHWM (MB) of a component since the last call, then start a new window."""
        with self.lock:
            rss, hwm = self.window_kb.pop(name, [0, 0])
        return {"peak_mb": round(rss / 1024), "hwm_mb": round(hwm / 1024)}

    def stop(self) -> None:
        if self.is_alive():
            self.stop_event.set()
            self.join()
        if self.busy_end is None:
            self.busy_end = machine_busy_seconds()

    def _largest(self, name: str, count: int = 4) -> list[dict]:
        mine = sorted(((key, p) for key, p in self.process_peaks.items() if p[0] == name), key=lambda x: -x[1][3])
        return [{"pid": key[0], "command": p[1], "peak_rss_mb": round(p[2] / 1024), "hwm_mb": round(p[3] / 1024),
                 "seen_s": round(p[5] - p[4], 1)} for key, p in mine[:count]]

    def report(self) -> dict:
        """Peaks in MB per component, the largest concurrent sum, and CPU seconds."""
        with self.lock:
            components = sorted(set(self.peak_kb) | set(self.hwm_kb))
            cpu: dict[str, float] = defaultdict(float)
            for key, last in self.cpu_last.items():
                cpu[self.cpu_component[key]] += (last - self.cpu_first[key]) / CLOCK_TICKS
            busy = (self.busy_end if self.busy_end is not None else machine_busy_seconds()) - self.busy_start
            return {
                "samples": self.samples, "interval_s": self.interval,
                "components": {name: {"peak_mb": round(self.peak_kb[name] / 1024),
                                      "hwm_mb": round(self.hwm_kb[name] / 1024),
                                      "processes": len(self.pids_seen[name]),
                                      "cpu_s": round(cpu.get(name, 0.0), 1),
                                      "largest_processes": self._largest(name)} for name in components},
                "total_peak_mb": round(self.total_peak_kb / 1024),
                "total_peak_at": self.total_peak_at,
                "total_peak_parts_mb": {k: round(v / 1024) for k, v in self.total_peak_parts.items()},
                "sum_of_component_peaks_mb": round(sum(self.peak_kb.values()) / 1024),
                "sum_of_component_hwm_mb": round(sum(self.hwm_kb.values()) / 1024),
                "components_cpu_s": round(sum(cpu.values()), 1),
                # CPU of processes the sampler did not attribute (other work on the machine, and
                # the last < interval of processes that ended between two samples).
                "other_cpu_s": round(max(busy - sum(cpu.values()), 0.0), 1),
                "sampler_error": self.error,
                "fork_samples_not_counted": self.forks_skipped,
            }


def largest_process_lines(components: dict[str, dict], labels: dict[str, str] | None = None) -> list[str]:
    """One line per component: its largest processes by their own peak (VmHWM), for a report."""
    lines = []
    for name, component in components.items():
        largest = [p for p in (component or {}).get("largest_processes", []) if p["hwm_mb"] >= 1]
        if largest:
            text = "; ".join(f"{p['command']} (pid {p['pid']}, {p['seen_s']:g} s) {p['hwm_mb']:,}" for p in largest)
            lines.append(f"    {(labels or {}).get(name, name)[:40]:<40} {text}")
    return lines


# --- a lakehouse of the benchmark's own -------------------------------------------------------

def progress(message: str) -> None:
    from datetime import datetime

    print(f"[{datetime.now():%H:%M:%S}] {message}", flush=True)


def lakehouse_command() -> list[str]:
    script = Path(sys.executable).parent / "lakehouse"
    return [str(script)] if script.exists() else [sys.executable, "-m", "lakehouse.commands.cli"]


def link_jars(home: Path) -> None:
    """Link the project's fetched jars into a benchmark's state folder (never fetched again)."""
    from lakehouse.core.settings import default_home

    jars = (Path(default_home()) / "jars").resolve()
    if not (jars / "spark").is_dir() or not (jars / "kafka").is_dir():
        raise SystemExit(f"jars not found in {jars}: run `make setup` first")
    (home / "jars").symlink_to(jars)
