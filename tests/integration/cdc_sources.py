"""Real CDC sources for the Debezium tests: throwaway PostgreSQL and MariaDB servers, and Debezium
(the embedded engine with our Kafka writer, jvm/debezium/; a real Kafka Connect worker,
jvm/kafka-connect/; Debezium Server, jvm/debezium-server/) streaming their changes to a broker.

Everything runs on this machine, on free loopback ports, in temporary folders, each server in
its own process group with bounded waits, and is stopped and deleted when its block ends.
`make debezium` installs the servers (Debian packages) and fetches Debezium; a missing piece
fails with the command that provides it.

PostgreSQL refuses to run as root: as root, the servers run as the `postgres` user the Debian
package creates, in a folder made in the system's temporary directory (pytest's own folders
are readable by their owner only).
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest

from lakehouse.core.local_kafka import free_port
from tests.integration.processes import wait_until

START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 60
SQL_TIMEOUT_S = 120
SERVER_USER = "postgres"  # the unprivileged user servers run as when the tests run as root


def _server_user() -> pwd.struct_passwd | None:
    """Who the database servers run as: None for the current user, the `postgres` user as root."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SERVER_USER)
    except KeyError:
        pytest.fail(f"running as root and there is no `{SERVER_USER}` user to run the database servers as: "
                    "`make debezium` installs PostgreSQL, which creates it (or run the tests as another user)")


def _as_user(user: pwd.struct_passwd | None) -> dict:
    return {} if user is None else {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


@contextmanager
def _server_folder(prefix: str, user: pwd.struct_passwd | None) -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        if user is not None:
            os.chown(folder, user.pw_uid, user.pw_gid)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _run(command: list[str], what: str, timeout_s: float = SQL_TIMEOUT_S, **kwargs) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, **kwargs)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what} did not finish within {timeout_s:.0f}s: {' '.join(command)[:300]}")
    if done.returncode != 0:
        pytest.fail(f"{what} failed (code {done.returncode}): {(done.stderr or done.stdout).strip()[-2000:]}")
    return done.stdout


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def _stop_group(process: subprocess.Popen, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM to the process's group, SIGKILL if it has not exited in time."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=timeout_s)
    except ProcessLookupError:
        process.wait(timeout=timeout_s)


# --- PostgreSQL -------------------------------------------------------------------------------

def postgres_bin_dir() -> Path:
    """The server binaries: Debian keeps them in /usr/lib/postgresql/<major>/bin, off PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    pg_ctl = shutil.which("pg_ctl")
    if pg_ctl:
        return Path(pg_ctl).resolve().parent
    pytest.fail("PostgreSQL server not found (pg_ctl): run `make debezium`")


POSTGRES_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "wal_level": "logical",  # what Debezium's pgoutput decoding needs
    "max_wal_senders": "10",
    "max_replication_slots": "10",
    "max_connections": "40",
    "shared_buffers": "32MB",
    "timezone": "'UTC'",
    # a throwaway cluster: durability buys nothing here and costs the shared disk
    "fsync": "off",
    "full_page_writes": "off",
}


@dataclass
class Postgres:
    """A running throwaway cluster; its superuser is `postgres`, trusted on loopback."""

    bin_dir: Path
    folder: Path
    port: int
    superuser: str = "postgres"

    @property
    def log(self) -> Path:
        return self.folder / "server.log"

    def psql(self, database: str = "postgres") -> list[str]:
        return [str(self.bin_dir / "psql"), "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1",
                "-p", str(self.port), "-U", self.superuser, "-d", database]

    def sql(self, script: str, database: str = "postgres") -> str:
        """Runs the script in one psql session (one transaction per statement unless it says
        BEGIN); its output, tuples only, fields separated by |."""
        return _run(self.psql(database), f"psql on {database}", input=script, env=_utc_env())

    def session(self, database: str) -> PsqlSession:
        return PsqlSession(self.psql(database))

    def create_database(self, name: str) -> None:
        self.sql(f"create database {name}")


def _utc_env() -> dict[str, str]:
    return {**os.environ, "PGTZ": "UTC", "PGCONNECT_TIMEOUT": "10"}


class PsqlSession:
    """One open psql session, fed statement by statement: a transaction held open across steps
    of a test (BEGIN now, COMMIT later)."""

    def __init__(self, command: list[str]):
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, env=_utc_env(), bufsize=1)

    def run(self, statements: str, timeout_s: float = SQL_TIMEOUT_S) -> list[str]:
        """Sends the statements, waits until psql has executed them; the lines they printed."""
        marker = f"done-{time.monotonic_ns()}"
        self.process.stdin.write(f"{statements}\n\\echo {marker}\n")
        self.process.stdin.flush()
        deadline = time.monotonic() + timeout_s
        output = []
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                pytest.fail(f"psql session ended: {''.join(output)[-2000:]}")
            if line.strip() == marker:
                if any(text.startswith(("ERROR", "psql:")) for text in output):
                    pytest.fail(f"psql session: {''.join(output)[-2000:]}")
                return [text.rstrip("\n") for text in output]
            output.append(line)
        pytest.fail(f"psql session did not answer within {timeout_s:.0f}s")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextmanager
def postgres_cluster(timezone: str = "UTC") -> Iterator[Postgres]:
    """A new PostgreSQL cluster with logical decoding on, on a free port, its sessions in
    ``timezone`` by default; deleted afterwards."""
    bin_dir = postgres_bin_dir()
    user = _server_user()
    with _server_folder("lakehouse-postgres-", user) as folder:
        data = folder / "data"
        _run([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
              "--locale=C", "--no-sync"], "initdb", **_as_user(user))
        port = free_port()
        settings = {**POSTGRES_SETTINGS, "port": str(port), "unix_socket_directories": f"'{folder}'",
                    "timezone": f"'{timezone}'"}
        with open(data / "postgresql.conf", "a") as conf:
            conf.writelines(f"{name} = {value}\n" for name, value in settings.items())
        server = Postgres(bin_dir, folder, port)
        pg_ctl = [str(bin_dir / "pg_ctl"), "-D", str(data)]
        _run([*pg_ctl, "-l", str(server.log), "-w", "-t", str(START_TIMEOUT_S), "start"], "pg_ctl start",
             timeout_s=START_TIMEOUT_S + 10, **_as_user(user))
        try:
            yield server
        finally:
            stop = subprocess.run([*pg_ctl, "-m", "fast", "-w", "-t", str(STOP_TIMEOUT_S), "stop"],
                                  capture_output=True, timeout=STOP_TIMEOUT_S + 10, **_as_user(user))
            if stop.returncode != 0:
                subprocess.run([*pg_ctl, "-m", "immediate", "-w", "stop"], capture_output=True,
                               timeout=STOP_TIMEOUT_S, **_as_user(user))


def spelled(value) -> object:
    """One spelling for a value read from PostgreSQL (text) and from the mirror (Arrow): instants
    as UTC ISO-8601 with microseconds, decimals as text."""
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(value, Decimal):
        return str(value)
    return value


class PostgresSource:
    """A PostgreSQL table as the truth of its live mirror (expectations.mirror.MirrorSource).

    ``renames`` maps silver's column names to the table's where silver renames one; the key is
    one column. Instants must be timestamptz (Debezium sends them as ISO-8601 text, which the
    contracts declare as strings), read back in UTC.
    """

    def __init__(self, server: Postgres, database: str, table: str, key: str, renames: dict[str, str] | None = None):
        self.server, self.database, self.table, self.key = server, database, table, key
        self.renames = renames or {}

    def row_count(self) -> int:
        return int(self.server.sql(f"select count(*) from {self.table}", self.database))

    def rows(self) -> dict[Hashable, dict]:
        # JSON keeps numbers and booleans typed (numerics exact, as Decimal); instants come out as
        # PGTZ=UTC ISO-8601 text
        text = self.server.sql(f"select coalesce(json_agg(t order by {self.key}), '[]') from {self.table} t",
                               self.database)
        return {row[self.key]: {name: spelled(_instant(value)) for name, value in row.items()}
                for row in json.loads(text, parse_float=Decimal)}

    def column_names(self) -> list[str]:
        return self.server.sql(
            "select column_name from information_schema.columns "
            f"where table_schema = 'public' and table_name = '{self.table}' order by ordinal_position",
            self.database).split()

    def spelled(self, live_rows: list[dict]) -> dict[Hashable, dict]:
        return spelled_live_rows(live_rows, self.column_names(), self.key, self.renames)


def spelled_live_rows(live_rows: list[dict], columns: list[str], key: str,
                      renames: dict[str, str]) -> dict[Hashable, dict]:
    """Live mirror rows as a source table spells its own: its column names, its columns only."""
    result = {}
    for row in live_rows:
        source_row = {renames.get(name, name): spelled(value) for name, value in row.items()}
        result[source_row[key]] = {column: source_row.get(column) for column in columns}
    return result


def _instant(value):
    """PostgreSQL's JSON spelling of a timestamptz in UTC ('2024-05-01T10:00:00.123456+00:00') as
    a datetime; anything else as it is."""
    if isinstance(value, str) and len(value) >= 19 and value[10:11] == "T" and value.endswith("+00:00"):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return value
    return value


# --- MariaDB ----------------------------------------------------------------------------------

def mariadb_binaries() -> tuple[Path, Path, Path]:
    """(mariadbd, mariadb-install-db, mariadb client)."""
    server = shutil.which("mariadbd") or ("/usr/sbin/mariadbd" if os.access("/usr/sbin/mariadbd", os.X_OK) else None)
    install = shutil.which("mariadb-install-db")
    client = shutil.which("mariadb")
    if not (server and install and client):
        pytest.fail("MariaDB server or client not found (mariadbd, mariadb-install-db, mariadb): run `make debezium`")
    return Path(server), Path(install), Path(client)


@dataclass
class MariaDb:
    """A running throwaway MariaDB server with the binlog in ROW format; the user `debezium`
    (password `debezium`) may do everything, from loopback."""

    client: Path
    folder: Path
    port: int
    user: str = "debezium"
    password: str = "debezium"
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def log(self) -> Path:
        return self.folder / "error.log"

    @property
    def socket(self) -> Path:
        return self.folder / "mariadb.sock"

    def sql(self, script: str, database: str | None = None) -> str:
        """Runs the script as root over the socket; its output, tab-separated, no headers, unescaped."""
        command = [str(self.client), "--no-defaults", f"--socket={self.socket}", "--user=root", "--batch",
                   "--raw", "--skip-column-names"]
        return _run([*command, *([database] if database else [])], "mariadb client", input=script)


class MariaDbSource:
    """A MariaDB table as the truth of its live mirror (expectations.mirror.MirrorSource), read
    as PostgresSource reads its table: instants (TIMESTAMP columns, which Debezium sends as
    ISO-8601 text in UTC) spelled in UTC, decimals exact."""

    def __init__(self, db: MariaDb, database: str, table: str, key: str, renames: dict[str, str] | None = None):
        self.db, self.database, self.table, self.key = db, database, table, key
        self.renames = renames or {}

    def _columns(self) -> list[tuple[str, str]]:
        text = self.db.sql("select column_name, data_type from information_schema.columns where table_schema = "
                           f"'{self.database}' and table_name = '{self.table}' order by ordinal_position")
        return [tuple(line.split("\t")) for line in text.splitlines()]

    def column_names(self) -> list[str]:
        return [name for name, _ in self._columns()]

    def rows(self) -> dict[Hashable, dict]:
        fields = ", ".join(
            f"'{name}', " + (f"date_format({name}, '%Y-%m-%dT%H:%i:%s.%fZ')" if kind in ("timestamp", "datetime")
                             else name)
            for name, kind in self._columns())
        text = self.db.sql(f"set time_zone = '+00:00'; select coalesce(json_arrayagg(json_object({fields}) "
                           f"order by {self.key}), '[]') from {self.table};", self.database)
        return {row[self.key]: {name: spelled(value) for name, value in row.items()}
                for row in json.loads(text, parse_float=Decimal)}

    def spelled(self, live_rows: list[dict]) -> dict[Hashable, dict]:
        return spelled_live_rows(live_rows, self.column_names(), self.key, self.renames)


@contextmanager
def mariadb_server(time_zone: str = "SYSTEM") -> Iterator[MariaDb]:
    """A new MariaDB server (binlog ROW, full row images, server id 1) on a free port, its
    sessions in ``time_zone`` by default (SYSTEM: the machine's); deleted afterwards."""
    server, install, client = mariadb_binaries()
    user = _server_user()
    os_user = pwd.getpwuid(os.geteuid()).pw_name if user is None else user.pw_name
    with _server_folder("lakehouse-mariadb-", user) as folder:
        data = folder / "data"
        _run([str(install), "--no-defaults", f"--datadir={data}", f"--user={os_user}",
              "--auth-root-authentication-method=normal", "--skip-test-db"], "mariadb-install-db",
             timeout_s=START_TIMEOUT_S, **_as_user(user))
        db = MariaDb(client, folder, free_port())
        command = [str(server), "--no-defaults", f"--user={os_user}", f"--datadir={data}", f"--socket={db.socket}",
                   f"--port={db.port}", "--bind-address=127.0.0.1", f"--pid-file={folder / 'mariadbd.pid'}",
                   f"--log-error={db.log}", "--skip-name-resolve",
                   # what Debezium's binlog reader needs
                   f"--log-bin={folder / 'binlog'}", "--binlog-format=ROW", "--binlog-row-image=FULL",
                   "--server-id=1", f"--default-time-zone={time_zone}",
                   "--innodb-buffer-pool-size=32M", "--innodb-log-file-size=16M", "--innodb-flush-log-at-trx-commit=2"]
        with open(folder / "stdout.log", "wb") as out:
            db.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True, **_as_user(user))
        try:
            wait_until(lambda: db.socket.exists() and _answers(db), "MariaDB", db.log, START_TIMEOUT_S, db.process)
            db.sql(f"create user '{db.user}'@'%' identified by '{db.password}';\n"
                   f"grant all privileges on *.* to '{db.user}'@'%';")
            yield db
        finally:
            _stop_group(db.process)


def _answers(db: MariaDb) -> bool:
    probe = subprocess.run([str(db.client), "--no-defaults", f"--socket={db.socket}", "--user=root", "-e", "select 1"],
                           capture_output=True, timeout=30)
    return probe.returncode == 0


# --- Kafka topics -----------------------------------------------------------------------------

def create_topics(bootstrap: str, topics: list[str], partitions: int = 3) -> None:
    """The topics Debezium writes to: the broker does not create topics on first use."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic(topic, num_partitions=partitions, replication_factor=1) for topic in topics]
    for future in admin.create_topics(new).values():
        future.result(timeout=30)


def topic_size(bootstrap: str, topic: str) -> int:
    """Messages in the topic (sum of its partitions' end offsets)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"size-{time.time_ns()}"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions)
    finally:
        consumer.close()


def wait_for_messages(bootstrap: str, topic: str, count: int, debezium: Debezium | ConnectWorker | DebeziumServer,
                      timeout_s: float = 180) -> int:
    """Waits until the topic holds at least ``count`` messages; fails with the log tail of what
    writes them (Debezium, a Connect worker, Debezium Server)."""
    def enough() -> int | None:
        size = topic_size(bootstrap, topic)
        return size if size >= count else None

    return wait_until(enough, f"{count} messages in {topic}", debezium.log, timeout_s, debezium.process)


# --- Debezium ---------------------------------------------------------------------------------

DEBEZIUM_MAIN = "io.github.lakehouse.debezium.DebeziumToKafka"
# Topic names `<prefix>.<schema or database>.<table>` become `<table>`: the pipeline's topics
# are its streams' names.
ROUTE_TO_TABLE_NAME = {
    "transforms": "route",
    "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
    "transforms.route.regex": r"[^.]+\.[^.]+\.(.+)",
    "transforms.route.replacement": "$1",
}


def debezium_jars(jars_dir: Path) -> Path:
    folder = jars_dir / "debezium"
    if not list(folder.glob("lakehouse-debezium-*.jar")):
        pytest.fail(f"Debezium jars not found in {folder}: run `make debezium`")
    return folder


def postgres_connector(server: Postgres, database: str, tables: list[str], name: str, **overrides) -> dict[str, str]:
    """The PostgreSQL connector (pgoutput, its own slot and publication) for ``tables`` of public."""
    return {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "topic.prefix": name,
        "database.hostname": "127.0.0.1",
        "database.port": str(server.port),
        "database.user": server.superuser,
        "database.password": "trusted",
        "database.dbname": database,
        "plugin.name": "pgoutput",
        "slot.name": f"{name}_slot",
        "publication.name": f"{name}_publication",
        "publication.autocreate.mode": "filtered",
        "table.include.list": ",".join(f"public.{table}" for table in tables),
        **ROUTE_TO_TABLE_NAME,
        **overrides,
    }


def mariadb_connector(db: MariaDb, database: str, tables: list[str], name: str, folder: Path,
                      **overrides) -> dict[str, str]:
    """Debezium's MariaDB connector (the MySQL connector's sibling on the same binlog reader; the
    MySQL connector itself refuses MariaDB) for ``tables`` of ``database``."""
    return {
        "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
        "topic.prefix": name,
        "database.hostname": "127.0.0.1",
        "database.port": str(db.port),
        "database.user": db.user,
        "database.password": db.password,
        "database.server.id": "5401",
        "database.include.list": database,
        "table.include.list": ",".join(f"{database}.{table}" for table in tables),
        "include.schema.changes": "false",
        "schema.history.internal": "io.debezium.storage.file.history.FileSchemaHistory",
        "schema.history.internal.file.filename": str(folder / "schema-history.dat"),
        **ROUTE_TO_TABLE_NAME,
        **overrides,
    }


class Debezium:
    """One connector in its own JVM (DebeziumToKafka), writing schemaless JSON to ``bootstrap``.

    Its offsets (and schema history) stay in ``folder``: stopped and started again, it goes
    on where it stopped, as Debezium Server does.
    """

    def __init__(self, jars_dir: Path, folder: Path, name: str, connector: dict[str, str], bootstrap: str,
                 text: str = ""):
        self.java = java()
        self.classpath = f"{debezium_jars(jars_dir)}/*"
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.config = folder / f"{name}.properties"
        self.log = folder / f"{name}.log"
        self.properties = {
            "name": name,
            "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
            "offset.storage.file.filename": str(folder / f"{name}.offsets"),
            "offset.flush.interval.ms": "1000",
            **connector,
            "kafka.bootstrap.servers": bootstrap,
            "kafka.linger.ms": "5",
        }
        # a properties file's text put first, as it is (`lakehouse cdc add` printed it): the lines
        # above follow it, and java.util.Properties keeps the last of a key's lines
        self.text = text
        self.process: subprocess.Popen | None = None

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Starts the connector and waits until it streams: its snapshot, if it takes one, is over."""
        self.config.write_text(self.text + "".join(f"{key}={_escaped(value)}\n"
                                                   for key, value in self.properties.items()))
        started_at = self.log.stat().st_size if self.log.exists() else 0
        command = [self.java, "-Xmx512m", "-XX:+UseSerialGC",
                   "-Dorg.slf4j.simpleLogger.showDateTime=true",
                   "-Dorg.slf4j.simpleLogger.log.org.apache.kafka=warn",
                   "-cp", self.classpath, DEBEZIUM_MAIN, str(self.config)]
        with open(self.log, "ab") as out:
            # in its folder: relative paths in its properties (a schema history file) land there
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True, cwd=self.folder)

        def streaming() -> bool:
            with open(self.log, "rb") as log:
                log.seek(started_at)
                return b"debezium: streaming" in log.read()

        wait_until(streaming, "Debezium", self.log, timeout_s, self.process)

    def stop(self) -> None:
        """SIGTERM: the engine stops cleanly and commits its offsets; anything else fails the test."""
        if self.process is not None:
            _stop_group(self.process)
            if self.process.returncode != 0:
                pytest.fail(f"Debezium stopped with code {self.process.returncode}; log tail:\n{_tail(self.log)}")


def _escaped(value: str) -> str:
    """A value as java.util.Properties reads it back (backslashes are escapes there)."""
    return value.replace("\\", "\\\\")


def java() -> str:
    """The java the services run on (lakehouse.core.preflight's choice); the test fails without one."""
    from lakehouse.core.preflight import PreflightError, check_java

    try:
        return check_java()
    except PreflightError as exc:
        pytest.fail(str(exc))


@contextmanager
def running(service):
    """``service`` (a Debezium engine, a Kafka Connect worker, a Debezium Server) started, then
    stopped at the end of the block; a failure kills its process group instead."""
    try:
        service.start()
        yield service
    except BaseException:
        if service.process is not None:
            _stop_group(service.process)
        raise
    service.stop()


@contextmanager
def debezium(jars_dir: Path, folder: Path, name: str, connector: dict[str, str], bootstrap: str,
             text: str = "") -> Iterator[Debezium]:
    """A started connector, stopped at the end of the block whatever happens; ``text``: a
    properties file's text put first (Debezium)."""
    with running(Debezium(jars_dir, folder, name, connector, bootstrap, text)) as engine:
        yield engine


# --- Kafka Connect ----------------------------------------------------------------------------

CONNECT_MAIN = "org.apache.kafka.connect.cli.ConnectStandalone"
# The worker's own converters as Kafka ships them (config/connect-standalone.properties): JSON
# with schemas. A connector file that sets its own (`lakehouse cdc add` prints schemaless JSON)
# overrides them for its connector, so a test can see that its lines took effect.
CONNECT_WORKER_CONVERTERS = {
    "key.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "key.converter.schemas.enable": "true",
    "value.converter.schemas.enable": "true",
}


def kafka_connect_jars(jars_dir: Path) -> Path:
    folder = jars_dir / "kafka-connect"
    if not (list(folder.glob("connect-runtime-*.jar")) and list(folder.glob("jetty-server-*.jar"))):
        pytest.fail(f"Kafka Connect jars not found in {folder}: run `make debezium`")
    return folder


class _Runtime:
    """What the real runtimes share: a JVM in its own process group writing to ``log``, whose
    lines since its last start are read for its progress and its errors."""

    log: Path
    process: subprocess.Popen | None = None
    _started_at = 0

    def _log_since_start(self) -> bytes:
        with open(self.log, "rb") as log:
            log.seek(self._started_at)
            return log.read()

    def errors(self) -> str:
        """The log's ERROR lines and the causes of its stack traces since the last start, each
        with the lines of its message (a config's errors are listed on lines of their own)."""
        picked, inside = [], False
        for line in self._log_since_start().decode(errors="replace").splitlines():
            if " ERROR " in line or line.startswith("Caused by:"):
                inside = True
            elif line.startswith("\t") or line[:1].isdigit():  # a stack frame, the next log line
                inside = False
            if inside:
                picked.append(line[:1000])
        return "\n".join(picked)[-4000:]

    def _launch(self, command: list[str], cwd: Path) -> None:
        self._started_at = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True, cwd=cwd)

    def _fail_if_exited(self, what: str) -> None:
        if self.process.poll() is not None:
            # what it could not start stops it: the errors come before the shutdown's lines,
            # which fill the log's tail
            pytest.fail(f"{what} exited (code {self.process.returncode}):\n{self.errors()}\n"
                        f"log tail:\n{_tail(self.log)}")

    def _stop(self, what: str, stopped: bytes) -> None:
        """SIGTERM; it must exit as the JVM does on SIGTERM (0 or 143) after logging ``stopped``."""
        if self.process is None:
            return
        _stop_group(self.process)
        if self.process.returncode not in (0, 128 + signal.SIGTERM) or stopped not in self._log_since_start():
            pytest.fail(f"{what} stopped with code {self.process.returncode}; log tail:\n{_tail(self.log)}")


class ConnectWorker(_Runtime):
    """A real Kafka Connect standalone worker (ConnectStandalone worker.properties
    connector.properties) running one connector from ``connector_text``, a connector
    .properties file written as it is.

    The worker's classpath is Connect alone (<jars>/kafka-connect); the connectors come from its
    plugin.path, a folder of ``folder`` holding a link to <jars>/debezium, the way a deployment
    unpacks Debezium's connector archive into a plugin folder: each plugin folder gets a class
    loader of its own, so what is tested is the connector as a deployment loads it, not one
    that works only because Connect's own jars sit beside it. Its offsets (a file) stay in
    ``folder``, its working folder (relative paths in the connector file, a schema history
    file, land there): stopped and started again, it goes on where it stopped.
    """

    def __init__(self, jars_dir: Path, folder: Path, connector_text: str, bootstrap: str):
        from lakehouse.core.local_kafka import free_port

        self.java = java()
        self.classpath = f"{kafka_connect_jars(jars_dir)}/*"
        self.folder = folder
        plugins = folder / "plugins"
        plugins.mkdir(parents=True, exist_ok=True)
        if not (plugins / "debezium").exists():
            (plugins / "debezium").symlink_to(debezium_jars(jars_dir).resolve(), target_is_directory=True)
        self.connector_file = folder / "connector.properties"
        self.worker_file = folder / "worker.properties"
        self.log = folder / "connect.log"
        self.connector_text = connector_text
        self.port = free_port()
        self.worker = {
            "bootstrap.servers": bootstrap,
            **CONNECT_WORKER_CONVERTERS,
            "offset.storage.file.filename": str(folder / "connect.offsets"),
            "offset.flush.interval.ms": "1000",
            # its REST API, on loopback only: the test reads the connector's state there
            "listeners": f"http://127.0.0.1:{self.port}",
            "plugin.path": str(plugins),
        }

    def status(self) -> dict | None:
        """The state of the worker's connector as its REST API gives it ({"connector": ...,
        "tasks": [...]}); None until the worker answers with its connector."""
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/connectors?expand=status",
                                        timeout=5) as response:
                connectors = json.loads(response.read())
        except (urllib.error.URLError, OSError, ValueError):
            return None
        return next(iter(connectors.values()))["status"] if connectors else None

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Starts the worker with the connector and waits until the connector streams: its task
        is RUNNING and Debezium's snapshot, if it takes one, is over. A connector or task the
        worker reports FAILED fails the test with its trace."""
        self.worker_file.write_text("".join(f"{key}={_escaped(value)}\n" for key, value in self.worker.items()))
        self.connector_file.write_text(self.connector_text)
        command = [self.java, "-Xmx512m", "-XX:+UseSerialGC",
                   "-Dorg.slf4j.simpleLogger.showDateTime=true",
                   # every client's config dump at INFO is most of the log otherwise
                   "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.clients=warn",
                   "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.common=warn",
                   # and a line for each of the test's status requests
                   "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.connect.runtime.rest.RestServer=warn",
                   "-cp", self.classpath, CONNECT_MAIN, str(self.worker_file), str(self.connector_file)]
        self._launch(command, self.folder)

        def streaming() -> bool:
            self._fail_if_exited("Kafka Connect")  # as it does when it cannot create the connector
            status = self.status()
            if status is None:
                return False
            states = [status["connector"], *status.get("tasks", [])]
            failed = [state for state in states if state.get("state") == "FAILED"]
            if failed:
                pytest.fail(f"Kafka Connect: connector {status.get('name')} failed: "
                            f"{failed[0].get('trace', '')[:3000]}\nlog tail:\n{_tail(self.log)}")
            running = len(states) > 1 and all(state.get("state") == "RUNNING" for state in states)
            # Debezium's coordinator, once the snapshot is over
            return running and b"Starting streaming" in self._log_since_start()

        wait_until(streaming, "Kafka Connect", self.log, timeout_s, self.process)

    def stop(self) -> None:
        """SIGTERM: the worker stops its connector, commits its offsets and logs that it stopped
        (the JVM then exits 143, as on any SIGTERM); anything else fails the test."""
        self._stop("Kafka Connect", b"Kafka Connect stopped")


@contextmanager
def connect_standalone(jars_dir: Path, folder: Path, connector_text: str, bootstrap: str) -> Iterator[ConnectWorker]:
    """A started Kafka Connect standalone worker running the connector file ``connector_text``,
    stopped at the end of the block whatever happens."""
    with running(ConnectWorker(jars_dir, folder, connector_text, bootstrap)) as worker:
        yield worker


# --- Debezium Server --------------------------------------------------------------------------

SERVER_JAVA = 21  # debezium-server-core 3.3 is Java 21 bytecode (jvm/debezium-server/pom.xml)


def debezium_server_app(jars_dir: Path) -> Path:
    app = jars_dir / "debezium-server" / "quarkus-app" / "quarkus-run.jar"
    if not app.exists():
        pytest.fail(f"Debezium Server not found ({app}): run `make debezium`")
    return app


class DebeziumServer(_Runtime):
    """Real Debezium Server (jvm/debezium-server) run from ``folder`` as from its distribution's
    folder: its configuration is config/application.properties there, written as given
    (``text``), and the relative paths in it (the offsets file under data/) resolve there.
    data/ is made, as the printed comment above the offsets file tells a user to: Debezium does
    not make it. Its HTTP server (the health checks) listens on a free loopback port, set by
    system properties, so the file stays as given. Stopped and started again, it goes on from
    its offsets.
    """

    def __init__(self, jars_dir: Path, folder: Path, text: str):
        from lakehouse.core.local_kafka import free_port
        from lakehouse.core.preflight import PreflightError, java_home

        try:
            self.java = str(Path(java_home(SERVER_JAVA)) / "bin" / "java")
        except PreflightError as exc:
            pytest.fail(str(exc))
        self.app = debezium_server_app(jars_dir)
        self.folder = folder
        self.config = folder / "config" / "application.properties"
        self.log = folder / "server.log"
        self.text = text
        self.port = free_port()

    def health(self) -> dict | None:
        """Its health checks (Debezium's: its engine runs); None until it answers."""
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/q/health", timeout=5) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:  # 503 while a check is DOWN: the body says which
            return json.loads(error.read() or b"{}")
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Starts the server and waits until its connector streams: its health is UP and
        Debezium's snapshot, if it takes one, is over."""
        self.config.parent.mkdir(parents=True, exist_ok=True)
        self.config.write_text(self.text)
        (self.folder / "data").mkdir(exist_ok=True)
        command = [self.java, "-Xmx512m", "-XX:+UseSerialGC",
                   "-Dquarkus.http.host=127.0.0.1", f"-Dquarkus.http.port={self.port}",
                   "-jar", str(self.app)]
        self._launch(command, self.folder)

        def streaming() -> bool:
            self._fail_if_exited("Debezium Server")
            health = self.health()
            return (health or {}).get("status") == "UP" and b"Starting streaming" in self._log_since_start()

        wait_until(streaming, "Debezium Server", self.log, timeout_s, self.process)

    def stop(self) -> None:
        """SIGTERM: the engine stops and stores its offsets, Quarkus logs that it stopped."""
        self._stop("Debezium Server", b" stopped in ")


@contextmanager
def debezium_server(jars_dir: Path, folder: Path, text: str) -> Iterator[DebeziumServer]:
    """A started Debezium Server with ``text`` as its application.properties, stopped at the end
    of the block whatever happens."""
    with running(DebeziumServer(jars_dir, folder, text)) as server:
        yield server
