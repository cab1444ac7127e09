"""docker-compose.yml is valid, consistent, and agrees with the `cluster` configuration profile.

No Docker engine is needed: when a compose CLI is installed it validates the file; otherwise a
JSON Schema of the compose subset we use does. The checks live in tests/compose_checks.py; the
second half of this module breaks copies of the files and shows each check notices.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from lakehouse.core.settings import Settings
from tests import compose_checks as checks


@pytest.fixture(scope="module")
def compose() -> dict:
    return checks.load()


@pytest.fixture(scope="module")
def env_example() -> str:
    return checks.ENV_EXAMPLE.read_text()


@pytest.fixture(scope="module")
def settings() -> Settings:
    return Settings.from_env({"LAKEHOUSE_PROFILE": "cluster"})


@pytest.fixture(scope="module")
def credentials() -> list[str]:
    """Secrets of the cluster profile, also with a SASL Kafka (LAKEHOUSE_KAFKA_OPT_*)."""
    plain = Settings.from_env({"LAKEHOUSE_PROFILE": "cluster"}).required_credentials()
    sasl = Settings.from_env({"LAKEHOUSE_PROFILE": "cluster",
                              "LAKEHOUSE_KAFKA_OPT_SECURITY_PROTOCOL": "SASL_SSL"}).required_credentials()
    return list(dict.fromkeys(plain + sasl))


def all_errors(compose: dict, env_example: str, settings: Settings, credentials: list[str]) -> list[str]:
    return (checks.schema_errors(compose) + checks.semantic_errors(compose, env_example)
            + checks.profile_errors(compose, settings, credentials, env_example))


def compose_cli() -> list[str] | None:
    """`docker compose` (v2) if it works, else `docker-compose` (v1), else None."""
    if shutil.which("docker"):
        try:
            probe = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            probe = None
        if probe is not None and probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


# --- the real files --------------------------------------------------------------------------

def test_compose_file_is_valid(compose, tmp_path):
    cli = compose_cli()
    if cli is None:
        # No compose CLI on this machine: the schema of the subset of the spec the file uses.
        assert checks.schema_errors(compose) == []
        return
    env_file = tmp_path / "sample.env"
    env_file.write_text("".join(f"{key}={value}\n" for key, value in checks.SAMPLE_ENV.items()))
    result = subprocess.run(
        [*cli, "--env-file", str(env_file), "-f", str(checks.COMPOSE_FILE), "config", "--quiet"],
        cwd=checks.REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_compose_file_matches_the_schema(compose):
    assert checks.schema_errors(compose) == []


def test_compose_file_is_consistent(compose, env_example):
    assert checks.semantic_errors(compose, env_example) == []


def test_compose_file_agrees_with_the_cluster_profile(compose, settings, credentials, env_example):
    assert settings.profile == "cluster" and settings.catalog_type == "rest"
    assert checks.profile_errors(compose, settings, credentials, env_example) == []


def test_required_variables_stop_compose_when_missing(compose):
    # What docker compose does without .env: refuse, naming the variable, instead of starting
    # MinIO and the catalog with empty credentials.
    errors = checks.schema_errors(compose, env={})
    assert errors and "AWS_" in errors[0]


def test_lakehouse_image_builds_what_the_profile_expects(settings):
    assert checks.image_errors(checks.DOCKERFILE.read_text(), checks.DOCKERIGNORE.read_text(),
                               checks.MAKEFILE.read_text(), settings) == []


def test_env_file_is_git_ignored_and_the_example_is_not():
    ignored = [line.strip() for line in (checks.REPO_ROOT / ".gitignore").read_text().splitlines()]
    assert ".env" in ignored
    assert not any(line in (".env*", ".env.*", "*.example") for line in ignored)


def test_lakehouse_commands_of_the_services_parse(compose):
    from lakehouse.commands.cli import build_parser

    commands = {name: cmd for name, service in checks.services(compose).items()
                if (cmd := checks.lakehouse_command(checks.interpolate(service, checks.SAMPLE_ENV)))}
    assert {"spark-master", "spark-worker", "spark-thrift", "ingest", "init"} <= set(commands)
    for name, cmd in commands.items():
        arguments = [cmd[1:]] if cmd[1:] != ["--help"] else []
        if cmd[1:3] == ["submit", "ingest"]:
            arguments.append(["ingest", *cmd[3:]])  # the submitted job's own arguments
        for args in arguments:
            try:
                build_parser().parse_args(args)
            except SystemExit:
                pytest.fail(f"{name}: `lakehouse {' '.join(args)}` is not a valid lakehouse command")


# --- every check notices a broken copy --------------------------------------------------------

def _rename_kafka(c):
    c["services"]["kafka-broker"] = c["services"].pop("kafka")
    for service in c["services"].values():
        deps = service.get("depends_on") or {}
        if "kafka" in deps:
            deps["kafka-broker"] = deps.pop("kafka")


def _set_env(service, key, value):
    def mutate(c):
        c["services"][service]["environment"][key] = value
    return mutate


def _drop_env(service, key):
    def mutate(c):
        del c["services"][service]["environment"][key]
    return mutate


def _set(service, key, value):
    def mutate(c):
        c["services"][service][key] = value
    return mutate


def _drop(service, key):
    def mutate(c):
        del c["services"][service][key]
    return mutate


def _drop_dependency(service, dependency):
    def mutate(c):
        del c["services"][service]["depends_on"][dependency]
    return mutate


def _worker_option(flag, value):
    def mutate(c):
        cmd = c["services"]["spark-worker"]["command"]
        cmd[cmd.index(flag) + 1] = value
    return mutate


BROKEN_COMPOSE = {
    "kafka service renamed": (_rename_kafka, "kafka_bootstrap_servers: host 'kafka' is no service"),
    "healthcheck dropped": (_drop("schema-registry", "healthcheck"), "schema-registry: runs until stopped but has no"),
    "waiting on a service without healthcheck": (_drop("iceberg-rest", "healthcheck"),
                                                 "waits for iceberg-rest to be healthy"),
    "literal password": (_set_env("minio", "MINIO_ROOT_PASSWORD", "minio123"), "minio: MINIO_ROOT_PASSWORD holds a"),
    "secret with a default": (_set_env("iceberg-rest", "AWS_SECRET_ACCESS_KEY", "${AWS_SECRET_ACCESS_KEY:-changeme}"),
                              "iceberg-rest: AWS_SECRET_ACCESS_KEY holds a literal"),
    "typo in a service key": (lambda c: c["services"]["kafka"].update(healtcheck={}), "'healtcheck' was unexpected"),
    "unquoted restart: no": (_set("init", "restart", False), "services/init/restart"),
    "bad duration": (lambda c: c["services"]["kafka"]["healthcheck"].update(interval="10 seconds"), "interval"),
    "undeclared volume": (lambda c: c["volumes"].pop("kafka-data"), "'kafka-data' is not declared"),
    "dependency on a missing service": (lambda c: c["services"]["ingest"]["depends_on"].update(
        {"spark-workers": {"condition": "service_healthy"}}), "depends on 'spark-workers', which is no service"),
    "dependency cycle": (lambda c: c["services"]["kafka"].update(
        depends_on={"ingest": {"condition": "service_started"}}), "depends on itself"),
    "undocumented variable": (_set_env("kafka", "KAFKA_NUM_PARTITIONS", "${KAFKA_PARTITIONS:-3}"),
                              "${KAFKA_PARTITIONS} is used but not documented"),
    "undocumented pass-through": (_set_env("ingest", "LAKEHOUSE_DEBUG", None), "LAKEHOUSE_DEBUG is passed through"),
    "one-shot nobody running waits for": (_drop_dependency("ingest", "minio-init"),
                                          "minio-init: one-shot service no long-running service waits for"),
    "one-shot that restarts forever": (_set("minio-init", "restart", "unless-stopped"), "never completes"),
    "Kafka data in the container": (_drop("kafka", "volumes"), "Kafka data /var/lib/kafka/data is not on a named"),
    "in-memory catalog": (_set_env("iceberg-rest", "CATALOG_URI", "jdbc:sqlite::memory:"),
                          "the catalog database (jdbc:sqlite::memory:) is not a file"),
    "Kafka internal listener moved": (_set_env("kafka", "KAFKA_LISTENERS",
                                               "INTERNAL://:9094,EXTERNAL://:29092,CONTROLLER://:9093"),
                                      "kafka_bootstrap_servers: service kafka listens on [9093, 9094, 29092]"),
    "Kafka advertises another address": (_set_env("kafka", "KAFKA_ADVERTISED_LISTENERS",
                                                  "INTERNAL://broker:9092,EXTERNAL://localhost:29092"),
                                         "bootstrap address kafka:9092 is not an advertised listener"),
    "host listener not published": (_set("kafka", "ports", []), "advertises localhost:29092 to the host"),
    "schema registry on another port": (_set_env("schema-registry", "SCHEMA_REGISTRY_LISTENERS", "http://0.0.0.0:8085"),
                                        "schema_registry_url: service schema-registry listens on [8085]"),
    "thrift server on another port": (_set("spark-thrift", "command",
                                           ["lakehouse", "cluster", "thrift-server", "--port", "10001"]),
                                      "thrift_host:thrift_port: service spark-thrift listens on [10001]"),
    "thrift port not published": (_set("spark-thrift", "ports", ["127.0.0.1:10001:10000"]),
                                  "spark-thrift: does not publish port 10000"),
    "master on another port": (_set("spark-master", "command", ["lakehouse", "cluster", "master", "--port", "7078"]),
                               "spark_master: service spark-master listens on [7078]"),
    "catalog without S3 credentials": (_drop_env("iceberg-rest", "AWS_SECRET_ACCESS_KEY"),
                                       "iceberg-rest: credential AWS_SECRET_ACCESS_KEY does not reach"),
    "worker without S3 credentials": (_drop_env("spark-worker", "AWS_ACCESS_KEY_ID"),
                                      "spark-worker: credential AWS_ACCESS_KEY_ID does not reach"),
    "SASL password not passed through": (_drop_env("ingest", "LAKEHOUSE_KAFKA_OPT_SASL_PASSWORD"),
                                         "ingest: credential LAKEHOUSE_KAFKA_OPT_SASL_PASSWORD does not reach"),
    "store key differs from the clients'": (_set_env("minio", "MINIO_ROOT_USER", "${MINIO_USER:-admin}"),
                                            "MINIO_ROOT_USER is not ${AWS_ACCESS_KEY_ID}"),
    "wrong region": (_set_env("spark-worker", "AWS_REGION", "eu-west-1"), "spark-worker: AWS_REGION 'eu-west-1'"),
    "bucket not created": (_set("minio-init", "command", ["mc mb --ignore-existing lake/other"]),
                           "creates the warehouse bucket 'lakehouse'"),
    "catalog on another warehouse": (_set_env("iceberg-rest", "CATALOG_WAREHOUSE", "s3://warehouse/"),
                                     "CATALOG_WAREHOUSE 's3://warehouse/' is not the profile's"),
    "state folder not a volume": (_set("ingest", "volumes", []), "ingest: LAKEHOUSE_HOME /lakehouse is not a mounted"),
    "lakehouse service without the profile": (_set_env("init", "LAKEHOUSE_PROFILE", "local"),
                                              "init: runs the lakehouse image without LAKEHOUSE_PROFILE=cluster"),
    "driver unreachable": (_set_env("ingest", "LAKEHOUSE_SPARK_DRIVER_HOST", "localhost"),
                           "ingest: LAKEHOUSE_SPARK_DRIVER_HOST is 'localhost'"),
    "worker too small": (_worker_option("--memory", "2g"), "the workers offer 4 cores and 2048 MB"),
    "application without a core cap": (_drop_env("ingest", "LAKEHOUSE_SPARK_CORES_MAX"),
                                       "ingest: no LAKEHOUSE_SPARK_CORES_MAX"),
    "metrics published on every interface": (_set("ingest", "ports", ["9108:9108"]),
                                             "ingest: publishes 9108:9108 on every interface of the host"),
    "metrics endpoint on the container's loopback": (_drop_env("ingest", "LAKEHOUSE_METRICS_BIND_ADDRESS"),
                                                     "ingest: publishes its metrics port 9108, but the endpoint"),
    "thrift server on the container's loopback": (_set("spark-thrift", "command",
                                                       ["lakehouse", "cluster", "thrift-server", "--port", "10000"]),
                                                  "spark-thrift: the Thrift Server listens on its container's"),
    "thrift server without its password": (_drop_env("spark-thrift", "LAKEHOUSE_THRIFT_PASSWORD"),
                                           "spark-thrift: the Thrift Server listens on 0.0.0.0 without"),
    "thrift password with a default": (_set_env("cli", "LAKEHOUSE_THRIFT_PASSWORD", "${LAKEHOUSE_THRIFT_PASSWORD:-x}"),
                                       "cli: LAKEHOUSE_THRIFT_PASSWORD holds a literal"),
}


def test_the_real_files_pass_every_check(compose, env_example, settings, credentials):
    # The baseline of the broken copies below: each of them fails only by its mutation.
    assert all_errors(compose, env_example, settings, credentials) == []


@pytest.mark.parametrize("mutation", list(BROKEN_COMPOSE))
def test_checks_notice_a_broken_compose_file(mutation, compose, env_example, settings, credentials):
    mutate, expected = BROKEN_COMPOSE[mutation]
    broken = checks.unshared(compose)
    mutate(broken)
    errors = all_errors(broken, env_example, settings, credentials)
    assert any(expected in error for error in errors), errors


BROKEN_ENV_EXAMPLE = {
    "required secret missing": (lambda text: text.replace("AWS_SECRET_ACCESS_KEY=\n", ""),
                                "${AWS_SECRET_ACCESS_KEY} is used but not documented"),
    "required secret commented out": (lambda text: text.replace("AWS_SECRET_ACCESS_KEY=", "# AWS_SECRET_ACCESS_KEY="),
                                      "${AWS_SECRET_ACCESS_KEY} is required but commented out"),
    "secret value committed": (lambda text: text.replace("AWS_SECRET_ACCESS_KEY=", "AWS_SECRET_ACCESS_KEY=hunter22"),
                               ".env.example: AWS_SECRET_ACCESS_KEY has a value"),
    "SASL credential undocumented": (lambda text: text.replace("# LAKEHOUSE_KAFKA_OPT_SASL_USERNAME=\n", ""),
                                     "credential LAKEHOUSE_KAFKA_OPT_SASL_USERNAME is not in .env.example"),
    "thrift password commented out": (lambda text: text.replace("LAKEHOUSE_THRIFT_PASSWORD=",
                                                                "# LAKEHOUSE_THRIFT_PASSWORD="),
                                      "${LAKEHOUSE_THRIFT_PASSWORD} is required but commented out"),
}


@pytest.mark.parametrize("mutation", list(BROKEN_ENV_EXAMPLE))
def test_checks_notice_a_broken_env_example(mutation, compose, env_example, settings, credentials):
    mutate, expected = BROKEN_ENV_EXAMPLE[mutation]
    broken = mutate(env_example)
    assert broken != env_example
    errors = all_errors(compose, broken, settings, credentials)
    assert any(expected in error for error in errors), errors


BROKEN_IMAGE = {
    "no profile": ("dockerfile", lambda t: t.replace("LAKEHOUSE_PROFILE=cluster", "LAKEHOUSE_PROFILE=local"),
                   "does not set LAKEHOUSE_PROFILE=cluster"),
    "jars elsewhere": ("dockerfile", lambda t: t.replace("COPY --from=jars /opt/lakehouse-jars /opt/lakehouse-jars",
                                                         "COPY --from=jars /opt/lakehouse-jars /opt/jars"),
                       "copies no jars to LAKEHOUSE_JARS_DIR /opt/lakehouse-jars"),
    "mvn differs from make setup": ("dockerfile", lambda t: t.replace("package dependency:copy-dependencies",
                                                                      "dependency:copy-dependencies"),
                                    "the image fetches jars with"),
    "another Python": ("dockerfile", lambda t: t.replace("FROM python:3.11-slim-bookworm", "FROM python:3.12-slim"),
                       "not Python 3.11"),
    "credentials in the build context": ("dockerignore", lambda t: t.replace(".env\n", ""),
                                         ".dockerignore does not exclude .env"),
}


@pytest.mark.parametrize("mutation", list(BROKEN_IMAGE))
def test_checks_notice_a_broken_image(mutation, settings):
    files = {"dockerfile": checks.DOCKERFILE.read_text(), "dockerignore": checks.DOCKERIGNORE.read_text()}
    which, mutate, expected = BROKEN_IMAGE[mutation]
    broken = mutate(files[which])
    assert broken != files[which]
    files[which] = broken
    errors = checks.image_errors(files["dockerfile"], files["dockerignore"], checks.MAKEFILE.read_text(), settings)
    assert any(expected in error for error in errors), errors


def test_interpolation_follows_compose():
    env = {"SET": "value", "EMPTY": ""}
    assert checks.interpolate("${SET} ${UNSET:-d} ${EMPTY:-d} ${EMPTY-d} $$SET $SET", env) == "value d d  $SET value"
    with pytest.raises(checks.InterpolationError, match="EMPTY: needed"):
        checks.interpolate("${EMPTY:?needed}", env)
    assert checks.references(["$$ESCAPED ${A:?x}", {"k": "$B"}]) == [("A", ":?"), ("B", "")]
