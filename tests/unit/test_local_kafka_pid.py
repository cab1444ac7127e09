"""The broker's pid file is not trusted blindly: a stale one may name any other process. The
broker is the process that carries the pid file's start token, whatever any clock says."""

import os
import subprocess
import sys
import time

from lakehouse.core import local_kafka
from lakehouse.core.local_kafka import BrokerPaths, free_port
from lakehouse.core.settings import Settings


def test_a_pid_file_of_an_earlier_version_naming_another_process_is_not_the_broker(tmp_path):
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_KAFKA_PORT": str(free_port())})
    paths = BrokerPaths(settings.kafka_dir)
    paths.root.mkdir(parents=True)
    # A pid file without a start token (an earlier version's): an unrelated process, and one naming
    # this folder's broker configuration but started after the pid file was written (a pid the
    # system handed out again after the broker died).
    unrelated = subprocess.Popen(["sleep", "60"])
    look_alike = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(paths.config)])
    try:
        for process in (unrelated, look_alike):
            said = []
            _write_pid_file(paths, process, written_before=process is look_alike)
            assert local_kafka.stop(settings, log=said.append) is False
            assert said == ["Kafka is not running"]
            time.sleep(0.2)
            assert process.poll() is None, "stop signalled a process that is not the broker"
            assert not paths.pid.exists()  # the stale file is cleared
            _write_pid_file(paths, process, written_before=process is look_alike)
            state = local_kafka.status(settings)
            assert not state["running"] and state["pid"] is None
            assert local_kafka.running_pid(settings) is None
    finally:
        for process in (unrelated, look_alike):
            process.kill()
            process.wait()


def _write_pid_file(paths: BrokerPaths, process: subprocess.Popen, written_before: bool) -> None:
    paths.pid.write_text(str(process.pid))
    if written_before:  # the file is older than the process
        an_hour_ago = time.time() - 3600
        os.utime(paths.pid, (an_hour_ago, an_hour_ago))


def test_the_broker_is_the_process_with_the_start_token_whatever_the_clocks_say(tmp_path):
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_KAFKA_PORT": str(free_port())})
    paths = BrokerPaths(settings.kafka_dir)
    paths.root.mkdir(parents=True)
    token = "5e1f0c0ffee"
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    broker = subprocess.Popen([*sleeper, local_kafka.start_token_option(token), str(paths.config)])
    # this folder's configuration, another start's token: a broker started since, or a pid reused
    other_start = subprocess.Popen([*sleeper, local_kafka.start_token_option("another"), str(paths.config)])
    try:
        for shift in (-3600, 0, 3600):  # the file an hour older than the process, or younger: no matter
            paths.pid.write_text(f"{broker.pid} {token}")
            os.utime(paths.pid, (time.time() + shift, time.time() + shift))
            assert local_kafka.running_pid(settings) == broker.pid
        paths.pid.write_text(f"{other_start.pid} {token}")
        said = []
        assert local_kafka.stop(settings, log=said.append) is False
        assert said == ["Kafka is not running"] and other_start.poll() is None
    finally:
        for process in (broker, other_start):
            process.kill()
            process.wait()
