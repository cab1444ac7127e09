"""What long commands show a person: progress bars on a terminal, nothing extra in a log.

A bar is drawn only when standard error is a terminal and CI is not set, so CI logs and
files that output is redirected to keep their plain lines (rich decides what a terminal
is; NO_COLOR and TERM=dumb are honoured there too). Bars go to standard error: standard
output stays the command's result, which scripts read.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


def stderr_console() -> Console:
    return Console(stderr=True)


def shows_progress(console: Console | None = None) -> bool:
    """True when a bar would reach a person: a terminal on standard error, and not CI."""
    if os.environ.get("CI"):
        return False
    return (console or stderr_console()).is_terminal


@contextmanager
def progress(description: str, total: int | None = None, show: bool = True) -> Iterator[Callable[..., None]]:
    """A bar for one long piece of work; yields ``advance(steps=1, description=None, completed=None)``
    (``completed``: set the count instead of adding to it).

    ``total`` None draws an indeterminate bar (a count of unknown end, e.g. a catch-up).
    ``show`` False never draws (e.g. worker processes sharing one terminal). Off a terminal
    the bar is disabled and ``advance`` costs next to nothing.
    """
    console = stderr_console()
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=console, transient=True, disable=not (show and shows_progress(console)))
    terminal = sys.stderr
    with bar:
        # While a bar is drawn, sys.stderr is rich's proxy, which prints above the bar; log
        # lines written to the terminal itself would tear the bar apart.
        handlers = [h for h in logging.getLogger().handlers
                    if isinstance(h, logging.StreamHandler) and h.stream is terminal]
        for handler in handlers:
            handler.setStream(sys.stderr)
        task = bar.add_task(description, total=total)

        def advance(steps: float = 1, description: str | None = None, completed: float | None = None) -> None:
            bar.update(task, **({"completed": completed} if completed is not None else {"advance": steps}),
                       **({"description": description} if description else {}))

        try:
            yield advance
        finally:
            for handler in handlers:
                handler.setStream(terminal)
