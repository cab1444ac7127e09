"""What long commands show a person: progress bars on a terminal, nothing extra in a log.

A bar is drawn only when standard error is a terminal and CI is not set, so CI logs and
files that output is redirected to keep their plain lines (rich decides what a terminal
is; NO_COLOR and TERM=dumb are honoured there too). Bars go to standard error: standard
output stays the command's result, which scripts read.
"""

from __future__ import annotations

import os
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
def progress(description: str, total: int | None = None) -> Iterator[Callable[..., None]]:
    """A bar for one long piece of work; yields ``advance(steps=1, description=None)``.

    ``total`` None draws an indeterminate bar (a count of unknown end, e.g. a catch-up).
    Off a terminal the bar is disabled and ``advance`` costs next to nothing.
    """
    console = stderr_console()
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=console, transient=True, disable=not shows_progress(console))
    with bar:
        task = bar.add_task(description, total=total)

        def advance(steps: float = 1, description: str | None = None) -> None:
            bar.update(task, advance=steps, **({"description": description} if description else {}))

        yield advance
