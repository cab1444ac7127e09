"""The one place that builds the SparkSession.

Every Spark process of the project gets the same configuration from here: the streaming
jobs and the CLI through :func:`get_spark`, and dbt (which builds its own session in its
own process, ``method: session``) through ``profiles.yml``, which :func:`render_dbt_profile`
generates from the same :func:`spark_conf` and a test keeps in step with this module.
"""

from __future__ import annotations

from pathlib import Path

from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import (
    CATALOG_NAME,
    NAMESPACES,
    PREFIX,
    SETTINGS,
    SETTINGS_RESOLVED,
    THRIFT_PASSWORD,
    Settings,
    jinja_spark_inputs,
)

PACKAGE_DIR = Path(__file__).resolve().parent
LOG4J_FILE = "log4j2-spark.properties"
# Options of every Spark JVM the project starts (driver; executors on a cluster). Spark generates
# one Java method per whole-stage codegen stage, and HotSpot never compiles a method of more than
# 8,000 bytes of bytecode (DontCompileHugeMethods): a wide stage runs interpreted for every record,
# for good. Purchases' Avro decoding is such a stage in the ingestion job (7,859 bytes on a unit
# plan, over the limit on the job's): with the option the job went from 0.60 to 0.85 of the
# checked append (medians of three rounds; 0.93 in a warm one: benchmarks/RESULTS.md, issue 43).
# Spark's own alternative, a lower spark.sql.codegen.hugeMethodLimit, gives up whole-stage
# codegen for the stage instead.
JIT_OPTIONS = "-XX:-DontCompileHugeMethods"


# Iceberg's JDBC catalog whose commits carry the single-writer fence (jvm/catalog, ARCHITECTURE
# §8 "One writer per stream"): a bronze append made under a stream's writer lease commits only
# while the table's lease is still that job's. Named as the implementation, in place of `type`
# (Iceberg refuses both).
FENCED_JDBC_CATALOG = "io.github.lakehouse.catalog.FencedJdbcCatalog"


def catalog_conf(inputs: dict[str, str]) -> dict[str, str]:
    """The Iceberg catalog `lake`: JDBC on SQLite (this machine) or REST (a cluster)."""
    prefix = f"spark.sql.catalog.{CATALOG_NAME}"
    conf = {prefix: "org.apache.iceberg.spark.SparkCatalog"}
    if inputs["catalog_type"] == "jdbc":
        conf[f"{prefix}.catalog-impl"] = FENCED_JDBC_CATALOG
    else:
        # a REST catalog: the fence runs on its server, when that serves the catalog above
        conf[f"{prefix}.type"] = inputs["catalog_type"]
    conf[f"{prefix}.uri"] = inputs["catalog_uri"]
    if inputs["catalog_type"] == "jdbc":
        conf.update({
            # V1 adds the iceberg_type column pyiceberg's SqlCatalog understands: both open one database.
            f"{prefix}.jdbc.schema-version": "V1",
            # Several processes (jobs, dbt, pyiceberg) commit to one SQLite file: wait, don't fail.
            f"{prefix}.jdbc.journal_mode": "WAL",
            f"{prefix}.jdbc.busy_timeout": "30000",
        })
    conf[f"{prefix}.warehouse"] = inputs["warehouse"]
    if inputs["warehouse"].startswith(("s3://", "s3a://")):
        # Iceberg's own S3 client (iceberg-aws-bundle): no Hadoop S3A needed. Credentials come
        # from the AWS SDK's default chain (AWS_ACCESS_KEY_ID/..., never from this conf).
        conf[f"{prefix}.io-impl"] = "org.apache.iceberg.aws.s3.S3FileIO"
        conf[f"{prefix}.client.region"] = inputs["s3_region"]
        if inputs["s3_endpoint"]:
            conf[f"{prefix}.s3.endpoint"] = inputs["s3_endpoint"]
            # MinIO and most S3-compatible stores serve buckets as paths, not subdomains.
            conf[f"{prefix}.s3.path-style-access"] = "true"
    # Jobs, dbt and pyiceberg commit from separate processes: always read the latest metadata.
    conf[f"{prefix}.cache-enabled"] = "false"
    return conf


# The JVM classes PySpark looks up on every column function and every micro-batch
# (pin_jvm_classes), by their full names.
PINNED_CLASSES = (
    "org.apache.spark.sql.functions",
    "org.apache.spark.api.python.PythonUtils",
    "org.apache.spark.sql.api.python.PythonSQLUtils",
    "org.apache.spark.sql.Observation",  # DataFrame.observe: each batch's counts
    "org.apache.spark.util.Utils",  # the text of every Java exception PySpark converts
    "py4j.reflection.TypeUtil",  # is_instance_of: a dozen per Java exception PySpark converts
)


def spark_conf(inputs: dict[str, str], package_dir: str) -> dict[str, str]:
    """Spark configuration from plain strings (real values, or Jinja expressions for dbt)."""
    home = inputs["home"]
    return {
        "spark.master": inputs["spark_master"],
        "spark.driver.memory": inputs["spark_driver_memory"],
        # Jars from jvm/pom.xml on the driver's system classpath: java.sql.DriverManager only
        # finds the SQLite JDBC driver there, and in local mode the executors share this JVM.
        # (A cluster's executors get them listed in spark.jars: see get_spark and submit.)
        "spark.driver.extraClassPath": f"{inputs['jars_dir']}/spark/*",
        # Local platform: the driver listens on loopback only. In a container, the cluster
        # profile binds all interfaces and names the host executors reach it at.
        "spark.driver.host": inputs["spark_driver_host"],
        "spark.driver.bindAddress": inputs["spark_driver_bind_address"],
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{package_dir}/{LOG4J_FILE} {JIT_OPTIONS}"
                                         f"{inputs['jvm_options']}",
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        **catalog_conf(inputs),
        "spark.sql.defaultCatalog": CATALOG_NAME,
        # No Hive metastore: dbt-spark asks for Hive support, this keeps Derby out of it.
        "spark.sql.catalogImplementation": "in-memory",
        "spark.sql.warehouse.dir": f"{home}/spark-warehouse",
        "spark.sql.shuffle.partitions": inputs["shuffle_partitions"],
        "spark.sql.session.timeZone": "UTC",
        # dbt-spark forces ANSI off in its sessions; jobs use the same SQL semantics.
        "spark.sql.ansi.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.streaming.stopGracefullyOnShutdown": "true",
        # What a job caches is read back at once: a crashed batch's remaining records while it
        # is completed, a dead-letter replay's decoded records (a batch as it streams is not
        # cached: ingestion/job.py). Compressing the cache cost more CPU than it saved when
        # every batch was cached whole (benchmarks/RESULTS.md, ingestion throughput: +20%
        # without); not measured since.
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
        # PySpark records the Python call site of every DataFrame function it calls (a Python
        # stack capture and four JVM round trips each), to name it in error messages. The job
        # builds each micro-batch's plan afresh: without it, building a batch's plan took 40-60
        # ms instead of 110-140 (benchmarks/RESULTS.md, issue 43). Errors still name the failing
        # expression, not the Python line that built it.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
    }


def is_local_master(master: str) -> bool:
    return master.startswith("local")


def spark_jars(settings: Settings) -> list[Path]:
    return sorted((settings.jars_dir / "spark").glob("*.jar"))


def cluster_conf(settings: Settings) -> dict[str, str]:
    """What only a cluster master needs: executor resources, and the jars shipped to executors
    (spark.jars lists files; it does not expand globs)."""
    if is_local_master(settings.spark_master):
        return {}
    conf = {
        "spark.jars": ",".join(str(jar) for jar in spark_jars(settings)),
        "spark.executor.memory": settings.spark_executor_memory,
        "spark.executor.cores": str(settings.spark_executor_cores),
        "spark.executor.extraJavaOptions": JIT_OPTIONS,
    }
    if settings.spark_cores_max:
        conf["spark.cores.max"] = settings.spark_cores_max
    return conf


def get_spark(settings: Settings, app_name: str = "lakehouse"):
    """The active SparkSession, created from the settings if there is none yet."""
    missing = [p for p in ("iceberg-spark-runtime", "sqlite-jdbc", "spark-sql-kafka", "lakehouse-catalog")
               if not list((settings.jars_dir / "spark").glob(f"{p}*.jar"))]
    if missing:
        raise LakehouseError(
            f"Spark jars missing in {settings.jars_dir / 'spark'} ({', '.join(missing)}): run `make setup`"
        )
    import os

    from pyspark.sql import SparkSession

    # Spark resolves its local address before reading any conf; loopback avoids a warning
    # and never exposes the driver on a network interface.
    if settings.spark_driver_bind_address != "0.0.0.0":
        os.environ.setdefault("SPARK_LOCAL_IP", settings.spark_driver_bind_address)

    builder = SparkSession.builder.appName(app_name)
    conf = {**spark_conf(settings.spark_inputs(), str(PACKAGE_DIR)), **cluster_conf(settings)}
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    pin_jvm_classes(spark)
    return spark


def pin_jvm_classes(spark) -> None:
    """Bind the JVM classes PySpark names on every column function and every micro-batch to the
    Python side of the gateway once (``PINNED_CLASSES``).

    PySpark asks the JVM for Spark's ``functions`` class on every column function: by its full
    name in ``F.col``, ``F.when``... (pyspark/sql/functions/builtin.py), by its short name in
    ``==``, ``&``, ``isNull``... (``sc._jvm.functions``, pyspark/sql/classic/column.py), and for
    ``PythonUtils`` by its short name in every function of several columns (``F.struct``,
    ``select``). py4j resolves a short name by trying it bare and then under each imported
    package, and a name reached attribute by attribute (``jvm.py4j.reflection.TypeUtil``, which
    PySpark's conversion of a Java exception asks a dozen times) package by package: every miss
    is a class loader's search through all the jars on the class path. Ingestion builds each
    micro-batch's plan afresh (foreachBatch), hundreds of such calls per batch, and reading its
    counts (``Observation.get``) ends on a Java exception, the end of the map's iterator: profiled,
    the lookups were a fifth of the job's JVM samples, and the exception's another tenth
    (benchmarks/RESULTS.md, issue 43). Bound as attributes of the gateway's JVM view, under their
    full name, their short name and package by package, they no longer reach the JVM."""
    jvm = spark.sparkContext._jvm
    for full in PINNED_CLASSES:
        if full in vars(jvm):
            continue
        found = getattr(jvm, full)
        setattr(jvm, full, found)
        setattr(jvm, full.rsplit(".", 1)[1], found)
        # package by package: jvm.py4j, its .reflection, its .TypeUtil (a package already bound
        # keeps its object, so classes of one package share it)
        parent = jvm
        for part in full.split(".")[:-1]:
            if part not in vars(parent):
                setattr(parent, part, getattr(parent, part))
            parent = getattr(parent, part)
        setattr(parent, full.rsplit(".", 1)[1], found)


def session_on(spark, settings: Settings):
    """A new session of the running application whose catalog is the one ``settings`` name.

    For tests and benchmarks that need a lakehouse of their own (own catalog, own warehouse)
    next to the one the application started with: one JVM, two catalogs. Only the per-session
    catalog settings change; everything static (jars, extensions, memory) is the application's.
    """
    session = spark.newSession()
    conf = spark_conf(settings.spark_inputs(), str(PACKAGE_DIR))
    for kind in ("type", "catalog-impl"):  # a catalog of the other kind: Iceberg refuses both set
        if f"spark.sql.catalog.{CATALOG_NAME}.{kind}" not in conf:
            session.conf.unset(f"spark.sql.catalog.{CATALOG_NAME}.{kind}")
    for key, value in conf.items():
        if key.startswith(f"spark.sql.catalog.{CATALOG_NAME}") or key == "spark.sql.shuffle.partitions":
            session.conf.set(key, value)
    return session


def ensure_namespaces(spark) -> None:
    for namespace in NAMESPACES:
        spark.sql(f"create namespace if not exists {CATALOG_NAME}.{namespace}")


def relation_exists(spark, name: str) -> bool:
    """Whether a table or view of the lakehouse catalog exists.

    Not catalog.tableExists(): it says False for the catalog's views (the CDC changelogs).
    Resolving the name plans nothing and reads no data.
    """
    from pyspark.errors import AnalysisException

    try:
        spark.table(name)
    except AnalysisException as exc:
        if "TABLE_OR_VIEW_NOT_FOUND" in str(exc):
            return False
        raise
    return True


DBT_PROFILE_HEADER = """\
# dbt profile of the lakehouse. GENERATED by `lakehouse dbt-profile > profiles.yml` from
# lakehouse/core/spark.py (the one place that configures Spark); tests fail if the two differ.
#
# `local` (default): dbt builds its own Spark session in-process (method: session) on the
# same Iceberg catalog as the streaming jobs. It follows the same LAKEHOUSE_* variables;
# with none set, the state folder is .lakehouse/ in the folder you run dbt from (the root).
#
# `cluster`: dbt sends its SQL to a Spark Thrift Server (method: thrift), which holds the
# catalog settings itself (`lakehouse cluster thrift-server`, the docker-compose service
# spark-thrift). `lakehouse dbt run --target cluster`; LAKEHOUSE_THRIFT_HOST/_PORT say where it is.
# It logs in as LAKEHOUSE_THRIFT_USER with LAKEHOUSE_THRIFT_PASSWORD (SASL PLAIN, HiveServer2's
# CUSTOM mode); without a password it sends a placeholder, which only a server without
# authentication (on loopback) takes.
#
# Run dbt as `lakehouse dbt ...`: it resolves LAKEHOUSE_CONFIG_FILE and LAKEHOUSE_PROFILE into
# the variables below, which dbt alone cannot read, and holds the dbt-tables lock. A plain
# `dbt` with either of them set is refused here (the `host` of each target), whatever the
# command; a plain run, build, seed or snapshot is refused by the project's on-run-start hook.
"""

# The settings the profile reads: `lakehouse dbt` (dbt_env) puts each into dbt's environment.
DBT_PROFILE_SETTINGS = ("home", "jars_dir", "spark_master", "spark_driver_memory", "jvm_options",
                        "shuffle_partitions", "catalog_uri", "warehouse", "thrift_host", "thrift_port", "thrift_user")
# What the `cluster` target sends as the password when LAKEHOUSE_THRIFT_PASSWORD is unset: SASL PLAIN
# needs one, and a server without authentication takes any (PyHive sends "x" there).
NO_THRIFT_PASSWORD = "none"


def _unresolved_settings_check() -> str:
    """A Jinja expression that renders to nothing, or stops dbt when LAKEHOUSE_CONFIG_FILE or a
    LAKEHOUSE_PROFILE is set and `lakehouse dbt` did not resolve them (SETTINGS_RESOLVED).

    A profile can only read variables (env_var) and has no error function: asking for a
    variable that cannot exist, named by the message, is how it stops dbt with that line."""
    config, profile = f"{PREFIX}CONFIG_FILE", f"{PREFIX}{SETTINGS['profile'].env}"
    unresolved = (f"not env_var('{SETTINGS_RESOLVED}', '') and (env_var('{config}', '') or "
                  f"env_var('{profile}', 'local') not in ('', 'local'))")
    message = (f"('{config}' if env_var('{config}', '') else '{profile}') ~ ' is set, and a plain dbt does "
               f"not read it: run it as `lakehouse ' ~ flags.INVOCATION_COMMAND ~ '`'")
    return "{{ env_var(" + message + ") if " + unresolved + " else '' }}"


def render_dbt_profile() -> str:
    conf = spark_conf(jinja_spark_inputs(), "{{ env_var('PWD', '.') }}/lakehouse/core")
    check = _unresolved_settings_check()
    lines = [
        DBT_PROFILE_HEADER.rstrip("\n"),
        "lakehouse:",
        "  target: local",
        "  outputs:",
        "    local:",
        "      type: spark",
        "      method: session",
        f'      host: "{check}localhost"',
        "      schema: silver",
        "      threads: 1",
        "      server_side_parameters:",
    ]
    for key, value in conf.items():
        lines.append(f'        {key}: "{value}"')
    thrift = {name: SETTINGS[name] for name in ("thrift_host", "thrift_port", "thrift_user")}
    lines += [
        "    cluster:",
        "      type: spark",
        "      method: thrift",
        f"      host: \"{check}{{{{ env_var('{PREFIX}{thrift['thrift_host'].env}', "
        f"'{thrift['thrift_host'].default('')}') }}}}\"",
        f"      port: \"{{{{ env_var('{PREFIX}{thrift['thrift_port'].env}', "
        f"'{thrift['thrift_port'].default('')}') | as_number }}}}\"",
        f"      user: \"{{{{ env_var('{PREFIX}{thrift['thrift_user'].env}', "
        f"'{thrift['thrift_user'].default('')}') }}}}\"",
        # HiveServer2's CUSTOM mode (lakehouse/commands/cluster.py): SASL PLAIN, user and password
        "      auth: CUSTOM",
        f"      password: \"{{{{ env_var('{THRIFT_PASSWORD}', '') or '{NO_THRIFT_PASSWORD}' }}}}\"",
        "      schema: silver",
        "      threads: 1",
        # A server that is still starting (compose, the test's fixture) is waited for.
        "      connect_retries: 10",
        "      connect_timeout: 10",
    ]
    return "\n".join(lines) + "\n"
