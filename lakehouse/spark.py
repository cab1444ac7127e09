"""The one place that builds the SparkSession.

Every Spark process of the project gets the same configuration from here: the streaming
jobs and the CLI through :func:`get_spark`, and dbt (which builds its own session in its
own process, ``method: session``) through ``profiles.yml``, which :func:`render_dbt_profile`
generates from the same :func:`spark_conf` and a test keeps in step with this module.
"""

from __future__ import annotations

from pathlib import Path

from lakehouse.config import CATALOG_NAME, NAMESPACES, Settings, jinja_spark_inputs
from lakehouse.errors import LakehouseError

PACKAGE_DIR = Path(__file__).resolve().parent
LOG4J_FILE = "log4j2-spark.properties"


def spark_conf(inputs: dict[str, str], package_dir: str) -> dict[str, str]:
    """Spark configuration from plain strings (real values, or Jinja expressions for dbt)."""
    home = inputs["home"]
    jars = f"{home}/jars/spark"
    return {
        "spark.master": inputs["spark_master"],
        "spark.driver.memory": inputs["spark_driver_memory"],
        # Jars from jvm/pom.xml on the driver's system classpath: java.sql.DriverManager only
        # finds the SQLite JDBC driver there, and in local mode the executors share this JVM.
        # (spark.jars does not expand globs; a cluster master needs them listed, see issue 8.)
        "spark.driver.extraClassPath": f"{jars}/*",
        # Local platform: the driver listens on loopback only.
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{package_dir}/{LOG4J_FILE}",
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        f"spark.sql.catalog.{CATALOG_NAME}": "org.apache.iceberg.spark.SparkCatalog",
        f"spark.sql.catalog.{CATALOG_NAME}.type": "jdbc",
        f"spark.sql.catalog.{CATALOG_NAME}.uri": inputs["catalog_uri"],
        # V1 adds the iceberg_type column pyiceberg's SqlCatalog understands: both open one database.
        f"spark.sql.catalog.{CATALOG_NAME}.jdbc.schema-version": "V1",
        # Several processes (jobs, dbt, pyiceberg) commit to one SQLite file: wait, don't fail.
        f"spark.sql.catalog.{CATALOG_NAME}.jdbc.journal_mode": "WAL",
        f"spark.sql.catalog.{CATALOG_NAME}.jdbc.busy_timeout": "30000",
        f"spark.sql.catalog.{CATALOG_NAME}.warehouse": inputs["warehouse"],
        # Jobs, dbt and pyiceberg commit from separate processes: always read the latest metadata.
        f"spark.sql.catalog.{CATALOG_NAME}.cache-enabled": "false",
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
        # A micro-batch is cached once and read twice at once: compressing it cost more CPU
        # than it saved (benchmarks/RESULTS.md, ingestion throughput: +20% without).
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
    }


def get_spark(settings: Settings, app_name: str = "lakehouse"):
    """The active SparkSession, created from the settings if there is none yet."""
    missing = [p for p in ("iceberg-spark-runtime", "sqlite-jdbc", "spark-sql-kafka")
               if not list((settings.jars_dir / "spark").glob(f"{p}*.jar"))]
    if missing:
        raise LakehouseError(
            f"Spark jars missing in {settings.jars_dir / 'spark'} ({', '.join(missing)}): run `make setup`"
        )
    import os

    from pyspark.sql import SparkSession

    # Spark resolves its local address before reading any conf; loopback avoids a warning
    # and never exposes the driver on a network interface.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    builder = SparkSession.builder.appName(app_name)
    for key, value in spark_conf(settings.spark_inputs(), str(PACKAGE_DIR)).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    return spark


def session_on(spark, settings: Settings):
    """A new session of the running application whose catalog is the one ``settings`` name.

    For tests and benchmarks that need a lakehouse of their own (own catalog, own warehouse)
    next to the one the application started with: one JVM, two catalogs. Only the per-session
    catalog settings change; everything static (jars, extensions, memory) is the application's.
    """
    session = spark.newSession()
    conf = spark_conf(settings.spark_inputs(), str(PACKAGE_DIR))
    for key, value in conf.items():
        if key.startswith(f"spark.sql.catalog.{CATALOG_NAME}") or key == "spark.sql.shuffle.partitions":
            session.conf.set(key, value)
    return session


def ensure_namespaces(spark) -> None:
    for namespace in NAMESPACES:
        spark.sql(f"create namespace if not exists {CATALOG_NAME}.{namespace}")


def relation_exists(spark, name: str) -> bool:
    """Whether a table or view of the lakehouse catalog exists.

    Not catalog.tableExists(): it says False for the catalog's views (the live CDC mirrors).
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
# lakehouse/spark.py (the one place that configures Spark); tests fail if the two differ.
#
# `local` (default): dbt builds its own Spark session in-process (method: session) on the
# same Iceberg catalog as the streaming jobs. It follows the same LAKEHOUSE_* variables;
# with none set, the state folder is .lakehouse/ in the folder you run dbt from (the root).
"""


def render_dbt_profile() -> str:
    conf = spark_conf(jinja_spark_inputs(), "{{ env_var('PWD', '.') }}/lakehouse")
    lines = [
        DBT_PROFILE_HEADER.rstrip("\n"),
        "lakehouse:",
        "  target: local",
        "  outputs:",
        "    local:",
        "      type: spark",
        "      method: session",
        "      host: localhost",
        "      schema: silver",
        "      threads: 1",
        "      server_side_parameters:",
    ]
    for key, value in conf.items():
        lines.append(f'        {key}: "{value}"')
    return "\n".join(lines) + "\n"
