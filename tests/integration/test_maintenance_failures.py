"""A maintenance pass that fails, and maintenance that is overdue, as an operator sees them.

On a lakehouse of its own, three silver tables of three data files each: `broken`, one of whose
data files is gone from the warehouse (what a hand-made cleanup or a lost disk leaves), `fine`,
and `never`, which no pass touches. `lakehouse maintain` (the real command line) over `broken`
and `fine`: compaction cannot read `broken`'s files, so that step fails; `fine` is maintained
all the same. The command exits 1 with one `error:` line naming the table and the step;
`lakehouse status --check` fails on it, and, allowed no time since a successful pass, on the
maintenance overdue of every table; the metrics endpoint serves the failed steps and
each table's last successful pass, read from the maintenance log.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from lakehouse.core import metrics
from lakehouse.core.local_kafka import free_port
from tests.integration.own_lakehouse import cli_env, lakehouse_fixture

pytestmark = pytest.mark.integration

LAKEHOUSE = str(Path(sys.executable).with_name("lakehouse"))
TABLES = ("broken", "fine", "never")
# every table with 2+ files is compacted (the default asks for 5)
POLICY = {"defaults": {"min_input_files": 2, "quiet_minutes": 0}}


lake = lakehouse_fixture("maintenance-failures")


def lakehouse_env(own, folder: Path) -> dict[str, str]:
    policy = folder / "maintenance.yml"
    policy.write_text(yaml.safe_dump(POLICY))
    # no dbt run recorded for this lakehouse: status must not read the checkout's target/
    return {**cli_env(own), "LAKEHOUSE_MAINTENANCE_FILE": str(policy), "DBT_TARGET_PATH": str(folder / "target")}


@pytest.fixture(scope="module")
def maintained(lake, tmp_path_factory) -> dict:
    own, session, _ = lake
    folder = tmp_path_factory.mktemp("maintenance-failures")
    for name in TABLES:
        session.sql(f"create table silver.{name} (id bigint, v string) using iceberg")
        for n in range(3):
            session.sql(f"insert into silver.{name} values ({n}, 'x')")
    (gone,) = [row.file_path for row in session.sql("select file_path from silver.broken.data_files limit 1").collect()]
    Path(gone.removeprefix("file:")).unlink()
    env = lakehouse_env(own, folder)
    result = subprocess.run([LAKEHOUSE, "maintain", "--table", "silver.broken", "--table", "silver.fine"], env=env,
                            capture_output=True, text=True, timeout=900)
    log = [json.loads(line) for line in (own.home / "maintenance" / "log.jsonl").read_text().splitlines()]
    return {"env": env, "result": result, "log": {entry["table"]: entry for entry in log}}


def status_check(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([LAKEHOUSE, "status", "--check"], env=env, capture_output=True, text=True, timeout=300)


def test_a_failed_step_fails_the_command_with_one_line_naming_it(maintained):
    result = maintained["result"]
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: silver.broken: compact failed: "), output
    # the other table of the pass was maintained all the same
    assert "silver.fine: data files 3 -> 1" in result.stdout, output
    log = maintained["log"]
    assert log["silver.broken"]["failures"] and log["silver.broken"]["failures"][0].startswith("compact failed: ")
    assert log["silver.fine"]["failures"] == []


def test_status_check_fails_on_the_failed_pass_and_on_overdue_maintenance(maintained):
    finished = {table: datetime.fromisoformat(entry["finished_at"]).strftime("%Y-%m-%d %H:%M:%SZ")
                for table, entry in maintained["log"].items()}
    now = status_check(maintained["env"])
    assert now.returncode == 3, now.stdout + now.stderr
    assert now.stdout.splitlines() == [
        f"table silver.broken: the last maintenance pass ({finished['silver.broken']}) failed: "
        + maintained["log"]["silver.broken"]["failures"][0]], now.stdout

    # with no time allowed since a successful pass (as two days after this one, with the default of
    # 48 hours), every table's maintenance is overdue, `never`'s too. (Not faketime: librdkafka's
    # timed waits, for the lag of the streams, take the faked wall clock for the kernel's.)
    later = status_check({**maintained["env"], "LAKEHOUSE_STATUS_MAX_MAINTENANCE_AGE_HOURS": "0"})
    assert later.returncode == 3, later.stdout + later.stderr
    lines = later.stdout.splitlines()
    overdue = [line for line in lines if "maintenance overdue" in line]
    assert [line.split(":")[0] for line in overdue] == ["table silver.broken", "table silver.fine",
                                                        "table silver.never"], lines
    assert f"last successful maintenance pass {finished['silver.fine']}, more than 0 hours ago " \
           "(LAKEHOUSE_STATUS_MAX_MAINTENANCE_AGE_HOURS; `lakehouse maintain`)" in overdue[1]
    assert "never maintained successfully" in overdue[0] and "never maintained successfully" in overdue[2]
    assert len(lines) == 4 and "the last maintenance pass" in lines[0]

    shown = subprocess.run([LAKEHOUSE, "status"], env=maintained["env"], capture_output=True, text=True, timeout=300)
    (row,) = [line for line in shown.stdout.splitlines() if line.strip().startswith("silver.broken ")]
    assert "1 step(s) FAILED" in row, shown.stdout


def scrape(port: int) -> dict[tuple[str, str], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(sample.name, sample.labels.get("table", "")): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples
            if sample.name.startswith("lakehouse_maintenance_")}


def test_the_metrics_endpoint_serves_the_failed_steps_and_the_last_success(lake, maintained):
    own, _, _ = lake
    port = free_port()
    try:
        metrics.serve(dataclasses.replace(own, metrics_port=port))
        samples = scrape(port)
    finally:
        metrics.stop_serving()
    fine = datetime.fromisoformat(maintained["log"]["silver.fine"]["finished_at"]).timestamp()
    assert samples == {("lakehouse_maintenance_failed_steps", "silver.broken"): 1,
                       ("lakehouse_maintenance_failed_steps", "silver.fine"): 0,
                       ("lakehouse_maintenance_last_success_timestamp_seconds", "silver.fine"): fine}
