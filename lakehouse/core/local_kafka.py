"""The embedded local Kafka: a real Apache Kafka broker (KRaft, combined broker+controller).

It runs from the jars `make setup` copies into <state>/jars/kafka, in its own JVM, with its
data, configuration and logs under <state>/kafka. Storage is formatted once; later starts
reuse the data. `start` returns only once the broker answers a metadata request.
"""

from __future__ import annotations

import base64
import shlex
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil

from lakehouse.core.errors import LakehouseError
from lakehouse.core.files import write_atomically
from lakehouse.core.preflight import PreflightError, check_java, port_is_free
from lakehouse.core.settings import Settings

START_TIMEOUT_S = 90
STOP_TIMEOUT_S = 30
BROKER_HEAP = "-Xmx768m"
# A pid file without a start token only (`broker_process`): psutil derives a start time from the
# boot time, which Linux gives in whole seconds.
CLOCK_SLACK_S = 2.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class BrokerPaths:
    root: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def config(self) -> Path:
        return self.root / "server.properties"

    @property
    def log4j(self) -> Path:
        return self.root / "log4j2.properties"

    @property
    def pid(self) -> Path:
        return self.root / "broker.pid"

    @property
    def console(self) -> Path:
        return self.logs / "console.out"


def server_properties(data_dir: Path, port: int, controller_port: int) -> str:
    """A single-node KRaft configuration: replication factors of 1 for internal topics."""
    return "\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@127.0.0.1:{controller_port}",
        f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        f"log.dirs={data_dir}",
        "num.partitions=3",
        "offsets.topic.replication.factor=1",
        "offsets.topic.num.partitions=3",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "share.coordinator.state.topic.replication.factor=1",
        "share.coordinator.state.topic.min.isr=1",
        # A laptop broker: no week-long retention filling the disk, no rebalance delay.
        "log.retention.hours=72",
        "group.initial.rebalance.delay.ms=0",
        "auto.create.topics.enable=false",
        # One node has no other broker to hand its partitions to: a controlled shutdown only fences
        # it first, and a metadata request answered in that window lists no broker at all. A
        # librdkafka 2.16 client (confluentinc/librdkafka#5301) can then drop its only broker for
        # good, and a producer holds its messages until they time out (docs/ARCHITECTURE.md §3).
        "controlled.shutdown.enable=false",
        "",
    ])


def log4j_properties(logs_dir: Path) -> str:
    return "\n".join([
        "rootLogger.level=INFO",
        "rootLogger.appenderRef.file.ref=file",
        "appender.file.type=RollingFile",
        "appender.file.name=file",
        f"appender.file.fileName={logs_dir}/server.log",
        f"appender.file.filePattern={logs_dir}/server.log.%i",
        "appender.file.layout.type=PatternLayout",
        # dated with the zone, as the project's other log lines (lakehouse/core/logs.py)
        "appender.file.layout.pattern=[%d{yyyy-MM-dd'T'HH:mm:ss.SSSXXX}] %p %m (%c)%n",
        "appender.file.policies.type=Policies",
        "appender.file.policies.size.type=SizeBasedTriggeringPolicy",
        "appender.file.policies.size.size=20MB",
        "appender.file.strategy.type=DefaultRolloverStrategy",
        "appender.file.strategy.max=3",
        "",
    ])


def write_configs(paths: BrokerPaths, port: int, controller_port: int) -> None:
    """The broker's configuration files, each replaced whole: a start that fails half-way (a
    full disk) leaves the previous configuration, never a truncated one Kafka would misread."""
    write_atomically(paths.config, server_properties(paths.data, port, controller_port))
    write_atomically(paths.log4j, log4j_properties(paths.logs))


def broker_process(settings: Settings) -> psutil.Process | None:
    """The broker of this state folder, or None when it is not running.

    The pid file alone proves nothing: after a crash or a reboot its pid may belong to any
    other process, which must never be signalled or reported as the broker. So the process
    must name this folder's broker configuration on its command line, and the start token the
    pid file holds beside the pid (a new one per start, `start_token_option`): a pid handed out
    again, even to another broker of this folder, does not carry it. No clock is compared: the
    check before compared a process's start time (psutil's, derived from the boot time) with the
    file's time, two clock readings that a stepped clock can set apart, so that the running
    broker looks like a stranger (a suspected cause of one chaos failure, not proven).

    A pid file without a token (written by an earlier version, whose broker may still run)
    falls back to that older check: the process did not start after the file was written.
    """
    paths = BrokerPaths(settings.kafka_dir)
    try:
        pid, *token = paths.pid.read_text().split()
        process = psutil.Process(int(pid))
        command = process.cmdline()
        if token:
            ours = str(paths.config) in command and start_token_option(token[0]) in command
        else:
            written = paths.pid.stat().st_mtime
            ours = str(paths.config) in command and process.create_time() <= written + CLOCK_SLACK_S
    except (OSError, ValueError, psutil.Error):  # no file, garbage, gone, a zombie, or another user's
        return None
    return process if ours else None


def start_token_option(token: str) -> str:
    """The broker JVM's option that carries its start token (see `broker_process`)."""
    return f"-Dlakehouse.broker-start={token}"


def running_pid(settings: Settings) -> int | None:
    process = broker_process(settings)
    return None if process is None else process.pid


def _tcp_open(bootstrap: str, timeout_s: float) -> bool:
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def broker_answers(bootstrap: str, timeout_s: float = 3.0) -> bool:
    # A plain TCP probe first: librdkafka logs every refused connection to stderr.
    if not _tcp_open(bootstrap, timeout_s):
        return False
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({
        "bootstrap.servers": bootstrap,
        "socket.timeout.ms": int(timeout_s * 1000),
        "log_level": 0,
    })
    try:
        return bool(admin.list_topics(timeout=timeout_s).brokers)
    except Exception:  # KafkaException of any kind means "not (yet) answering"
        return False


def _classpath(settings: Settings) -> str:
    jars = settings.jars_dir / "kafka"
    if not list(jars.glob("kafka_2.13-*.jar")):
        raise LakehouseError(f"Kafka broker jars missing in {jars}: run `make setup`")
    return f"{jars}/*"


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def start(settings: Settings, log=print) -> int:
    """Start the broker (if not running) and wait until it answers; returns its pid."""
    paths = BrokerPaths(settings.kafka_dir)
    pid = running_pid(settings)
    if pid is not None:
        if broker_answers(settings.kafka_bootstrap_servers):
            log(f"Kafka already running (pid {pid}) on {settings.kafka_bootstrap_servers}")
            return pid
        raise LakehouseError(f"a Kafka process (pid {pid}) is running but not answering: `lakehouse kafka stop`")
    try:
        java = check_java()
    except PreflightError as exc:
        raise LakehouseError(str(exc)) from None
    classpath = _classpath(settings)
    port = settings.kafka_port
    if not port_is_free(port):
        raise LakehouseError(
            f"port {port} is already in use: stop what listens there, or choose another port "
            "with LAKEHOUSE_KAFKA_PORT=<port>"
        )
    controller_port = free_port()
    for folder in (paths.data, paths.logs):
        folder.mkdir(parents=True, exist_ok=True)
    write_configs(paths, port, controller_port)
    jvm = [java, BROKER_HEAP, *shlex.split(settings.jvm_options), f"-Dlog4j2.configurationFile=file:{paths.log4j}",
           "-cp", classpath]

    if not (paths.data / "meta.properties").exists():
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        fmt = subprocess.run(
            [*jvm, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c", str(paths.config)],
            capture_output=True, text=True,
        )
        if fmt.returncode != 0:
            raise LakehouseError(f"formatting Kafka storage failed: {(fmt.stderr or fmt.stdout).strip()[-300:]}")

    token = uuid.uuid4().hex
    with open(paths.console, "ab") as console:
        proc = subprocess.Popen(
            [*jvm, start_token_option(token), "kafka.Kafka", str(paths.config)],
            stdout=console, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,  # survives the CLI; stopped by `lakehouse kafka stop`
        )
    write_atomically(paths.pid, f"{proc.pid} {token}")
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            paths.pid.unlink(missing_ok=True)
            raise LakehouseError(
                f"Kafka exited during start-up (code {proc.returncode}); last log lines:\n"
                + (_tail(paths.logs / "server.log") or _tail(paths.console))
            )
        if broker_answers(settings.kafka_bootstrap_servers, timeout_s=1.0):
            log(f"Kafka started (pid {proc.pid}) on {settings.kafka_bootstrap_servers}, data in {paths.data}")
            return proc.pid
        time.sleep(0.5)
    stop(settings, log=lambda _: None)
    raise LakehouseError(f"Kafka did not answer within {START_TIMEOUT_S}s; see {paths.logs / 'server.log'}")


def stop(settings: Settings, log=print) -> bool:
    """Stop the broker: SIGTERM (a clean shutdown, logs flushed), SIGKILL if it does not exit in time."""
    paths = BrokerPaths(settings.kafka_dir)
    broker = broker_process(settings)
    if broker is None:
        paths.pid.unlink(missing_ok=True)
        log("Kafka is not running")
        return False
    try:
        broker.terminate()
        broker.wait(STOP_TIMEOUT_S)  # also reaps it when this process started it
        log(f"Kafka stopped (pid {broker.pid})")
    except psutil.TimeoutExpired:
        broker.kill()
        broker.wait()
        log(f"Kafka (pid {broker.pid}) did not stop in {STOP_TIMEOUT_S}s and was killed")
    except psutil.NoSuchProcess:
        log(f"Kafka stopped (pid {broker.pid})")
    paths.pid.unlink(missing_ok=True)
    return True


def status(settings: Settings) -> dict:
    pid = running_pid(settings)
    answering = pid is not None and broker_answers(settings.kafka_bootstrap_servers)
    return {
        "running": pid is not None,
        "pid": pid,
        "answering": answering,
        "bootstrap_servers": settings.kafka_bootstrap_servers,
        "data_dir": str(BrokerPaths(settings.kafka_dir).data),
    }
