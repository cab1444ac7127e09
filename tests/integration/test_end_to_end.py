"""One stream through the whole chain, with real components only:

producer -> Kafka broker -> Structured Streaming job -> Iceberg bronze (+ dead letters)
-> dbt silver/gold (its own Spark process) -> pyiceberg and Spark read back -> GX suite.

The module has a lakehouse of its own (broker, topics, catalog, tables): its checks compare
whole tables with what it produced, so no other module's user_events may be in them, in
whatever order the modules run.
"""

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from ingestion import job
from lakehouse.operations.dbt import run_dbt
from producers import user_events
from producers.faults import FaultRates
from tests.conftest import REPO_ROOT
from tests.integration.own_lakehouse import cli_env, lakehouse_fixture

pytestmark = pytest.mark.integration

EVENTS = 3_000
SEED = 42
# This chain carries one stream; the models of the other streams need their bronze tables.
USER_EVENT_MODELS = ["--select", "user_events events_by_type_daily"]
FAULTS = FaultRates(duplicate=0.02, late=0.02, out_of_order=0.02, corrupt=0.01, invalid=0.01, evolve_after=0.5)


# (its settings, a Spark session on its catalog, its dbt target folder).
lake = lakehouse_fixture("end-to-end")


@pytest.fixture(scope="module")
def own(lake):
    return lake[0]


@pytest.fixture(scope="module")
def session(lake):
    return lake[1]


@pytest.fixture(scope="module")
def dbt_target(lake):
    return lake[2]


@pytest.fixture(scope="module")
def produced(own):
    report = user_events.produce(own, EVENTS, FAULTS, seed=SEED, progress=False)
    manifest = report.manifest()
    assert report.failed == 0 and report.delivered == EVENTS + manifest["faults"]["duplicate"]
    assert len(manifest["dead_letters"]) > 20
    assert {"late", "out_of_order", "evolved"} <= set(manifest["faults"])
    return report


@pytest.fixture(scope="module")
def ingested(session, own, produced):
    job.run(session, own, ["user_events"], available_now=True)
    return produced


@pytest.fixture(scope="module")
def built(ingested, own, dbt_target):
    # build: the models and their data tests (keys unique and not null, event types known)
    run_dbt(own, ["build", *USER_EVENT_MODELS], target_dir=dbt_target, capture=True)
    return ingested


def pyiceberg_catalog(own) -> SqlCatalog:
    db = own.catalog_uri.removeprefix("jdbc:sqlite:")
    return SqlCatalog("lake", uri=f"sqlite:///{db}", warehouse=own.warehouse)


def test_every_record_lands_in_bronze_or_dead_letters_exactly_once(session, ingested):
    bronze = session.table("bronze.user_events").where("_error_code is null") \
        .select("_kafka_partition", "_kafka_offset").collect()
    dead = session.table("bronze.dead_letters").where("stream = 'user_events'") \
        .select("partition", "offset", "error_code").collect()  # the view over the dead rows
    bronze_coords = {(r._kafka_partition, r._kafka_offset) for r in bronze}
    dead_coords = {(r.partition, r.offset): r.error_code for r in dead}
    assert len(bronze) == len(bronze_coords) and len(dead) == len(dead_coords)  # no record twice
    assert not bronze_coords & set(dead_coords)  # never both
    assert len(bronze_coords) + len(dead_coords) == ingested.delivered  # never neither
    expected = {(d["partition"], d["offset"]): d["error_code"] for d in ingested.manifest()["dead_letters"]}
    assert dead_coords == expected  # the right records, with the right reasons


def test_duplicates_late_and_evolved_records_are_kept_in_bronze(session, ingested):
    faults = ingested.manifest()["faults"]
    bronze = session.table("bronze.user_events").where("_error_code is null")  # good rows
    assert bronze.count() - bronze.select("event_id").distinct().count() == faults["duplicate"]
    rescued = bronze.where("_rescued is not null").collect()
    assert len(rescued) >= faults["evolved"]  # re-sends of evolved records carry it too
    assert all(set(json.loads(row._rescued)) == {"referrer"} for row in rescued)
    late = bronze.where("event_timestamp < _kafka_timestamp - interval 1 day").count()
    assert late >= faults["late"]


def test_replayed_batch_is_not_written_twice(session, own, ingested):
    """Iceberg's own sink test, applied to ours: lose the last checkpoint commit, restart."""
    checkpoint = Path(job.checkpoint_location(own, job.get_stream("user_events")))
    commits = sorted((checkpoint / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    assert commits, "the ingestion left no checkpoint commits"
    rows_before = session.table("bronze.user_events").count()
    dead_before = session.table("bronze.dead_letters").count()
    snapshots_before = session.table("bronze.user_events.snapshots").count()
    commits[-1].unlink()
    (commits[-1].parent / f".{commits[-1].name}.crc").unlink(missing_ok=True)  # Hadoop's checksum sidecar
    job.run(session, own, ["user_events"], available_now=True)
    assert session.table("bronze.user_events").count() == rows_before
    assert session.table("bronze.dead_letters").count() == dead_before
    assert session.table("bronze.user_events.snapshots").count() == snapshots_before
    assert (checkpoint / "commits" / commits[-1].name).exists()  # the batch is committed again


def test_dbt_builds_silver_and_gold_from_bronze(session, built):
    bronze_ids = session.table("bronze.user_events").where("_error_code is null").select("event_id").distinct().count()
    silver = session.table("silver.user_events")
    assert silver.count() == bronze_ids
    assert silver.select("event_id").distinct().count() == bronze_ids
    gold_total = session.sql("select sum(event_count) as n from gold.events_by_type_daily").collect()[0].n
    assert gold_total == bronze_ids


def documented_status_keys() -> dict[str, str]:
    """key -> type, from the table of `status --json`'s keys in docs/operations.md."""
    text = (REPO_ROOT / "docs" / "operations.md").read_text()
    table = text.split("### The keys of `status --json`", 1)[1].split("\n## ", 1)[0]
    return {match[1]: match[2] for match in re.finditer(r"^\| `([^`]+)` \| ([^|]+?) \|", table, re.M)}


def status_keys(value, path: str, documented: dict[str, str]) -> set[str]:
    """The key paths of a `status --json` value, written as the doc writes them (a.b, a[].b);
    a documented map's keys are data, not keys, except that its object values are followed as
    a.<name>.key when the doc says so."""
    keys = {path} if path and not path.endswith(("[]", ">")) else set()  # a list's items, a map's values
    if documented.get(path, "").startswith("map"):
        placeholder = next((k[len(path) + 1:].split(".")[0] for k in documented if k.startswith(path + ".<")), None)
        for item in (value.values() if placeholder and isinstance(value, dict) else ()):
            keys |= status_keys(item, f"{path}.{placeholder}", documented)
    elif isinstance(value, dict):
        for key, item in value.items():
            keys |= status_keys(item, f"{path}.{key}" if path else key, documented)
    elif isinstance(value, list) and not all(isinstance(item, str) for item in value):
        for item in value:
            keys |= status_keys(item, f"{path}[]", documented)
    return keys


def test_status_json_keys_are_the_documented_ones(own, built, dbt_target, quality_report):
    """Every key a real `lakehouse status --json --check` prints is in docs/operations.md's table,
    and every key there is printed (with a dbt run, a quality run, streams and tables)."""
    env = {**cli_env(own), "DBT_TARGET_PATH": str(dbt_target)}
    result = subprocess.run([str(Path(sys.executable).with_name("lakehouse")), "status", "--json", "--check"],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode in (0, 3), result.stdout + result.stderr  # 3: the job ran --available-now
    shown = json.loads(result.stdout)
    assert shown["dbt"]["models"] and shown["quality"] and shown["streams"] and shown["tables"]
    documented = documented_status_keys()
    printed = status_keys(shown, "", documented)
    assert sorted(printed - set(documented)) == [], "printed, not in docs/operations.md"
    assert sorted(set(documented) - printed) == [], "in docs/operations.md, not printed"


def test_pyiceberg_reads_the_same_catalog(own, built):
    catalog = pyiceberg_catalog(own)
    assert {ns[0] for ns in catalog.list_namespaces()} >= {"bronze", "silver", "gold"}
    assert ("bronze", "user_events") in catalog.list_tables("bronze")
    assert ("silver", "user_events") in catalog.list_tables("silver")
    assert ("gold", "events_by_type_daily") in catalog.list_tables("gold")
    silver = catalog.load_table("silver.user_events").scan().to_arrow()
    assert silver.num_rows > 0
    assert len(set(silver.column("event_id").to_pylist())) == silver.num_rows


def test_one_catalog_on_sqlite_in_wal_mode_and_no_derby(own, built):
    import sqlite3

    from tests.conftest import REPO_ROOT

    db = own.catalog_uri.removeprefix("jdbc:sqlite:")
    with sqlite3.connect(db) as connection:
        assert connection.execute("pragma journal_mode").fetchone()[0] == "wal"
        catalogs = {row[0] for row in connection.execute("select distinct catalog_name from iceberg_tables")}
    assert catalogs == {"lake"}
    for folder in (REPO_ROOT, own.home):
        assert not (folder / "metastore_db").exists() and not (folder / "derby.log").exists()


def test_second_run_is_incremental_and_duplicates_do_not_double(session, own, built, dbt_target):
    silver_before = session.table("silver.user_events").count()
    first_snapshot = session.sql(
        "select snapshot_id from silver.user_events.snapshots order by committed_at limit 1").collect()[0][0]
    bronze_before = session.table("bronze.user_events").where("_error_code is null").count()
    # Same seed, same fault rates: the first 500 events again, faults included (the original
    # run evolved its schema only after event 1,500, so the re-send must not evolve at all).
    # Every readable one is a duplicate: bronze keeps it (dedup is silver's job), silver must not.
    resent = user_events.produce(own, 500, dataclasses.replace(FAULTS, evolve_after=None), seed=SEED,
                                 progress=False)
    assert resent.failed == 0
    job.run(session, own, ["user_events"], available_now=True)
    run_dbt(own, ["run", *USER_EVENT_MODELS], target_dir=dbt_target, capture=True)

    unreadable = len(resent.manifest()["dead_letters"])
    good = session.table("bronze.user_events").where("_error_code is null").count()
    assert good == bronze_before + resent.delivered - unreadable
    assert session.table("silver.user_events").count() == silver_before
    history = {r.snapshot_id for r in session.sql("select snapshot_id from silver.user_events.history").collect()}
    assert first_snapshot in history, "silver was recreated instead of updated incrementally"
    results = json.loads((dbt_target / "run_results.json").read_text())
    assert {r["status"] for r in results["results"]} == {"success"}
    manifest = json.loads((dbt_target / "manifest.json").read_text())
    materialized = {n["name"]: n["config"]["materialized"] for n in manifest["nodes"].values()
                    if n["resource_type"] == "model" and n["name"] in ("user_events", "events_by_type_daily")}
    assert materialized == {"user_events": "incremental", "events_by_type_daily": "incremental"}


def test_dbt_docs_catalog_has_columns(own, built, dbt_target):
    run_dbt(own, ["docs", "generate"], target_dir=dbt_target, capture=True)
    catalog = json.loads((dbt_target / "catalog.json").read_text())
    columns = {key.split(".")[-1]: set(node["columns"]) for key, node in catalog["nodes"].items()}
    assert {"event_id", "event_at", "event_type", "_kafka_offset"} <= columns["user_events"]
    assert {"event_date", "event_type", "event_count"} <= columns["events_by_type_daily"]


@pytest.fixture(scope="module")
def quality_report(session, own, built):
    from expectations.runner import run_quality

    # this test builds only the user_events models
    return run_quality(session, own, layer="silver", stream="user_events")


def test_quality_suite_passes_on_the_built_tables(quality_report):
    assert quality_report.passed and quality_report.critical_failures == 0
    assert quality_report.docs_index.exists()


def test_dbt_build_fails_on_a_duplicated_key_and_names_the_test(session, own, built, dbt_target):
    """A key that is not unique stops `dbt build` at its model's data test (models/silver/
    _silver__models.yml), whose name the error carries; on the built tables the same build
    passes (the `built` fixture ran it). The table is rolled back after."""
    from lakehouse.core.errors import LakehouseError

    # main's head, not the newest snapshot: that may be a dropped audit branch's (a run with nothing new)
    built_snapshot = session.sql("select snapshot_id from silver.user_events.refs "
                                 "where name = 'main'").first()[0]
    session.sql("insert into silver.user_events select * from silver.user_events limit 1")
    try:
        with pytest.raises(LakehouseError, match="Failure in test unique_user_events_event_id"):
            run_dbt(own, ["build", "--select", "user_events"], target_dir=dbt_target, capture=True)
        results = json.loads((dbt_target / "run_results.json").read_text())
        failing = {r["unique_id"].split(".")[2] for r in results["results"] if r["status"] == "fail"}
        assert failing == {"unique_user_events_event_id"}
    finally:
        session.sql(f"call lake.system.rollback_to_snapshot('silver.user_events', {built_snapshot})")
