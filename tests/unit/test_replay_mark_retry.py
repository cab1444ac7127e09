"""The dead-letter replay's MERGE is retried only when a concurrent commit made Iceberg refuse it.

Spark is replaced by a recorder here on purpose: what is under test is the retry policy around
``spark.sql`` (which errors are retried, how often, and that the temporary view is always
dropped); the MERGE itself runs against real tables in tests/integration/test_dlq_replay.py.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from lakehouse.operations.dead_letters import replay


class Outcome:
    def createOrReplaceTempView(self, name):  # noqa: N802 (Spark's name)
        self.view = name


class Session:
    """Fails ``spark.sql`` with the given errors, in order, then succeeds."""

    def __init__(self, errors):
        self.errors, self.statements, self.dropped = list(errors), [], []
        self.catalog = self

    def sql(self, statement):
        self.statements.append(statement)
        if self.errors:
            raise self.errors.pop(0)

    def dropTempView(self, name):  # noqa: N802 (Spark's name)
        self.dropped.append(name)


def _report():
    report = replay.ReplayReport("0f0e-1", False, datetime(2026, 1, 1, tzinfo=UTC))
    report.streams.append(replay.StreamReplay("user_events", "bronze.user_events", selected=2))
    return report


def test_a_conflicting_commit_is_retried(monkeypatch):
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    spark = Session([RuntimeError("org.apache.iceberg.exceptions.CommitFailedException: base changed")])
    assert replay._mark(spark, _report(), [Outcome()], 0, 10) == 2
    assert len(spark.statements) == 2 and spark.statements[0] == spark.statements[1]
    assert len(spark.dropped) == 1


def test_conflicts_beyond_the_attempts_are_raised(monkeypatch):
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    conflicts = [RuntimeError(f"ValidationException: conflicting files ({n})") for n in range(replay.MERGE_ATTEMPTS)]
    spark = Session(conflicts)
    with pytest.raises(RuntimeError, match=rf"conflicting files \({replay.MERGE_ATTEMPTS - 1}\)"):
        replay._mark(spark, _report(), [Outcome()], 0, 10)
    assert len(spark.statements) == replay.MERGE_ATTEMPTS
    assert len(spark.dropped) == 1


def test_any_other_error_is_raised_at_once(monkeypatch):
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    spark = Session([RuntimeError("AnalysisException: column not found")])
    with pytest.raises(RuntimeError, match="column not found"):
        replay._mark(spark, _report(), [Outcome()], 0, 10)
    assert len(spark.statements) == 1
    assert len(spark.dropped) == 1
