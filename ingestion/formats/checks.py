"""The checks every wire format runs on a record, in order of precedence, and the per-batch
constants they read (the batch's instant and id, kept out of the generated code)."""

from __future__ import annotations

import operator
from datetime import UTC, datetime, timedelta
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lakehouse.contracts.bronze_columns import (
    ERROR_CODE,
    ERROR_DETAIL,
)

CORRUPT_COLUMN = "_corrupt_record"
KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp")
# The record's Kafka headers (the source's ``includeHeaders``): carried through the decoding
# when the source gives them, so a dead row keeps them with its bytes (ARCHITECTURE §7).
HEADERS_COLUMN = "headers"


def kafka_columns(frame: DataFrame) -> tuple[str, ...]:
    """The Kafka columns a decoder passes on: the headers too when ``frame`` has them."""
    return (*KAFKA_COLUMNS, HEADERS_COLUMN) if HEADERS_COLUMN in frame.columns else KAFKA_COLUMNS
ERROR_COLUMNS = (ERROR_CODE, ERROR_DETAIL)
EARLIEST_EVENT_TIME = "2000-01-01 00:00:00"
MAX_CLOCK_SKEW = "INTERVAL 1 DAY"


def first_error(checks: list[tuple[Column, str, Column]]) -> tuple[Column, Column]:
    """(code, detail) of the first failing check, in order of precedence; nulls if none fails."""
    code, detail = F.lit(None).cast("string"), F.lit(None).cast("string")
    for failed, error_code, error_detail in reversed(checks):
        code = F.when(failed, F.lit(error_code)).otherwise(code)
        detail = F.when(failed, error_detail).otherwise(detail)
    return code, detail


def names_where(conditions: dict[str, Column]) -> Column:
    """Comma-separated names whose condition holds (for error details)."""
    return F.concat_ws(", ", *[F.when(cond, F.lit(name)) for name, cond in conditions.items()])


def any_of(conditions) -> Column:
    return reduce(operator.or_, conditions, F.lit(False))


def missing_check(payload: Column, required: tuple[str, ...]) -> tuple[Column, str, Column]:
    return missing_check_of({name: payload[name] for name in required}, required)


def missing_check_of(values: dict[str, Column], required: tuple[str, ...]) -> tuple[Column, str, Column]:
    missing = {name: values[name].isNull() for name in required}
    return (any_of(missing.values()), "MISSING_REQUIRED_FIELD",
            F.concat(F.lit("missing required field(s): "), names_where(missing)))


def batch_constant(value: int) -> Column:
    """A number fixed for one micro-batch (its instant, its id) as a column of every record, kept
    out of the Java source Spark generates for the batch's plan.

    Spark writes a number literal into that source, so every batch of the job, planned afresh
    (foreachBatch) with its own instant and id, got a class of its own: compiled by Spark, then
    run by the JVM from cold (interpreted, then at a profiling tier, its optimised code last),
    every batch. Measured: with the same literals in every batch the job went from 0.65 to 0.82
    of the checked append (benchmarks/RESULTS.md, issue 43). An array literal is held by
    reference instead, outside the source; indexed by an expression Spark does not fold (the
    record's Kafka partition times zero, plus one) it stays an array read per record, so each
    batch's plan generates the same source and Spark's code cache hands back the class the JIT
    has compiled already. Correct either way: folded, the value would only be compiled in again.
    Needs the batch's ``partition`` column."""
    return F.element_at(F.array(F.lit(value).cast("long")), F.col("partition") * 0 + 1)


def batch_instant(now: datetime) -> Column:
    """``now``, a batch's instant, as a timestamp column out of the generated code (`batch_constant`)."""
    micros = (now - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    return F.timestamp_micros(batch_constant(micros))


def event_time_check(event_time: Column, name: str, now: datetime | None) -> tuple[Column, str, Column]:
    """Event times before 2000 or more than a day ahead of ``now`` are out of range. ``now`` is the
    batch's instant (`batch_instant`), never the clock: the passes over one batch classify alike."""
    latest = batch_instant(now or datetime.now(UTC)) + F.expr(MAX_CLOCK_SKEW)
    return ((event_time < F.lit(EARLIEST_EVENT_TIME).cast("timestamp")) | (event_time > latest),
            "EVENT_TIME_OUT_OF_RANGE",
            F.concat(F.lit(f"{name}="), event_time.cast("string")))


def with_errors(frame: DataFrame, columns: list[Column], checks: list[tuple[Column, str, Column]]) -> DataFrame:
    code, detail = first_error(checks)
    return frame.select(*columns, *kafka_columns(frame), code.alias(ERROR_CODE), detail.alias(ERROR_DETAIL))
