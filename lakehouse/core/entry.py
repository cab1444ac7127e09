"""How every command-line entry point runs: logging set up once (lakehouse/core/logs.py, in the
form --log-format or LAKEHOUSE_LOG_FORMAT names), problems the user can fix printed as one
`error:` line with a non-zero exit (LAKEHOUSE_DEBUG=1 shows the stack trace).

`lakehouse` (lakehouse.commands.cli) and `python -m ingestion` (what spark-submit runs) both
go through here, so the two spell errors and exit codes the same way.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from lakehouse.core import logs
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import PREFIX, Settings

Command = Callable[[argparse.Namespace, Settings], int]


def add_log_format_argument(parser: argparse.ArgumentParser, default=None) -> None:
    """--log-format, on the main parser and every command's (so it may follow the command);
    a command's parser passes argparse.SUPPRESS, so an absent option keeps the main one's."""
    # no `choices`: argparse would print its usage too; a bad value is one `error:` line (run_command)
    parser.add_argument("--log-format", metavar="text|json", default=default,
                        help="log lines as dated text (default) or one JSON object per line; "
                             "default: LAKEHOUSE_LOG_FORMAT")


def run_command(command: Command, args: argparse.Namespace) -> int:
    """Run one parsed command with the settings of the environment; its exit status."""
    try:
        settings = Settings.from_env()
        logs.configure(getattr(args, "log_format", None) or settings.log_format)
        return command(args, settings)
    except LakehouseError as exc:
        if os.environ.get(PREFIX + "DEBUG") == "1":
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
