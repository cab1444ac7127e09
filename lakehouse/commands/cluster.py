"""Running the lakehouse on a Spark cluster: standalone master and workers, the Thrift Server
for dbt, the submission of the ingestion job, and the one-shot setup of a fresh platform.

Everything is launched from PySpark's own distribution (the pyspark wheel carries Spark's
`bin/spark-class`, `bin/spark-submit` and jars, the Thrift Server's included), so the same
commands work on this machine, in the docker-compose containers and on any host with the
project installed. The commands here only assemble argument lists (pure, unit-tested); the
CLI runs them in the foreground, replacing its own process so signals reach the JVM.
"""

from __future__ import annotations

import os
import sys
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pyspark

from lakehouse.contracts.streams import load_pipeline
from lakehouse.core.errors import LakehouseError
from lakehouse.core.kafka_admin import admin_client, topic_names
from lakehouse.core.settings import (
    CATALOG_NAME,
    NAMESPACES,
    PREFIX,
    PROJECT_ROOT,
    QUALITY_NAMESPACE,
    SETTINGS,
    THRIFT_PASSWORD,
    Settings,
)
from lakehouse.core.spark import (
    JIT_OPTIONS,
    LOG4J_FILE,
    PACKAGE_DIR,
    cluster_conf,
    get_spark,
    spark_conf,
    spark_jars,
)
from lakehouse.operations.status import existing_catalog
from producers.delivery import ensure_topic

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
THRIFT_SERVER_CLASS = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"
# The Thrift Server's login check (jvm/thrift-auth): HiveServer2's CUSTOM authentication, the user
# and password of the server's environment. Spark's server also knows NONE, NOSASL, LDAP,
# KERBEROS and PAM; CUSTOM needs no directory service and no PAM module on the host.
THRIFT_AUTHENTICATOR_CLASS = "io.github.lakehouse.thrift.EnvironmentPasswordAuthenticator"
THRIFT_AUTH_JAR = "lakehouse-thrift-auth-"
THRIFT_DEFAULT_HOST = "127.0.0.1"  # `lakehouse cluster thrift-server` listens on loopback unless told
JOB_PACKAGES = ("lakehouse", "ingestion", "producers", "expectations")
JOB_ENTRY_POINT = PROJECT_ROOT / "ingestion" / "__main__.py"
PACKAGE_NAME = "lakehouse-jobs.zip"


def spark_home() -> Path:
    return Path(pyspark.__file__).resolve().parent


def _log4j_option() -> str:
    return f"-Dlog4j2.configurationFile=file:{PACKAGE_DIR}/{LOG4J_FILE}"


def daemon_env(settings: Settings, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment of master, worker and spark-submit processes."""
    env = dict(os.environ if base is None else base)
    env["SPARK_HOME"] = str(spark_home())
    if settings.spark_driver_bind_address != "0.0.0.0":
        # This machine's processes talk over loopback; without this Spark picks a network
        # interface and warns. In a container (bind 0.0.0.0) Spark's own choice is right.
        env.setdefault("SPARK_LOCAL_IP", settings.spark_driver_bind_address)
    # The launcher reads these for Master and Worker: our quiet logging, not Spark's INFO.
    env.setdefault("SPARK_DAEMON_JAVA_OPTS", _log4j_option())
    # Executors and the driver run the project's Python (the virtualenv's or the image's).
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # The Thrift Server's login check reads the user from its environment (a config file's included).
    env[PREFIX + SETTINGS["thrift_user"].env] = settings.thrift_user
    return env


def master_command(host: str, port: int, webui_port: int) -> list[str]:
    return [str(spark_home() / "bin" / "spark-class"), MASTER_CLASS,
            "--host", host, "--port", str(port), "--webui-port", str(webui_port)]


def worker_command(master: str, cores: int, memory: str, webui_port: int, work_dir: Path,
                   host: str | None = None) -> list[str]:
    command = [str(spark_home() / "bin" / "spark-class"), WORKER_CLASS,
               "--cores", str(cores), "--memory", memory, "--webui-port", str(webui_port),
               # Executors' working folders (jars, logs): under the state folder, not inside pyspark.
               "--work-dir", str(work_dir)]
    if host:
        command += ["--host", host]
    return [*command, master]


def _conf_arguments(conf: dict[str, str]) -> list[str]:
    arguments = []
    for key, value in conf.items():
        arguments += ["--conf", f"{key}={value}"]
    return arguments


def submit_conf(settings: Settings) -> dict[str, str]:
    """The session configuration of lakehouse.core.spark, for a JVM that spark-submit starts."""
    conf = {**spark_conf(settings.spark_inputs(), str(PACKAGE_DIR)), **cluster_conf(settings)}
    conf.pop("spark.master")  # given as --master
    conf.pop("spark.driver.memory")  # given as --driver-memory, before the JVM starts
    return conf


def submit_command(settings: Settings, job_args: list[str], package: Path) -> list[str]:
    """spark-submit of the ingestion job (client mode: the driver runs here)."""
    return [
        str(spark_home() / "bin" / "spark-submit"),
        "--master", settings.spark_master,
        "--name", "lakehouse-ingest",
        "--driver-memory", settings.spark_driver_memory,
        # Before the JVM starts: java.sql.DriverManager finds the SQLite driver only here.
        "--driver-class-path", f"{settings.jars_dir}/spark/*",
        "--jars", ",".join(str(jar) for jar in spark_jars(settings)),
        "--py-files", str(package),
        *_conf_arguments({k: v for k, v in submit_conf(settings).items() if k != "spark.jars"}),
        str(JOB_ENTRY_POINT), *job_args,
    ]


def is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def thrift_authentication(settings: Settings, bind_host: str, environ: dict[str, str]) -> bool:
    """Whether the Thrift Server checks a password (LAKEHOUSE_THRIFT_PASSWORD is set); refuses, in
    one line, a server without one listening beyond loopback (any host that reaches it could read
    and write every table of the catalog), and one whose login check is not built."""
    if environ.get(THRIFT_PASSWORD):
        if not any(jar.name.startswith(THRIFT_AUTH_JAR) for jar in spark_jars(settings)):
            raise LakehouseError(f"no {THRIFT_AUTH_JAR}*.jar in {settings.jars_dir / 'spark'} (the Thrift Server's "
                                 f"password check): run `make setup` (or set {PREFIX}JARS_DIR)")
        return True
    if not is_loopback(bind_host):
        raise LakehouseError(f"the Thrift Server would let anyone who reaches {bind_host} read and write the "
                             f"catalog: set {THRIFT_PASSWORD} (clients log in as {PREFIX}THRIFT_USER "
                             f"{settings.thrift_user!r} with it), or listen on {THRIFT_DEFAULT_HOST} (--host)")
    return False


def thrift_server_command(settings: Settings, port: int, bind_host: str, authenticate: bool = False) -> list[str]:
    """The Spark Thrift Server on the lakehouse catalog, for dbt's `cluster` target. With
    ``authenticate``, a login needs the user and password of the server's environment (the
    password is never on this command line, which every user of the host can read)."""
    state = settings.home / "thrift-server"
    conf = submit_conf(settings)
    conf.update({
        "spark.app.name": "lakehouse-thrift-server",
        # The server asks for Hive support whatever the conf says; its (unused) metastore goes
        # to the state folder instead of a metastore_db/ in the current folder. Every table
        # dbt reads and writes is in the Iceberg catalog `lake`, the session's default catalog.
        "spark.hadoop.javax.jdo.option.ConnectionURL":
            f"jdbc:derby:;databaseName={state}/metastore_db;create=true",
        "spark.driver.extraJavaOptions":
            f"{_log4j_option()} {JIT_OPTIONS} -Dderby.system.home={state} {settings.jvm_options}".rstrip(),
    })
    return [
        str(spark_home() / "bin" / "spark-submit"),
        "--master", settings.spark_master,
        "--class", THRIFT_SERVER_CLASS,
        "--driver-memory", settings.spark_driver_memory,
        "--driver-class-path", f"{settings.jars_dir}/spark/*",
        *_conf_arguments(conf),
        "spark-internal",
        "--hiveconf", f"hive.server2.thrift.port={port}",
        "--hiveconf", f"hive.server2.thrift.bind.host={bind_host}",
        # HiveServer2 reads --hiveconf as Java system properties, which the CUSTOM mode's own
        # configuration (a new HiveConf per login) reads too
        *(["--hiveconf", "hive.server2.authentication=CUSTOM",
            "--hiveconf", f"hive.server2.custom.authentication.class={THRIFT_AUTHENTICATOR_CLASS}"]
          if authenticate else ["--hiveconf", "hive.server2.authentication=NONE"]),
    ]


def build_package(settings: Settings) -> Path:
    """A zip of the project's Python packages for executors' Python workers (--py-files).

    The ingestion job runs no Python on executors today (decoding and writing are JVM code),
    but a job whose functions reference project modules (a Python UDF, an RDD map) needs
    them there; shipping the zip keeps a cluster able to run whatever the driver can.
    Rebuilt on every submission: it takes milliseconds and can never be stale.
    """
    target = settings.home / "dist" / PACKAGE_NAME
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in JOB_PACKAGES:
            for path in sorted((PROJECT_ROOT / package).rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts:
                    archive.write(path, path.relative_to(PROJECT_ROOT).as_posix())
    partial.replace(target)
    return target


def check_submission(settings: Settings) -> None:
    """Fail with one line before a JVM starts when the submission cannot work."""
    if not spark_jars(settings):
        raise LakehouseError(f"no jars in {settings.jars_dir / 'spark'}: run `make setup` "
                             f"(or set {PREFIX}JARS_DIR)")
    missing = [name for name in settings.required_credentials() if not os.environ.get(name)]
    if missing:
        raise LakehouseError(f"the configuration needs {', '.join(missing)} in the environment "
                             "(secrets are never read from files)")


# Thrift clients (PyHive, so dbt's `cluster` target) open every session with `USE default`;
# with `lake` as the default catalog that namespace must exist there.
SESSION_NAMESPACE = "default"


def ensure_session_namespace(settings: Settings) -> None:
    """Create `lake.default` before the Thrift Server starts (pyiceberg: no Spark needed)."""
    catalog = existing_catalog(settings)
    if catalog is None:
        raise LakehouseError(f"no catalog at {settings.catalog_uri} yet: run `lakehouse cluster init` "
                             "(or ingest something) first")
    try:
        catalog.create_namespace_if_not_exists(SESSION_NAMESPACE)
    except Exception as exc:  # network, permissions: one line, not a stack trace
        raise LakehouseError(f"cannot create namespace {SESSION_NAMESPACE!r} in {settings.catalog_uri}: {exc}") \
            from None


def wait_for_services(settings: Settings, timeout_s: float = 300.0) -> None:
    """Wait until Kafka (and the REST catalog, when used) answer: compose starts them together."""
    deadline = time.monotonic() + timeout_s
    while True:
        problems = []
        try:
            topic_names(admin_client(settings), settings)
        except LakehouseError as exc:
            problems.append(str(exc))
        if settings.catalog_type == "rest":
            try:
                urllib.request.urlopen(settings.catalog_uri.rstrip("/") + "/v1/config", timeout=5).close()
            except (urllib.error.URLError, OSError) as exc:
                problems.append(f"REST catalog {settings.catalog_uri}: {exc}")
        if not problems:
            return
        if time.monotonic() > deadline:
            raise LakehouseError("services not ready after "
                                 f"{timeout_s:.0f}s: {'; '.join(problems)}")
        print(f"waiting for services: {problems[0]}", flush=True)
        time.sleep(5)


def init_platform(settings: Settings, partitions: int = 3) -> dict[str, list[str]]:
    """Create every stream's topic and the catalog's namespaces; idempotent."""
    check_submission(settings)
    wait_for_services(settings)
    topics = sorted({spec.topic for spec in load_pipeline().values()})
    for topic in topics:
        ensure_topic(settings, topic, partitions=partitions)
    spark = get_spark(settings, app_name="lakehouse-init")
    namespaces = [*NAMESPACES, QUALITY_NAMESPACE, SESSION_NAMESPACE]
    for namespace in namespaces:
        spark.sql(f"create namespace if not exists {CATALOG_NAME}.{namespace}")
    return {"topics": topics, "namespaces": namespaces}
