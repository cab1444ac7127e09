"""The dead-letter replay's MERGE (one per stream table) is retried only when a concurrent commit
made Iceberg refuse it.

Spark is replaced by a recorder here on purpose: what is under test is the retry policy around
``spark.sql`` (which errors are retried, how often, and that the temporary view is always
dropped); the MERGE itself runs against real tables in tests/integration/test_dlq_replay.py.
"""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from lakehouse.operations.dead_letters import replay


class Outcome:
    columns = ["_kafka_topic", "_kafka_partition", "_kafka_offset", "_error_code", "_error_detail", "_schema_id"]

    def createOrReplaceTempView(self, name):  # noqa: N802 (Spark's name)
        self.view = name


class Session:
    """Fails ``spark.sql`` with the given errors, in order, then succeeds."""

    def __init__(self, errors):
        self.errors, self.statements, self.dropped, self.settings = list(errors), [], [], {}
        self.catalog = self.conf = self

    def set(self, key, value):
        self.settings[key] = value

    def unset(self, key):
        self.settings.pop(key)

    def sql(self, statement):
        self.statements.append(statement)
        if self.errors:
            raise self.errors.pop(0)

    def dropTempView(self, name):  # noqa: N802 (Spark's name)
        self.dropped.append(name)


SPEC = SimpleNamespace(name="user_events", bronze_table="bronze.user_events")


def _report():
    report = replay.ReplayReport("0f0e-1", False, datetime(2026, 1, 1, tzinfo=UTC))
    report.streams.append(replay.StreamReplay("user_events", "bronze.user_events", selected=2))
    return report


def test_a_conflicting_commit_is_retried(monkeypatch):
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    spark = Session([RuntimeError("org.apache.iceberg.exceptions.CommitFailedException: base changed")])
    replay._merge(spark, SPEC, _report(), Outcome())
    assert len(spark.statements) == 2 and spark.statements[0] == spark.statements[1]
    assert "merge into `bronze`.`user_events`" in spark.statements[0]
    assert len(spark.dropped) == 1 and spark.settings == {}


def test_conflicts_beyond_the_attempts_are_raised(monkeypatch):
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    conflicts = [RuntimeError(f"ValidationException: conflicting files ({n})") for n in range(replay.MERGE_ATTEMPTS)]
    spark = Session(conflicts)
    with pytest.raises(RuntimeError, match=rf"conflicting files \({replay.MERGE_ATTEMPTS - 1}\)"):
        replay._merge(spark, SPEC, _report(), Outcome())
    assert len(spark.statements) == replay.MERGE_ATTEMPTS
    assert len(spark.dropped) == 1


def test_any_other_error_is_raised_at_once(monkeypatch):
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    spark = Session([RuntimeError("AnalysisException: column not found")])
    with pytest.raises(RuntimeError, match="column not found"):
        replay._merge(spark, SPEC, _report(), Outcome())
    assert len(spark.statements) == 1
    assert len(spark.dropped) == 1
