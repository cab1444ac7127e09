import os
import socket
import subprocess
import sys

import pytest

from lakehouse.commands.cli import build_parser
from tests.conftest import REPO_ROOT, jars_source

PREFLIGHT = str(REPO_ROOT / "lakehouse" / "core" / "preflight.py")


def run_preflight(*args, env=None):
    return subprocess.run([sys.executable, PREFLIGHT, *args], capture_output=True, text=True, env=env, timeout=60)


def test_missing_java_is_one_clear_line(tmp_path):
    env = {"PATH": str(tmp_path), "HOME": os.environ.get("HOME", "/root")}
    result = run_preflight("java", env=env)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: Java not found")


def test_taken_port_is_one_clear_line():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = run_preflight("port", str(port))
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"error: port {port} is already in use: stop what listens there, "
        "or choose another port for Kafka with LAKEHOUSE_KAFKA_PORT=<port>"
    )


def test_taken_port_is_fine_when_it_is_our_own_broker(tmp_path):
    pidfile = tmp_path / "broker.pid"
    pidfile.write_text(str(os.getpid()))  # a live process stands in for the broker
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        assert run_preflight("port", str(sock.getsockname()[1]), str(pidfile)).returncode == 0


SUBCOMMANDS = ["kafka", "produce", "ingest", "status", "maintain", "dlq", "dbt", "quality", "dbt-profile", "config",
               "demo", "cluster", "submit"]


@pytest.mark.parametrize("command", [[], *[[c] for c in SUBCOMMANDS]])
def test_every_subcommand_explains_itself(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([*command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: lakehouse")
    assert len(out.splitlines()) > 3


def test_bad_input_is_one_line_not_a_stack_trace(tmp_path):
    env = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "lakehouse.commands.cli", "ingest", "clicks"],
                            capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "error: unknown stream 'clicks'; configured streams: accounts, cdc_transactions, customers, employees, "
        "purchases, user_events"
    ]


@pytest.mark.parametrize(("args", "env", "message"), [
    (["quality", "run", "--stream", "clicks"], {},
     "error: no quality suite for stream 'clicks'; streams with suites: accounts, cdc_transactions, customers, "
     "dead_letters, employees, purchases, reference, user_events"),
    (["quality", "run", "--layer", "gold", "--stream", "dead_letters"], {},
     "error: no quality suite for layer 'gold' and stream 'dead_letters'; streams with suites in gold: "
     "accounts, customers, employees, purchases, user_events"),
    (["quality", "run"], {"LAKEHOUSE_QUALITY_DEAD_LETTER_RATE_CRITICAL": "ten percent"},
     "error: LAKEHOUSE_QUALITY_DEAD_LETTER_RATE_CRITICAL must be a number >= 0, got 'ten percent'"),
])
def test_bad_quality_selection_or_threshold_is_one_line_before_spark_starts(tmp_path, args, env, message):
    env = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path), **env}
    result = subprocess.run([sys.executable, "-m", "lakehouse.commands.cli", *args],
                            capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [message]
    assert not (tmp_path / "gx").exists()  # nothing was started or written


def test_lakehouse_dbt_without_a_command_says_what_to_give(tmp_path):
    env = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "lakehouse.commands.cli", "dbt"],
                            capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "error: give dbt's arguments, e.g. `lakehouse dbt run` or `lakehouse dbt build -s silver`"]


def test_lakehouse_dbt_passes_every_argument_to_dbt_its_options_first_included(tmp_path):
    from lakehouse.commands.cli import _dbt_arguments

    assert _dbt_arguments(["--log-format", "json", "dbt", "--debug", "run", "-s", "x"]) == \
        (["--log-format", "json", "dbt"], ["--debug", "run", "-s", "x"])
    assert _dbt_arguments(["dbt", "--version"]) == (["dbt"], ["--version"])
    assert _dbt_arguments(["status", "dbt"]) is None
    env = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "lakehouse.commands.cli", "dbt", "--version"],
                            capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=120)
    assert result.returncode == 0 and "installed:" in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize("command, env, message", [
    (["submit", "ingest", "all"], {"LAKEHOUSE_PROFILE": "cluster"},
     "error: the configuration needs AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY in the environment"),
    (["cluster", "thrift-server"], {}, "error: no catalog at jdbc:sqlite:{home}/catalog.db yet: run "
                                       "`lakehouse cluster init` (or ingest something) first"),
    (["submit", "ingest", "all"], {"LAKEHOUSE_JARS_DIR": "{home}/none"}, "error: no jars in {home}/none/spark"),
])
def test_cluster_commands_refuse_what_cannot_work_in_one_line(tmp_path, command, env, message):
    # the jars the other tests use (a clone without its own .lakehouse/jars has none there)
    jars = jars_source()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LAKEHOUSE_", "AWS_"))}
    env = {**base, "LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_JARS_DIR": str(jars),
           **{k: v.format(home=tmp_path) for k, v in env.items()}}
    result = subprocess.run([sys.executable, "-m", "lakehouse.commands.cli", *command],
                            capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[0].startswith(message.format(home=tmp_path)), result.stderr
    assert "Traceback" not in result.stderr
