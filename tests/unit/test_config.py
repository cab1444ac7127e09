from pathlib import Path

import pytest

from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings, default_home


def test_defaults_describe_the_local_platform():
    settings = Settings.from_env({})
    assert settings.home == Path(default_home())
    assert settings.kafka_bootstrap_servers == "127.0.0.1:9092"
    assert settings.catalog_uri == f"jdbc:sqlite:{default_home()}/catalog.db"
    assert settings.warehouse == f"file://{default_home()}/warehouse"
    assert settings.checkpoint_root == Path(default_home()) / "checkpoints"
    assert settings.spark_master == "local[2]"


def test_derived_paths_follow_home_and_explicit_values_win(tmp_path):
    settings = Settings.from_env({
        "LAKEHOUSE_HOME": str(tmp_path),
        "LAKEHOUSE_KAFKA_PORT": "19999",
        "LAKEHOUSE_WAREHOUSE": "s3://bucket/wh",
    })
    assert settings.catalog_uri == f"jdbc:sqlite:{tmp_path}/catalog.db"
    assert settings.kafka_bootstrap_servers == "127.0.0.1:19999"
    assert settings.warehouse == "s3://bucket/wh"


def test_kafka_client_options_pass_through_from_the_environment():
    settings = Settings.from_env({
        "LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS": "b1:9093,b2:9093",
        "LAKEHOUSE_KAFKA_OPT_SECURITY_PROTOCOL": "SASL_SSL",
        "LAKEHOUSE_KAFKA_OPT_SASL_MECHANISM": "PLAIN",
    })
    assert settings.kafka_client_config() == {
        "bootstrap.servers": "b1:9093,b2:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
    }


def test_config_file_is_read_and_environment_wins(tmp_path):
    config = tmp_path / "lakehouse.env"
    config.write_text("# local overrides\nLAKEHOUSE_SPARK_MASTER=local[1]\nLAKEHOUSE_KAFKA_PORT=1234\n")
    settings = Settings.from_env({"LAKEHOUSE_CONFIG_FILE": str(config), "LAKEHOUSE_KAFKA_PORT": "4321"})
    assert settings.spark_master == "local[1]"
    assert settings.kafka_port == 4321


@pytest.mark.parametrize("env, message", [
    ({"LAKEHOUSE_KAFKA_PORT": "nine"}, "invalid number"),
    ({"LAKEHOUSE_CONFIG_FILE": "/nonexistent/lakehouse.env"}, "cannot read LAKEHOUSE_CONFIG_FILE"),
    # the platform's settings
    ({"LAKEHOUSE_PROFILE": "clutser"}, "unknown LAKEHOUSE_PROFILE 'clutser': choose one of cluster, local"),
    ({"LAKEHOUSE_CATALOG_TYPE": "hive"}, "LAKEHOUSE_CATALOG_TYPE must be jdbc or rest"),
    ({"LAKEHOUSE_THRIFT_PORT": "ten"}, "invalid number"),
])
def test_bad_configuration_is_one_clear_error(env, message):
    with pytest.raises(LakehouseError, match=message):
        Settings.from_env(env)


def test_the_cluster_profile_points_every_part_at_the_compose_services():
    settings = Settings.from_env({"LAKEHOUSE_PROFILE": "cluster"})
    assert settings.profile == "cluster"
    assert settings.kafka_bootstrap_servers == "kafka:9092"
    assert settings.schema_registry_url == "http://schema-registry:8081"
    assert (settings.catalog_type, settings.catalog_uri) == ("rest", "http://iceberg-rest:8181")
    assert settings.warehouse == "s3://lakehouse/warehouse" and settings.s3_endpoint == "http://minio:9000"
    assert settings.spark_master == "spark://spark-master:7077"
    assert (settings.thrift_host, settings.thrift_port) == ("spark-thrift", 10000)
    assert settings.home == Path("/lakehouse") and settings.jars_dir == Path("/opt/lakehouse-jars")
    assert settings.checkpoint_root == Path("/lakehouse/checkpoints")  # derived defaults follow the profile's home
    assert settings.required_credentials() == ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]


def test_environment_and_config_file_win_over_the_profile(tmp_path):
    config = tmp_path / "site.env"
    config.write_text("LAKEHOUSE_CATALOG_URI=http://catalog.internal:8181\nLAKEHOUSE_SPARK_MASTER=spark://a:7077\n")
    settings = Settings.from_env({"LAKEHOUSE_PROFILE": "cluster", "LAKEHOUSE_CONFIG_FILE": str(config),
                                  "LAKEHOUSE_SPARK_MASTER": "spark://b:7077"})
    assert settings.catalog_uri == "http://catalog.internal:8181"  # file over profile
    assert settings.spark_master == "spark://b:7077"  # environment over file
    assert settings.kafka_bootstrap_servers == "kafka:9092"  # the profile where nobody says otherwise


def test_kafka_sasl_and_ca_options_are_translated_for_the_java_client():
    settings = Settings.from_env({
        "LAKEHOUSE_KAFKA_OPT_SECURITY_PROTOCOL": "SASL_SSL",
        "LAKEHOUSE_KAFKA_OPT_SASL_MECHANISMS": "SCRAM-SHA-512",
        "LAKEHOUSE_KAFKA_OPT_SASL_USERNAME": "ingest",
        "LAKEHOUSE_KAFKA_OPT_SASL_PASSWORD": 'p"w\\d',
        "LAKEHOUSE_KAFKA_OPT_SSL_CA_LOCATION": "/etc/ca.pem",
    })
    # librdkafka (producers) gets them as given ...
    assert settings.kafka_client_config()["sasl.username"] == "ingest"
    # ... the Java client (Spark) as a JAAS login, a mechanism and a PEM trust store.
    assert settings.java_kafka_options() == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            'username="ingest" password="p\\"w\\\\d";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/etc/ca.pem",
    }
    assert settings.required_credentials() == ["LAKEHOUSE_KAFKA_OPT_SASL_USERNAME",
                                               "LAKEHOUSE_KAFKA_OPT_SASL_PASSWORD"]
    plain = Settings.from_env({"LAKEHOUSE_KAFKA_OPT_SASL_USERNAME": "u", "LAKEHOUSE_KAFKA_OPT_SASL_PASSWORD": "p"})
    assert plain.java_kafka_options()["sasl.jaas.config"].startswith(
        "org.apache.kafka.common.security.plain.PlainLoginModule required")
    assert Settings.from_env({}).java_kafka_options() == {} and Settings.from_env({}).required_credentials() == []


@pytest.mark.parametrize("line", [
    "LAKEHOUSE_KAFKA_OPT_SASL_PASSWORD=hunter2",
    "LAKEHOUSE_KAFKA_OPT_SASL_JAAS_CONFIG=org.apache.kafka.common.security.plain.PlainLoginModule required;",
    "LAKEHOUSE_KAFKA_OPT_SSL_KEY_PASSWORD=hunter2",
    "LAKEHOUSE_SCHEMA_REGISTRY_URL=https://user:hunter2@registry.example:8081",
])
def test_a_secret_in_the_config_file_is_refused_naming_the_variable(tmp_path, line):
    config = tmp_path / "lakehouse.env"
    config.write_text(f"LAKEHOUSE_KAFKA_PORT=4321\n{line}\n")
    variable = line.split("=", 1)[0]
    with pytest.raises(LakehouseError) as refused:
        Settings.from_env({"LAKEHOUSE_CONFIG_FILE": str(config)})
    message = str(refused.value)
    assert "\n" not in message and "hunter2" not in message
    assert f"set the environment variable {variable} instead" in message and str(config) in message


def test_a_secret_in_a_profile_is_refused(tmp_path, monkeypatch):
    import lakehouse.core.settings as settings_module

    (tmp_path / "leaky.env").write_text("LAKEHOUSE_KAFKA_OPT_SASL_PASSWORD=hunter2\n")
    monkeypatch.setattr(settings_module, "PROFILES_DIR", tmp_path)
    with pytest.raises(LakehouseError, match="the profile 'leaky'.*LAKEHOUSE_KAFKA_OPT_SASL_PASSWORD"):
        Settings.from_env({"LAKEHOUSE_PROFILE": "leaky"})


def test_secrets_from_the_environment_are_accepted_and_never_shown():
    settings = Settings.from_env({
        "LAKEHOUSE_KAFKA_OPT_SASL_USERNAME": "lake", "LAKEHOUSE_KAFKA_OPT_SASL_PASSWORD": "hunter2",
        "LAKEHOUSE_SCHEMA_REGISTRY_URL": "https://user:hunter2@registry.example:8081/path"})
    assert settings.kafka_options["sasl.password"] == "hunter2"
    shown = settings.shown()
    assert "hunter2" not in repr(shown)
    assert shown["schema_registry_url"] == "https://user:***@registry.example:8081/path"
    plain = Settings.from_env({"LAKEHOUSE_SCHEMA_REGISTRY_URL": "http://registry:8081"})
    assert plain.shown()["schema_registry_url"] == "http://registry:8081"


def test_lakehouse_config_prints_no_secret():
    import os
    import subprocess
    import sys

    env = {**os.environ, "LAKEHOUSE_SCHEMA_REGISTRY_URL": "https://user:hunter2@registry.example:8081",
           "LAKEHOUSE_KAFKA_OPT_SASL_PASSWORD": "hunter2"}
    for extra in ([], ["--json"]):
        result = subprocess.run([sys.executable, "-m", "lakehouse.commands.cli", "config", *extra], env=env,
                                capture_output=True, text=True, check=True)
        assert "hunter2" not in result.stdout and "user:***@registry.example" in result.stdout


def test_the_writer_lease_times_are_settings_and_a_renewal_fits_twice_in_the_lease():
    """LAKEHOUSE_WRITER_LEASE_SECONDS / _RENEW_SECONDS (ingestion/single_writer.py): a job watching
    a lease must see a live holder renew it within the lease time."""
    defaults = Settings.from_env({})
    assert (defaults.writer_lease_seconds, defaults.writer_renew_seconds) == (120.0, 30.0)
    short = Settings.from_env({"LAKEHOUSE_WRITER_LEASE_SECONDS": "6", "LAKEHOUSE_WRITER_RENEW_SECONDS": "2"})
    assert (short.writer_lease_seconds, short.writer_renew_seconds) == (6.0, 2.0)
    for lease, renew in (("6", "4"), ("6", "0"), ("x", "2"), ("inf", "2"), ("6", "-1")):
        with pytest.raises(LakehouseError, match="LAKEHOUSE_WRITER_") as refused:
            Settings.from_env({"LAKEHOUSE_WRITER_LEASE_SECONDS": lease, "LAKEHOUSE_WRITER_RENEW_SECONDS": renew})
        assert "\n" not in str(refused.value)
