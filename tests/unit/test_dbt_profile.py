"""profiles.yml is generated from the Spark session module; the two must never drift."""

import jinja2
import yaml

from lakehouse.core.settings import Settings
from lakehouse.core.spark import PACKAGE_DIR, render_dbt_profile, spark_conf
from tests.conftest import REPO_ROOT


def test_committed_profile_is_the_generated_one():
    assert (REPO_ROOT / "profiles.yml").read_text() == render_dbt_profile(), (
        "profiles.yml is stale: run `lakehouse dbt-profile > profiles.yml`"
    )


def _render(value: str, env: dict) -> str:
    def env_var(name, default=None):
        if name in env:
            return env[name]
        if default is None:
            raise KeyError(name)
        return default

    return jinja2.Environment().from_string(value).render(env_var=env_var)


def test_profile_renders_to_the_same_spark_conf_as_the_jobs(tmp_path):
    env = {"PWD": str(REPO_ROOT), "LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_SPARK_MASTER": "local[1]"}
    profile = yaml.safe_load((REPO_ROOT / "profiles.yml").read_text())
    output = profile["lakehouse"]["outputs"][profile["lakehouse"]["target"]]
    assert output["method"] == "session"
    rendered = {key: _render(value, env) for key, value in output["server_side_parameters"].items()}
    expected = spark_conf(Settings.from_env(env).spark_inputs(), str(PACKAGE_DIR))
    assert rendered == expected


def test_profile_defaults_to_the_state_folder_under_the_project_root():
    profile = yaml.safe_load((REPO_ROOT / "profiles.yml").read_text())
    params = profile["lakehouse"]["outputs"]["local"]["server_side_parameters"]
    uri = _render(params["spark.sql.catalog.lake.uri"], {"PWD": str(REPO_ROOT)})
    assert uri == f"jdbc:sqlite:{REPO_ROOT}/.lakehouse/catalog.db"


def test_every_folder_dbt_project_yml_names_exists():
    """dbt skips a missing folder silently: a typo there loses models, macros or tests unseen."""
    project = yaml.safe_load((REPO_ROOT / "dbt_project.yml").read_text())
    named = {key: project[key] for key in project if key.endswith("-paths") and key != "clean-targets"}
    assert {"model-paths", "macro-paths", "seed-paths", "test-paths"} <= set(named)
    missing = [f"{key}: {path}" for key, paths in named.items() for path in paths if not (REPO_ROOT / path).is_dir()]
    assert missing == []
