"""The quality gate: a dbt run's critical checks, between its audit branch and main.

`lakehouse dbt` runs every dbt command that writes in a process of its own that invokes dbt
in-process (dbtRunner, as `lakehouse dbt loop` does), with LAKEHOUSE_PUBLICATION_GATE=on: a run
whose models and dbt tests passed and that changed rows then keeps its audit branch instead of
publishing it (macros/audit_publish.sql, "held for the quality checks"). Here the quality suites
of every table the run wrote are validated on that branch (`spark.wap.branch`), in dbt's own
Spark session when dbt runs one (no second JVM); when no critical check failed, the
run-operation `audit_publish_held` publishes it with the same macros as any publication (the
fence, the fast-forward, the staged positions, the cut); otherwise `audit_keep_held` keeps the
branch for inspection and one line names the failed checks. A dbt started any other way
publishes nothing it changed (the macro keeps the branch and says so). With the setting
`publication_gate` off (LAKEHOUSE_PUBLICATION_GATE=off) a run is published once its models and
dbt tests pass, as before the gate, and the suites check it after.

Which suites gate: those whose own table the run wrote (a gold reconciliation runs when its
gold table was rebuilt, and reads the silver it reconciles on the branch too, when the run
wrote that). Not the comparisons with a live source database (the `.source` suites): the
source moves on while a build is checked, so they measure the lakehouse's lag, not the build;
`lakehouse quality run` keeps them.

`python -m lakehouse.operations.quality_gate DBT_ARGS` is what `lakehouse dbt` starts (holding
the dbt-tables lock for the whole of it); it is not a command of its own.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakehouse.core.settings import Settings

if TYPE_CHECKING:
    from expectations.runner import QualityReport
    from expectations.suites import SuiteSpec

log = logging.getLogger("lakehouse.quality_gate")

GATE_ENV = "LAKEHOUSE_PUBLICATION_GATE"  # the setting publication_gate; macros/audit_publish.sql reads it
HOLD = "on"
# set by the processes that run the gate after dbt (main, `lakehouse dbt loop`): a dbt without it
# holds nothing it could not publish, it keeps its branch and fails (macros/audit_publish.sql)
RUNNER_ENV = "LAKEHOUSE_GATE_RUNNER"
BRANCH_PREFIX = "audit_"  # macros/audit_publish.sql, audit_branch()


def audit_branch(invocation_id: str) -> str:
    """The audit branch of the dbt invocation `invocation_id` (macros/audit_publish.sql)."""
    return BRANCH_PREFIX + invocation_id.replace("-", "_")


def gate_suites(written: Collection[str], suites: Sequence[SuiteSpec] | None = None) -> list[SuiteSpec]:
    """The suites that gate a run that wrote the tables `written` (see the module's doc)."""
    from expectations.suites import project_suites

    suites = project_suites() if suites is None else suites
    return [suite for suite in suites if suite.table in written and not suite.compares_with_source]


def ran_tables(result: Any) -> list[str]:
    """`schema.table` of every model and seed table a dbt invocation's result ran with success,
    in the order dbt ran them (the macro's audit_ran(), without the views)."""
    ran = []
    for node_result in getattr(result.result, "results", None) or []:
        node = getattr(node_result, "node", None)
        if (node is not None and getattr(node, "resource_type", None) in ("model", "seed")
                and str(node_result.status) == "success"
                and node.config.materialized not in ("view", "ephemeral")):
            ran.append(f"{node.schema}.{node.alias or node.name}")
    return ran


@dataclass(frozen=True)
class GateOutcome:
    branch: str
    held: tuple[str, ...]  # the tables the run wrote to its branch
    report: QualityReport | None  # None: no suite checks these tables
    published: bool
    error: str | None = None  # why it was not published, one line
    said: bool = False  # dbt's output has the line already (the macro that kept the branch said it)
    unchecked: tuple[str, ...] = ()  # held tables no suite checks: dbt's tests alone gate them

    @property
    def failed_checks(self) -> list[str]:
        from expectations.suites import CRITICAL

        if self.report is None:
            return []
        return sorted({f"{r.suite}: {r.expectation}({r.column or ''})" for r in self.report.failures(CRITICAL)})


def gate_session(settings: Settings):
    """dbt's Spark session when it runs one in this process (method: session); otherwise (dbt
    sends its SQL to a Thrift server) a local one, which takes no cluster cores."""
    from pyspark import SparkContext

    from lakehouse.core.spark import get_spark, is_local_master

    if SparkContext._active_spark_context is None and not is_local_master(settings.spark_master):
        settings = dataclasses.replace(settings, spark_master="local[2]")
    return get_spark(settings, app_name="lakehouse-quality-gate")


def held_tables(spark, ran: Sequence[str], branch: str) -> list[str]:
    from lakehouse.core.sql import sql_string

    return [table for table in ran
            if spark.sql(f"select count(*) from {table}.refs where name = {sql_string(branch)}").first()[0]]


def check_and_publish(invoke: Callable[[list[str]], Any], settings: Settings, result: Any,
                      invocation_id: str, project: Sequence[str] = ()) -> GateOutcome | None:
    """After a gated dbt invocation (`result`, `invocation_id`): validate what it held and publish
    it or keep it, with `invoke` (a dbtRunner's, so in the same process and Spark session) given
    `project` (the run's options: `carried_options`); None when the run held nothing (it failed,
    wrote nothing new, or published it already)."""
    if not result.success or settings.publication_gate != HOLD:  # off: the macro published it
        return None
    branch = audit_branch(invocation_id)
    ran = ran_tables(result)
    if not ran:
        return None
    spark = gate_session(settings)
    held = held_tables(spark, ran, branch)
    if not held:
        return None
    from expectations.runner import run_quality

    suites = gate_suites(held)
    log.info("quality gate: %d suite(s) on branch %s of %s", len(suites), branch, ", ".join(held))
    report = run_quality(spark, settings, suites=suites, branch=branch) if suites else None
    unchecked = tuple(table for table in held if table not in {suite.table for suite in suites})
    if unchecked:  # said, not passed over: a model of the user's own that no suite names
        log.warning("quality gate: no quality suite checks %s: dbt's tests alone gate it", ", ".join(unchecked))
    outcome = GateOutcome(branch, tuple(held), report, published=report is None or report.passed,
                          unchecked=unchecked)
    if outcome.published:
        done = invoke(["run-operation", "audit_publish_held", "--args",
                       json.dumps({"branch": branch, "ran": ran}), *OPERATION_OPTIONS, *project])
        if not done.success:
            return dataclasses.replace(outcome, published=False, error=(
                f"not published: publishing branch {branch} failed: {_first_line(done.exception)}"))
        return outcome
    failed = outcome.failed_checks
    reason = (f"{len(failed)} critical quality check(s) failed on the branch ({'; '.join(failed)}; "
              f"report {report.report_path})")
    kept = invoke(["run-operation", "audit_keep_held", "--args",
                   json.dumps({"branch": branch, "ran": ran, "reason": reason}), *OPERATION_OPTIONS, *project])
    note = "" if kept.success else f" (keeping the branch failed too: {_first_line(kept.exception)})"
    return dataclasses.replace(outcome, error=f"not published: {reason}{note}", said=kept.success)


# the run's artifacts (run_results.json, which `lakehouse status` reads) stay the run's
OPERATION_OPTIONS = ("--no-write-json",)
# dbt's options that say where and with what the run ran: the gate's run-operations take them
# too (a run through the Thrift server is published there, with the run's vars)
CARRIED_OPTIONS = frozenset({"--target", "-t", "--profile", "--vars", "--project-dir", "--profiles-dir",
                             "--target-path"})


def carried_options(dbt_args: Sequence[str]) -> list[str]:
    """The options of `dbt_args` a run-operation of the same run needs (CARRIED_OPTIONS), in both
    forms: `--target cluster` and `--target=cluster`."""
    carried = []
    for number, arg in enumerate(dbt_args):
        name = arg.split("=", 1)[0]
        if name in CARRIED_OPTIONS:
            carried += [arg] if "=" in arg else list(dbt_args[number:number + 2])
    return carried


def _first_line(exception: BaseException | None) -> str:
    text = str(exception or "see dbt's lines above").strip()
    return text.splitlines()[0][:300] if text else type(exception).__name__


def main(argv: list[str]) -> int:
    """dbt `argv` in this process, then the gate; dbt's exit status (0, 1 failed, 2 error), 1 when
    the gate kept the run's branch."""
    from dbt.cli.main import dbtRunner
    from dbt_common.invocation import get_invocation_id

    from expectations.runner import format_summary

    settings = Settings.from_env()
    os.environ[RUNNER_ENV] = "1"
    # parsed once, for the run and the gate's run-operation (each would parse the project again,
    # seconds each), as `lakehouse dbt loop` does; a parse that fails is the run's to report
    parsed = dbtRunner().invoke(["parse", "--quiet", *carried_options(argv)])
    runner = dbtRunner(manifest=parsed.result) if parsed.success else dbtRunner()
    result = runner.invoke(argv)
    if result.exception is not None and not result.success:
        return 2
    outcome = check_and_publish(runner.invoke, settings, result, get_invocation_id(), carried_options(argv))
    if outcome is not None and outcome.report is not None:
        print(f"quality checks of branch {outcome.branch} ({', '.join(outcome.held)}):\n"
              f"{format_summary(outcome.report)}", flush=True)
    if outcome is not None and outcome.unchecked:
        print(f"no quality suite checks {', '.join(outcome.unchecked)}: dbt's tests alone gated it", flush=True)
    if outcome is not None and outcome.error:
        if not outcome.said:
            print(outcome.error, flush=True)
        return 1
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
