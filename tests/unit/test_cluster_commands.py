"""The cluster side's pure parts: catalog configuration, and the commands that start Spark's
master, worker, Thrift Server and the ingestion job's submission."""

import zipfile

import pytest

from lakehouse.commands import cluster
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings
from lakehouse.core.spark import cluster_conf, spark_conf


def _conf(settings: Settings) -> dict[str, str]:
    return spark_conf(settings.spark_inputs(), "/pkg")


def test_local_settings_build_the_jdbc_catalog_and_ship_nothing():
    settings = Settings.from_env({"LAKEHOUSE_HOME": "/h"})
    conf = _conf(settings)
    # Iceberg's JDBC catalog behind the writer fence (jvm/catalog), named in place of `type`
    assert conf["spark.sql.catalog.lake.catalog-impl"] == "io.github.lakehouse.catalog.FencedJdbcCatalog"
    assert "spark.sql.catalog.lake.type" not in conf
    assert conf["spark.sql.catalog.lake.jdbc.schema-version"] == "V1"
    assert not any(".s3." in key or key.endswith("io-impl") for key in conf)
    assert conf["spark.driver.extraClassPath"] == "/h/jars/spark/*"
    assert cluster_conf(settings) == {}  # local[*]: the executors are the driver's JVM


def test_cluster_profile_builds_a_rest_catalog_on_s3_without_secrets(tmp_path):
    settings = Settings.from_env({"LAKEHOUSE_PROFILE": "cluster", "LAKEHOUSE_JARS_DIR": str(tmp_path),
                                  "AWS_SECRET_ACCESS_KEY": "never-in-conf"})
    (tmp_path / "spark").mkdir()
    for jar in ("a.jar", "b.jar"):
        (tmp_path / "spark" / jar).write_bytes(b"")
    conf = _conf(settings)
    assert conf["spark.sql.catalog.lake.type"] == "rest"
    assert "spark.sql.catalog.lake.catalog-impl" not in conf
    assert conf["spark.sql.catalog.lake.uri"] == "http://iceberg-rest:8181"
    assert conf["spark.sql.catalog.lake.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert conf["spark.sql.catalog.lake.s3.endpoint"] == "http://minio:9000"
    assert conf["spark.sql.catalog.lake.s3.path-style-access"] == "true"
    assert not any("jdbc" in key for key in conf)
    assert conf["spark.driver.bindAddress"] == "0.0.0.0"
    assert "never-in-conf" not in repr(conf)
    shipped = cluster_conf(settings)
    assert shipped["spark.jars"] == f"{tmp_path}/spark/a.jar,{tmp_path}/spark/b.jar"  # listed: no globs
    assert (shipped["spark.executor.memory"], shipped["spark.executor.cores"]) == ("2g", "2")


def test_submission_carries_master_resources_jars_package_and_the_same_session_conf(tmp_path):
    (tmp_path / "jars" / "spark").mkdir(parents=True)
    (tmp_path / "jars" / "spark" / "iceberg.jar").write_bytes(b"")
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_SPARK_MASTER": "spark://m:7077",
                                  "LAKEHOUSE_SPARK_EXECUTOR_MEMORY": "3g", "LAKEHOUSE_SPARK_CORES_MAX": "4"})
    command = cluster.submit_command(settings, ["all", "--trigger", "30s"], tmp_path / "pkg.zip")
    assert command[0].endswith("bin/spark-submit")
    after = dict(zip(command, command[1:], strict=False))
    assert after["--master"] == "spark://m:7077"
    assert after["--jars"] == f"{tmp_path}/jars/spark/iceberg.jar"
    assert after["--py-files"] == f"{tmp_path}/pkg.zip"
    confs = {arg.split("=", 1)[0]: arg.split("=", 1)[1] for arg in command if "=" in arg and arg[0] != "-"}
    assert confs["spark.executor.memory"] == "3g" and confs["spark.cores.max"] == "4"
    assert confs["spark.sql.defaultCatalog"] == "lake"
    assert "spark.master" not in confs and "spark.jars" not in confs  # given as --master and --jars
    assert command[-4:] == [str(cluster.JOB_ENTRY_POINT), "all", "--trigger", "30s"]


def test_thrift_server_runs_the_server_class_on_the_lakehouse_catalog(tmp_path):
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)})
    command = cluster.thrift_server_command(settings, 10001, "127.0.0.1")
    after = dict(zip(command, command[1:], strict=False))
    assert after["--class"] == cluster.THRIFT_SERVER_CLASS
    assert command[-7:] == ["spark-internal", "--hiveconf", "hive.server2.thrift.port=10001",
                            "--hiveconf", "hive.server2.thrift.bind.host=127.0.0.1",
                            "--hiveconf", "hive.server2.authentication=NONE"]
    assert f"spark.sql.catalog.lake.uri=jdbc:sqlite:{tmp_path}/catalog.db" in command
    # Its Hive metastore stays in the state folder, not in the current directory.
    assert any(arg.endswith(f"databaseName={tmp_path}/thrift-server/metastore_db;create=true") for arg in command)


def test_master_and_worker_come_from_pysparks_launcher(tmp_path):
    master = cluster.master_command("127.0.0.1", 7077, 8080)
    assert master[0] == str(cluster.spark_home() / "bin" / "spark-class")
    assert master[1:] == [cluster.MASTER_CLASS, "--host", "127.0.0.1", "--port", "7077", "--webui-port", "8080"]
    worker = cluster.worker_command("spark://m:7077", 2, "2g", 8081, tmp_path)
    assert worker[1] == cluster.WORKER_CLASS and worker[-1] == "spark://m:7077"
    assert dict(zip(worker, worker[1:], strict=False))["--work-dir"] == str(tmp_path)


def test_the_package_holds_every_project_module(tmp_path):
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)})
    package = cluster.build_package(settings)
    names = set(zipfile.ZipFile(package).namelist())
    assert {"lakehouse/commands/cli.py", "ingestion/job.py", "lakehouse/contracts/pipeline.yml",
            "producers/__init__.py", "expectations/__init__.py"} <= names
    assert not any("__pycache__" in name for name in names)


def test_the_thrift_server_checks_a_password_from_the_environment_and_needs_one_beyond_loopback(tmp_path):
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_JARS_DIR": str(tmp_path / "jars")})
    # no password: loopback only
    assert cluster.thrift_authentication(settings, "127.0.0.1", {}) is False
    assert cluster.thrift_authentication(settings, "localhost", {}) is False
    for host in ("0.0.0.0", "10.1.2.3", "spark-thrift"):
        with pytest.raises(LakehouseError, match=rf"^the Thrift Server would let anyone who reaches {host} read and "
                                                 r"write the catalog: set LAKEHOUSE_THRIFT_PASSWORD"):
            cluster.thrift_authentication(settings, host, {})
    # a password: the login check must be built (`make setup`), then every login is checked
    secret = {"LAKEHOUSE_THRIFT_PASSWORD": "s3cret pass"}
    with pytest.raises(LakehouseError, match=r"no lakehouse-thrift-auth-\*\.jar in .*: run `make setup`"):
        cluster.thrift_authentication(settings, "0.0.0.0", secret)
    (tmp_path / "jars" / "spark").mkdir(parents=True)
    (tmp_path / "jars" / "spark" / "lakehouse-thrift-auth-0.1.0.jar").write_bytes(b"")
    assert cluster.thrift_authentication(settings, "0.0.0.0", secret) is True
    command = cluster.thrift_server_command(settings, 10000, "0.0.0.0", authenticate=True)
    assert command[-4:] == ["--hiveconf", "hive.server2.authentication=CUSTOM", "--hiveconf",
                            f"hive.server2.custom.authentication.class={cluster.THRIFT_AUTHENTICATOR_CLASS}"]
    assert not any("s3cret" in arg for arg in command)  # never on the command line `ps` shows
    # the user the server accepts is the configuration's, for the JVM to read
    user = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_THRIFT_USER": "dbt"})
    assert cluster.daemon_env(user, {})["LAKEHOUSE_THRIFT_USER"] == "dbt"


def test_the_thrift_password_is_never_read_from_a_file(tmp_path):
    config = tmp_path / "lakehouse.env"
    config.write_text("LAKEHOUSE_THRIFT_PASSWORD=hunter2\n")
    with pytest.raises(LakehouseError, match="sets LAKEHOUSE_THRIFT_PASSWORD, a secret"):
        Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_CONFIG_FILE": str(config)})
