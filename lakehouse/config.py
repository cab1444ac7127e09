"""One configuration object for every part of the lakehouse.

Settings come from environment variables prefixed ``LAKEHOUSE_``, optionally from a
``KEY=VALUE`` file named by ``LAKEHOUSE_CONFIG_FILE`` (the environment wins over the file).
The defaults describe the embedded local platform: a Kafka broker on this machine and an
Iceberg JDBC catalog on SQLite, everything under one state folder (``.lakehouse/``).

Kafka client options (security protocol, SASL, SSL, ...) are passed through from
``LAKEHOUSE_KAFKA_OPT_<OPTION>`` variables: ``LAKEHOUSE_KAFKA_OPT_SECURITY_PROTOCOL=SASL_SSL``
becomes the client option ``security.protocol=SASL_SSL`` for producers and Spark alike.
Secrets are read only from the environment; nothing here is ever written to disk.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lakehouse.errors import LakehouseError

PREFIX = "LAKEHOUSE_"
KAFKA_OPTION_PREFIX = PREFIX + "KAFKA_OPT_"
PROJECT_ROOT = Path(__file__).resolve().parent.parent
CATALOG_NAME = "lake"
NAMESPACES = ("bronze", "silver", "gold")
QUALITY_NAMESPACE = "quality"  # the history of quality runs (expectations.history)


@dataclass(frozen=True)
class Setting:
    """One configurable value: its variable name, help text and default.

    ``default`` receives the state folder as a string so that derived defaults (catalog
    database, warehouse, checkpoints) follow ``LAKEHOUSE_HOME`` when only that is set.
    """

    env: str
    help: str
    default: Callable[[str], str]


# Order matters only for --help output (`lakehouse config`).
SETTINGS: dict[str, Setting] = {
    "home": Setting("HOME", "state folder: jars, Kafka data, catalog, warehouse, checkpoints, reports",
                    lambda home: home),
    "kafka_port": Setting("KAFKA_PORT", "port of the local Kafka broker", lambda home: "9092"),
    "kafka_bootstrap_servers": Setting("KAFKA_BOOTSTRAP_SERVERS", "Kafka bootstrap servers",
                                       lambda home: ""),  # derived from kafka_port below
    "schema_registry_url": Setting("SCHEMA_REGISTRY_URL",
                                   "Confluent-compatible schema registry (empty: local file registry)",
                                   lambda home: ""),
    "spark_master": Setting("SPARK_MASTER", "Spark master URL", lambda home: "local[2]"),
    "spark_driver_memory": Setting("SPARK_DRIVER_MEMORY", "Spark driver memory", lambda home: "2g"),
    "shuffle_partitions": Setting("SHUFFLE_PARTITIONS", "spark.sql.shuffle.partitions (2 cores: small)",
                                  lambda home: "4"),
    "catalog_uri": Setting("CATALOG_URI", "Iceberg JDBC catalog URI",
                           lambda home: f"jdbc:sqlite:{home}/catalog.db"),
    "warehouse": Setting("WAREHOUSE", "Iceberg warehouse location",
                         lambda home: f"file://{home}/warehouse"),
    "checkpoint_root": Setting("CHECKPOINT_ROOT", "root folder of streaming checkpoints",
                               lambda home: f"{home}/checkpoints"),
    "trigger_interval": Setting("TRIGGER_INTERVAL", "processing-time trigger of streaming jobs",
                                lambda home: "30 seconds"),
    "quality_dead_letter_rate_warn": Setting(
        "QUALITY_DEAD_LETTER_RATE_WARN", "share of a stream's records in dead letters that is a quality warning",
        lambda home: "0.02"),
    "quality_dead_letter_rate_critical": Setting(
        "QUALITY_DEAD_LETTER_RATE_CRITICAL", "share of a stream's records in dead letters that fails the quality run",
        lambda home: "0.10"),
    "quality_dead_letter_window_hours": Setting(
        "QUALITY_DEAD_LETTER_WINDOW_HOURS", "the dead-letter rate counts records ingested in the last N hours",
        lambda home: "24"),
    "quality_max_event_age_days": Setting(
        "QUALITY_MAX_EVENT_AGE_DAYS", "bronze event times older than this are a quality warning", lambda home: "45"),
}


def default_home() -> str:
    return str(PROJECT_ROOT / ".lakehouse")


def _read_config_file(path: str) -> dict[str, str]:
    values: dict[str, str] = {}
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise LakehouseError(f"cannot read LAKEHOUSE_CONFIG_FILE {path}: {exc.strerror}") from None
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "=" not in line:
            raise LakehouseError(f"{path}:{number}: expected KEY=VALUE, got {line!r}")
        key, value = line.split("=", 1)
        values[key.strip()] = value.strip().strip('"').strip("'")
    return values


def _positive_number(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also refuses nan
        raise LakehouseError(f"{PREFIX}{SETTINGS[name].env} must be a number >= 0, got {text!r}")
    return value


@dataclass(frozen=True)
class Settings:
    home: Path
    kafka_port: int
    kafka_bootstrap_servers: str
    schema_registry_url: str
    spark_master: str
    spark_driver_memory: str
    shuffle_partitions: int
    catalog_uri: str
    warehouse: str
    checkpoint_root: Path
    trigger_interval: str
    kafka_options: dict[str, str] = field(default_factory=dict)
    quality_dead_letter_rate_warn: float = 0.02
    quality_dead_letter_rate_critical: float = 0.10
    quality_dead_letter_window_hours: float = 24.0
    quality_max_event_age_days: float = 45.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = dict(os.environ if env is None else env)
        if env.get(PREFIX + "CONFIG_FILE"):
            env = {**_read_config_file(env[PREFIX + "CONFIG_FILE"]), **env}
        home = str(Path(env.get(PREFIX + "HOME") or default_home()).expanduser().resolve())
        raw = {name: env.get(PREFIX + s.env) or s.default(home) for name, s in SETTINGS.items()}
        raw["home"] = home
        try:
            port = int(raw["kafka_port"])
            partitions = int(raw["shuffle_partitions"])
        except ValueError as exc:
            raise LakehouseError(f"invalid number in configuration: {exc}") from None
        quality = {name: _positive_number(name, raw[name]) for name in raw if name.startswith("quality_")}
        if quality["quality_dead_letter_rate_warn"] > quality["quality_dead_letter_rate_critical"]:
            raise LakehouseError(f"{PREFIX}QUALITY_DEAD_LETTER_RATE_WARN ({quality['quality_dead_letter_rate_warn']}) "
                                 f"is above {PREFIX}QUALITY_DEAD_LETTER_RATE_CRITICAL "
                                 f"({quality['quality_dead_letter_rate_critical']})")
        kafka_options = {
            key[len(KAFKA_OPTION_PREFIX):].lower().replace("_", "."): value
            for key, value in env.items()
            if key.startswith(KAFKA_OPTION_PREFIX)
        }
        return cls(
            home=Path(home),
            kafka_port=port,
            kafka_bootstrap_servers=raw["kafka_bootstrap_servers"] or f"127.0.0.1:{port}",
            schema_registry_url=raw["schema_registry_url"],
            spark_master=raw["spark_master"],
            spark_driver_memory=raw["spark_driver_memory"],
            shuffle_partitions=partitions,
            catalog_uri=raw["catalog_uri"],
            warehouse=raw["warehouse"],
            checkpoint_root=Path(raw["checkpoint_root"]),
            trigger_interval=raw["trigger_interval"],
            kafka_options=kafka_options,
            **quality,
        )

    # Folders inside the state folder. Created on demand by whoever writes there.
    @property
    def jars_dir(self) -> Path:
        return self.home / "jars"

    @property
    def kafka_dir(self) -> Path:
        return self.home / "kafka"

    @property
    def reports_dir(self) -> Path:
        return self.home / "reports"

    def kafka_client_config(self) -> dict[str, str]:
        """librdkafka / Java client options shared by producers, admin and Spark."""
        return {"bootstrap.servers": self.kafka_bootstrap_servers, **self.kafka_options}

    def spark_inputs(self) -> dict[str, str]:
        """The values the Spark session is built from (see lakehouse.spark.spark_conf)."""
        return {
            "home": str(self.home),
            "spark_master": self.spark_master,
            "spark_driver_memory": self.spark_driver_memory,
            "shuffle_partitions": str(self.shuffle_partitions),
            "catalog_uri": self.catalog_uri,
            "warehouse": self.warehouse,
        }


def jinja_spark_inputs() -> dict[str, str]:
    """The same inputs as Jinja expressions, for dbt's profiles.yml.

    dbt renders profiles.yml with ``env_var()``, so the profile follows the same
    ``LAKEHOUSE_*`` variables; unset, the state folder is ``.lakehouse`` in the folder
    `dbt` runs from (the project root, where dbt_project.yml is).
    """
    home_expr = f"env_var('{PREFIX}HOME', env_var('PWD', '.') ~ '/.lakehouse')"
    inputs = {"home": "{{ " + home_expr + " }}"}
    for name in ("spark_master", "spark_driver_memory", "shuffle_partitions", "catalog_uri", "warehouse"):
        setting = SETTINGS[name]
        # The default is rendered with a placeholder home that splices the home expression
        # into a Jinja string concatenation: 'jdbc:sqlite:' ~ <home> ~ '/catalog.db'.
        default_expr = "'" + setting.default("' ~ " + home_expr + " ~ '") + "'"
        default_expr = default_expr.replace("'' ~ ", "").replace(" ~ ''", "")
        inputs[name] = "{{ env_var('" + PREFIX + setting.env + "', " + default_expr + ") }}"
    return inputs
