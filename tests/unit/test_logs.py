"""The one logging setup (lakehouse/core/logs.py): both forms of a line, with the extra fields and
exceptions; the choice by option or variable, a bad one refused with one `error:` line; the JVM's
log4j2 configuration offering the same two forms. The real JVM and job lines, parsed line by line,
are in tests/integration/test_status_check.py."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from datetime import datetime

import pytest

from lakehouse.core import logs
from lakehouse.core.errors import LakehouseError
from lakehouse.core.spark import LOG4J_FILE, PACKAGE_DIR
from tests.conftest import REPO_ROOT


def record(message: str, *args, extra: dict | None = None, exc_info=None, level=logging.INFO) -> logging.LogRecord:
    return logging.getLogger("lakehouse.ingest").makeRecord(
        "lakehouse.ingest", level, __file__, 1, message, args, exc_info, extra=extra)


def dated(text: str) -> datetime:
    """The time of a line, which must be ISO 8601 to the millisecond with a zone."""
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)", text), text
    return datetime.fromisoformat(text)


def test_a_text_line_is_dated_with_its_zone_level_and_logger():
    line = logs.LakehouseFormatter("text").format(record("%s batch %d: read %s", "orders", 3, "1,000"))
    time, level, rest = line.split(" ", 2)
    dated(time)
    assert (level, rest) == ("INFO", "lakehouse.ingest: orders batch 3: read 1,000")


def test_a_json_line_has_the_keys_and_every_extra():
    """The project's own extras first, in their order, then any other one: none left out (an
    extra outside the known list was dropped in silence)."""
    counts = {"read": 1000, "bronze": 990, "dead_letters": 10}
    line = logs.LakehouseFormatter("json").format(record(
        "%s batch %d: read %s", "orders", 3, "1,000",
        extra={"stream": "orders", "batch": 3, "counts": counts, "unlisted": "not a known key", "query": "q1"}))
    assert "\n" not in line
    fields = json.loads(line)
    assert list(fields) == ["time", "level", "logger", "message", "stream", "batch", "counts", "query", "unlisted"]
    assert (fields["query"], fields["unlisted"]) == ("q1", "not a known key")
    dated(fields["time"])
    assert fields["level"] == "INFO" and fields["logger"] == "lakehouse.ingest"
    assert fields["message"] == "orders batch 3: read 1,000"
    assert (fields["stream"], fields["batch"], fields["counts"]) == ("orders", 3, counts)


def test_an_exception_stays_on_its_line_in_json_and_follows_it_in_text():
    try:
        raise ValueError("bad \"value\"\nsecond line")
    except ValueError:
        exc_info = sys.exc_info()
    failed = record("the batch failed", exc_info=exc_info, level=logging.ERROR)
    (line,) = logs.LakehouseFormatter("json").format(failed).splitlines()
    fields = json.loads(line)
    assert fields["level"] == "ERROR" and fields["message"] == "the batch failed"
    assert fields["exception"].startswith("Traceback (most recent call last):")
    assert fields["exception"].endswith('ValueError: bad "value"\nsecond line')

    first, *rest = logs.LakehouseFormatter("text").format(failed).splitlines()
    assert first.endswith(" ERROR lakehouse.ingest: the batch failed")
    assert rest[0] == "Traceback (most recent call last):" and rest[-1] == "second line"


def test_utc_is_written_z_like_log4j_and_other_zones_with_their_offset(monkeypatch):
    import time

    for zone, ending in (("UTC", "Z"), ("Asia/Kolkata", "+05:30"), ("America/New_York", "-05:00")):
        monkeypatch.setenv("TZ", zone)
        time.tzset()
        text = logs.timestamp(1796180645.123)  # 2026-12-02T03:04:05.123Z, a winter day
        assert text.endswith(ending), (zone, text)
        assert dated(text).timestamp() == pytest.approx(1796180645.123)
    monkeypatch.undo()
    time.tzset()


def test_the_option_wins_over_the_variable_and_a_bad_value_is_a_user_error(monkeypatch):
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    monkeypatch.setenv(logs.VARIABLE, "text")
    monkeypatch.delenv("DBT_LOG_FORMAT", raising=False)
    try:
        assert logs.configure("json") == "json"
        assert logs.configure("JSON") == "json"  # twice: one handler, not two
        ours = [h for h in root.handlers if h not in before]
        assert len(ours) == 1 and ours[0].formatter.form == "json"
        # what the process starts follows: the JVM's log4j (by the variable), dbt (by its own)
        assert os.environ[logs.VARIABLE] == "json" and os.environ["DBT_LOG_FORMAT"] == "json"
        with pytest.raises(LakehouseError, match=r"^--log-format must be text or json, got 'xml'$"):
            logs.configure("xml")
        monkeypatch.setenv(logs.VARIABLE, "yaml")
        with pytest.raises(LakehouseError, match=r"^LAKEHOUSE_LOG_FORMAT must be text or json, got 'yaml'$"):
            logs.configure()
    finally:  # this process's logging as it was, for the tests after this one
        for handler in [h for h in root.handlers if h not in before]:
            root.removeHandler(handler)
        root.setLevel(level)
        logging.captureWarnings(False)


@pytest.mark.parametrize("argv, env", [(["--log-format", "xml", "config"], {}),
                                       (["config", "--log-format", "xml"], {}),
                                       (["config"], {"LAKEHOUSE_LOG_FORMAT": "xml"})])
def test_a_bad_form_is_one_error_line(tmp_path, argv, env):
    result = subprocess.run([sys.executable, "-m", "lakehouse.commands.cli", *argv], capture_output=True, text=True,
                            env={**os.environ, "LAKEHOUSE_HOME": str(tmp_path), **env}, cwd=REPO_ROOT, timeout=120)
    assert result.returncode == 1 and result.stdout == ""
    where = "LAKEHOUSE_LOG_FORMAT" if env else "--log-format"
    assert result.stderr.splitlines() == [f"error: {where} must be text or json, got 'xml'"]


def test_log4j_offers_both_forms_by_the_same_variable_dated_with_the_zone():
    properties = dict(line.split(" = ", 1) for line in (PACKAGE_DIR / LOG4J_FILE).read_text().splitlines()
                      if line and not line.startswith("#"))
    assert properties["rootLogger.appenderRef.stderr.ref"] == "${env:" + logs.VARIABLE + ":-text}"
    assert {properties[f"appender.{form}.name"] for form in logs.FORMATS} == set(logs.FORMATS)
    assert properties["appender.text.layout.pattern"].startswith("%d{yyyy-MM-dd'T'HH:mm:ss.SSSXXX} ")
    template = json.loads(properties["appender.json.layout.eventTemplate"])
    assert list(template) == ["time", "level", "logger", "message", "exception"]


def test_a_failed_dbt_runs_error_lines_are_read_from_its_json_logs_too():
    from lakehouse.operations.dbt import _dbt_line_text

    line = json.dumps({"data": {}, "info": {"level": "error", "msg": "Database Error in model x", "ts": "..."}})
    assert _dbt_line_text(line) == "ERROR Database Error in model x"
    assert _dbt_line_text("03:04:05  Database Error in model x") == "03:04:05  Database Error in model x"
    assert _dbt_line_text("{not json") == "{not json"
