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
