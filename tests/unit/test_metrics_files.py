"""The metrics endpoint's declarations, its setting, and the files over it (ops/).

Every metric an alert rule (ops/alerts.yml) or a dashboard panel (ops/grafana-dashboard.json)
names is one the endpoint serves (lakehouse/core/metrics.py declares them all); `promtool`,
when installed (Debian's `prometheus` package), loads the rules and the scrape configuration.
A port in use stops `lakehouse ingest` and `lakehouse dbt loop` with one `error:` line.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from lakehouse.core import metrics
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "ops" / "alerts.yml"
DASHBOARD = ROOT / "ops" / "grafana-dashboard.json"
SCRAPE_CONFIG = ROOT / "ops" / "prometheus.yml"
# Prometheus's own series: a scrape target's health
PROMETHEUS_SERIES = {"up"}
METRIC = re.compile(r"\b(lakehouse_\w+|up)\b(?!\s*\()")


def rule_expressions() -> dict[str, str]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return {rule["alert"]: rule["expr"] for group in groups for rule in group["rules"]}


def panel_expressions() -> dict[str, str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return {f"{panel['title']} {target['refId']}": target["expr"]
            for panel in panels for target in panel.get("targets", [])}


@pytest.mark.parametrize("source", ["alert rules", "dashboard panels"])
def test_every_expression_names_metrics_the_endpoint_serves(source):
    expressions = rule_expressions() if source == "alert rules" else panel_expressions()
    served = metrics.served_names() | PROMETHEUS_SERIES
    assert expressions
    for where, expression in expressions.items():
        names = set(METRIC.findall(expression))
        assert names, f"{where}: names no metric: {expression}"
        assert names <= served, f"{where}: not served: {sorted(names - served)}"


def test_the_alerts_cover_what_an_operator_is_paged_for():
    named = {name for expression in rule_expressions().values() for name in METRIC.findall(expression)}
    assert {"lakehouse_stream_query_state", "lakehouse_stream_lag_records", "lakehouse_stream_dead_rows_total",
            "lakehouse_dbt_model_last_success_timestamp_seconds", "lakehouse_quality_checks_failed"} <= named


def test_the_dashboard_uses_every_metric_declared():
    used = {name for expression in panel_expressions().values() for name in METRIC.findall(expression)}
    bases = {name for name in metrics.served_names() if not name.endswith(("_created", "_count", "_sum"))}
    assert bases - used == set()


PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian package `prometheus`)")
@pytest.mark.parametrize("check, path", [("rules", ALERTS), ("config", SCRAPE_CONFIG)])
def test_promtool_loads_the_files(check, path):
    result = subprocess.run([PROMTOOL, "check", check, str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


# --- the setting and the endpoint -----------------------------------------------------------

@pytest.mark.parametrize("value, port", [("", None), ("9108", 9108), (" 9108 ", 9108)])
def test_the_port_setting(value, port, tmp_path):
    assert Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_METRICS_PORT": value}).metrics_port == port


@pytest.mark.parametrize("value", ["0", "65536", "http", "-1"])
def test_a_bad_port_is_one_clear_error(value, tmp_path):
    with pytest.raises(LakehouseError, match=r"LAKEHOUSE_METRICS_PORT must be a port number \(1-65535\)"):
        Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_METRICS_PORT": value})


def test_the_port_can_come_from_the_config_file(tmp_path):
    config = tmp_path / "lakehouse.env"
    config.write_text("LAKEHOUSE_METRICS_PORT=9109\n")
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_CONFIG_FILE": str(config)})
    assert settings.metrics_port == 9109


def test_nothing_is_served_when_the_port_is_unset(tmp_path):
    assert metrics.serve(Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)})) is False


def busy_port() -> socket.socket:
    holder = socket.socket()
    holder.bind(("0.0.0.0", 0))
    holder.listen()
    return holder


def test_a_port_in_use_is_one_clear_error(tmp_path):
    with busy_port() as holder:
        port = holder.getsockname()[1]
        settings = dataclasses.replace(Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)}), metrics_port=port)
        with pytest.raises(LakehouseError, match=rf"^cannot serve metrics on port {port} \(LAKEHOUSE_METRICS_PORT\): "):
            metrics.serve(settings)


def non_loopback_address() -> str:
    """An IPv4 address of this machine that is not loopback: how another host would reach it."""
    import ipaddress

    import psutil

    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family == socket.AF_INET and not ipaddress.ip_address(address.address).is_loopback:
                return address.address
    pytest.fail("this machine has no IPv4 address but loopback: the test connects through one")


def answers(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError:
        return False
    return True


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_endpoint_listens_on_loopback_only_unless_told_otherwise(tmp_path):
    outside = non_loopback_address()
    port = free_port()
    settings = dataclasses.replace(Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)}), metrics_port=port)
    try:
        metrics.serve(settings)
        assert answers("127.0.0.1", port)
        assert not answers(outside, port), f"the endpoint answers on {outside}:{port}, not only on loopback"
    finally:
        metrics.stop_serving()
    # in a container, the address Prometheus reaches it at: every interface, when set so
    port = free_port()
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_METRICS_PORT": str(port),
                                  "LAKEHOUSE_METRICS_BIND_ADDRESS": "0.0.0.0"})
    try:
        metrics.serve(settings)
        assert answers(outside, port) and answers("127.0.0.1", port)
    finally:
        metrics.stop_serving()


@pytest.mark.parametrize("command", [["ingest", "user_events"], ["dbt", "loop", "--every", "1m"]])
def test_a_command_with_the_port_in_use_stops_with_one_line(command, tmp_path):
    with busy_port() as holder:
        port = holder.getsockname()[1]
        env = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_METRICS_PORT": str(port)}
        result = subprocess.run([str(Path(sys.executable).with_name("lakehouse")), *command], env=env,
                                capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: cannot serve metrics on port {port} (LAKEHOUSE_METRICS_PORT): Address already in use: "
        "pick a free port or unset it"], result.stderr


# --- what the updates serve ---------------------------------------------------------------------

class Query:
    """A StreamingQuery's progress as PySpark hands it out: dicts of Spark's JSON."""

    def __init__(self, reports: list[dict], active: bool = True, failed: bool = False):
        self.recentProgress, self.isActive, self.failed = reports, active, failed
        self.lastProgress = reports[-1] if reports else None

    def exception(self):
        return RuntimeError("boom") if self.failed else None


def report(batch: int, at: str, rows: int, millis: int = 1500) -> dict:
    return {"batchId": batch, "timestamp": f"2026-12-02T05:00:{at}.000Z", "numInputRows": rows,
            "durationMs": {"triggerExecution": millis}}


def scrape() -> dict[str, float]:
    text = generate_latest(metrics.REGISTRY).decode()
    return {f"{s.name}{dict(sorted(s.labels.items()))}": s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_progress_is_counted_once_per_report_idle_ones_are_not_batches():
    stream = "unit_progress"
    first = [report(0, "01", 100), report(1, "02", 50)]
    metrics.observe_query(stream, Query(first), lambda p: 7)
    # the same reports again, then an idle trigger's report (no rows) and a skipped-over batch
    metrics.observe_query(stream, Query(first), lambda p: 7)
    metrics.observe_query(stream, Query([*first, report(2, "03", 0, 5), report(3, "04", 25), report(4, "05", 5)]),
                          lambda p: 0)
    values = scrape()
    labels = {"stream": stream}
    assert values[f"lakehouse_stream_records_read_total{labels}"] == 180
    assert values[f"lakehouse_stream_batch_duration_seconds_count{labels}"] == 4  # the idle report is no batch
    assert values[f"lakehouse_stream_batch_duration_seconds_sum{labels}"] == 6.0
    assert values[f"lakehouse_stream_lag_records{labels}"] == 0
    assert values[f"lakehouse_stream_query_state{ {'state': 'active', 'stream': stream} }"] == 1
    assert values[f"lakehouse_stream_query_state{ {'state': 'stopped', 'stream': stream} }"] == 0


def test_a_failed_query_says_so():
    metrics.observe_query("unit_failed", Query([report(0, "01", 1)], active=False, failed=True), lambda p: None)
    values = scrape()
    assert values[f"lakehouse_stream_query_state{ {'state': 'failed', 'stream': 'unit_failed'} }"] == 1
    assert values[f"lakehouse_stream_query_state{ {'state': 'active', 'stream': 'unit_failed'} }"] == 0
