"""An Iceberg REST catalog server on this machine, for the tests of the cluster profile.

It is Iceberg's own RESTCatalogServer (jvm/rest-catalog: the iceberg-open-api test fixtures,
the server the apache/iceberg-rest-fixture image of docker-compose.yml runs), serving the
project's JDBC catalog on SQLite (FencedJdbcCatalog, jvm/catalog: table commits behind the
single-writer fence of ARCHITECTURE §8, checked here on the server) over the REST protocol,
with a file:// warehouse. Spark, dbt's Thrift
Server and pyiceberg then reach the catalog only over HTTP, as on a cluster.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lakehouse.commands.cluster import spark_home
from lakehouse.core.local_kafka import free_port
from lakehouse.core.spark import FENCED_JDBC_CATALOG
from tests.integration.processes import http_answers, running, wait_until

SERVER_CLASS = "org.apache.iceberg.rest.RESTCatalogServer"


@contextmanager
def rest_catalog(jars_dir: Path, folder: Path, warehouse: str, s3=None) -> Iterator[str]:
    """Run the server until the block ends; yield its URI. With ``s3`` (an S3Store), the
    warehouse is on that store, written with S3FileIO as the compose stack's catalog does."""
    jars = jars_dir / "rest-catalog"
    if not list(jars.glob("iceberg-open-api-*-test-fixtures.jar")):
        raise RuntimeError(f"the REST catalog server's jars are missing in {jars}: run `make setup`")
    # Hadoop's FileSystem (for the file:// warehouse) from Spark's own jars: one copy, one version.
    extra = sorted(str(p) for p in (spark_home() / "jars").glob("hadoop-client-*.jar"))
    extra += [str(p) for p in (spark_home() / "jars").glob("commons-logging-*.jar")]
    # The catalog it serves: the project's fenced JDBC catalog (lakehouse/core/spark.py's too).
    extra += [str(p) for p in (jars_dir / "spark").glob("lakehouse-catalog-*.jar")]
    port = free_port()
    env = {
        **os.environ,
        # CATALOG_<PROPERTY>: `__` is `-`, `_` is `.` (Iceberg's RCKUtils).
        "CATALOG_CATALOG__IMPL": FENCED_JDBC_CATALOG,
        "CATALOG_URI": f"jdbc:sqlite:{folder}/rest-catalog.db",
        "CATALOG_JDBC_SCHEMA__VERSION": "V1",
        "CATALOG_WAREHOUSE": warehouse,
        "CATALOG_REST_PORT": str(port),
    }
    if s3 is not None:
        env.update({**s3.env(), "CATALOG_IO__IMPL": "org.apache.iceberg.aws.s3.S3FileIO",
                    "CATALOG_S3_ENDPOINT": s3.endpoint, "CATALOG_S3_PATH__STYLE__ACCESS": "true"})
    folder.mkdir(parents=True, exist_ok=True)
    uri = f"http://127.0.0.1:{port}"
    log = folder / "rest-catalog.log"
    command = ["java", "-Xmx256m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
               "-cp", ":".join([f"{jars}/*", *extra]), SERVER_CLASS]
    with running(command, env, log) as process:
        wait_until(lambda: http_answers(f"{uri}/v1/config"), "the REST catalog server", log, 60, process)
        yield uri
