"""`lakehouse demo` as a user runs it (what `make demo` calls after setup), in its own state folder."""

import json
import math
import os
import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from lakehouse.core.local_kafka import free_port
from lakehouse.core.preflight import port_is_free
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.integration
LAKEHOUSE = str(Path(os.sys.executable).parent / "lakehouse")


def processes_mentioning(text: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            command = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in command:
            found.append(f"{cmdline.parent.name}: {command[:120]}")
    return found


@pytest.fixture(scope="module")
def demo(settings, tmp_path_factory):
    """`lakehouse demo --events 2000` run once in a state folder of its own: (home, env, stdout)."""
    tmp_path = tmp_path_factory.mktemp("demo")
    home = tmp_path / "home"
    home.mkdir()
    (home / "jars").symlink_to(settings.jars_dir.resolve())
    port = free_port()
    env = {
        **os.environ,
        "LAKEHOUSE_HOME": str(home),
        "LAKEHOUSE_KAFKA_PORT": str(port),
        "DBT_TARGET_PATH": str(tmp_path / "target"),
        "DBT_LOG_PATH": str(tmp_path / "logs"),
    }
    result = subprocess.run([LAKEHOUSE, "demo", "--events", "2000"],
                            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return home, env, result.stdout


def test_demo_runs_the_chain_reports_it_and_stops_what_it_started(demo, spark):
    home, env, out = demo
    tmp_path = home.parent
    port = int(env["LAKEHOUSE_KAFKA_PORT"])
    rows = {m.group(1): int(m.group(2).replace(",", ""))
            for m in re.finditer(r"^\s+(\w+\.\w+)\s+([\d,]+) rows$", out, re.M)}
    for table in ("silver.user_events", "silver.employees", "silver.purchases", "silver.customers",
                  "silver.accounts", "gold.sales_by_region_daily", "gold.customer_activity",
                  "gold.headcount_by_team_role", "gold.account_balance_summary", "gold.events_by_type_daily"):
        assert rows[table] > 0, table
    # dbt build ran seeds, models, data tests and unit tests, all green
    assert "dbt build" in out
    for stream in ("customers", "accounts"):  # the CDC oracle: live mirror == source database
        assert re.search(rf"silver\.{stream} \(CDC mirror, [\d,]+ live rows\) equals the source database", out), stream
    streams = {m.group(1): [int(g.replace(",", "")) for g in m.groups()[1:4]] + [m.group(5)]
               for m in re.finditer(r"^\s+(\w+)\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)\s+(.+)$", out, re.M)}
    # with the customers connector's transaction topic, which its producer writes (issue 58, item 3)
    assert set(streams) == {"employees", "purchases", "user_events", "customers", "accounts", "cdc_transactions"}
    for name, (delivered, good, dead, verdict) in streams.items():
        assert verdict == "every offset once in bronze (good or dead), reasons match", name
        assert good + dead == delivered and good > 0, name
    assert sum(dead for _, _, dead, _ in streams.values()) > 0  # a small demo may leave one stream clean
    assert streams["user_events"][0] > 2000  # the demo's faults re-send some events
    # a clean demo passes every critical expectation of every layer
    assert "quality: PASSED (0 critical" in out
    suites = re.findall(r"^(bronze|silver|gold)\s+\w+\s+(\S+)\s+(\d+)/(\d+)\s+(pass|warn|FAIL)$", out, re.M)
    assert {layer for layer, *_ in suites} == {"bronze", "silver", "gold"} and len(suites) >= 30
    assert all(verdict != "FAIL" for *_, verdict in suites)
    # the CDC oracle ran: the live mirrors were compared with the source databases, row by row
    assert "Skipped:" not in out
    report = re.search(r"quality report: (\S+)", out)
    assert report and Path(report.group(1)) == home / "reports" / "quality" / "index.html"
    assert Path(report.group(1)).is_file()

    # It ends with a maintenance pass (fewer files than before) and the status view.
    assert "==> [6/7] maintenance" in out and "==> [7/7] status" in out
    total = re.search(r"^total: (\d+) table\(s\), data files ([\d,]+) -> ([\d,]+)", out, re.M)
    assert total and int(total.group(1)) >= 15, out[-5000:]
    assert int(total.group(3).replace(",", "")) < int(total.group(2).replace(",", ""))
    status = out[out.index("==> [7/7] status"):]
    for part in ("Streams", "Tables", "dbt", "Quality", "Transactions"):
        assert re.search(rf"^{part}$", status, re.M), part
    # every source transaction of the demo arrived whole, so every one is published
    assert re.search(r"^  silver\.cdc_transactions: [1-9][\d,]* published, none waiting$", status, re.M), status
    assert re.search(r"^  purchases\s+#\d+\s+\S+ \S+\s+[\d,]+\s+\S+/s\s+0\s+[\d,]+\s+\w+", status, re.M), status
    maintained = re.findall(r"^  (\w+\.\w+)\s+[\d,]+\s+[\d,]+\s+.*\d\d:\d\d:\d\dZ, [\d,]+ -> [\d,]+ files",
                            status, re.M)
    assert {"bronze.purchases", "silver.customers_mirror", "gold.customer_activity"} <= set(maintained), status
    assert "last run: dbt build" in status and "last run:" in status.split("Quality")[1]
    assert ": PASSED" in status.split("Quality")[1]

    # dbt docs: the catalog describes the new models' columns. This dbt and the next run in this
    # process, on the demo's lakehouse (tests/integration/dbt_in_process.py): the demo's own
    # `dbt build` above is its own process, as users run it.
    from lakehouse.core.settings import Settings
    from tests.integration.dbt_in_process import run_dbt
    own = Settings.from_env(env)
    run_dbt(own, ["docs", "generate"], tmp_path / "target")
    catalog = json.loads((tmp_path / "target" / "catalog.json").read_text())
    columns = {node["metadata"]["name"]: set(node["columns"]) for node in catalog["nodes"].values()}
    assert {"customer_id", "_seq", "_is_deleted"} <= columns["customers_mirror"]
    assert {"valid_from", "valid_to", "is_current", "op"} <= columns["customers_history"]
    assert {"sales_date", "region", "revenue"} <= columns["sales_by_region_daily"]

    # source freshness: every stream landed rows just now; dead letters are not checked
    run_dbt(own, ["source", "freshness"], tmp_path / "target")
    sources = json.loads((tmp_path / "target" / "sources.json").read_text())
    verdicts = {r["unique_id"].split(".")[-1]: r["status"] for r in sources["results"]
                if r["unique_id"].startswith("source.")}
    assert verdicts == {name: "pass" for name in ("employees", "purchases", "user_events", "customers", "accounts",
                                                  "cdc_transactions")}

    # Nothing it started is still running: broker down, port free, no JVM on this state folder.
    assert port_is_free(port)
    assert not (home / "kafka" / "broker.pid").exists()
    assert processes_mentioning(str(home)) == []


class _FailureRows(HTMLParser):
    """The cell texts of each row of the landing page's failures table."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._in_table = self._in_cell = False

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self._in_table = ("class", "failures") in attrs
        elif self._in_table and tag == "tr":
            self.rows.append([])
        elif self._in_table and tag == "td":
            self._in_cell = True
            self.rows[-1].append("")

    def handle_endtag(self, tag):
        if tag == "table":
            self._in_table = False
        elif tag == "td":
            self._in_cell = False

    def handle_data(self, data):
        if self._in_cell:
            self.rows[-1][-1] += data


def plain(value):
    """A value as both engines' Python rows can be compared: instants in UTC (Spark gives naive
    local times, DuckDB aware ones), structs as dicts, maps as dicts, lists as lists."""
    from datetime import UTC, datetime

    from pyspark.sql import Row

    if isinstance(value, datetime):
        return value.astimezone(UTC)
    if isinstance(value, Row):
        value = value.asDict()
    if isinstance(value, dict):
        return tuple(sorted((key, plain(item)) for key, item in value.items()))
    if isinstance(value, list | tuple):
        return tuple(plain(item) for item in value)
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def test_duckdb_reads_every_silver_and_gold_table_as_spark_does(demo, spark):
    """Every Iceberg table of silver and gold, the live CDC tables included (no tombstones),
    read by DuckDB has Spark's rows. DuckDB reads them through pyiceberg (a scan into Arrow):
    its own `iceberg` extension downloads from extensions.duckdb.org (docs/models.md)."""
    from collections import Counter

    import duckdb
    from pyiceberg.catalog.sql import SqlCatalog

    from lakehouse.core.settings import Settings
    from lakehouse.core.spark import session_on

    _, env, _ = demo
    settings = Settings.from_env(env)
    lake = session_on(spark, settings)
    catalog = SqlCatalog("lake", uri="sqlite:///" + settings.catalog_uri.removeprefix("jdbc:sqlite:"),
                         warehouse=settings.warehouse)
    connection = duckdb.connect()
    for namespace in ("silver", "gold"):
        views = {row.viewName for row in lake.sql(f"show views in {namespace}").collect()}
        spark_tables = {row.tableName for row in lake.sql(f"show tables in {namespace}").collect()} - views
        tables = {name for _, name in catalog.list_tables(namespace)}
        assert tables == spark_tables, namespace
        if namespace == "silver":
            # the live CDC tables are tables now; only the changelogs (staging) are views
            assert {"customers", "accounts"} <= tables and views == {"customers_changelog", "accounts_changelog"}
        else:
            assert {"sales_by_region_daily", "customer_activity", "headcount_by_team_role",
                    "account_balance_summary", "events_by_type_daily"} <= tables
        for name in sorted(tables):
            catalog.load_table(f"{namespace}.{name}").scan().to_duckdb(f"{namespace}_{name}", connection)
            read = connection.sql(f"select * from {namespace}_{name}")
            rows = Counter(plain(row) for row in read.fetchall())
            expected = lake.table(f"{namespace}.{name}")
            assert read.columns == expected.columns, f"{namespace}.{name}"
            assert rows == Counter(plain(tuple(row)) for row in expected.collect()), f"{namespace}.{name}"
            if name in ("customers", "accounts"):
                tombstones = connection.sql(f"select count(*) from {namespace}_{name} where op in ('D', 'T')")
                assert rows and tombstones.fetchall() == [(0,)], f"{namespace}.{name}"


def plant_dead_letters(lake, stream: str, rate: float) -> int:
    """Add dead rows to `stream`'s bronze table until its dead-letter rate is at least `rate`
    (the rate counts the rows ingested within the window: now is in it); returns how many."""
    from datetime import UTC, datetime

    from pyspark.sql import functions as F

    table = lake.table(f"bronze.{stream}")
    landed = table.count()
    dead = table.where("_error_code is not null").count()
    planted = math.ceil((rate * landed - dead) / (1 - rate))
    now = datetime.now(UTC)
    rows = lake.createDataFrame(
        [(stream, 99, offset, now, b"planted \x00 bytes", "CORRUPT_PAYLOAD", "planted by the test", now, -1)
         for offset in range(planted)],
        "_kafka_topic string, _kafka_partition int, _kafka_offset long, _ingested_at timestamp, _raw_value binary, "
        "_error_code string, _error_detail string, _dead_at timestamp, _batch_id long")
    rows.select(*[F.col(f.name) if f.name in rows.columns else F.lit(None).cast(f.dataType).alias(f.name)
                  for f in table.schema.fields]).writeTo(f"bronze.{stream}").append()
    return planted


def quality_run(env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([LAKEHOUSE, "quality", "run", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=900)


def history(settings, run_id: str) -> dict[tuple[str, str, str], dict]:
    """The quality.results rows of a run, read through pyiceberg, by (suite, expectation, severity)."""
    from pyiceberg.catalog.sql import SqlCatalog

    from expectations.history import RESULTS_TABLE

    catalog = SqlCatalog("lake", uri="sqlite:///" + settings.catalog_uri.removeprefix("jdbc:sqlite:"),
                         warehouse=settings.warehouse)
    rows = catalog.load_table(RESULTS_TABLE).scan(row_filter=f"run_id == '{run_id}'").to_arrow().to_pylist()
    return {(r["suite"], r["expectation"], r["column_name"], r["severity"]): r for r in rows}


def test_planted_bad_data_fails_the_right_checks_with_the_right_exit_status(demo, spark):
    """After the demo: a warning exits 0, critical failures exit 1, and both land in the history and the report."""
    from lakehouse.core.settings import Settings
    from lakehouse.core.spark import session_on
    from tests.browser import ARTIFACTS_DIR, render_in_chromium

    home, env, _ = demo
    settings = Settings.from_env(env)
    lake = session_on(spark, settings)
    rate = "expect_column_max_to_be_between"

    # A dead-letter rate above the warning threshold (2 %), below the critical one (10 %).
    plant_dead_letters(lake, "purchases", 0.05)
    warned = quality_run(env, "--layer", "bronze", "--stream", "purchases")
    assert warned.returncode == 0, warned.stdout[-3000:] + warned.stderr[-3000:]
    assert "PASSED: 0 critical failure(s), 1 warning(s)" in warned.stdout
    run_id = re.search(r"run (\S+)$", warned.stdout, re.M).group(1)
    rows = history(settings, run_id)
    warning = rows[("bronze.purchases.dead_letter_rate", rate, "dead_letter_rate", "warning")]
    assert warning["success"] is False and 0.05 <= float(warning["observed_value"]) < 0.10
    assert rows[("bronze.purchases.dead_letter_rate", rate, "dead_letter_rate", "critical")]["success"] is True
    assert sum(not r["success"] for r in rows.values()) == 1

    # Critical: a duplicated silver key, a negative purchase amount, a dead-letter rate above 10 %.
    purchases = lake.table("silver.purchases")
    [duplicate] = purchases.orderBy("transaction_id").limit(1).collect()
    purchases.where(f"transaction_id = '{duplicate.transaction_id}'").writeTo("silver.purchases").append()
    purchases.where(f"transaction_id = '{duplicate.transaction_id}'").limit(1) \
        .withColumn("transaction_id", F.lit("planted-negative")) \
        .withColumn("amount", F.lit(-12.5).cast("decimal(14,2)")).writeTo("silver.purchases").append()
    plant_dead_letters(lake, "user_events", 0.2)

    failed = quality_run(env)
    assert failed.returncode == 1, failed.stdout[-3000:] + failed.stderr[-3000:]
    assert re.search(r"^FAILED: 5 critical failure\(s\), \d+ warning\(s\)", failed.stdout, re.M), failed.stdout[-3000:]
    run_id = re.search(r"run (\S+)$", failed.stdout, re.M).group(1)
    rows = history(settings, run_id)
    assert len(rows) >= 120  # every check of every layer was recorded
    unique = rows[("silver.purchases", "expect_column_values_to_be_unique", "transaction_id", "critical")]
    assert (unique["success"], unique["unexpected_count"]) == (False, 2)
    assert json.loads(unique["unexpected_sample"]) == [duplicate.transaction_id] * 2
    negative = rows[("silver.purchases", "expect_column_values_to_be_between", "amount", "critical")]
    assert (negative["success"], negative["unexpected_count"]) == (False, 1)
    assert [float(v) for v in json.loads(negative["unexpected_sample"])] == [-12.5]
    dead = rows[("bronze.user_events.dead_letter_rate", rate, "dead_letter_rate", "critical")]
    assert dead["success"] is False and float(dead["observed_value"]) >= 0.2
    for stream in ("purchases", "user_events"):  # both rates are above the warning threshold too
        assert rows[(f"bronze.{stream}.dead_letter_rate", rate, "dead_letter_rate", "warning")]["success"] is False
    # gold was built before the planting: its revenue and purchase counts no longer reconcile
    reconciliation = rows[("gold.sales_by_region_daily.reconciliation", "expect_column_values_to_be_null",
                           "mismatch", "critical")]
    assert reconciliation["success"] is False
    # the samples name the measures that differ: the planted row's currency, revenue and count
    # (each sample is "<measure> <currency>, <days checked>: <values>")
    assert {m.split(",")[0] for m in json.loads(reconciliation["unexpected_sample"])} == {
        f"revenue {duplicate.currency}", f"purchases {duplicate.currency}"}
    critical = {key[:2] for key, r in rows.items() if not r["success"] and r["severity"] == "critical"}
    assert critical == {("silver.purchases", "expect_column_values_to_be_unique"),
                        ("silver.purchases", "expect_column_values_to_be_between"),
                        ("bronze.user_events.dead_letter_rate", rate),
                        ("gold.sales_by_region_daily.reconciliation", "expect_column_values_to_be_null"),
                        ("gold.customer_activity.reconciliation", "expect_column_values_to_be_null")}

    # The landing page, opened in headless Chromium, shows the suites and the planted counts.
    page = Path(re.search(r"^Report: (\S+)$", failed.stdout, re.M).group(1))
    assert page == home / "reports" / "quality" / "index.html"
    dom = render_in_chromium(page, ARTIFACTS_DIR / "quality-report.png")
    for suite in ("bronze.purchases.dead_letter_rate", "silver.purchases", "gold.sales_by_region_daily",
                  "bronze.user_events.dead_letter_rate"):
        assert suite in dom.replace("<wbr>", ""), suite
    parser = _FailureRows()
    parser.feed(dom)
    failures = {(cells[1], cells[2], cells[3]): cells for cells in parser.rows if len(cells) == 8}
    unique_row = failures[("silver.purchases", "expect_column_values_to_be_unique", "transaction_id")]
    assert unique_row[0] == "critical" and unique_row[4].startswith("2 of ")
    assert duplicate.transaction_id in unique_row[5]
    negative_row = failures[("silver.purchases", "expect_column_values_to_be_between", "amount")]
    assert negative_row[4].startswith("1 of ") and "-12.5" in negative_row[5]
    # the rate failed both its thresholds: a critical row and a warning row
    assert sorted(cells[0] for cells in parser.rows
                  if cells[1:4] == ["bronze.user_events.dead_letter_rate", rate, "dead_letter_rate"]) == [
        "critical", "warning"]
    assert "FAILED" in dom and "Pass rate over past runs" in dom


def test_every_silver_and_gold_table_is_created_audited(demo):
    """Every model table is created with `write.wap.enabled` (macros/audit_publish.sql,
    audit_table_properties()), so even its first build goes to the run's branch and is published
    only once its tests pass. Seen failing before the silver event models named it in their own
    tblproperties (which replace the project's): their first build wrote main directly."""
    from lakehouse.core.settings import Settings
    from lakehouse.operations.published import PUBLICATIONS_TABLE, read_cut
    from lakehouse.operations.status import pyiceberg_catalog

    _, env, _ = demo
    catalog = pyiceberg_catalog(Settings.from_env(env))
    tables = [".".join(name) for namespace in ("silver", "gold") for name in catalog.list_tables(namespace)]
    seeds = {"silver.country_regions"}  # reference data of the repository, which `dbt seed` writes to main
    unaudited = [name for name in tables if name not in {PUBLICATIONS_TABLE, *seeds}
                 and catalog.load_table(name).properties.get("write.wap.enabled") != "true"]
    assert not unaudited
    # the demo's build published every one of them, and named them (and the seed) in one cut
    cut = read_cut(catalog)
    assert cut is not None and set(cut.tables) == set(tables) - {PUBLICATIONS_TABLE}
