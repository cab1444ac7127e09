"""dbt invoked in the test's own process (dbtRunner), on a Spark session of the test's.

For tests that run the project's dbt many times on a lakehouse of their own. Each `dbt`
subprocess (lakehouse/operations/dbt.py `run_dbt`, how users, the demo and the CLI run it)
starts Python, imports dbt, parses the project and starts a cold JVM with its own Spark session
before its first statement; here the JVM of the test process is already warm, the project is
parsed once, and only the statements remain (docs/testing.md, "The test run").

It is the same project, profile, macros and SQL: dbt-spark's session method takes the running
session (`SparkSession.builder.getOrCreate()`, which returns the process's first session and
applies the profile's runtime settings to it), so for the length of an invocation the given
session (the lakehouse's own catalog, tests/integration/own_lakehouse.py) stands in as that
first session, and the environment is the one a dbt subprocess would get (`dbt_env`).
`lakehouse dbt loop` runs dbt in its process the same way (run_loop). What it does not check:
the profile's JVM-wide settings (jars, extensions, memory), which come from the test's session
here; the dbt processes of the demo, test_end_to_end.py and the event-log runs still do.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lakehouse.core.locks import dbt_run_lock
from lakehouse.core.settings import PROJECT_ROOT, Settings
from lakehouse.operations.dbt import dbt_env


def run_dbt(settings: Settings, args: list[str], target_dir: Path, capture: bool = True):
    """`dbt <args>` on the lakehouse of ``settings``, in this process; raises with the failed
    nodes' messages when it fails. The signature of lakehouse.operations.dbt.run_dbt, so that a
    test module switches by its import (``capture`` is unused: dbt's output goes to this
    process's, which pytest captures)."""
    key = (str(settings.home), str(target_dir))
    if key not in _PROJECTS:
        _PROJECTS[key] = _Project(settings, target_dir)
    return _PROJECTS[key].invoke(args)


_PROJECTS: dict[tuple[str, str], _Project] = {}


class _Project:
    """The project, parsed once, and a session on the lakehouse's catalog, for one target folder."""

    def __init__(self, settings: Settings, target_dir: Path):
        from pyspark.sql import SparkSession

        from lakehouse.core.spark import session_on

        first = SparkSession._instantiatedSession
        if first is None:
            raise AssertionError("dbt in process needs the tests' Spark session (the `spark` fixture)")
        self.settings, self.target_dir = settings, target_dir
        self.session = session_on(first, settings)
        self.flags = ["--project-dir", str(PROJECT_ROOT), "--profiles-dir", str(PROJECT_ROOT)]
        self._runner = None

    def invoke(self, args: list[str]):
        from dbt.cli.main import dbtRunner
        from dbt_common.invocation import get_invocation_id

        from lakehouse.operations.quality_gate import RUNNER_ENV, carried_options, check_and_publish

        # the lock run_dbt holds: maintenance never compacts a table under a running MERGE, and the
        # project's on-run-start hook sees its holder
        with dbt_run_lock(self.settings) as holder, \
                _environment({**dbt_env(self.settings, self.target_dir), **holder, RUNNER_ENV: "1"}), \
                _first_session(self.session):
            if self._runner is None:
                parsed = dbtRunner().invoke(["parse", *self.flags])
                if not parsed.success:
                    raise AssertionError(f"dbt could not parse the project: {parsed.exception}")
                self._runner = dbtRunner(manifest=parsed.result)  # parsed once, as `lakehouse dbt loop` does
            result = self._runner.invoke([*args, *self.flags])
            # then the quality gate on what the run held, and its publication, as `lakehouse dbt` does
            gate = check_and_publish(self._runner.invoke, self.settings, result, get_invocation_id(),
                                     [*self.flags, *carried_options(args)])
        if gate is not None and not gate.published:
            raise AssertionError(f"`dbt {' '.join(args)}`: {gate.error}")
        if not result.success:
            failed = [f"{getattr(r.node, 'name', '?')}: {r.status}: {r.message}"
                      for r in getattr(result.result, "results", None) or []
                      if str(r.status) not in ("success", "pass")]
            raise AssertionError(f"`dbt {' '.join(args)}` failed: {result.exception or ''} {failed}")
        return result


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """This process's environment set to ``values`` (dbt reads its settings and the profile's
    env_var() from it), and restored afterwards."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextmanager
def _first_session(session) -> Iterator[None]:
    """``session`` as the one `SparkSession.builder.getOrCreate()` returns, until the block ends."""
    from pyspark.sql import SparkSession

    first = SparkSession._instantiatedSession
    SparkSession._instantiatedSession = session
    try:
        yield
    finally:
        SparkSession._instantiatedSession = first
