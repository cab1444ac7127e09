"""The one logging setup of every command and job: `lakehouse ...`, `python -m ingestion`, the
producers' worker processes, the benchmarks.

Every line is dated with its zone (ISO 8601 to the millisecond with the offset of the machine's
zone, ``Z`` for UTC, as the JVM's log4j writes it: ``2026-12-02T03:04:05.123Z``,
``2026-12-02T04:04:05.123+01:00``), so a line says when it happened wherever it is read.
Two forms, chosen by ``--log-format`` or ``LAKEHOUSE_LOG_FORMAT``:

* ``text`` (default): ``<time> <LEVEL> <logger>: <message>``, for people;
* ``json``: one JSON object per line with ``time``, ``level``, ``logger``, ``message``, every
  extra key a line carries (``stream``, ``batch``, ``counts``...: passed with
  ``log.info(..., extra={...})``) and ``exception`` (the stack trace, when there is one), for
  log collectors.

The chosen form is put in this process's environment, so what it starts follows it: the JVM's
log4j2 configuration (lakehouse/core/log4j2-spark.properties) picks its appender from the same
variable, and dbt gets ``DBT_LOG_FORMAT=json`` (its own JSON objects, see docs/operations.md).

The extra keys are the hook for a metrics layer: a logging.Handler added to the root logger
receives the same structured values a JSON line shows, without parsing messages.
"""

from __future__ import annotations

import json
import logging
import os
import traceback
from datetime import datetime
from typing import Any

from lakehouse.core.errors import LakehouseError

VARIABLE = "LAKEHOUSE_LOG_FORMAT"
FORMATS = ("text", "json")
# Values log calls of the project pass with extra={...}; a JSON line carries those present
# first, in this order, then any other extra key in name order (none is left out).
EXTRA_KEYS = ("stream", "batch", "counts", "seconds", "run", "success", "models", "error")
# What every LogRecord has by itself: an attribute outside these came from extra={...}.
RECORD_ATTRIBUTES = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}
# Loggers that are noise at INFO: py4j logs every callback-server connection, GX dozens of lines
# of config handling per suite.
QUIET_LOGGERS = ("py4j", "great_expectations")


def log_format(value: str | None, where: str = VARIABLE) -> str:
    """A validated form name ('text' when ``value`` is empty); a user error names ``where``."""
    if not value:
        return "text"
    if value.strip().lower() not in FORMATS:
        raise LakehouseError(f"{where} must be {' or '.join(FORMATS)}, got {value!r}")
    return value.strip().lower()


def timestamp(created: float) -> str:
    """ISO 8601 to the millisecond with the local zone's offset: 2026-12-02T03:04:05.123Z in UTC
    (log4j's XXX, so the Python and JVM lines of one process read alike)."""
    text = datetime.fromtimestamp(created).astimezone().isoformat(timespec="milliseconds")
    return text.removesuffix("+00:00") + "Z" if text.endswith("+00:00") else text


class LakehouseFormatter(logging.Formatter):
    """Either form of a record (module docstring); exceptions stay on the record's lines."""

    def __init__(self, form: str = "text"):
        super().__init__()
        self.form = log_format(form)

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if self.form == "json":
            return json.dumps(self.fields(record, message), default=str, ensure_ascii=False, separators=(",", ":"))
        line = f"{timestamp(record.created)} {record.levelname} {record.name}: {message}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info).rstrip("\n")
        elif record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line

    @staticmethod
    def fields(record: logging.LogRecord, message: str) -> dict[str, Any]:
        fields: dict[str, Any] = {"time": timestamp(record.created), "level": record.levelname,
                                  "logger": record.name, "message": message}
        fields.update({key: getattr(record, key) for key in EXTRA_KEYS if hasattr(record, key)})
        fields.update({key: value for key, value in sorted(vars(record).items())
                       if key not in RECORD_ATTRIBUTES and key not in fields and not key.startswith("_")})
        if record.exc_info:
            fields["exception"] = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
        return fields


class _Handler(logging.StreamHandler):
    """The handler this module installs (told apart from others when configure runs again)."""


def configure(form: str | None = None, level: int = logging.INFO) -> str:
    """Set up logging for this process and what it starts; the form chosen.

    ``form`` (e.g. the --log-format option) wins over LAKEHOUSE_LOG_FORMAT; neither: text.
    Safe to call again (the handler is replaced, not added twice). Log lines go to standard
    error: standard output stays the command's result, which scripts read.
    """
    chosen = log_format(form, "--log-format") if form else log_format(os.environ.get(VARIABLE))
    os.environ[VARIABLE] = chosen
    if chosen == "json":
        os.environ.setdefault("DBT_LOG_FORMAT", "json")
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(handler)
    handler = _Handler()
    handler.setFormatter(LakehouseFormatter(chosen))
    root.addHandler(handler)
    root.setLevel(level)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.captureWarnings(True)  # Python warnings become log lines of the same form
    return chosen
