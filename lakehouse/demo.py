"""`lakehouse demo`: the whole chain once, on the embedded local platform.

Kafka (started here unless already running) -> produce user events with some faulty ones
-> ingest into bronze (available-now) -> dbt run (silver, gold) -> quality checks -> a
summary. Whatever the demo started is stopped at the end, also on failure or Ctrl-C.
"""

from __future__ import annotations

import logging
import time

from lakehouse import local_kafka
from lakehouse.config import Settings
from lakehouse.errors import LakehouseError

log = logging.getLogger("lakehouse.demo")

TABLES = ("bronze.user_events", "bronze.dead_letters", "silver.user_events", "gold.events_by_type_daily")


def _step(number: int, text: str) -> float:
    print(f"\n==> [{number}/5] {text}", flush=True)
    return time.monotonic()


def table_counts(spark) -> dict[str, int]:
    counts = {}
    for table in TABLES:
        counts[table] = spark.table(table).count() if spark.catalog.tableExists(table) else 0
    return counts


def dead_letters_by_reason(spark, stream: str) -> dict[str, int]:
    if not spark.catalog.tableExists("bronze.dead_letters"):
        return {}
    rows = spark.sql(
        "select error_code, count(*) as n from bronze.dead_letters "
        f"where stream = '{stream}' group by error_code order by error_code"
    ).collect()
    return {row.error_code: row.n for row in rows}


def dead_letters_at(spark, stream: str, coordinates: dict) -> dict:
    """Error codes of the dead letters at the given (partition, offset) coordinates."""
    if not coordinates:
        return {}
    wanted = spark.createDataFrame(list(coordinates), "partition int, offset long")
    rows = (spark.table("bronze.dead_letters").where(f"stream = '{stream}'")
            .join(wanted, ["partition", "offset"]).select("partition", "offset", "error_code").collect())
    return {(row.partition, row.offset): row.error_code for row in rows}


def main(settings: Settings, events: int = 20_000) -> int:
    from expectations.runner import format_summary, run_quality
    from ingestion import job
    from lakehouse.dbt import run_dbt
    from lakehouse.spark import ensure_namespaces, get_spark
    from producers import user_events
    from producers.faults import FaultRates

    started_kafka = False
    spark = None
    began = time.monotonic()
    try:
        _step(1, f"Kafka on {settings.kafka_bootstrap_servers}")
        if local_kafka.running_pid(settings) is None:
            local_kafka.start(settings)
            started_kafka = True
        else:
            print("reusing the Kafka broker that is already running (it stays running)")

        faults = FaultRates.demo()
        _step(2, f"produce {events:,} user events with the demo's faults (duplicates, late, out of order, "
                 "corrupt, invalid, schema evolution)")
        produced = user_events.produce(settings, events, faults)
        if produced.failed:
            raise LakehouseError(f"{produced.failed} messages were not delivered")
        manifest = produced.manifest(faults.as_dict())
        expected_dead = {(d["partition"], d["offset"]): d["error_code"] for d in manifest["dead_letters"]}
        print(f"delivered {produced.delivered:,}; injected: "
              + ", ".join(f"{kind} {n:,}" for kind, n in manifest["faults"].items()))

        _step(3, "ingest Kafka -> bronze (available-now)")
        spark = get_spark(settings, app_name="lakehouse-demo")
        ensure_namespaces(spark)
        dead_before = sum(dead_letters_by_reason(spark, "user_events").values())
        job.run(spark, settings, ["user_events"], available_now=True)

        _step(4, "dbt run (silver, gold)")
        run_dbt(settings, ["run"])

        _step(5, "quality checks (Great Expectations)")
        report = run_quality(spark, settings)
        print(format_summary(report))

        counts = table_counts(spark)
        by_reason = dead_letters_by_reason(spark, "user_events")
        new_dead = sum(by_reason.values()) - dead_before
        found = dead_letters_at(spark, "user_events", expected_dead)
        print("\n" + "=" * 64)
        print("lakehouse demo summary")
        print("=" * 64)
        for table, count in counts.items():
            print(f"  {table:<32} {count:>12,} rows")
        reasons = ", ".join(f"{code} {n:,}" for code, n in by_reason.items()) or "none"
        print(f"  dead letters by reason: {reasons}")
        matched = new_dead == len(expected_dead) and found == expected_dead
        print(f"  dead letters this run: {new_dead:,}; unreadable messages produced: {len(expected_dead):,}"
              f" -> {'match, record for record' if matched else 'MISMATCH'}")
        verdict = "PASSED" if report.passed else "FAILED"
        print(f"  quality: {verdict} ({report.critical_failures} critical, {report.warning_failures} warning failures)")
        print(f"  report: {report.docs_index}")
        print(f"  took {time.monotonic() - began:.0f}s")
        empty = [table for table, count in counts.items() if count == 0 and table != "bronze.dead_letters"]
        if empty:
            raise LakehouseError(f"empty after the demo: {', '.join(empty)}")
        if not matched:
            raise LakehouseError("dead letters do not match the unreadable messages produced")
        if not report.passed:
            raise LakehouseError("critical quality checks failed; see the report")
        return 0
    finally:
        if spark is not None:
            spark.stop()
        if started_kafka:
            local_kafka.stop(settings)
