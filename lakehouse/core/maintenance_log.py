"""The maintenance log, read: what the passes of `lakehouse maintain` did to each table.

`lakehouse maintain` (lakehouse/operations/maintenance.py) appends one JSON object per table and
pass to <home>/maintenance/log.jsonl. `lakehouse status` reads the last pass of each table and
its last successful one from here, and so does the metrics endpoint (lakehouse/core/metrics.py),
so both judge a pass alike: it succeeded when it was real (not a dry run), no step failed and
the table was not skipped (a dbt run held the dbt-tables lock past the wait).

An entry names its failed steps in ``failures`` and a skip in ``skipped``. Entries written
before those keys existed kept both among their ``problems`` notes ("compact failed: ...",
"skipped: ..."): they are read from there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lakehouse.core.errors import LakehouseError

LOG = Path("maintenance") / "log.jsonl"  # under the state folder
# How a step's failure was spelled among an older entry's notes (TableMaintenance.run's step names).
_OLD_FAILURE = re.compile(r"^(compact|rewrite position deletes|rewrite manifests|expire snapshots|remove orphans) "
                          r"failed: ")


def log_path(home: Path) -> Path:
    return Path(home) / LOG


def failures(entry: dict[str, Any]) -> list[str]:
    """The steps that failed in a table's pass, one line each ("compact failed: <reason>")."""
    if isinstance(entry.get("failures"), list):
        return [str(f) for f in entry["failures"]]
    return [str(p) for p in entry.get("problems") or [] if _OLD_FAILURE.match(str(p))]


def skipped(entry: dict[str, Any]) -> str | None:
    """Why the pass left the table alone, or None."""
    if "skipped" in entry:
        return entry["skipped"] or None
    return next((str(p) for p in entry.get("problems") or [] if str(p).startswith("skipped:")), None)


def succeeded(entry: dict[str, Any]) -> bool:
    return not entry.get("dry_run") and not failures(entry) and skipped(entry) is None


@dataclass(frozen=True)
class TablePasses:
    last: dict[str, Any]  # the table's last real (not dry-run) pass
    last_success: dict[str, Any] | None  # its last successful pass; None: none in the log


def passes_by_table(lines: Iterable[str]) -> dict[str, TablePasses]:
    """Each table's last real pass and last successful pass; lines that are not entries are skipped."""
    last: dict[str, dict[str, Any]] = {}
    success: dict[str, dict[str, Any]] = {}
    for line in lines:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("table"), str) or entry.get("dry_run"):
            continue
        last[entry["table"]] = entry  # the log is appended in time order: later lines win
        if succeeded(entry):
            success[entry["table"]] = entry
    return {table: TablePasses(entry, success.get(table)) for table, entry in last.items()}


def read(home: Path) -> dict[str, TablePasses]:
    """The passes of the log in the state folder ``home``; {} when `lakehouse maintain` never ran."""
    path = log_path(home)
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise LakehouseError(f"cannot read {path}: {exc.strerror}") from None
    return passes_by_table(text.splitlines())
