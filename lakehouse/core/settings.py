"""One configuration object for every part of the lakehouse.

Settings come from environment variables prefixed ``LAKEHOUSE_``, optionally from a
``KEY=VALUE`` file named by ``LAKEHOUSE_CONFIG_FILE`` (the environment wins over the file).
The defaults describe the embedded local platform: a Kafka broker on this machine and an
Iceberg JDBC catalog on SQLite, everything under one state folder (``.lakehouse/``).

A *profile* names a file of defaults for a whole platform: ``LAKEHOUSE_PROFILE=cluster``
reads ``lakehouse/core/profiles/cluster.env``, which points every part at the services of
docker-compose.yml (REST catalog, S3 object store, schema registry, Spark master). Order of
precedence: environment, then ``LAKEHOUSE_CONFIG_FILE``, then the profile, then the defaults.

Kafka client options (security protocol, SASL, SSL, ...) are passed through from
``LAKEHOUSE_KAFKA_OPT_<OPTION>`` variables: ``LAKEHOUSE_KAFKA_OPT_SECURITY_PROTOCOL=SASL_SSL``
becomes the client option ``security.protocol=SASL_SSL`` for producers and Spark alike.
Secrets are read only from the environment; nothing here is ever written to disk.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from lakehouse.core.errors import LakehouseError

PREFIX = "LAKEHOUSE_"
KAFKA_OPTION_PREFIX = PREFIX + "KAFKA_OPT_"
PROJECT_ROOT = Path(__file__).resolve().parents[2]
PROFILES_DIR = Path(__file__).resolve().parent / "profiles"
LOCAL_PROFILE = "local"  # the built-in defaults; every other profile is a file in PROFILES_DIR
CATALOG_NAME = "lake"
NAMESPACES = ("bronze", "silver", "gold")
QUALITY_NAMESPACE = "quality"  # the history of quality runs (expectations.history)
# Set by `lakehouse dbt` in the environment of the dbt it starts (lakehouse.operations.dbt.dbt_env):
# every LAKEHOUSE_* variable profiles.yml reads holds this configuration's value, so the
# LAKEHOUSE_CONFIG_FILE or LAKEHOUSE_PROFILE also in that environment are resolved, not ignored.
SETTINGS_RESOLVED = PREFIX + "SETTINGS_RESOLVED"
# The Thrift Server's password (dbt's `cluster` target): a secret, so the environment only, never a
# Setting (never printed, never read from a file); lakehouse/commands/cluster.py, profiles.yml.
THRIFT_PASSWORD = PREFIX + "THRIFT_PASSWORD"


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
    "profile": Setting("PROFILE", "platform profile: local (this machine) or cluster (docker-compose services)",
                       lambda home: LOCAL_PROFILE),
    "home": Setting("HOME", "state folder: jars, Kafka data, catalog, warehouse, checkpoints, reports",
                    lambda home: home),
    "jars_dir": Setting("JARS_DIR", "JVM jars of `make setup` (spark/, kafka/)", lambda home: f"{home}/jars"),
    "kafka_port": Setting("KAFKA_PORT", "port of the local Kafka broker", lambda home: "9092"),
    "kafka_bootstrap_servers": Setting("KAFKA_BOOTSTRAP_SERVERS", "Kafka bootstrap servers",
                                       lambda home: ""),  # derived from kafka_port below
    "schema_registry_url": Setting("SCHEMA_REGISTRY_URL",
                                   "Confluent-compatible schema registry (empty: local file registry)",
                                   lambda home: ""),
    "spark_master": Setting("SPARK_MASTER", "Spark master URL", lambda home: "local[2]"),
    "spark_driver_memory": Setting("SPARK_DRIVER_MEMORY", "Spark driver memory", lambda home: "2g"),
    "jvm_options": Setting("JVM_OPTIONS", "extra options of every JVM started here: Spark drivers (jobs, CLI, "
                           "dbt) and the local broker (empty: none)", lambda home: ""),
    "spark_driver_host": Setting("SPARK_DRIVER_HOST", "address executors reach the driver at",
                                 lambda home: "127.0.0.1"),
    "spark_driver_bind_address": Setting("SPARK_DRIVER_BIND_ADDRESS", "address the driver listens on",
                                         lambda home: "127.0.0.1"),
    "spark_executor_memory": Setting("SPARK_EXECUTOR_MEMORY", "memory per executor (cluster masters)",
                                     lambda home: "1g"),
    "spark_executor_cores": Setting("SPARK_EXECUTOR_CORES", "cores per executor (cluster masters)",
                                    lambda home: "1"),
    "spark_cores_max": Setting("SPARK_CORES_MAX", "cores a job takes from a standalone cluster (empty: all)",
                               lambda home: ""),
    "shuffle_partitions": Setting("SHUFFLE_PARTITIONS", "spark.sql.shuffle.partitions (2 cores: small)",
                                  lambda home: "4"),
    "catalog_type": Setting("CATALOG_TYPE", "Iceberg catalog: jdbc (SQLite on this machine) or rest",
                            lambda home: "jdbc"),
    "catalog_uri": Setting("CATALOG_URI", "Iceberg catalog URI (jdbc:sqlite:... or http://rest-catalog)",
                           lambda home: f"jdbc:sqlite:{home}/catalog.db"),
    "warehouse": Setting("WAREHOUSE", "Iceberg warehouse location (file://... or s3://bucket/path)",
                         lambda home: f"file://{home}/warehouse"),
    "s3_endpoint": Setting("S3_ENDPOINT", "S3-compatible object store endpoint (empty: AWS S3)", lambda home: ""),
    "s3_region": Setting("S3_REGION", "S3 region", lambda home: "us-east-1"),
    "checkpoint_root": Setting("CHECKPOINT_ROOT", "root folder of streaming checkpoints",
                               lambda home: f"{home}/checkpoints"),
    "trigger_interval": Setting("TRIGGER_INTERVAL", "processing-time trigger of streaming jobs",
                                lambda home: "30 seconds"),
    "writer_lease_seconds": Setting(
        "WRITER_LEASE_SECONDS", "a stream's writer lease lapses when a starting job saw it not renewed for this "
        "long (by that job's own clock)", lambda home: "120"),
    "writer_renew_seconds": Setting("WRITER_RENEW_SECONDS", "how often a running job renews its writer leases",
                                    lambda home: "30"),
    "thrift_host": Setting("THRIFT_HOST", "Spark Thrift Server host (dbt target `cluster`)",
                           lambda home: "localhost"),
    "thrift_port": Setting("THRIFT_PORT", "Spark Thrift Server port", lambda home: "10000"),
    "thrift_user": Setting("THRIFT_USER", "user dbt's `cluster` target logs in to the Thrift Server as, with the "
                           "password LAKEHOUSE_THRIFT_PASSWORD (environment only); the user the server accepts",
                           lambda home: "lakehouse"),
    "quality_dead_letter_rate_warn": Setting(
        "QUALITY_DEAD_LETTER_RATE_WARN", "share of a stream's records in dead letters that is a quality warning",
        lambda home: "0.02"),
    "quality_dead_letter_rate_critical": Setting(
        "QUALITY_DEAD_LETTER_RATE_CRITICAL", "share of a stream's records in dead letters that fails the quality run",
        lambda home: "0.10"),
    "quality_dead_letter_window_hours": Setting(
        "QUALITY_DEAD_LETTER_WINDOW_HOURS", "the dead-letter rate counts records ingested in the last N hours",
        lambda home: "24"),
    "publication_gate": Setting(
        "PUBLICATION_GATE", "on: a dbt run that changed silver or gold is published only once the quality suites of "
        "the tables it wrote pass on its audit branch; off: it is published once its models and dbt tests pass, "
        "and the suites check it after (docs/models.md)", lambda home: "on"),
    "quality_max_event_age_days": Setting(
        "QUALITY_MAX_EVENT_AGE_DAYS", "bronze event times older than this are a quality warning", lambda home: "45"),
    "log_format": Setting("LOG_FORMAT", "log lines: text (dated, for people) or json (one object per line)",
                          lambda home: "text"),
    "status_max_lag": Setting("STATUS_MAX_LAG", "`lakehouse status --check`: records a stream may be behind its "
                              "topic's end", lambda home: "100000"),
    "status_max_model_age_minutes": Setting(
        "STATUS_MAX_MODEL_AGE_MINUTES", "`lakehouse status --check`: minutes since a dbt model's last success "
        "after which it is stale", lambda home: "60"),
    "status_max_maintenance_age_hours": Setting(
        "STATUS_MAX_MAINTENANCE_AGE_HOURS", "`lakehouse status --check`: hours since a table's last successful "
        "`lakehouse maintain` pass (never maintained: since its oldest snapshot) after which its maintenance is "
        "overdue", lambda home: "48"),
    "metrics_port": Setting("METRICS_PORT", "port of the Prometheus metrics endpoint of `lakehouse ingest` and "
                            "`lakehouse dbt loop` (unset: no endpoint)", lambda home: ""),
    "metrics_bind_address": Setting("METRICS_BIND_ADDRESS", "address the metrics endpoint listens on (0.0.0.0: "
                                    "every interface, e.g. in a container whose port is published)",
                                    lambda home: "127.0.0.1"),
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


# Variables that hold a secret: Kafka passwords, JAAS configurations (which embed one), tokens.
_SECRET_OPTION = re.compile(r"PASSWORD|SECRET|JAAS|TOKEN|CREDENTIAL", re.IGNORECASE)


def _url_has_password(url: str) -> bool:
    try:
        return urlsplit(url).password is not None
    except ValueError:
        return False


def secrets_in(values: Mapping[str, str]) -> list[str]:
    """The variables of `values` that carry a secret (a Kafka password, the Thrift Server's, a URL
    with a password)."""
    found = [key for key in values if (key.startswith(KAFKA_OPTION_PREFIX) and _SECRET_OPTION.search(key))
             or key == THRIFT_PASSWORD]
    return found + [key for key, value in values.items()
                    if key == PREFIX + "SCHEMA_REGISTRY_URL" and _url_has_password(value)]


def _refuse_secrets(values: Mapping[str, str], where: str) -> None:
    """Secrets come from the environment only: a file can be committed, copied or printed."""
    if found := secrets_in(values):
        raise LakehouseError(f"{where} sets {found[0]}, a secret: secrets are read only from the environment; "
                             f"remove it from the file and set the environment variable {found[0]} instead")


def redact_url(url: str) -> str:
    """The URL with any password replaced by ***, for printing and error messages.

    Text-based rather than urlsplit: it must also work on the malformed URL an error is about.
    """
    scheme, sep, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    userinfo, at, host = authority.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return url
    return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}{slash}{path}"


def profile_names() -> list[str]:
    return sorted([LOCAL_PROFILE, *(p.stem for p in PROFILES_DIR.glob("*.env"))])


def _read_profile(name: str) -> dict[str, str]:
    if name == LOCAL_PROFILE:
        return {}
    if name not in profile_names():
        raise LakehouseError(f"unknown {PREFIX}PROFILE {name!r}: choose one of {', '.join(profile_names())}")
    return _read_config_file(str(PROFILES_DIR / f"{name}.env"))


def _positive_number(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also refuses nan
        raise LakehouseError(f"{PREFIX}{SETTINGS[name].env} must be a number >= 0, got {text!r}")
    return value


def _port_or_none(name: str, text: str) -> int | None:
    """A TCP port (1-65535), or None when the setting is empty (the feature is off)."""
    if not text.strip():
        return None
    if not text.strip().isdigit() or not 1 <= int(text) <= 65535:
        raise LakehouseError(f"{PREFIX}{SETTINGS[name].env} must be a port number (1-65535), got {text!r}")
    return int(text)


@dataclass(frozen=True)
class Settings:
    profile: str
    home: Path
    jars_dir: Path
    kafka_port: int
    kafka_bootstrap_servers: str
    schema_registry_url: str
    spark_master: str
    spark_driver_memory: str
    jvm_options: str
    spark_driver_host: str
    spark_driver_bind_address: str
    spark_executor_memory: str
    spark_executor_cores: int
    spark_cores_max: str
    shuffle_partitions: int
    catalog_type: str
    catalog_uri: str
    warehouse: str
    s3_endpoint: str
    s3_region: str
    checkpoint_root: Path
    trigger_interval: str
    thrift_host: str
    thrift_port: int
    thrift_user: str = "lakehouse"
    kafka_options: dict[str, str] = field(default_factory=dict)
    writer_lease_seconds: float = 120.0
    writer_renew_seconds: float = 30.0
    quality_dead_letter_rate_warn: float = 0.02
    quality_dead_letter_rate_critical: float = 0.10
    quality_dead_letter_window_hours: float = 24.0
    publication_gate: str = "on"
    quality_max_event_age_days: float = 45.0
    log_format: str = "text"
    status_max_lag: int = 100_000
    status_max_model_age_minutes: float = 60.0
    status_max_maintenance_age_hours: float = 48.0
    metrics_port: int | None = None  # None: no metrics endpoint
    metrics_bind_address: str = "127.0.0.1"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = dict(os.environ if env is None else env)
        if env.get(PREFIX + "CONFIG_FILE"):
            from_file = _read_config_file(env[PREFIX + "CONFIG_FILE"])
            _refuse_secrets(from_file, f"{PREFIX}CONFIG_FILE {env[PREFIX + 'CONFIG_FILE']}")
            env = {**from_file, **env}
        profile = env.get(PREFIX + "PROFILE") or LOCAL_PROFILE
        from_profile = _read_profile(profile)
        _refuse_secrets(from_profile, f"the profile {profile!r} ({PROFILES_DIR / (profile + '.env')})")
        env = {**from_profile, **env}
        home = str(Path(env.get(PREFIX + "HOME") or default_home()).expanduser().resolve())
        raw = {name: env.get(PREFIX + s.env) or s.default(home) for name, s in SETTINGS.items()}
        raw["home"] = home
        try:
            port = int(raw["kafka_port"])
            partitions = int(raw["shuffle_partitions"])
            executor_cores = int(raw["spark_executor_cores"])
            thrift_port = int(raw["thrift_port"])
        except ValueError as exc:
            raise LakehouseError(f"invalid number in configuration: {exc}") from None
        if raw["publication_gate"] not in ("on", "off"):
            raise LakehouseError(f"{PREFIX}PUBLICATION_GATE must be on or off, got {raw['publication_gate']!r}")
        if raw["catalog_type"] not in ("jdbc", "rest"):
            raise LakehouseError(f"{PREFIX}CATALOG_TYPE must be jdbc or rest, got {raw['catalog_type']!r}")
        quality = {name: _positive_number(name, raw[name]) for name in raw if name.startswith("quality_")}
        if quality["quality_dead_letter_rate_warn"] > quality["quality_dead_letter_rate_critical"]:
            raise LakehouseError(f"{PREFIX}QUALITY_DEAD_LETTER_RATE_WARN ({quality['quality_dead_letter_rate_warn']}) "
                                 f"is above {PREFIX}QUALITY_DEAD_LETTER_RATE_CRITICAL "
                                 f"({quality['quality_dead_letter_rate_critical']})")
        from lakehouse.core.logs import log_format

        log_form = log_format(raw["log_format"], PREFIX + SETTINGS["log_format"].env)
        max_lag = _positive_number("status_max_lag", raw["status_max_lag"])
        if not math.isfinite(max_lag) or max_lag != int(max_lag):
            raise LakehouseError(f"{PREFIX}STATUS_MAX_LAG must be a whole number of records, "
                                 f"got {raw['status_max_lag']!r}")
        lease, renew = (_positive_number(name, raw[name]) for name in ("writer_lease_seconds", "writer_renew_seconds"))
        if not (0 < renew and 2 * renew <= lease < math.inf):
            # a taker watches the lease for the lapse: a live holder must renew at least once within it
            raise LakehouseError(f"{PREFIX}WRITER_RENEW_SECONDS ({raw['writer_renew_seconds']}) must be above 0 and at "
                                 f"most half of {PREFIX}WRITER_LEASE_SECONDS ({raw['writer_lease_seconds']})")
        kafka_options = {
            key[len(KAFKA_OPTION_PREFIX):].lower().replace("_", "."): value
            for key, value in env.items()
            if key.startswith(KAFKA_OPTION_PREFIX)
        }
        return cls(
            profile=profile,
            home=Path(home),
            jars_dir=Path(raw["jars_dir"]),
            kafka_port=port,
            kafka_bootstrap_servers=raw["kafka_bootstrap_servers"] or f"127.0.0.1:{port}",
            schema_registry_url=raw["schema_registry_url"],
            spark_master=raw["spark_master"],
            spark_driver_memory=raw["spark_driver_memory"],
            jvm_options=raw["jvm_options"],
            spark_driver_host=raw["spark_driver_host"],
            spark_driver_bind_address=raw["spark_driver_bind_address"],
            spark_executor_memory=raw["spark_executor_memory"],
            spark_executor_cores=executor_cores,
            spark_cores_max=raw["spark_cores_max"],
            shuffle_partitions=partitions,
            catalog_type=raw["catalog_type"],
            publication_gate=raw["publication_gate"],
            catalog_uri=raw["catalog_uri"],
            warehouse=raw["warehouse"],
            s3_endpoint=raw["s3_endpoint"],
            s3_region=raw["s3_region"],
            checkpoint_root=Path(raw["checkpoint_root"]),
            trigger_interval=raw["trigger_interval"],
            thrift_host=raw["thrift_host"],
            thrift_port=thrift_port,
            thrift_user=raw["thrift_user"],
            kafka_options=kafka_options,
            writer_lease_seconds=lease,
            writer_renew_seconds=renew,
            **quality,
            log_format=log_form,
            status_max_lag=int(max_lag),
            status_max_model_age_minutes=_positive_number("status_max_model_age_minutes",
                                                          raw["status_max_model_age_minutes"]),
            status_max_maintenance_age_hours=_positive_number("status_max_maintenance_age_hours",
                                                              raw["status_max_maintenance_age_hours"]),
            metrics_port=_port_or_none("metrics_port", raw["metrics_port"]),
            metrics_bind_address=raw["metrics_bind_address"].strip(),
        )

    # Folders inside the state folder. Created on demand by whoever writes there.
    @property
    def kafka_dir(self) -> Path:
        return self.home / "kafka"

    @property
    def reports_dir(self) -> Path:
        return self.home / "reports"

    def kafka_client_config(self) -> dict[str, str]:
        """librdkafka / Java client options shared by producers, admin and Spark."""
        return {"bootstrap.servers": self.kafka_bootstrap_servers, **self.kafka_options}

    def java_kafka_options(self) -> dict[str, str]:
        """The Kafka options for Spark's (Java) Kafka client, from the librdkafka-style ones.

        Producers use librdkafka, Spark the Java client; most options mean the same in both,
        but SASL credentials and the CA file are spelled differently. One set of variables
        configures both: ``sasl.username``/``sasl.password`` become a JAAS login for the
        mechanism, ``ssl.ca.location`` a PEM trust store.
        """
        options = dict(self.kafka_options)
        username, password = options.pop("sasl.username", None), options.pop("sasl.password", None)
        if username is not None and "sasl.jaas.config" not in options:
            mechanism = options.get("sasl.mechanism", options.get("sasl.mechanisms", "PLAIN")).upper()
            module = ("org.apache.kafka.common.security.scram.ScramLoginModule" if mechanism.startswith("SCRAM")
                      else "org.apache.kafka.common.security.plain.PlainLoginModule")
            escaped = [(v or "").replace("\\", "\\\\").replace('"', '\\"') for v in (username, password)]
            options["sasl.jaas.config"] = f'{module} required username="{escaped[0]}" password="{escaped[1]}";'
        if "sasl.mechanisms" in options:  # librdkafka's plural alias
            options.setdefault("sasl.mechanism", options.pop("sasl.mechanisms"))
        ca = options.pop("ssl.ca.location", None)
        if ca and "ssl.truststore.location" not in options:
            options["ssl.truststore.type"] = "PEM"
            options["ssl.truststore.location"] = ca
        return options

    def required_credentials(self) -> list[str]:
        """Environment variables that must hold secrets for this configuration.

        Secrets never live in settings files: S3 access goes through the AWS SDK's default
        chain (these variables), Kafka SASL through LAKEHOUSE_KAFKA_OPT_SASL_*.
        """
        needed = []
        if self.warehouse.startswith(("s3://", "s3a://")) and self.s3_endpoint:
            needed += ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]
        if "SASL" in self.kafka_options.get("security.protocol", "").upper():
            needed += [KAFKA_OPTION_PREFIX + "SASL_USERNAME", KAFKA_OPTION_PREFIX + "SASL_PASSWORD"]
        return needed

    def shown(self) -> dict[str, str]:
        """Every setting as text for printing (`lakehouse config`): secrets never appear."""
        shown = {name: str(getattr(self, name)) for name in SETTINGS}
        shown["schema_registry_url"] = redact_url(self.schema_registry_url)
        shown["kafka_options"] = ", ".join(f"{k}=***" for k in self.kafka_options) or "(none)"
        return shown

    def spark_inputs(self) -> dict[str, str]:
        """The values the Spark session is built from (see lakehouse.core.spark.spark_conf)."""
        return {
            "home": str(self.home),
            "jars_dir": str(self.jars_dir),
            "spark_master": self.spark_master,
            "spark_driver_memory": self.spark_driver_memory,
            # appended to the driver's Java options as is: with its separating space, if any
            "jvm_options": f" {self.jvm_options}" if self.jvm_options else "",
            "spark_driver_host": self.spark_driver_host,
            "spark_driver_bind_address": self.spark_driver_bind_address,
            "shuffle_partitions": str(self.shuffle_partitions),
            "catalog_type": self.catalog_type,
            "catalog_uri": self.catalog_uri,
            "warehouse": self.warehouse,
            "s3_endpoint": self.s3_endpoint,
            "s3_region": self.s3_region,
        }


def jinja_spark_inputs() -> dict[str, str]:
    """The same inputs as Jinja expressions, for dbt's profiles.yml.

    dbt renders profiles.yml with ``env_var()``, so the profile follows the same
    ``LAKEHOUSE_*`` variables; unset, the state folder is ``.lakehouse`` in the folder
    `dbt` runs from (the project root, where dbt_project.yml is).
    """
    home_expr = f"env_var('{PREFIX}HOME', env_var('PWD', '.') ~ '/.lakehouse')"
    # The `local` target is the local platform: a JDBC catalog and a loopback driver. The
    # cluster's catalog is configured in its Thrift Server, not in the dbt profile.
    inputs = {"home": "{{ " + home_expr + " }}", "catalog_type": "jdbc", "s3_endpoint": "", "s3_region": "",
              "spark_driver_host": "127.0.0.1", "spark_driver_bind_address": "127.0.0.1"}
    jvm_options = f"env_var('{PREFIX}{SETTINGS['jvm_options'].env}', '')"
    inputs["jvm_options"] = "{{ ' ' ~ " + jvm_options + " if " + jvm_options + " else '' }}"  # as Settings.spark_inputs
    for name in ("jars_dir", "spark_master", "spark_driver_memory", "shuffle_partitions", "catalog_uri",
                 "warehouse"):
        setting = SETTINGS[name]
        # The default is rendered with a placeholder home that splices the home expression
        # into a Jinja string concatenation: 'jdbc:sqlite:' ~ <home> ~ '/catalog.db'.
        default_expr = "'" + setting.default("' ~ " + home_expr + " ~ '") + "'"
        default_expr = default_expr.replace("'' ~ ", "").replace(" ~ ''", "")
        inputs[name] = "{{ env_var('" + PREFIX + setting.env + "', " + default_expr + ") }}"
    return inputs
