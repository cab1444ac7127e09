"""`lakehouse demo`: the whole chain once, on the embedded local platform.

Kafka (started here unless already running) -> produce every stream of the pipeline with
the demo's fault mix -> ingest them all into bronze in one Spark application
(available-now) -> dbt build (silver, gold; published once the quality gate passed) -> the other
quality checks -> a summary that checks, per
stream, that every offset produced is in bronze or in dead letters exactly once, with the right reason
-> a maintenance pass over every table -> the status view.
Whatever the demo started is stopped at the end, also on failure or Ctrl-C.
"""

from __future__ import annotations

import logging
import time

from pyspark.sql import functions as F

from expectations.mirror import check_mirror
from expectations.runner import QualityReport, format_summary, run_quality
from expectations.suites import project_suites
from ingestion import job
from ingestion.invariant import check_every_offset_once, offset_ranges
from lakehouse.contracts.bronze_columns import DEAD, ERROR_CODE, KAFKA_OFFSET, KAFKA_PARTITION
from lakehouse.contracts.streams import StreamSpec, load_pipeline
from lakehouse.core import local_kafka
from lakehouse.core.errors import LakehouseError
from lakehouse.core.kafka_admin import admin_client, end_offsets, topic_names
from lakehouse.core.settings import PROJECT_ROOT, Settings
from lakehouse.core.spark import ensure_namespaces, get_spark, relation_exists
from lakehouse.operations import maintenance, status
from lakehouse.operations.dbt import run_dbt
from lakehouse.operations.quality_gate import gate_suites
from producers.cdc.stream import simulator_source, simulator_sources
from producers.faults import FaultRates
from producers.run import PRODUCERS, produce

log = logging.getLogger("lakehouse.commands.demo")

MODEL_TABLES = (
    "silver.employees", "silver.purchases", "silver.user_events", "silver.customers", "silver.accounts",
    "silver.customers_history", "silver.accounts_history",
    "gold.sales_by_region_daily", "gold.customer_activity", "gold.headcount_by_team_role",
    "gold.account_balance_summary", "gold.events_by_type_daily",
)
# The CDC simulator commits one change at a time to its SQLite source: far slower than the
# event producers, so the change streams get a tenth of the events' count.
CDC_SHARE = 10
STEPS = 7


def _step(number: int, text: str) -> float:
    print(f"\n==> [{number}/{STEPS}] {text}", flush=True)
    return time.monotonic()


def _main_heads(spark) -> dict[str, int | None]:
    """{table: main's snapshot id} of every silver and gold table (views left out)."""
    heads = {}
    for namespace in ("silver", "gold"):  # created before ingestion (ensure_namespaces)
        views = {row.viewName for row in spark.sql(f"show views in {namespace}").collect()}
        for row in spark.sql(f"show tables in {namespace}").collect():
            if row.tableName not in views:
                table = f"{namespace}.{row.tableName}"
                found = spark.sql(f"select snapshot_id from {table}.refs where name = 'main'").first()
                heads[table] = found[0] if found else None
    return heads


def _count(spark, table: str) -> int:
    """Rows of a table or view; 0 when it does not exist (yet)."""
    return spark.table(table).count() if relation_exists(spark, table) else 0


def dead_letters_by_reason(spark, spec: StreamSpec) -> dict[str, int]:
    """The stream's dead rows in its bronze table (ARCHITECTURE §7), by reason."""
    if not relation_exists(spark, spec.bronze_table):
        return {}
    rows = (spark.table(spec.bronze_table).where(DEAD).groupBy(F.col(ERROR_CODE).alias("code")).count()
            .orderBy("code").collect())
    return {row.code: row["count"] for row in rows}


def dead_letters_at(spark, spec: StreamSpec, coordinates: dict) -> dict:
    """Error codes of the stream's dead rows at the given (partition, offset) coordinates."""
    if not coordinates:
        return {}
    wanted = spark.createDataFrame(list(coordinates), "partition int, offset long")
    rows = (spark.table(spec.bronze_table).where(DEAD)
            .select(F.col(KAFKA_PARTITION).alias("partition"), F.col(KAFKA_OFFSET).alias("offset"),
                    ERROR_CODE)
            .join(wanted, ["partition", "offset"]).collect())
    return {(row.partition, row.offset): row[ERROR_CODE] for row in rows}


def main(settings: Settings, events: int = 20_000) -> int:
    started_kafka = False
    spark = None
    began = time.monotonic()
    pipeline = load_pipeline()
    # the produced streams, and the transaction topics their connectors write (the customers
    # producer writes its connector's: ARCHITECTURE §9, "Transactions")
    streams = {name: spec for name, spec in pipeline.items()
               if name in PRODUCERS or any(other.transactions == name for other in pipeline.values()
                                           if other.name in PRODUCERS)}
    try:
        _step(1, f"Kafka on {settings.kafka_bootstrap_servers}")
        started_kafka = _start_kafka(settings)

        _step(2, f"produce {', '.join(streams)} with the demo's faults (duplicates, late, out of order, "
                 "corrupt, invalid, unknown schema ids, schema evolution)")
        produced, ranges = _produce(settings, streams, events)

        _step(3, "ingest Kafka -> bronze, every stream in one Spark application (available-now)")
        spark = get_spark(settings, app_name="lakehouse-demo")
        _ingest(spark, settings, streams)

        _step(4, "dbt build (seed, silver and gold models, their data and unit tests), then the quality gate: "
                 "the suites of the tables it wrote, on its audit branch, before it publishes them")
        before = _main_heads(spark)
        run_dbt(settings, ["build"])
        # (a seed is written to main by dbt directly, never held for the gate)
        seeds = {f"silver.{seed.stem}" for seed in (PROJECT_ROOT / "seeds").glob("*.csv")}
        published = {table for table, head in _main_heads(spark).items() if head != before.get(table)} - seeds

        _step(5, "quality checks (Great Expectations): the suites the gate did not run")
        # the gate ran (and recorded) the suites of every table the build published: not twice
        gated = gate_suites(published)
        report = run_quality(spark, settings, suites=[suite for suite in project_suites() if suite not in gated],
                             sources=simulator_sources(settings))
        print(format_summary(report))
        print(f"  and before publication, on the build's branch: {len(gated)} suite(s) of {len(published)} table(s), "
              "no critical failure (warnings in the report)")
        mismatched = _print_summary(spark, settings, streams, produced, ranges, report)

        _step(6, "maintenance: compaction, manifest rewrite, snapshot expiry, orphan files (lakehouse maintain)")
        # The demo's ingestion has finished, so no partition is still being written.
        print(maintenance.format_summary(maintenance.maintain(spark, settings, all_partitions=True)))

        _step(7, "status (lakehouse status)")
        print(status.format_report(status.collect_status(settings)))
        print(f"\n  demo took {time.monotonic() - began:.0f}s")
        _check_outcome(spark, mismatched, report)
        return 0
    finally:
        if spark is not None:
            spark.stop()
        if started_kafka:
            local_kafka.stop(settings)


def _start_kafka(settings: Settings) -> bool:
    """Start the local broker unless one runs; True when the demo started it (and stops it)."""
    if local_kafka.running_pid(settings) is not None:
        print("reusing the Kafka broker that is already running (it stays running)")
        return False
    local_kafka.start(settings)
    return True


def _produce(settings: Settings, streams: dict[str, StreamSpec], events: int
             ) -> tuple[dict[str, dict], dict[str, dict[int, tuple[int, int]]]]:
    """Every stream's messages with the demo's faults; each stream's fault manifest and the
    offsets it produced ({partition: (first, end)}: a reused broker's topics hold earlier runs)."""
    faults = FaultRates.demo()
    produced, ranges = {}, {}
    for name, spec in streams.items():
        if spec.is_transactions:
            continue  # written by its connector's stream, below
        count = events // CDC_SHARE if spec.is_cdc else events
        start = _end_offsets_if_any(settings, spec.topic)
        side = streams.get(spec.transactions) if spec.transactions else None
        side_start = _end_offsets_if_any(settings, side.topic) if side else {}
        report = produce(settings, name, count, faults=faults)
        if report.failed:
            raise LakehouseError(f"{name}: {report.failed} messages were not delivered")
        produced[name] = report.manifest(faults.as_dict())
        ranges[name] = offset_ranges(start, end_offsets(settings, spec.topic))
        if side is not None:  # its transaction topic: every event once in bronze, no faults
            produced[side.name] = {"topic": side.topic, "produced": report.other_topics.get(side.topic, 0),
                                   "failed": 0, "fault_rates": {}, "faults": {}, "dead_letters": []}
            ranges[side.name] = offset_ranges(side_start, end_offsets(settings, side.topic))
        print(f"  {name}: delivered {report.delivered:,}; injected: "
              + (", ".join(f"{kind} {n:,}" for kind, n in produced[name]["faults"].items()) or "none"))
    return produced, ranges


def _end_offsets_if_any(settings: Settings, topic: str) -> dict[int, int]:
    """The topic's end offsets; none when it does not exist yet (the producer creates it)."""
    return end_offsets(settings, topic) if topic in topic_names(admin_client(settings), settings) else {}


def _ingest(spark, settings: Settings, streams: dict[str, StreamSpec]) -> None:
    """Ingest every stream (available-now)."""
    ensure_namespaces(spark)
    job.run(spark, settings, list(streams), available_now=True)


def _print_summary(spark, settings: Settings, streams: dict[str, StreamSpec], produced: dict[str, dict],
                   ranges: dict[str, dict[int, tuple[int, int]]], report: QualityReport) -> list[str]:
    """The demo's summary; the streams and mirrors that do not hold what their sources sent."""
    print("\n" + "=" * 64)
    print("lakehouse demo summary")
    print("=" * 64)
    mismatched = _print_stream_counts(spark, streams, produced, ranges, settings)
    for name in streams:
        reasons = ", ".join(f"{code} {n:,}" for code, n in dead_letters_by_reason(spark, streams[name]).items())
        print(f"  dead letters of {name}: {reasons or 'none'}")
    for table in MODEL_TABLES:
        print(f"  {table:<32} {_count(spark, table):>12,} rows")
    mismatched += _print_mirror_checks(spark, settings, streams)
    verdict = "PASSED" if report.passed else "FAILED"
    print(f"  quality: {verdict} ({report.critical_failures} critical, {report.warning_failures} warning failures)")
    print(f"  quality report: {report.report_path}")
    print(f"  Data Docs: {report.docs_index}")
    return mismatched


def _print_stream_counts(spark, streams: dict[str, StreamSpec], produced: dict[str, dict],
                         ranges: dict[str, dict[int, tuple[int, int]]], settings: Settings | None = None) -> list[str]:
    """Per stream: each offset the demo produced is in bronze exactly once, a good row or a dead
    one (coordinates, not counts: a loss and a duplicate would cancel out in a count), the
    dead letters are at the manifest's coordinates with its reasons; the streams where not. With
    ``settings`` the offsets that hold no committed record (transaction markers, aborted
    records) are told apart from missing ones (ingestion/invariant.py)."""
    print(f"  {'stream':<12} {'delivered':>10} {'good':>10} {'dead':>7}  check")
    mismatched = []
    for name, spec in streams.items():
        manifest = produced[name]
        check = check_every_offset_once(spark, spec, ranges[name], settings=settings)
        expected = {(d["partition"], d["offset"]): d["error_code"] for d in manifest["dead_letters"]}
        problems = [check.describe()] if not check.holds else []
        if check.expected != manifest["produced"]:  # another producer wrote to the topic meanwhile
            problems.append(f"the topic holds {check.expected:,} new offsets, {manifest['produced']:,} delivered")
        if check.dead_letters != len(expected) or dead_letters_at(spark, spec, expected) != expected:
            problems.append(f"dead letters differ from the {len(expected):,} the faults call for")
        mismatched += [name] if problems else []
        verdict = "MISMATCH: " + "; ".join(problems) if problems else \
            "every offset once in bronze (good or dead), reasons match"
        print(f"  {name:<12} {manifest['produced']:>10,} {check.bronze:>10,} {check.dead_letters:>7,}  {verdict}")
    return mismatched


def _print_mirror_checks(spark, settings: Settings, streams: dict[str, StreamSpec]) -> list[str]:
    """Each CDC mirror in silver against its source database; the mirrors that differ."""
    mismatched = []
    for name, spec in streams.items():
        if spec.is_cdc:
            check = check_mirror(spark, simulator_source(settings, name))
            verdict = "equals the source database" if check.equal else \
                f"DIFFERS from the source database: {check.describe()}"
            mismatched += [] if check.equal else [f"silver.{name}"]
            print(f"  silver.{name} (CDC mirror, {check.mirror_rows:,} live rows) {verdict}")
    return mismatched


def _check_outcome(spark, mismatched: list[str], report: QualityReport) -> None:
    """A failed demo is one error line: empty models, sources not mirrored, critical checks failed."""
    empty = [table for table in MODEL_TABLES if _count(spark, table) == 0]
    if empty:
        raise LakehouseError(f"empty after the demo: {', '.join(empty)}")
    if mismatched:
        raise LakehouseError(f"not what the sources hold: {', '.join(mismatched)}")
    if not report.passed:
        raise LakehouseError("critical quality checks failed; see the report")
