"""profiles.yml is generated from the Spark session module; the two must never drift."""

import os
import re

import jinja2
import pytest
import yaml

from lakehouse.core.settings import PREFIX, SETTINGS, SETTINGS_RESOLVED, Settings
from lakehouse.core.spark import PACKAGE_DIR, render_dbt_profile, spark_conf
from lakehouse.operations.dbt import dbt_env, writes
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


def _host(target: str, env: dict, command: str = "dbt run --select purchases") -> str:
    """The `host` of a target of profiles.yml, rendered as dbt renders it."""
    from types import SimpleNamespace

    def env_var(name, default=None):
        if name in env:
            return env[name]
        if default is None:
            raise KeyError(name)  # dbt: "Env var required but not provided: '<name>'"
        return default

    value = yaml.safe_load((REPO_ROOT / "profiles.yml").read_text())["lakehouse"]["outputs"][target]["host"]
    return jinja2.Environment().from_string(value).render(env_var=env_var,
                                                           flags=SimpleNamespace(INVOCATION_COMMAND=command))


@pytest.mark.parametrize("target", ["local", "cluster"])
def test_a_plain_dbt_with_a_config_file_or_profile_is_refused_in_one_line(target):
    for unresolved in ({"LAKEHOUSE_CONFIG_FILE": "/etc/lakehouse.env"}, {"LAKEHOUSE_PROFILE": "cluster"}):
        with pytest.raises(KeyError) as refused:
            _host(target, unresolved)
        (name,) = unresolved
        assert refused.value.args[0] == (f"{name} is set, and a plain dbt does not read it: run it as "
                                         "`lakehouse dbt run --select purchases`")
    # resolved by `lakehouse dbt` (dbt_env), or nothing to resolve: the target's own host
    expected = "localhost"
    for fine in ({"LAKEHOUSE_CONFIG_FILE": "/etc/lakehouse.env", SETTINGS_RESOLVED: "1"},
                 {"LAKEHOUSE_PROFILE": "cluster", SETTINGS_RESOLVED: "1"}, {"LAKEHOUSE_PROFILE": "local"},
                 {"LAKEHOUSE_CONFIG_FILE": "", "LAKEHOUSE_PROFILE": ""}, {}):
        assert _host(target, fine) == expected


def test_lakehouse_dbt_gives_dbt_every_variable_the_profile_reads_from_the_config_file(tmp_path, monkeypatch):
    """A setting only the LAKEHOUSE_CONFIG_FILE holds reaches dbt as the variable profiles.yml reads."""
    named = set(re.findall(r"env_var\('(LAKEHOUSE_\w+)'", (REPO_ROOT / "profiles.yml").read_text()))
    # what is not a setting: the configuration's own pointers, the marker, the secret (environment only)
    markers = {"LAKEHOUSE_CONFIG_FILE", "LAKEHOUSE_PROFILE", SETTINGS_RESOLVED, "LAKEHOUSE_THRIFT_PASSWORD"}
    by_variable = {PREFIX + SETTINGS[name].env: name for name in SETTINGS}
    assert named - markers <= set(by_variable), named - markers - set(by_variable)
    values = {"LAKEHOUSE_HOME": str(tmp_path / "home"), "LAKEHOUSE_JARS_DIR": str(tmp_path / "jars"),
              "LAKEHOUSE_SPARK_MASTER": "local[3]", "LAKEHOUSE_SPARK_DRIVER_MEMORY": "3g",
              "LAKEHOUSE_JVM_OPTIONS": "-Xss4m", "LAKEHOUSE_SHUFFLE_PARTITIONS": "7",
              "LAKEHOUSE_CATALOG_URI": f"jdbc:sqlite:{tmp_path}/other.db", "LAKEHOUSE_WAREHOUSE": f"file://{tmp_path}/w",
              "LAKEHOUSE_THRIFT_HOST": "thrift.example", "LAKEHOUSE_THRIFT_PORT": "10001",
              "LAKEHOUSE_THRIFT_USER": "dbt"}
    assert set(values) == named - markers
    config = tmp_path / "lakehouse.env"
    config.write_text("".join(f"{key}={value}\n" for key, value in values.items()))
    for key in [k for k in os.environ if k.startswith(PREFIX)]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("LAKEHOUSE_CONFIG_FILE", str(config))
    env = dbt_env(Settings.from_env())
    assert {key: env[key] for key in values} == values
    assert env[SETTINGS_RESOLVED] == "1" and env["LAKEHOUSE_CONFIG_FILE"] == str(config)
    assert _host("local", env) == "localhost"  # resolved: no refusal


@pytest.mark.parametrize(("args", "locked"), [
    (["run", "--select", "purchases"], True), (["build"], True), (["seed"], True), (["snapshot"], True),
    (["--debug", "run"], True), (["run-operation", "m"], True), (["retry"], True), (["some-new-command"], True),
    (["--version"], False),
    (["test"], False), (["ls", "--select", "run"], False), (["docs", "serve"], False), (["compile"], False),
    (["show", "--inline", "select 1"], False), (["source", "freshness"], False),
])
def test_lakehouse_dbt_holds_the_lock_for_every_command_that_may_write(args, locked):
    assert writes(args) is locked
