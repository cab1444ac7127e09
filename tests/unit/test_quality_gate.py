"""The quality gate's choices, without a lakehouse (lakehouse/operations/quality_gate.py;
tests/integration/test_audit_publish.py runs it on real tables): which suites gate which
tables, which tables a run ran, what `lakehouse dbt` starts, and that a held run is published
only when no critical check failed and kept otherwise, through dbt's own run-operations."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest

from expectations.runner import ExpectationResult, QualityReport, SuiteResult
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings
from lakehouse.operations import dbt as dbt_ops
from lakehouse.operations import quality_gate as gate


def names(suites) -> set[str]:
    return {suite.name for suite in suites}


def test_the_suites_of_the_tables_a_run_wrote_gate_it_and_no_others():
    found = names(gate.gate_suites({"silver.purchases"}))
    assert found == {"silver.purchases"}, found  # not gold's reconciliation: gold was not rebuilt
    found = names(gate.gate_suites({"silver.purchases", "gold.sales_by_region_daily"}))
    assert {"silver.purchases", "gold.sales_by_region_daily", "gold.sales_by_region_daily.reconciliation"} <= found
    # a mirror's comparison with its live source database measures lag, not the build
    found = names(gate.gate_suites({"silver.customers"}))
    assert "silver.customers" in found and "silver.customers.source" not in found, found
    assert gate.gate_suites({"silver.a_model_without_suites"}) == []


def node_result(name: str, status: str = "success", materialized: str = "incremental", kind: str = "model"):
    node = SimpleNamespace(resource_type=kind, schema=name.split(".")[0], alias=name.split(".")[1], name=name,
                           config=SimpleNamespace(materialized=materialized))
    return SimpleNamespace(node=node, status=status)


def test_the_tables_a_run_ran_are_its_successful_model_and_seed_tables_in_dbt_order():
    result = SimpleNamespace(result=SimpleNamespace(results=[
        node_result("silver.country_regions", kind="seed"),
        node_result("silver.purchases"),
        node_result("silver.purchases_view", materialized="view"),
        node_result("silver.broken", status="error"),
        SimpleNamespace(node=SimpleNamespace(resource_type="test", name="unique_x"), status="pass"),
        node_result("gold.sales_by_region_daily"),
    ]))
    assert gate.ran_tables(result) == ["silver.country_regions", "silver.purchases", "gold.sales_by_region_daily"]


def test_lakehouse_dbt_runs_a_writing_command_through_the_gate_and_a_reading_one_as_dbt():
    assert dbt_ops.dbt_command_line(["build", "-s", "x"]) == [sys.executable, "-m", "lakehouse.operations.quality_gate",
                                                              "build", "-s", "x"]
    assert dbt_ops.dbt_command_line(["test"])[1:] == ["test"] and "quality_gate" not in " ".join(
        dbt_ops.dbt_command_line(["test"]))
    assert dbt_ops.dbt_env(Settings.from_env({}))[gate.GATE_ENV] == gate.HOLD  # on by default
    assert dbt_ops.dbt_env(Settings.from_env({gate.GATE_ENV: "off"}))[gate.GATE_ENV] == "off"
    with pytest.raises(LakehouseError, match="PUBLICATION_GATE must be on or off"):
        Settings.from_env({gate.GATE_ENV: "maybe"})


def report(*failures: tuple[str, str]) -> QualityReport:
    results = [ExpectationResult(suite="silver.purchases", expectation="expect_column_values_to_not_be_null",
                                 column="transaction_id", severity="critical", success=True)]
    results += [ExpectationResult(suite="silver.purchases", expectation=expectation, column=column,
                                  severity=severity, success=False) for expectation, column, severity in failures]
    suite = SuiteResult("silver.purchases", "silver", "purchases", "silver.purchases", tuple(results))
    return QualityReport("run", None, (suite,), None, 1.0, report_path="/r/index.html")


@pytest.fixture
def held(monkeypatch):
    """A run that held silver.purchases on its branch; the suites' verdict set by each test."""
    verdict = {}
    monkeypatch.setattr(gate, "gate_session", lambda settings: "spark")
    monkeypatch.setattr(gate, "held_tables", lambda spark, ran, branch: ["silver.purchases"])

    def run_quality(session, settings, suites, branch):
        verdict["branch"], verdict["suites"] = branch, names(suites)
        return verdict["report"]

    import expectations.runner
    monkeypatch.setattr(expectations.runner, "run_quality", run_quality)
    invoked = []

    def invoke(args):
        invoked.append(args)
        return SimpleNamespace(success=True, exception=None)

    result = SimpleNamespace(success=True, result=SimpleNamespace(results=[node_result("silver.purchases")]))
    return verdict, invoked, lambda: gate.check_and_publish(invoke, Settings.from_env({}), result, "ab-12", ["-x"])


def test_a_held_run_whose_critical_checks_pass_is_published_by_the_macro(held):
    verdict, invoked, check = held
    verdict["report"] = report(("expect_column_values_to_be_in_set", "currency", "warning"))
    outcome = check()
    assert verdict == {"branch": "audit_ab_12", "suites": {"silver.purchases"}, "report": verdict["report"]}
    assert outcome.published and outcome.error is None
    [args] = invoked
    assert args[:2] == ["run-operation", "audit_publish_held"] and args[-1] == "-x"
    assert "--no-write-json" in args  # run_results.json stays the run's (`lakehouse status` reads it)
    assert json.loads(args[3]) == {"branch": "audit_ab_12", "ran": ["silver.purchases"]}


def test_a_held_run_whose_critical_check_fails_is_kept_with_one_line_naming_it(held):
    verdict, invoked, check = held
    verdict["report"] = report(("expect_column_values_to_be_between", "amount", "critical"))
    outcome = check()
    assert not outcome.published and outcome.said
    assert outcome.error.startswith(
        "not published: 1 critical quality check(s) failed on the branch "
        "(silver.purchases: expect_column_values_to_be_between(amount); report /r/index.html)")
    [args] = invoked
    assert args[:2] == ["run-operation", "audit_keep_held"]
    assert json.loads(args[3])["reason"] in outcome.error


def test_with_the_gate_off_the_macro_published_and_the_gate_does_nothing(held, monkeypatch):
    verdict, invoked, check = held
    result = SimpleNamespace(success=True, result=SimpleNamespace(results=[node_result("silver.purchases")]))
    off = Settings.from_env({gate.GATE_ENV: "off"})
    assert gate.check_and_publish(lambda args: invoked.append(args), off, result, "ab") is None
    assert invoked == [] and "branch" not in verdict


def test_a_run_that_failed_or_held_nothing_is_not_the_gates(held, monkeypatch):
    verdict, invoked, check = held
    monkeypatch.setattr(gate, "held_tables", lambda spark, ran, branch: [])
    assert check() is None and invoked == [] and "branch" not in verdict
    failed = SimpleNamespace(success=False, result=None)
    assert gate.check_and_publish(lambda args: None, Settings.from_env({}), failed, "ab") is None


def test_the_gates_run_operations_carry_the_runs_target_profile_and_vars():
    args = ["build", "-s", "user_events+", "--target", "cluster", "--vars", "{a: 1}", "--full-refresh",
            "--profiles-dir=/p", "-t", "x"]
    assert gate.carried_options(args) == ["--target", "cluster", "--vars", "{a: 1}", "--profiles-dir=/p", "-t", "x"]
    assert gate.carried_options(["run"]) == []


def test_the_gates_process_reads_the_same_lakehouse_as_the_process_that_started_it():
    """`lakehouse dbt` hands its settings to the process that runs dbt and the gate through the
    environment: all of them, not only those profiles.yml reads (a REST catalog's kind was lost)."""
    settings = Settings.from_env({"LAKEHOUSE_CATALOG_TYPE": "rest", "LAKEHOUSE_CATALOG_URI": "http://127.0.0.1:1",
                                  "LAKEHOUSE_QUALITY_MAX_EVENT_AGE_DAYS": "7"})
    assert Settings.from_env(dbt_ops.dbt_env(settings)) == settings


def test_a_held_table_no_suite_checks_is_named_not_passed_over(held, monkeypatch):
    verdict, invoked, check = held
    monkeypatch.setattr(gate, "held_tables", lambda spark, ran, branch: ["silver.purchases", "silver.mine"])
    verdict["report"] = report()
    outcome = check()
    assert outcome.published and outcome.unchecked == ("silver.mine",)
