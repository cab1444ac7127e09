"""The lakehouse beyond one JVM: a Spark standalone cluster, a REST catalog, dbt over Thrift.

On this machine, from PySpark's own launcher classes (`lakehouse cluster master|worker`,
i.e. bin/spark-class): a standalone master and one worker. The catalog is the cluster
profile's kind, an Iceberg REST catalog server (Iceberg's own, see rest_catalog.py), so every
process reaches it over HTTP only, and the warehouse is s3:// on an S3-compatible store
(S3Proxy, see s3_store.py) written through Iceberg's S3FileIO with the AWS_* keys.
`lakehouse cluster init` creates topics and namespaces; the ingestion job is submitted with
`lakehouse submit` (spark-submit, client mode), so the Kafka reads, the decoders and the
Iceberg writes run in an executor JVM the worker starts, not in the driver.
Then a Spark Thrift Server (`lakehouse cluster thrift-server`) opens the same catalog, on
loopback only and with a password from its environment (LAKEHOUSE_THRIFT_PASSWORD): a login
without it or with another is refused, and `lakehouse dbt build --target cluster` runs every
model and test through it (method: thrift) with the password the profile takes from the
same variable.

Real components only: the broker, Spark's master/worker/executor processes, Iceberg's REST
catalog server, an S3 API server, the Thrift Server, Iceberg tables read back through Spark
and pyiceberg.
What the compose stack has and this does not: MinIO instead of S3Proxy, and the images.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from lakehouse.commands import cluster
from lakehouse.core.local_kafka import free_port
from lakehouse.core.settings import Settings
from lakehouse.operations.dbt import run_dbt
from lakehouse.operations.status import pyiceberg_catalog
from producers.run import produce
from tests.integration.own_lakehouse import cli_env, own_lakehouse
from tests.integration.processes import running, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

LAKEHOUSE = str(Path(sys.executable).with_name("lakehouse"))
THRIFT_PASSWORD = "correct horse battery staple"  # the Thrift Server's and dbt's, from the environment
COUNTS = {"user_events": 400, "employees": 200, "purchases": 300, "customers": 150, "accounts": 150}


def master_state(webui_port: int) -> dict | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{webui_port}/json/", timeout=5) as response:
            return json.load(response)
    except OSError:
        return None


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def lakehouse(spark, settings, tmp_path_factory):
    with own_lakehouse(spark, settings, tmp_path_factory, "cluster", rest=True, s3=True,
                       publication_gate=True) as own:
        yield own


def test_init_creates_every_topic_and_namespace_once(lakehouse):
    """`lakehouse cluster init`, the compose stack's one-shot setup, here against the REST catalog."""
    from lakehouse.contracts.streams import load_pipeline
    from lakehouse.core.kafka_admin import admin_client

    own, _, _ = lakehouse
    topics = {spec.topic for spec in load_pipeline().values()}
    admin = admin_client(own)
    assert not topics & set(admin.list_topics(timeout=10).topics)
    for _ in range(2):  # the second run finds everything there and changes nothing
        result = subprocess.run([LAKEHOUSE, "cluster", "init"], env=cli_env(own), capture_output=True, text=True,
                                timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        assert "namespaces: bronze, silver, gold, quality, default" in result.stdout
    metadata = admin.list_topics(timeout=10).topics
    assert {topic: len(metadata[topic].partitions) for topic in topics} == {topic: 3 for topic in topics}
    namespaces = {ns[0] for ns in pyiceberg_catalog(own).list_namespaces()}
    assert {"bronze", "silver", "gold", "quality", "default"} <= namespaces


@pytest.fixture(scope="module")
def produced(lakehouse) -> dict[str, int]:
    own, _, _ = lakehouse
    delivered = {}
    for stream, count in COUNTS.items():
        report = produce(own, stream, count, seed=7, progress=False)
        assert report.failed == 0
        delivered[stream] = report.delivered
    return delivered


@pytest.fixture(scope="module")
def standalone(lakehouse, tmp_path_factory):
    """A standalone master and one worker (1 core, 1 GB) on loopback."""
    own, _, _ = lakehouse
    logs = tmp_path_factory.mktemp("cluster-logs")
    port, webui, worker_ui = free_port(), free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    env = cli_env(own)
    master_cmd = [LAKEHOUSE, "cluster", "master", "--host", "127.0.0.1", "--port", str(port),
                  "--webui-port", str(webui)]
    worker_cmd = [LAKEHOUSE, "cluster", "worker", url, "--host", "127.0.0.1", "--cores", "1",
                  "--memory", "1g", "--webui-port", str(worker_ui)]
    with running(master_cmd, env, logs / "master.log"):
        wait_until(lambda: master_state(webui), "standalone master", logs / "master.log")
        with running(worker_cmd, env, logs / "worker.log"):
            wait_until(lambda: (master_state(webui) or {}).get("aliveworkers") == 1, "worker registration",
                       logs / "worker.log")
            yield {"url": url, "webui": webui, "work_dir": own.home / "spark-work"}


@pytest.fixture(scope="module")
def submitted(lakehouse, produced, standalone):
    """`lakehouse submit ingest all --available-now` against the standalone master."""
    own, _, _ = lakehouse
    env = {**cli_env(own), "LAKEHOUSE_SPARK_MASTER": standalone["url"], "LAKEHOUSE_SPARK_DRIVER_MEMORY": "1g",
           "LAKEHOUSE_SPARK_EXECUTOR_MEMORY": "1g", "LAKEHOUSE_SPARK_EXECUTOR_CORES": "1"}
    result = subprocess.run([LAKEHOUSE, "submit", "ingest", "all", "--available-now"], env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return result.stdout + result.stderr


def test_ingestion_submitted_to_a_standalone_cluster_lands_every_record(lakehouse, produced, submitted,
                                                                         standalone):
    own, session, _ = lakehouse
    assert f"--master {standalone['url']}" in submitted  # the command the CLI echoed before exec
    for stream, delivered in produced.items():
        bronze = session.table(f"bronze.{stream}").count()
        dead = session.table("bronze.dead_letters").where(f"stream = '{stream}'").count()
        assert (stream, bronze, dead) == (stream, delivered, 0)  # no faults were injected
        assert session.table(f"bronze.{stream}").select("_kafka_partition", "_kafka_offset").distinct() \
            .count() == delivered
    # The same tables read back through pyiceberg, from the REST catalog the driver committed to.
    catalog = pyiceberg_catalog(own)
    assert type(catalog).__name__ == "RestCatalog"
    assert not (own.home / "catalog.db").exists()  # no process fell back to a local SQLite catalog
    assert (own.home / "rest-catalog" / "rest-catalog.db").exists()
    # Data and metadata went through the S3 API: into the store's folder, none to a local warehouse.
    assert own.warehouse == "s3://lakehouse/warehouse" and not (own.home / "warehouse").exists()
    stored = own.home / "s3-store" / "data" / "lakehouse" / "warehouse" / "bronze"
    assert len(list((stored / "purchases" / "data").rglob("*.parquet"))) >= 1
    assert len(list((stored / "purchases" / "metadata").glob("*.metadata.json"))) >= 1
    assert catalog.load_table("bronze.purchases").scan().to_arrow().num_rows == produced["purchases"]
    # `lakehouse status` reads the same catalog over REST (no Spark): rows per bronze table.
    result = subprocess.run([LAKEHOUSE, "status", "--json"], env=cli_env(own), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = {t["table"]: t["rows"] for t in json.loads(result.stdout)["tables"]}
    assert {stream: rows[f"bronze.{stream}"] for stream in produced} == produced


def test_the_work_ran_in_an_executor_jvm_of_the_worker(lakehouse, submitted, standalone):
    """Not local[*]: the master saw the application finish, with an executor the worker started."""
    state = master_state(standalone["webui"])
    apps = [app for app in state["completedapps"] if app["name"] == "lakehouse-ingest"]
    assert len(apps) == 1
    executor_dirs = list((standalone["work_dir"] / apps[0]["id"]).iterdir())
    assert executor_dirs, "the worker started no executor for the application"
    stderr = "".join((d / "stderr").read_text() for d in executor_dirs if (d / "stderr").exists())
    # The executor JVM ran tasks, with the project's jars fetched from the driver.
    assert "Running task" in stderr
    assert "iceberg-spark-runtime" in stderr and "lakehouse-protobuf-decoder" in stderr


def test_the_job_package_reaches_executor_python_workers(lakehouse, standalone, tmp_path):
    """`--py-files` of the package built for submission: an executor's Python imports the project."""
    own, _, _ = lakehouse
    package = cluster.build_package(own)
    script = tmp_path / "probe.py"
    script.write_text(
        "from pyspark.sql import SparkSession\n"
        "spark = SparkSession.builder.getOrCreate()\n"
        "def where(_):\n"
        "    import os, lakehouse.contracts.error_codes as codes\n"
        "    return f'{os.getcwd()} {codes.__file__}'\n"
        "print('PROBE', spark.sparkContext.parallelize([0], 1).map(where).collect()[0])\n"
        "spark.stop()\n")
    env = {**cluster.daemon_env(own, cli_env(own))}
    result = subprocess.run([str(cluster.spark_home() / "bin" / "spark-submit"), "--master", standalone["url"],
                             "--conf", "spark.executor.memory=512m", "--py-files", str(package), str(script)],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    probe = next(line for line in result.stdout.splitlines() if line.startswith("PROBE"))
    cwd, path = probe.split()[1:]
    # Imported from the zip the executor fetched into its working folder under the worker.
    assert cwd.startswith(str(standalone["work_dir"])) and path.startswith("./lakehouse-jobs.zip/"), probe


@pytest.fixture(scope="module")
def thrift_server(lakehouse, submitted, tmp_path_factory):
    own, _, _ = lakehouse
    logs = tmp_path_factory.mktemp("thrift-logs")
    port = free_port()
    env = {**cli_env(own), "LAKEHOUSE_SPARK_MASTER": "local[2]", "LAKEHOUSE_THRIFT_PASSWORD": THRIFT_PASSWORD}
    command = [LAKEHOUSE, "cluster", "thrift-server", "--port", str(port)]  # the default address
    with running(command, env, logs / "thrift.log") as process:
        wait_until(lambda: port_open(port), "Thrift Server", logs / "thrift.log", timeout_s=240, process=process)
        yield port, process


def thrift_login(port: int, **auth) -> list:
    """`select 1` through a PyHive session (dbt-spark's thrift method) with these credentials."""
    from pyhive import hive

    connection = hive.connect(host="127.0.0.1", port=port, **auth)
    try:
        cursor = connection.cursor()
        cursor.execute("select 1")
        return cursor.fetchall()
    finally:
        connection.close()


def test_the_thrift_server_listens_on_loopback_and_refuses_a_login_without_the_password(thrift_server):
    import ipaddress

    import psutil
    from thrift.transport.TTransport import TTransportException

    port, process = thrift_server
    server = psutil.Process(process.pid)  # `lakehouse cluster thrift-server` execs spark-submit, which execs java
    listening = {c.laddr.ip for p in (server, *server.children(recursive=True)) for c in p.net_connections("tcp")
                 if c.status == psutil.CONN_LISTEN and c.laddr.port == port}
    # Java listens on IPv6 sockets: 127.0.0.1 shows as ::ffff:127.0.0.1, every interface as ::
    addresses = {ipaddress.ip_address(ip) for ip in listening}
    assert {str(getattr(a, "ipv4_mapped", None) or a) for a in addresses} == {"127.0.0.1"}, listening
    for refused in ({"username": "lakehouse"},  # no password: PyHive's anonymous login
                    {"username": "lakehouse", "auth": "CUSTOM", "password": "wrong"},
                    {"username": "someone", "auth": "CUSTOM", "password": THRIFT_PASSWORD}):
        with pytest.raises(TTransportException):
            thrift_login(port, **refused)
    assert thrift_login(port, username="lakehouse", auth="CUSTOM", password=THRIFT_PASSWORD) == [(1,)]


def test_dbt_build_through_the_thrift_server(lakehouse, thrift_server, monkeypatch):
    own, session, dbt_target = lakehouse
    port, _ = thrift_server
    monkeypatch.setenv("LAKEHOUSE_THRIFT_PASSWORD", THRIFT_PASSWORD)  # dbt's profile reads it
    thrift = Settings.from_env({**cli_env(own), "LAKEHOUSE_THRIFT_HOST": "127.0.0.1",
                                "LAKEHOUSE_THRIFT_PORT": str(port)})
    run_dbt(thrift, ["build", "--target", "cluster"], target_dir=dbt_target, capture=True)
    results = json.loads((dbt_target / "run_results.json").read_text())
    assert results["args"]["target"] == "cluster"
    statuses = {r["unique_id"]: r["status"] for r in results["results"]}
    # Every seed, model, data test and unit test of the project ran, and each succeeded; the
    # exposure (the quality report) is in the build too, as dbt reports it: nothing to run.
    manifest = json.loads((dbt_target / "manifest.json").read_text())
    # (and the project's on-run-start hook, an operation node: `lakehouse dbt` held the lock, so it passed)
    expected = {uid for uid in manifest["nodes"] if uid.split(".")[0] in ("seed", "model", "test", "operation")}
    assert manifest["exposures"], "the project declares its exposure (models/_exposures.yml)"
    assert set(statuses) == expected | set(manifest["unit_tests"]) | set(manifest["exposures"])
    assert {statuses[uid] for uid in manifest["exposures"]} == {"no-op"}
    assert sum(uid.startswith("model.") for uid in statuses) >= 15
    assert {status for uid, status in statuses.items() if uid.startswith(("seed.", "model."))} == {"success"}
    assert {status for uid, status in statuses.items() if "test." in uid} == {"pass"}
    # What dbt built through the server is in the shared catalog, read here by another JVM.
    events = session.table("bronze.user_events").select("event_id").distinct().count()
    assert session.table("silver.user_events").count() == events
    assert session.table("gold.events_by_type_daily").groupBy().sum("event_count").first()[0] == events
    mirror = session.table("silver.customers_mirror").count()
    assert 0 < mirror <= COUNTS["customers"]
    # Every table the build wrote carries the run's fence in its snapshots (macros/dbt_fence.sql),
    # set by each model's pre-hook in that model's own Thrift session: the catalog checked each commit.
    run = results["metadata"]["invocation_id"]
    for table in ("silver.user_events", "silver.customers_mirror", "gold.events_by_type_daily"):
        fences = {(row.run or "").split(" ")[0] + " " + (row.read or "").split("@")[0] for row in session.sql(
            f"select summary['lakehouse.dbt-run'] as run, summary['lakehouse.dbt-read'] as read "
            f"from {table}.snapshots where operation != 'replace'").collect()}
        assert fences == {f"{run} {table}"}, (table, fences)


def test_an_increment_built_through_the_thrift_server_is_audited_on_its_branch_then_published(
        lakehouse, thrift_server, monkeypatch):
    """A second build through the server, on new events: each model's Thrift session writes to the
    run's audit branch (its pre-hook sets `spark.wap.branch` there, macros/audit_publish.sql), the
    tests read it, and the run publishes it: main holds every event once, no branch is left."""
    from ingestion import job

    own, session, dbt_target = lakehouse
    port, _ = thrift_server
    monkeypatch.setenv("LAKEHOUSE_THRIFT_PASSWORD", THRIFT_PASSWORD)
    thrift = Settings.from_env({**cli_env(own), "LAKEHOUSE_THRIFT_HOST": "127.0.0.1",
                                "LAKEHOUSE_THRIFT_PORT": str(port)})
    if not session.catalog.tableExists("silver.user_events"):  # run alone: the first build
        run_dbt(thrift, ["build", "--select", "user_events+", "--target", "cluster"], target_dir=dbt_target)
    assert produce(own, "user_events", 100, seed=8, progress=False).failed == 0
    job.run(session, own, ["user_events"], available_now=True)
    before = session.sql("select snapshot_id from silver.user_events.refs where name = 'main'").first()[0]
    done = run_dbt(thrift, ["build", "--select", "user_events+", "--target", "cluster"], target_dir=dbt_target,
                   capture=True)
    run = json.loads((dbt_target / "run_results.json").read_text())["metadata"]["invocation_id"]
    branch = "audit_" + run.replace("-", "_")
    assert f"of branch {branch}: " in done.stdout and "silver.user_events" in done.stdout, done.stdout[-3000:]
    events = session.table("bronze.user_events").select("event_id").distinct().count()
    assert session.table("silver.user_events").count() == events
    assert session.table("gold.events_by_type_daily").groupBy().sum("event_count").first()[0] == events
    for table in ("silver.user_events", "gold.events_by_type_daily"):
        assert {row.name for row in session.sql(f"select name from {table}.refs").collect()} == {"main"}, table
    head = session.sql("select snapshot_id from silver.user_events.refs where name = 'main'").first()[0]
    assert head != before


def test_maintenance_on_the_object_store_removes_an_old_orphan(lakehouse, thrift_server):
    """`lakehouse maintain` on the s3:// warehouse: every step runs, orphans are listed through
    S3FileIO (prefix listing) and an unreferenced file older than the policy's age is deleted."""
    import os

    own, session, _ = lakehouse
    data = own.home / "s3-store" / "data" / "lakehouse" / "warehouse" / "bronze" / "purchases" / "data"
    orphan = data / "00000-0-planted-orphan.parquet"
    orphan.write_bytes(b"not referenced by any snapshot")
    from lakehouse.operations.maintenance import load_policies

    age_hours = load_policies().for_table("bronze.purchases").orphan_min_age_hours + 24
    old = time.time() - age_hours * 3600
    os.utime(orphan, (old, old))  # S3Proxy reports the file's time as LastModified
    rows = session.table("bronze.purchases").count()
    result = subprocess.run([LAKEHOUSE, "maintain", "--all-partitions", "--table", "bronze.purchases", "--json"],
                            env={**cli_env(own), "LAKEHOUSE_SPARK_MASTER": "local[1]"}, capture_output=True,
                            text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    [table] = json.loads(result.stdout)
    assert table["problems"] == table["failures"] == [] and table["orphan_files_removed"] == 1, table
    assert not orphan.exists()
    assert session.table("bronze.purchases").count() == rows
