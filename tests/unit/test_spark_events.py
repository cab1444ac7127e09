"""Reading scans out of Spark's event log (tests/support/spark_events.py): the columns a scan reads,
and which scan of a MERGE is its read of the target."""

from __future__ import annotations

from tests.support.spark_events import merge_target_reads, scan_columns

MIRROR_SCAN = ("BatchScan lake.silver.customers_mirror[customer_id#46118L, _seq#46127, _file#46154, _pos#46155L, "
               "_spec_id#46152, _partition#46153] lake.silver.customers_mirror (branch=null) "
               "[filters=, groupedBy=customer_id_bucket] RuntimeFilters: []")


def test_a_scan_line_gives_the_columns_it_reads():
    assert scan_columns(MIRROR_SCAN) == ["customer_id", "_seq", "_file", "_pos", "_spec_id", "_partition"]
    assert scan_columns("BatchScan lake.bronze.t") == []


def test_the_target_read_of_a_merge_is_its_scan_of_row_positions():
    merge = {"nodes": {"WriteDelta", "MergeRows", "BatchScan"}, "scans": [
        {"table": "lake.silver.customers_mirror", "columns": scan_columns(MIRROR_SCAN)},
        {"table": "lake.silver.customers_mirror__dbt_changes", "columns": ["customer_id", "_seq", "email"]}]}
    # a read of the positions outside a row-level write (a metadata query) is no MERGE's
    select = {"nodes": {"BatchScan", "Project"}, "scans": [{"table": "lake.silver.t", "columns": ["id", "_file"]}]}
    assert merge_target_reads([select, merge]) == [("lake.silver.customers_mirror", ["customer_id", "_seq"])]


def test_a_scan_an_adaptive_replan_dropped_leaves_no_metric_pointing_nowhere(tmp_path):
    """Seen in CI once the transactions model read an empty relation: AQE's re-plan of a statement
    had one scan fewer, and the metrics of the dropped scan pointed past the list (IndexError)."""
    import json

    from tests.support.spark_events import sql_breakdown

    def scan(table, accumulator):
        return {"nodeName": f"BatchScan {table}", "simpleString": f"BatchScan {table}", "children": [],
                "metrics": [{"accumulatorId": accumulator, "name": "number of output rows"}]}

    def plan(*scans):
        return {"nodeName": "Union", "children": list(scans)}

    events = [
        {"Event": "SparkListenerSQLExecutionStart", "executionId": 1, "time": 1,
         "sparkPlanInfo": plan(scan("lake.bronze.a", 10), scan("lake.bronze.b", 11))},
        {"Event": "SparkListenerSQLAdaptiveExecutionUpdate", "executionId": 1,
         "sparkPlanInfo": plan(scan("lake.bronze.a", 10))},
        {"Event": "SparkListenerDriverAccumUpdates", "executionId": 1, "accumUpdates": [[10, 7], [11, 0]]},
        {"Event": "SparkListenerSQLExecutionEnd", "executionId": 1, "time": 2},
    ]
    log = tmp_path / "events"
    log.write_text("\n".join(json.dumps(event) for event in events) + "\n")
    [statement] = sql_breakdown(log)
    assert [(s["table"], s.get("rows")) for s in statement["scans"]] == [("lake.bronze.a", 7)]
