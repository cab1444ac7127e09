"""Great Expectations suites on a real Iceberg table, through the shared Spark session.

The tests run in file order and share the session's GX folder (<home>/gx): the first run
starts from a fresh folder, the later ones reuse what it stored (a run twice in a row).
Each test writes the whole table itself, so none depends on another's data.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from decimal import Decimal

import pytest

from expectations import run_quality
from expectations.history import RESULTS_TABLE
from expectations.mirror import check_mirror
from expectations.runner import TABLE_EXISTS, format_summary
from expectations.suites import SILVER_SUITES, SuiteSpec, expect, not_null, param, project_suites, select_suites
from lakehouse.core.errors import LakehouseError

pytestmark = pytest.mark.integration

# The real silver.user_events expectations, run against a table of the tests' own, so these
# tests never touch the silver table other tests build with dbt in the same catalog.
[REAL_SUITE] = [s for s in SILVER_SUITES if s.table == "silver.user_events"]
TABLE = "silver.qa_user_events"
SUITE = TABLE
QA_SUITES = (dataclasses.replace(REAL_SUITE, table=TABLE, name=TABLE, reads=(TABLE,), stream="qa_user_events"),)
NOT_NULL = "expect_column_values_to_not_be_null"
UNIQUE = "expect_column_values_to_be_unique"
IN_SET = "expect_column_values_to_be_in_set"

SCHEMA = (
    "event_id string, customer_id bigint, session_id string, event_type string, "
    "event_at timestamp, page string, device string, duration_ms int, _rescued string, "
    "_kafka_topic string, _kafka_partition int, _kafka_offset bigint, "
    "_kafka_timestamp timestamp, _ingested_at timestamp"
)
T0 = dt.datetime(2024, 5, 1, 12, 0, 0)


def event(n: int, event_type: str, *, event_id: str | None = None,
          customer_id: int | None = 1000) -> tuple:
    at = T0 + dt.timedelta(seconds=n)
    return (event_id or f"evt-{n:04d}", customer_id, f"sess-{n % 3}", event_type, at,
            f"/page/{n}", "mobile", 100 + n, None, "user_events", 0, n, at, at)


# One row of every allowed event type, plus a second page_view: clean by every rule.
CLEAN = [event(n, t) for n, t in enumerate(
    ["page_view", "search", "add_to_cart", "checkout", "login", "logout", "page_view"])]


def write_events(spark, rows: list[tuple]) -> None:
    spark.createDataFrame(rows, SCHEMA).writeTo(TABLE).using("iceberg").createOrReplace()
    assert spark.table(TABLE).count() == len(rows)  # the write really landed


@pytest.fixture(scope="module")
def session_identity(spark):
    """What must be unchanged after every GX run: the Python object and its JVM context."""
    return spark, spark.sparkContext.applicationId, spark._jsparkSession.hashCode()


@pytest.fixture(scope="module", autouse=True)
def _own_table(spark):
    yield
    spark.sql(f"drop table if exists {TABLE}")


def test_clean_table_passes_and_builds_data_docs(spark, settings, session_identity):
    write_events(spark, CLEAN)

    report = run_quality(spark, settings, layer="silver", suites=QA_SUITES)

    assert [s.name for s in report.suites] == [SUITE]
    results = report.suites[0].results
    assert [(r.expectation, r.column, r.severity) for r in results] == [
        (NOT_NULL, "event_id", "critical"),
        (UNIQUE, "event_id", "critical"),
        (NOT_NULL, "event_type", "critical"),
        (IN_SET, "event_type", "critical"),
        (NOT_NULL, "event_at", "critical"),
        (NOT_NULL, "customer_id", "warning"),
    ]
    assert all(r.success for r in results), format_summary(report)
    # GX really looked at the rows: every check counted all of them and found nothing wrong.
    assert {(r.element_count, r.unexpected_count) for r in results} == {(len(CLEAN), 0)}
    assert (report.passed, report.critical_failures, report.warning_failures) == (True, 0, 0)

    assert report.docs_index.name == "index.html"
    assert report.docs_index.is_file()
    assert report.docs_index.is_relative_to(settings.home / "gx")
    assert SUITE in report.docs_index.read_text()

    summary = format_summary(report)
    assert summary.splitlines()[0].split() == ["LAYER", "STREAM", "SUITE", "CHECKS", "VERDICT"]
    assert summary.splitlines()[2].split() == ["silver", "qa_user_events", SUITE, "6/6", "pass"]
    assert "PASSED: 0 critical failure(s), 0 warning(s) in 6 check(s) of 1 suite(s)" in summary
    assert "Failed checks:" not in summary


def test_duplicate_id_and_unknown_type_are_critical_failures(spark, settings):
    duplicate = event(100, "search", event_id=CLEAN[2][0])  # same id as an existing row
    unknown = event(101, "refund")
    write_events(spark, [*CLEAN, duplicate, unknown])

    report = run_quality(spark, settings, layer="silver", suites=QA_SUITES)

    assert report.passed is False
    assert report.critical_failures == 2
    assert report.warning_failures == 0
    failed = {(r.expectation, r.column) for r in report.failures()}
    assert failed == {(UNIQUE, "event_id"), (IN_SET, "event_type")}

    unique = report.result(SUITE, UNIQUE, "event_id")
    assert unique.unexpected_count == 2  # both rows sharing the id
    assert unique.unexpected_sample == (CLEAN[2][0], CLEAN[2][0])
    assert unique.element_count == len(CLEAN) + 2

    in_set = report.result(SUITE, IN_SET, "event_type")
    assert in_set.unexpected_count == 1
    assert in_set.unexpected_sample == ("refund",)

    summary = format_summary(report)
    assert "FAILED: 2 critical failure(s), 0 warning(s)" in summary
    assert summary.splitlines()[2].split()[-2:] == ["4/6", "FAIL"]
    unique_line = next(line for line in summary.splitlines() if UNIQUE in line)
    assert unique_line.split()[:5] == ["critical", SUITE, UNIQUE, "event_id", "2"]
    assert CLEAN[2][0] in unique_line  # the sample names the duplicated id


def test_null_customer_is_only_a_warning(spark, settings):
    write_events(spark, [*CLEAN, event(200, "login", customer_id=None)])

    report = run_quality(spark, settings, layer="silver", suites=QA_SUITES)

    assert report.passed is True
    assert report.critical_failures == 0
    assert report.warning_failures == 1
    [warning] = report.failures()
    assert (warning.expectation, warning.column, warning.severity) == (NOT_NULL, "customer_id", "warning")
    assert warning.unexpected_count == 1
    assert "PASSED: 0 critical failure(s), 1 warning(s)" in format_summary(report)


def test_missing_table_is_reported_as_a_critical_failure(spark, settings):
    table = "silver.qa_never_created"
    assert not spark.catalog.tableExists(table)
    missing = SuiteSpec(layer="silver", stream="qa_never_created", table=table,
                        expectations=(not_null("id"),))

    report = run_quality(spark, settings, stream="qa_never_created", suites=(*project_suites(), missing))

    assert [s.name for s in report.suites] == [table]
    [check] = report.results
    assert (check.expectation, check.severity, check.success) == (TABLE_EXISTS, "critical", False)
    assert table in (check.message or "") and "does not exist" in (check.message or "")
    assert (report.passed, report.critical_failures) == (False, 1)
    assert report.docs_index.is_file()


def test_selection_that_matches_nothing_is_an_error(spark, settings):
    with pytest.raises(LakehouseError, match="no quality suite"):
        select_suites(layer="gold", stream="dead_letters")
    with pytest.raises(LakehouseError, match="unknown layer"):
        run_quality(spark, settings, layer="platinum")


def test_every_result_is_appended_to_the_history_table(spark, settings):
    from pyiceberg.catalog.sql import SqlCatalog

    write_events(spark, [*CLEAN, event(300, "refund")])
    report = run_quality(spark, settings, layer="silver", suites=QA_SUITES)

    assert report.recorded_rows == len(report.results) == 6
    rows = spark.table(RESULTS_TABLE).where(f"run_id = '{report.run_id}'").collect()
    assert {(r.suite, r.expectation, r.column_name, r.severity, r.success, r.unexpected_count) for r in rows} == {
        (r.suite, r.expectation, r.column, r.severity, r.success, r.unexpected_count) for r in report.results}
    failed = [r for r in rows if not r.success]
    assert [(r.expectation, r.unexpected_count, r.unexpected_sample) for r in failed] == [(IN_SET, 1, '["refund"]')]
    assert {(r.layer, r.stream, r.table_name) for r in rows} == {("silver", "qa_user_events", TABLE)}

    # the same rows through pyiceberg: an ordinary Iceberg table anyone can read
    catalog = SqlCatalog("lake", uri="sqlite:///" + settings.catalog_uri.removeprefix("jdbc:sqlite:"),
                         warehouse=settings.warehouse)
    history = catalog.load_table(RESULTS_TABLE).scan(row_filter=f"run_id == '{report.run_id}'").to_arrow()
    assert history.num_rows == 6
    assert sorted(history.column("success").to_pylist()) == [False, True, True, True, True, True]

    # and the landing page, rewritten from that history, shows the failure
    assert report.report_path and report.report_path.is_file()
    page = report.report_path.read_text()
    assert SUITE in page and "refund" in page and report.run_id in page


def test_parameters_fill_in_suites_and_a_missing_one_skips_its_check(spark, settings):
    write_events(spark, CLEAN)
    counted = SuiteSpec(
        layer="silver", stream="qa_counts", table=TABLE, name=f"{TABLE}.counts",
        # a query suite, as the dead-letter rates and reconciliations are
        query=f"select count(*) as events, count_if(_ingested_at >= {{dead_letter_window_start}}) as recent "
              f"from {TABLE}",
        expectations=(
            expect("column_max_to_be_between", column="events", max_value=param("dead_letter_rate_critical")),
            expect("table_row_count_to_equal", value=param("qa_never_given")),
            expect("column_values_to_be_between", "warning", column="recent", min_value=1),
        ))
    report = run_quality(spark, settings, stream="qa_counts", suites=(counted,), record=False)

    [suite] = report.suites
    # 7 events against the critical dead-letter rate (0.10): fails, and shows the observed value
    max_check = report.result(counted.name, "expect_column_max_to_be_between", "events")
    assert (max_check.success, max_check.observed_value) == (False, len(CLEAN))
    # the test events were "ingested" in 2024, before the dead-letter window: none is recent
    recent = report.result(counted.name, "expect_column_values_to_be_between", "recent")
    assert (recent.success, recent.severity, recent.unexpected_count) == (False, "warning", 1)
    # a parameter the run has no value for: its check is skipped, and said so
    assert [r.expectation for r in suite.results] == [
        "expect_column_max_to_be_between", "expect_column_values_to_be_between"]
    [note] = suite.skipped
    assert "expect_table_row_count_to_equal" in note and "no value for parameter qa_never_given" in note
    assert "Skipped:" in format_summary(report)
    assert report.report_path is None and report.recorded_rows == 0


class MemorySource:
    """A source table held in memory, spelled as the live table spells it (a MirrorSource)."""

    table = "qa_customers"

    def __init__(self, rows: list[dict]):
        self._rows = rows

    def rows(self) -> dict:
        return {row["customer_id"]: dict(row) for row in self._rows}

    def spelled(self, live_rows: list[dict]) -> dict:
        return {row["customer_id"]: row for row in live_rows}


def write_mirror(spark, rows: list[dict]) -> None:
    spark.createDataFrame(rows, MIRROR_SCHEMA).writeTo(MIRROR).using("iceberg").createOrReplace()


MIRROR = "silver.qa_customers"
MIRROR_SCHEMA = "customer_id bigint, email string, tier string, balance decimal(10,2)"
[REAL_SOURCE_SUITE] = [s for s in SILVER_SUITES if s.name == "silver.customers.source"]
SOURCE_SUITE = dataclasses.replace(REAL_SOURCE_SUITE, stream="qa_customers", table=MIRROR, name=f"{MIRROR}.source",
                                   reads=(MIRROR,))
IS_NULL = "expect_column_values_to_be_null"


def test_a_mirror_with_the_source_count_but_a_value_changed_fails_naming_the_key(spark, settings):
    truth = [{"customer_id": n, "email": f"c{n}@example.com", "tier": "gold", "balance": Decimal(f"{n}.50")}
             for n in range(1, 9)]
    changed = [dict(row) for row in truth]
    changed[4]["email"] = "someone.else@example.com"  # key 5
    changed[6]["balance"] = Decimal("0.00")  # key 7
    write_mirror(spark, changed)
    source = MemorySource(truth)
    # what the check compared before: as many live rows as the source has, so it passed
    assert spark.table(MIRROR).count() == len(source.rows())

    report = run_quality(spark, settings, stream="qa_customers", suites=(SOURCE_SUITE,),
                         sources={"qa_customers": source})

    check = report.result(SOURCE_SUITE.name, IS_NULL, "difference")
    assert (check.success, check.severity, check.unexpected_count, check.element_count) == (False, "critical", 2, 8)
    assert check.unexpected_sample == ("5: values differ", "7: values differ")
    assert report.passed is False
    assert "5: values differ" in format_summary(report)
    assert "5: values differ" in report.report_path.read_text()  # the landing page names the key
    # the same comparison as the demo and the chaos tests run it
    mirror = check_mirror(spark, source)
    assert (mirror.equal, mirror.source_rows, mirror.mirror_rows) == (False, 8, 8)
    assert mirror.first_differing == ((5, "values differ"), (7, "values differ"))

    # a missing and an extra key, the count still equal
    write_mirror(spark, [*truth[:2], *truth[3:], {**truth[0], "customer_id": 99}])
    report = run_quality(spark, settings, stream="qa_customers", suites=(SOURCE_SUITE,),
                         sources={"qa_customers": source}, record=False)
    assert report.result(SOURCE_SUITE.name, IS_NULL, "difference").unexpected_sample == (
        "3: missing from the mirror", "99: not in the source")

    write_mirror(spark, truth)
    report = run_quality(spark, settings, stream="qa_customers", suites=(SOURCE_SUITE,),
                         sources={"qa_customers": source}, record=False)
    check = report.result(SOURCE_SUITE.name, IS_NULL, "difference")
    assert (check.success, check.unexpected_count, check.element_count) == (True, 0, 8)
    assert check_mirror(spark, source).equal

    # no source database for the stream: the suite is skipped, and says so
    report = run_quality(spark, settings, stream="qa_customers", suites=(SOURCE_SUITE,), record=False)
    [suite] = report.suites
    assert suite.results == () and len(suite.skipped) == 1 and "no oracle" in suite.skipped[0]
    spark.sql(f"drop table {MIRROR}")


def test_project_suites_cover_every_layer_and_stream():
    suites = project_suites()
    names = [s.name for s in suites]
    assert len(names) == len(set(names))  # suite names are GX asset and checkpoint names
    by_layer = {layer: {s.stream for s in suites if s.layer == layer} for layer in ("bronze", "silver", "gold")}
    streams = {"employees", "purchases", "user_events", "customers", "accounts"}
    # the customers connector's transaction topic: a bronze stream and a silver model, no gold
    transactions = {"cdc_transactions"}
    assert by_layer["bronze"] == streams | transactions | {"dead_letters"}
    assert by_layer["silver"] == streams | transactions | {"reference"}
    assert by_layer["gold"] == streams
    for stream in streams | transactions:  # a dead-letter rate per stream, warning below critical
        [rate] = [s for s in suites if s.name == f"bronze.{stream}.dead_letter_rate"]
        assert [(e.severity, e.kwargs.get("max_value")) for e in rate.expectations] == [
            ("warning", param("dead_letter_rate_warn")), ("critical", param("dead_letter_rate_critical")),
            ("critical", None)]  # and not every record of the window dead, whatever the rates
    assert all(s.query and len(s.reads) >= 2 for s in suites if s.name.endswith(".reconciliation"))


def test_spark_session_survives_gx(spark, session_identity):
    from pyspark.sql import SparkSession

    same_object, app_id, jvm_session = session_identity
    assert spark is same_object
    assert SparkSession.getActiveSession() is spark
    assert spark.sparkContext.applicationId == app_id  # not stopped and restarted
    assert spark._jsparkSession.hashCode() == jvm_session
    assert spark.range(3).count() == 3
    # The Iceberg catalog is still the session's (a restarted bare session would lack it).
    assert spark.conf.get("spark.sql.defaultCatalog") == "lake"


def test_a_stream_whose_records_are_all_dead_fails_a_critical_check_whatever_the_rates(spark, settings):
    """Issue 56: a key type the ingestion could not read made every record of a real table a dead
    letter, the mirror empty and its data tests green. Rates set to tolerate anything (1.0), the
    bronze suite still fails, critically: not one record of the window read. One good row, or no
    record at all in the window, passes."""
    from expectations.suites import bronze_suites
    from lakehouse.contracts.streams import load_pipeline

    table = "bronze.qa_all_dead"
    spec = dataclasses.replace(load_pipeline()["customers"], name="qa_all_dead", bronze_table=table)
    rate = next(s for s in bronze_suites(spec) if s.name.endswith(".dead_letter_rate"))
    lenient = dataclasses.replace(settings, quality_dead_letter_rate_warn=1.0, quality_dead_letter_rate_critical=1.0)
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)

    def run(codes: list[str | None], at: dt.datetime = now):
        spark.createDataFrame([(code, at) for code in codes], "_error_code string, _ingested_at timestamp") \
            .writeTo(table).using("iceberg").createOrReplace()
        return run_quality(spark, lenient, layer="bronze", suites=(rate,), record=False)

    try:
        report = run(["INVALID_CDC_ENVELOPE"] * 5)
        assert (report.passed, report.critical_failures) == (False, 1)
        check = report.result(rate.name, "expect_column_values_to_be_between", "good_rows")
        assert (check.severity, check.success, check.unexpected_sample) == ("critical", False, (0,))
        assert [r.success for r in report.results if r.column == "dead_letter_rate"] == [True, True]
        assert run(["INVALID_CDC_ENVELOPE"] * 5 + [None]).passed
        assert run(["INVALID_CDC_ENVELOPE"] * 5, at=now - dt.timedelta(days=30)).passed  # none in the window
    finally:
        spark.sql(f"drop table if exists {table}")
