"""One name per kind of row (issue 56, item 8): a stream's bronze rows are its good rows (decoded)
and its dead rows (the bytes and the reason of a record that cannot be read); there is no
dead-letter table since dead rows moved into the bronze tables (`bronze.dead_letters` is a view).

Before: the metric counting good rows was named `lakehouse_stream_bronze_rows`, the job's line
said "bronze N" for its good rows, and README's first screen and `lakehouse ingest --help` still
routed unreadable records "to a dead-letter table"."""

from __future__ import annotations

import re
from pathlib import Path

from lakehouse.commands.cli import build_parser
from lakehouse.core import metrics

ROOT = Path(__file__).resolve().parents[2]


def _subcommand_help(name: str) -> str:
    parser = build_parser()
    for action in parser._subparsers._group_actions:  # argparse keeps subparsers here
        if name in action.choices:
            return action.choices[name].format_help()
    raise AssertionError(f"no subcommand {name}")


def test_the_first_screen_and_the_ingest_help_name_no_dead_letter_table():
    first_screen = "\n".join((ROOT / "README.md").read_text().splitlines()[:40])
    for text, where in ((first_screen, "README.md"), (_subcommand_help("ingest"), "lakehouse ingest --help")):
        flat = " ".join(text.split())
        assert not re.search(r"dead[- ]letter table", flat), where
        assert "dead row" in flat, where


def test_row_metrics_are_named_for_the_rows_they_count():
    # the declared metrics (the registry also holds a collector of its own, the maintenance log's)
    names = {metric._name: metric._documentation for metric in metrics.REGISTRY._collector_to_names
             if hasattr(metric, "_documentation")}
    rows = {name: doc for name, doc in names.items() if "rows" in doc.lower() and name.startswith("lakehouse_stream")}
    assert rows, names
    for name, doc in rows.items():
        if doc.lower().startswith("good"):
            assert name.endswith("_good_rows"), name
        elif doc.lower().startswith("dead"):
            assert name.endswith("_dead_rows"), name
        else:  # bronze rows are good and dead rows together
            assert "good" not in name and "dead" not in name, name
    assert not any(name.endswith("_bronze_rows") and doc.lower().startswith("good") for name, doc in rows.items())
