from pathlib import Path

import pytest

from lakehouse.config import Settings, default_home
from lakehouse.errors import LakehouseError


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
])
def test_bad_configuration_is_one_clear_error(env, message):
    with pytest.raises(LakehouseError, match=message):
        Settings.from_env(env)
