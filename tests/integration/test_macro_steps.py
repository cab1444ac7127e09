"""The named steps of the CDC macros, each on cases of its own: dbt unit tests
(tests/dbt_macro_steps/models/_*__unit_tests.yml) of small models that call one step of
`cdc_history_versions` or `cdc_mirror_changes` on fixtures (issue 57 item 4).

They run in a private dbt project around tests/dbt_macro_steps/models and the project's
macros/, with the project's vars (bronze's column names, which the macros read), on the tests'
Spark session (dbtRunner in this process, dbt-spark's `session` method), as
`dbt test --select test_type:unit` there. A dbt unit test builds nothing: each runs its model's
SQL on its fixtures and compares the rows with the expected ones. The steps of the
materializations, which no dbt unit test reaches, are tests/unit/test_materialization_steps.py's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
STEPS = REPO / "tests" / "dbt_macro_steps" / "models"
SCHEMA = "macro_steps"


def unit_test_names() -> set[str]:
    return {test["name"] for path in STEPS.glob("_*__unit_tests.yml")
            for test in yaml.safe_load(path.read_text())["unit_tests"]}


@pytest.fixture(scope="module")
def project(spark, tmp_path_factory) -> list[str]:
    """The private project's folder flags, parsed once."""
    folder = tmp_path_factory.mktemp("macro-steps")
    spark.sql(f"create namespace if not exists {SCHEMA}")
    (folder / "macros").symlink_to(REPO / "macros")
    (folder / "models").symlink_to(STEPS)
    (folder / "dbt_project.yml").write_text(yaml.safe_dump({
        "name": "macro_steps", "version": "1.0", "config-version": 2, "profile": "macro_steps",
        "model-paths": ["models"], "macro-paths": ["macros"], "flags": {"send_anonymous_usage_stats": False},
        "vars": yaml.safe_load((REPO / "dbt_project.yml").read_text())["vars"],
        "models": {"macro_steps": {"+materialized": "view"}}}))
    # method session: dbt-spark takes the running Spark session (builder.getOrCreate)
    (folder / "profiles.yml").write_text(yaml.safe_dump({"macro_steps": {
        "target": "session",
        "outputs": {"session": {"type": "spark", "method": "session", "host": "localhost", "schema": SCHEMA,
                                "threads": 1}}}}))
    return ["--project-dir", str(folder), "--profiles-dir", str(folder),
            "--target-path", str(folder / "target"), "--log-path", str(folder / "logs")]


def test_every_step_passes_its_unit_tests(project):
    from dbt.cli.main import dbtRunner

    result = dbtRunner().invoke(["test", "--select", "test_type:unit", *project])
    statuses = {r.node.name: (str(r.status), r.message) for r in getattr(result.result, "results", None) or []}
    failed = {name: status for name, status in statuses.items() if status[0] != "pass"}
    assert result.success and not failed, f"{result.exception or ''} {failed}"
    assert set(statuses) == unit_test_names()  # every case ran
