"""Spark's event log of a dbt process: per SQL statement its time and each Iceberg scan's metrics.

A dbt process started with :func:`event_log_env` writes Spark's event log (pyspark reads
PYSPARK_SUBMIT_ARGS when dbt builds its session; no project file changes). :func:`sql_breakdown`
reads it back: per SQL statement (a root execution with the executions it ran inside it) its
start, end and wall time, the plan nodes it ran, and per Iceberg scan the table, data files
read and skipped, delete files, rows read. :func:`per_model` ties a `dbt run`'s statements to
its models by time, :func:`layer_rows` sums a model's rows read per layer. Used by
benchmarks/merge_scaling.py, benchmarks/dbt_scaling.py and the pruning test
(tests/integration/test_incremental_models.py): rows and files read do not depend on the
machine's load, times do.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from datetime import datetime
from pathlib import Path


def event_log_env(event_dir: Path) -> dict[str, str]:
    """Environment variables that make a pyspark process (dbt) write its event log to `event_dir`."""
    event_dir.mkdir(parents=True, exist_ok=True)
    return {"PYSPARK_SUBMIT_ARGS": " ".join([
        "--conf spark.eventLog.enabled=true", f"--conf spark.eventLog.dir=file://{event_dir}",
        "--conf spark.eventLog.compress=false", "--conf spark.eventLog.rolling.enabled=false", "pyspark-shell"])}


def newest_event_log(event_dir: Path) -> Path | None:
    logs = sorted((p for p in event_dir.iterdir() if p.is_file()), key=lambda p: p.stat().st_mtime)
    return logs[-1] if logs else None


def reads_cache(node_name: str) -> bool:
    # a named cache shows as "Scan In-memory table <name>", an unnamed one as "InMemoryTableScan"
    return node_name.startswith("InMemoryTableScan") or "In-memory table" in node_name


def _walk(plan: dict, found: list, cached: bool = False) -> None:
    """Every node with a flag: is it part of a cached plan (below a scan of a cached table)?"""
    found.append((plan, cached))
    cached = cached or reads_cache(plan["nodeName"])
    for child in plan.get("children", []):
        _walk(child, found, cached)


def sql_breakdown(event_log: Path) -> list[dict]:
    """Per SQL statement of the dbt process: wall time, its kind, its top plan node, and each
    Iceberg scan's files and rows. A statement that runs others inside it (CACHE TABLE, MERGE)
    is one root execution; its nested executions add their scans, not their time. A cached
    plan's scans belong to the execution that ran them first (the one that built the cache).
    Metric values come from driver updates (Iceberg's scan planning) and task ends (rows read).
    Each statement also has ``nodes``, the names of the plan nodes it ran (for the caller to
    classify)."""
    executions: dict[int, dict] = {}
    metric_of: dict[int, tuple[int, int, str]] = {}  # accumulator -> (execution, scan index, metric)
    values: dict[int, int] = defaultdict(int)

    def register(execution_id: int, plan: dict) -> None:
        nodes: list = []
        _walk(plan, nodes)
        ex = executions[execution_id]
        # an adaptive re-plan replaces the statement's scans: the metrics of the ones it dropped (a
        # scan of an empty relation AQE removed) point nowhere now
        for accumulator in [a for a, (owner, *_) in metric_of.items() if owner == execution_id]:
            del metric_of[accumulator]
        ex["top"] = plan["nodeName"] if plan["nodeName"] != "AdaptiveSparkPlan" or not plan.get("children") \
            else plan["children"][0]["nodeName"]
        ex["nodes"] = {"InMemoryTableScan" if reads_cache(n["nodeName"]) else n["nodeName"].split(" ")[0]
                       for n, cached in nodes if not cached}
        ex["scans"] = []
        for node, cached in nodes:
            name = node["nodeName"]
            if not name.startswith("BatchScan"):
                continue
            owners = {metric_of.get(m["accumulatorId"], (execution_id,))[0] for m in node.get("metrics", [])}
            if cached and owners != {execution_id}:
                continue  # read from the cache here; the scan ran in the statement that built it
            ex["scans"].append({"table": name.split(" ", 1)[1] if " " in name else name,
                                "columns": scan_columns(node.get("simpleString", ""))})
            for metric in node.get("metrics", []):
                metric_of[metric["accumulatorId"]] = (execution_id, len(ex["scans"]) - 1, metric["name"])

    with event_log.open() as lines:
        for line in lines:
            event = json.loads(line)
            kind = event["Event"].rsplit(".", 1)[-1]
            if kind == "SparkListenerSQLExecutionStart":
                execution_id = event["executionId"]
                executions[execution_id] = {"start": event["time"], "end": None,
                                            "root": event.get("rootExecutionId", execution_id)}
                register(execution_id, event["sparkPlanInfo"])
            elif kind == "SparkListenerSQLAdaptiveExecutionUpdate" and event["executionId"] in executions:
                register(event["executionId"], event["sparkPlanInfo"])
            elif kind == "SparkListenerSQLExecutionEnd" and event["executionId"] in executions:
                executions[event["executionId"]]["end"] = event["time"]
            elif kind == "SparkListenerDriverAccumUpdates":
                for accumulator, value in event["accumUpdates"]:
                    values[accumulator] += int(value)
            elif kind == "SparkListenerTaskEnd":
                for acc in event.get("Task Info", {}).get("Accumulables", []):
                    if acc["ID"] in metric_of and acc.get("Update") is not None:
                        values[acc["ID"]] += int(acc["Update"])
    for accumulator, (execution_id, index, name) in metric_of.items():
        if accumulator in values:
            executions[execution_id]["scans"][index][name] = values[accumulator]
    statements: dict[int, dict] = {}
    for execution_id, ex in sorted(executions.items()):
        root = ex["root"] if ex["root"] in executions else execution_id
        statement = statements.setdefault(root, {"id": root, "nodes": set(), "scans": []})
        statement["nodes"] |= ex["nodes"]
        statement["scans"] += [scan_summary(s) for s in ex["scans"]]
        if root == execution_id:
            statement["top"] = ex["top"]
            statement["start_ms"], statement["end_ms"] = ex["start"], ex["end"]
            statement["seconds"] = round((ex["end"] - ex["start"]) / 1000, 2) if ex["end"] else None
    return list(statements.values())


SCAN_METRICS = {  # Iceberg's scan metrics as Spark shows them -> short names
    "number of result data files": "data_files", "number of skipped data files": "skipped_data_files",
    "number of result delete files": "delete_files", "number of output rows": "rows",
    "total data file size (bytes)": "data_bytes", "number of row deletes applied": "row_deletes_applied",
}


def scan_summary(scan: dict) -> dict:
    return {"table": scan["table"], "columns": scan["columns"],
            **{short: scan[name] for name, short in SCAN_METRICS.items() if name in scan}}


def scan_columns(simple_string: str) -> list[str]:
    """The columns a scan reads, from its plan line: ``BatchScan lake.silver.t[a#1L, _seq#2] ...``
    -> ``['a', '_seq']`` (the read schema after column pruning, metadata columns included)."""
    head, bracket, rest = simple_string.partition("[")
    if not bracket or " " not in head.strip():
        return []
    return [re.sub(r"#\d+L?$", "", column.strip()) for column in rest.split("]", 1)[0].split(",") if column.strip()]


# What a row-level command (MERGE, UPDATE, DELETE) reads besides the table's own columns: the
# position of each row, to delete it (merge-on-read) or to know its file (copy-on-write).
ROW_POSITION_COLUMNS = ("_file", "_pos", "_spec_id", "_partition")


def merge_target_reads(statements: list[dict]) -> list[tuple[str, list[str]]]:
    """Per row-level write of the statements (Iceberg's WriteDelta, merge-on-read, or
    ReplaceData, copy-on-write), its target and the table columns its read of the target
    reads: the scan that also reads the rows' positions (`_file`), which no other scan of the
    statement reads. In statement order."""
    reads = []
    for statement in statements:
        if not statement["nodes"] & {"WriteDelta", "ReplaceData"}:
            continue
        for scan in statement["scans"]:
            if "_file" in scan["columns"]:
                reads.append((scan["table"], [c for c in scan["columns"] if c not in ROW_POSITION_COLUMNS]))
    return reads


# --- per model of a dbt run ---------------------------------------------------------------------

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


def own_table_of(model: str) -> str | None:
    for layer, names in (("silver", ("user_events", "purchases", "employees", "customers_mirror", "accounts_mirror",
                                     "customers_history", "accounts_history")),
                         ("gold", ("events_by_type_daily", "sales_by_region_daily", "customer_activity",
                                   "headcount_by_team_role", "account_balance_summary"))):
        if model in names:
            return f"{layer}.{model}"
    return None
