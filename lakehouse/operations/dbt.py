"""Running dbt from the lakehouse's own commands (demo, tests) exactly as a user would.

dbt runs as its own process at the project root, so it reads the root profiles.yml and
builds its own Spark session there; it is pointed at the same state folder by variable.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import PREFIX, PROJECT_ROOT, Settings


def dbt_executable() -> str:
    candidate = Path(sys.executable).parent / "dbt"
    return str(candidate) if candidate.exists() else "dbt"


def dbt_env(settings: Settings, target_dir: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env[PREFIX + "HOME"] = str(settings.home)
    env[PREFIX + "SPARK_MASTER"] = settings.spark_master
    env[PREFIX + "CATALOG_URI"] = settings.catalog_uri
    env[PREFIX + "WAREHOUSE"] = settings.warehouse
    env[PREFIX + "SHUFFLE_PARTITIONS"] = str(settings.shuffle_partitions)
    env[PREFIX + "JARS_DIR"] = str(settings.jars_dir)
    env[PREFIX + "THRIFT_HOST"] = settings.thrift_host
    env[PREFIX + "THRIFT_PORT"] = str(settings.thrift_port)
    env["PWD"] = str(PROJECT_ROOT)  # the profile resolves project paths from PWD
    env["DBT_SEND_ANONYMOUS_USAGE_STATS"] = "false"
    if target_dir is not None:
        env["DBT_TARGET_PATH"] = str(target_dir)
        env["DBT_LOG_PATH"] = str(target_dir / "logs")
    return env


def run_dbt(settings: Settings, args: list[str], target_dir: Path | None = None,
            capture: bool = False) -> subprocess.CompletedProcess:
    """Run `dbt <args>` at the project root; raise with dbt's own error lines if it fails.

    Holds the dbt-tables lock (lakehouse/locks.py) so maintenance never compacts a table
    under a running MERGE.
    """
    from lakehouse.core.locks import dbt_run_lock

    with dbt_run_lock(settings):
        result = subprocess.run(
            [dbt_executable(), *args], cwd=PROJECT_ROOT, env=dbt_env(settings, target_dir),
            capture_output=capture, text=True,
        )
    if result.returncode != 0:
        tail = ""
        if capture:
            lines = [ln for ln in (result.stdout or "").splitlines() if "ERROR" in ln or "Error" in ln]
            tail = ": " + " | ".join(lines[-3:]) if lines else ""
        raise LakehouseError(f"`dbt {' '.join(args)}` failed (exit {result.returncode}){tail}")
    return result
