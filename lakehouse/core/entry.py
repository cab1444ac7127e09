"""How every command-line entry point runs: logging set up once, problems the user can fix
printed as one `error:` line with a non-zero exit (LAKEHOUSE_DEBUG=1 shows the stack trace).

`lakehouse` (lakehouse.commands.cli) and `python -m ingestion` (what spark-submit runs) both
go through here, so the two spell errors and exit codes the same way.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable

from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import PREFIX, Settings

Command = Callable[[argparse.Namespace, Settings], int]


def configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    # py4j logs every callback-server connection at INFO.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    # GX logs its config handling at INFO, dozens of lines per suite.
    logging.getLogger("great_expectations").setLevel(logging.WARNING)


def run_command(command: Command, args: argparse.Namespace) -> int:
    """Run one parsed command with the settings of the environment; its exit status."""
    configure_logging()
    try:
        settings = Settings.from_env()
        return command(args, settings)
    except LakehouseError as exc:
        if os.environ.get(PREFIX + "DEBUG") == "1":
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
