"""`lakehouse demo` as a user runs it (what `make demo` calls after setup), in its own state folder."""

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from lakehouse.local_kafka import free_port
from lakehouse.preflight import port_is_free
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.integration


def processes_mentioning(text: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            command = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in command:
            found.append(f"{cmdline.parent.name}: {command[:120]}")
    return found


def test_demo_runs_the_chain_reports_it_and_stops_what_it_started(settings, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "jars").symlink_to(settings.jars_dir.resolve())
    port = free_port()
    env = {
        **os.environ,
        "LAKEHOUSE_HOME": str(home),
        "LAKEHOUSE_KAFKA_PORT": str(port),
        "DBT_TARGET_PATH": str(tmp_path / "target"),
        "DBT_LOG_PATH": str(tmp_path / "logs"),
    }
    lakehouse = str(Path(os.sys.executable).parent / "lakehouse")
    result = subprocess.run([lakehouse, "demo", "--events", "2000"],
                            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout

    rows = {m.group(1): int(m.group(2).replace(",", ""))
            for m in re.finditer(r"^\s+(\w+\.\w+)\s+([\d,]+) rows$", out, re.M)}
    for table in ("silver.user_events", "silver.employees", "silver.purchases", "silver.customers",
                  "silver.accounts", "gold.sales_by_region_daily", "gold.customer_activity",
                  "gold.headcount_by_team_role", "gold.account_balance_summary", "gold.events_by_type_daily"):
        assert rows[table] > 0, table
    # dbt build ran seeds, models, data tests and unit tests, all green
    assert "dbt build" in out
    for stream in ("customers", "accounts"):  # the CDC oracle: live mirror == source database
        assert re.search(rf"silver\.{stream} \(CDC mirror, [\d,]+ live rows\) equals the source database", out), stream
    streams = {m.group(1): [int(g.replace(",", "")) for g in m.groups()[1:4]] + [m.group(5)]
               for m in re.finditer(r"^\s+(\w+)\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)\s+(.+)$", out, re.M)}
    assert set(streams) == {"employees", "purchases", "user_events", "customers", "accounts"}
    for name, (delivered, bronze, dead, verdict) in streams.items():
        assert verdict == "every message in bronze or dead letters, reasons match", name
        assert bronze + dead == delivered and bronze > 0, name
    assert sum(dead for _, _, dead, _ in streams.values()) > 0  # a small demo may leave one stream clean
    assert streams["user_events"][0] > 2000  # the demo's faults re-send some events
    assert "quality: PASSED" in out
    report = re.search(r"report: (\S+)", out)
    assert report and Path(report.group(1)).is_file()

    # dbt docs: the catalog describes the new models' columns
    from lakehouse.dbt import dbt_executable
    docs = subprocess.run([dbt_executable(), "docs", "generate"], cwd=REPO_ROOT, env={**env, "PWD": str(REPO_ROOT)},
                          capture_output=True, text=True, timeout=600)
    assert docs.returncode == 0, docs.stdout[-3000:]
    catalog = json.loads((tmp_path / "target" / "catalog.json").read_text())
    columns = {node["metadata"]["name"]: set(node["columns"]) for node in catalog["nodes"].values()}
    assert {"customer_id", "_seq", "_is_deleted"} <= columns["customers_mirror"]
    assert {"valid_from", "valid_to", "is_current", "op"} <= columns["customers_history"]
    assert {"sales_date", "region", "revenue"} <= columns["sales_by_region_daily"]

    # source freshness: every stream landed rows just now; dead letters are not checked
    fresh = subprocess.run([dbt_executable(), "source", "freshness"], cwd=REPO_ROOT,
                           env={**env, "PWD": str(REPO_ROOT)}, capture_output=True, text=True, timeout=600)
    assert fresh.returncode == 0, fresh.stdout[-3000:]
    sources = json.loads((tmp_path / "target" / "sources.json").read_text())
    verdicts = {r["unique_id"].split(".")[-1]: r["status"] for r in sources["results"]}
    assert verdicts == {name: "pass" for name in ("employees", "purchases", "user_events", "customers", "accounts")}

    # Nothing it started is still running: broker down, port free, no JVM on this state folder.
    assert port_is_free(port)
    assert not (home / "kafka" / "broker.pid").exists()
    assert processes_mentioning(str(home)) == []
