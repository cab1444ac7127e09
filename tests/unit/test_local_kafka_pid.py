"""The broker's pid file is not trusted blindly: a stale one may name any other process."""

import os
import subprocess
import sys
import time

from lakehouse.core import local_kafka
from lakehouse.core.local_kafka import BrokerPaths, free_port
from lakehouse.core.settings import Settings


def test_a_pid_file_naming_another_process_is_not_the_broker_and_stop_leaves_that_process_alone(tmp_path):
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_KAFKA_PORT": str(free_port())})
    paths = BrokerPaths(settings.kafka_dir)
    paths.root.mkdir(parents=True)
    # An unrelated process, and one naming this folder's broker configuration but started after
    # the pid file was written (a pid the system handed out again after the broker died).
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
