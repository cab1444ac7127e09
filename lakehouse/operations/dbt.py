"""`lakehouse dbt`: dbt with the lakehouse's configuration, holding the dbt-tables lock.

dbt runs as its own process at the project root, so it reads the root profiles.yml and
builds its own Spark session there; it is pointed at the same state folder by variable:
every setting profiles.yml reads is resolved here (LAKEHOUSE_CONFIG_FILE, LAKEHOUSE_PROFILE,
the defaults) and put in its environment (`dbt_env`), with SETTINGS_RESOLVED saying so. A
command that writes tables runs holding the dbt-tables lock, its holder named in
LAKEHOUSE_DBT_LOCK_HOLDER: the project's on-run-start hook refuses a writing command without it,
and profiles.yml a dbt whose configuration variables nobody resolved (ARCHITECTURE §4).
`lakehouse dbt loop` (run_loop) is the exception: dbt on a cadence inside one process, whose
Spark session stays warm between runs.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path

from lakehouse.core import metrics
from lakehouse.core.errors import LakehouseError
from lakehouse.core.locks import dbt_run_lock
from lakehouse.core.settings import PREFIX, PROJECT_ROOT, SETTINGS, SETTINGS_RESOLVED, Settings
from lakehouse.operations.quality_gate import (
    RUNNER_ENV,
    GateOutcome,
    audit_branch,
    carried_options,
    check_and_publish,
)

log = logging.getLogger("lakehouse.dbt")


def dbt_executable() -> str:
    candidate = Path(sys.executable).parent / "dbt"
    return str(candidate) if candidate.exists() else "dbt"


# dbt's commands that only read: they run without the dbt-tables lock (a `docs serve` would hold it
# for as long as it serves). Any other command, or one not recognised, takes it.
READ_ONLY_COMMANDS = frozenset({"clean", "compile", "debug", "deps", "docs", "init", "list", "ls", "parse", "show",
                                "source", "test"})
DBT_COMMANDS = READ_ONLY_COMMANDS | {"build", "clone", "retry", "run", "run-operation", "seed", "snapshot"}


def dbt_env(settings: Settings, target_dir: Path | None = None) -> dict[str, str]:
    """The environment of a dbt run on this configuration: every LAKEHOUSE_* setting holds its
    value, wherever it came from (environment, LAKEHOUSE_CONFIG_FILE, LAKEHOUSE_PROFILE, default),
    and SETTINGS_RESOLVED says so: those profiles.yml reads (spark.py DBT_PROFILE_SETTINGS), and the
    others for the quality gate's Spark session and suites in that process (the catalog's kind,
    the thresholds)."""
    env = dict(os.environ)
    for name, setting in SETTINGS.items():
        value = getattr(settings, name)
        env[PREFIX + setting.env] = "" if value is None else str(value)
    env[SETTINGS_RESOLVED] = "1"
    env["PWD"] = str(PROJECT_ROOT)  # the profile resolves project paths from PWD
    env["DBT_SEND_ANONYMOUS_USAGE_STATS"] = "false"
    if target_dir is not None:
        env["DBT_TARGET_PATH"] = str(target_dir)
        env["DBT_LOG_PATH"] = str(target_dir / "logs")
    return env


def dbt_command_line(args: list[str]) -> list[str]:
    """The process that runs `dbt <args>`: a command that may write runs dbt in a Python process
    that then runs the quality gate on what it held and publishes it (quality_gate.py); one that
    only reads runs dbt itself."""
    if writes(args):
        return [sys.executable, "-m", "lakehouse.operations.quality_gate", *args]
    return [dbt_executable(), *args]


def dbt_command(args: list[str]) -> str | None:
    """dbt's command among its arguments (`run` in `--debug run -s x`); None if none is known."""
    return next((arg for arg in args if arg in DBT_COMMANDS), None)


def writes(args: list[str]) -> bool:
    """Whether `dbt <args>` may write tables, so must hold the dbt-tables lock: a command not known
    to only read does (options alone, `--version`, run no command)."""
    if all(arg.startswith("-") for arg in args):
        return False
    return dbt_command(args) not in READ_ONLY_COMMANDS


def run_dbt(settings: Settings, args: list[str], target_dir: Path | None = None,
            capture: bool = False) -> subprocess.CompletedProcess:
    """Run `dbt <args>` at the project root; raise with dbt's own error lines if it fails.

    A command that writes holds the dbt-tables lock (lakehouse/core/locks.py) for its whole
    length, so maintenance never compacts a table under a running MERGE and two runs never
    append the same increment; the dbt it starts is told so (the hook's variable).
    """

    with dbt_run_lock(settings) if writes(args) else nullcontext({}) as holder:
        result = subprocess.run(
            dbt_command_line(args), cwd=PROJECT_ROOT, env={**dbt_env(settings, target_dir), **holder},
            capture_output=capture, text=True,
        )
    if result.returncode != 0:
        tail = ""
        if capture:
            output = [_dbt_line_text(ln) for ln in (result.stdout or "").splitlines()]
            # every test or model that failed, by name (dbt's summary: "Failure in test <name>
            # (<file>)"), then dbt's last error lines
            failures = [ln.strip() for ln in output if "Failure in " in ln or "not published: " in ln]
            errors = [ln for ln in output if ("ERROR" in ln or "Error" in ln) and "Failure in " not in ln]
            # and the last Python exception line of its errors (dbt logs to stdout)
            stderr = [ln for ln in (result.stderr or "").splitlines() if _EXCEPTION_LINE.match(ln)]
            lines = failures + errors[-3:] + stderr[-1:]
            tail = ": " + " | ".join(lines) if lines else ""
        raise LakehouseError(f"`dbt {' '.join(args)}` failed (exit {result.returncode}){tail}")
    return result


_COLOURS = re.compile(r"\x1b\[[0-9;]*m")
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit)\b.*")


def _dbt_line_text(line: str) -> str:
    """A line of dbt's output as text: with JSON logs (DBT_LOG_FORMAT=json), its message; its
    terminal colours (dbt colours a captured output too) left out."""
    line = _COLOURS.sub("", line)
    if line.startswith("{"):
        try:
            info = json.loads(line)["info"]
            return f"{info['level'].upper()} {info['msg']}"
        except (ValueError, KeyError, TypeError, AttributeError):
            pass
    return line


# --- `lakehouse dbt loop`: dbt on a cadence, in one process ------------------------------------

LOOP_DESCRIPTION = (
    "Run dbt again and again, every INTERVAL (start to start; a run that takes longer is followed "
    "at once), inside this one process: dbt is invoked programmatically (dbtRunner) and its Spark "
    "session, with the JVM behind it, stays warm from one run to the next, and the project is "
    "parsed once. Each run holds the dbt-tables lock, so `lakehouse maintain` slips in between "
    "runs. A failed run is reported and the loop goes on (--fail-fast stops it). SIGTERM or "
    "Ctrl-C lets the running dbt invocation finish, then stops; a second one stops at once. With "
    "LAKEHOUSE_METRICS_PORT set, serves Prometheus metrics on that port (/metrics: per model the last "
    "duration, rows written, last success; runs by result; the last quality run's failed checks).")
_INTERVAL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|secs|seconds?|m|min|mins|minutes?|h|hours?)?\s*$")
_SECONDS = {"ms": 0.001, "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1, "m": 60, "min": 60, "mins": 60,
            "minute": 60, "minutes": 60, "h": 3600, "hour": 3600, "hours": 3600}


def interval_seconds(text: str) -> float:
    """'30s' -> 30.0, '5m' -> 300.0, '90' -> 90.0; anything else is a user error."""
    match = _INTERVAL.match(text.lower())
    if not match or float(match.group(1)) <= 0:
        raise LakehouseError(f"invalid interval {text!r}: use e.g. 30s, 5m, 1h")
    return float(match.group(1)) * _SECONDS[match.group(2) or "s"]


def add_loop_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--every", required=True, metavar="INTERVAL",
                        help="time from the start of one run to the start of the next: 30s, 5m, 1h")
    parser.add_argument("--runs", type=int, metavar="N", help="stop after N runs (default: run until stopped)")
    parser.add_argument("--fail-fast", action="store_true", help="stop at the first failed run (exit 1)")
    parser.add_argument("--record", type=Path, metavar="FILE",
                        help="append one JSON line per run to FILE: start, end, seconds, success, each "
                             "model's status and seconds")
    parser.add_argument("dbt_args", nargs=argparse.REMAINDER, metavar="DBT_ARGS",
                        help="dbt's command and options for every run (default: run)")


def loop_main(argv: list[str], settings: Settings) -> int:
    """`lakehouse dbt loop ...` (argv: what follows `loop`)."""
    parser = argparse.ArgumentParser(prog="lakehouse dbt loop", description=LOOP_DESCRIPTION,
                                     epilog="Example: lakehouse dbt loop --every 30s run --select user_events+")
    add_loop_arguments(parser)
    args = parser.parse_args(argv)
    every = interval_seconds(args.every)
    if args.runs is not None and args.runs < 1:
        raise LakehouseError("--runs must be at least 1")
    dbt_args = args.dbt_args[1:] if args.dbt_args[:1] == ["--"] else args.dbt_args
    if dbt_args[:1] in (["loop"], ["parse"]):
        raise LakehouseError(f"`dbt {dbt_args[0]}` is not something to loop: give e.g. `run` or `build`")
    runs = run_loop(settings, every, dbt_args or ["run"], runs=args.runs, fail_fast=args.fail_fast,
                    record=args.record)
    return 0 if runs and runs[-1]["success"] else 1


def run_loop(settings: Settings, every: float, dbt_args: list[str], runs: int | None = None,
             fail_fast: bool = False, record: Path | None = None, target_dir: Path | None = None,
             stop: threading.Event | None = None) -> list[dict]:
    """Invoke `dbt <dbt_args>` every `every` seconds in this process; the runs' summaries.

    dbt reads its settings from the environment of this process (set here from `settings`, as
    for a dbt subprocess) and from the project root. `stop` (set by SIGTERM/SIGINT when None):
    no new run starts once it is set.
    """
    serving = metrics.serve(settings)  # a port in use is refused before dbt loads
    from dbt.cli.main import dbtRunner
    from dbt_common.invocation import get_invocation_id

    os.environ.update(dbt_env(settings, target_dir))
    os.environ[RUNNER_ENV] = "1"  # this loop runs the gate after each run
    if serving:
        _previous_successes()
    # dbt's own lines go through this process's logging (dated, text or JSON) instead of its
    # console logger (`HH:MM:SS` only); its file log (target/logs/dbt.log) is unchanged.
    project = ["--project-dir", str(PROJECT_ROOT), "--profiles-dir", str(PROJECT_ROOT),
               "--log-level", "none", "--no-use-colors"]
    stop = stop or _stop_on_signals()
    parsed = dbtRunner(callbacks=[log_dbt_event]).invoke(["parse", *project])
    if not parsed.success:
        raise LakehouseError(f"dbt could not parse the project: {parsed.exception or 'see the lines above'}")
    # parsed once: every run skips dbt's parse
    runner = dbtRunner(manifest=parsed.result, callbacks=[log_dbt_event])
    summaries: list[dict] = []
    next_start = time.monotonic()
    while not stop.is_set() and (runs is None or len(summaries) < runs):
        if stop.wait(max(0.0, next_start - time.monotonic())):
            break
        next_start = time.monotonic() + every
        started = time.time()
        with dbt_run_lock(settings) as holder:
            # where each model's table was before the run: its rows written are what main's
            # commits since then added (by lineage, not by commit time)
            heads = _model_table_heads(settings, parsed.result) if serving else {}
            os.environ.update(holder)  # what the project's on-run-start hook asks for
            try:
                result = runner.invoke([*dbt_args, *project])
                try:
                    gate = check_and_publish(runner.invoke, settings, result, get_invocation_id(),
                                             [*project, *carried_options(dbt_args)])
                except Exception as exc:  # noqa: BLE001 - a failed run; the loop goes on
                    gate = GateOutcome(audit_branch(get_invocation_id()), (), None, published=False,
                                       error=f"not published: the quality gate failed: {type(exc).__name__}: "
                                             f"{str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}")
            finally:
                for key in holder:
                    os.environ.pop(key, None)
        if serving:
            try:
                _record_metrics(settings, heads, result)
            except Exception as exc:  # noqa: BLE001 - the metrics must never stop the loop
                log.warning("dbt loop: metrics not updated: %s: %s", type(exc).__name__, exc)
        summary = _run_summary(len(summaries) + 1, started, time.time(), result)
        if gate is not None and not gate.published:
            summary.update(success=False, error=gate.error)
        summaries.append(summary)
        models = ", ".join(f"{name} {m['seconds']}s" for name, m in summary["models"].items())
        log.log(logging.INFO if summary["success"] else logging.ERROR,
                f"dbt loop run {summary['run']}: {'success' if summary['success'] else 'FAILED'} in "
                f"{summary['seconds']}s" + (f" ({models})" if models else "")
                + (f": {summary['error']}" if summary.get("error") else ""),
                extra={**{key: summary[key] for key in ("run", "success", "seconds", "models", "error")
                          if key in summary},
                       "counts": dict(Counter(m["status"] for m in summary["models"].values()))})
        if record is not None:
            with open(record, "a") as out:
                out.write(json.dumps(summary) + "\n")
        if fail_fast and not summary["success"]:
            break
    return summaries


_DBT_LEVELS = {"info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}
dbt_log = logging.getLogger("dbt")


def log_dbt_event(event) -> None:
    """One event of dbt's (an EventMsg) as the line dbt's console would print, logged: what its
    console shows (info and above, no cache events), secrets scrubbed as dbt scrubs them."""
    from dbt_common.events.functions import env_scrubber

    level = _DBT_LEVELS.get(event.info.level)
    if level is not None and event.info.msg and event.info.name not in ("CacheAction", "CacheDumpGraph"):
        dbt_log.log(level, env_scrubber(event.info.msg))


def _run_summary(number: int, started: float, ended: float, result) -> dict:
    models = {}
    for node_result in getattr(result.result, "results", None) or []:
        node = getattr(node_result, "node", None)
        if node is not None and getattr(node, "resource_type", None) == "model":
            models[node.name] = {"status": str(node_result.status), "seconds": round(node_result.execution_time, 2)}
    summary = {"run": number, "started": round(started, 3), "ended": round(ended, 3),
               "seconds": round(ended - started, 2), "success": bool(result.success), "models": models,
               "spark_application": _spark_application()}
    if result.exception is not None:
        summary["error"] = str(result.exception).strip().splitlines()[0][:300]
    return summary


def _previous_successes() -> None:
    """The models' last successes recorded before this loop (dbt's run_results.json), so that
    their age is known before this loop's first run ends."""
    from lakehouse.operations import status

    previous = status.dbt_status() or {}
    for name, model in (previous.get("models") or {}).items():
        done = status.parse_time(model["completed_at"])
        if model["status"] == "success" and done is not None:
            metrics.dbt_model_succeeded_before(name, done.timestamp())


def _model_table_heads(settings: Settings, manifest) -> dict[str, int | None]:
    """{table: its main's head snapshot id (None: none yet)} of every model that dbt materializes
    as a table, read through pyiceberg; a metrics failure must never stop the loop."""
    from lakehouse.operations import status

    try:
        catalog = status.existing_catalog(settings)
        if catalog is None:
            return {}
        heads = {}
        for node in manifest.nodes.values():
            if node.resource_type == "model" and node.config.materialized not in ("view", "ephemeral"):
                name = f"{node.schema}.{node.alias or node.name}"
                table = status.existing_table(catalog, name)
                snapshot = table.current_snapshot() if table is not None else None
                heads[name] = snapshot.snapshot_id if snapshot is not None else None
        return heads
    except Exception as exc:  # noqa: BLE001 - the metrics must never stop the loop
        log.warning("dbt loop: tables not read before the run (rows written not counted): %s: %s",
                    type(exc).__name__, exc)
        return {}


def _record_metrics(settings: Settings, heads: dict[str, int | None], result) -> None:
    """A run's models (duration, rows written, success) and the last quality run's verdict,
    handed to the metrics endpoint.

    dbt-spark reports no rows_affected, so a model's rows written are those main's commits to its
    table since its head before the run (``heads``) added (their ``added-records``), read through
    pyiceberg as `lakehouse status` reads tables; a view writes none.
    """
    from lakehouse.operations import status

    catalog = status.existing_catalog(settings)
    for node_result in getattr(result.result, "results", None) or []:
        node = getattr(node_result, "node", None)
        if node is None or getattr(node, "resource_type", None) != "model":
            continue
        success = str(node_result.status) == "success"
        name = f"{node.schema}.{node.alias or node.name}"
        table = None if catalog is None or node.config.materialized in ("view", "ephemeral") else \
            status.existing_table(catalog, name)
        ends = [_utc(step.completed_at) for step in node_result.timing if step.completed_at is not None]
        metrics.dbt_model_ran(node.name, success, node_result.execution_time,
                              rows_added_since(table, heads[name]) if table is not None and name in heads else None,
                              max(ends).timestamp() if ends else None)
    metrics.dbt_run(bool(result.success))
    quality = status.quality_status(catalog) if catalog is not None else None
    if quality is not None:
        run_at = status.parse_time(quality["run_at"])
        metrics.quality_run(quality["critical_failed"], quality["warnings_failed"],
                            run_at.timestamp() if run_at else None)


def rows_added_since(table, since: int | None) -> int:
    """Rows the commits to main of a (pyiceberg) table after snapshot ``since`` (None: all of
    them) added: main's ancestors from its head back to ``since``, by their parent links. Not by
    commit time: a snapshot carries its writer's clock, and one committed from a host whose clock
    is behind is stamped before the run started (Iceberg accepts up to a minute before its
    parent). A table replaced since (a full refresh) starts a new line: all of it counts."""
    from pyiceberg.table.snapshots import ancestors_of

    added = 0
    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        if snapshot.snapshot_id == since:
            break
        added += int(dict(snapshot.summary.additional_properties).get("added-records", 0))
    return added


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)  # dbt's timings are naive UTC


def _spark_application() -> str | None:
    """The id of the Spark application dbt's session runs in (the same one every run: warm)."""
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    return context.applicationId if context is not None else None


def _stop_on_signals() -> threading.Event:
    """An event SIGTERM and SIGINT set; the second signal stops the process at once."""
    stop = threading.Event()

    def handle(signum, frame):
        if stop.is_set():
            raise KeyboardInterrupt
        log.info("dbt loop: stopping after the running dbt invocation")
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handle)
    return stop
