"""Which dead letters a `lakehouse dlq` command reads, checked before Spark starts (pure).

Every mistake is a LakehouseError naming the option and what is allowed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from lakehouse.contracts.error_codes import ERROR_CODES
from lakehouse.core.errors import LakehouseError
from lakehouse.core.sql import sql_string, timestamp_sql
from lakehouse.operations.dead_letters.text import format_time, iso

TIME_HELP = ("an ISO time (2024-05-01T12:00, UTC unless it says otherwise), a date (2024-05-01) "
             "or a time ago (30m, 2h, 7d)")

_AGO = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d|w)$")
_AGO_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_time(text: str, option: str = "--since", now: datetime | None = None) -> datetime:
    """An aware UTC datetime from an ISO time, a date (its midnight, UTC) or ``30m``/``2h``/``7d`` ago."""
    now = now or datetime.now(UTC)
    cleaned = text.strip()
    ago = _AGO.match(cleaned.lower())
    if ago:
        number, unit = ago.groups()
        return now - timedelta(**{_AGO_UNITS[unit]: float(number)})
    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", cleaned):
            day = date.fromisoformat(cleaned)
            return datetime(day.year, day.month, day.day, tzinfo=UTC)
        parsed = datetime.fromisoformat(cleaned)
    except ValueError:
        raise LakehouseError(f"invalid {option} {text!r}: use {TIME_HELP}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


@dataclass(frozen=True)
class Filters:
    """Which dead letters a command reads; empty tuples mean all streams / all reasons."""

    streams: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    since: datetime | None = None  # ingested_at >= since
    until: datetime | None = None  # ingested_at < until
    include_replayed: bool = False

    def where_sql(self) -> str:
        """The SQL predicate over the view bronze.dead_letters."""
        parts = []
        if self.streams:
            parts.append(f"stream in ({', '.join(map(sql_string, self.streams))})")
        if self.reasons:
            parts.append(f"error_code in ({', '.join(map(sql_string, self.reasons))})")
        if self.since is not None:
            parts.append(f"ingested_at >= {timestamp_sql(self.since)}")
        if self.until is not None:
            parts.append(f"ingested_at < {timestamp_sql(self.until)}")
        if not self.include_replayed:
            parts.append("replayed_at is null")
        return " and ".join(parts) or "true"

    def describe(self) -> str:
        parts = ["pending and replayed" if self.include_replayed else "pending"]
        if self.streams:
            parts.append("stream " + ", ".join(self.streams))
        if self.reasons:
            parts.append("reason " + ", ".join(self.reasons))
        if self.since is not None:
            parts.append(f"ingested since {format_time(self.since)}")
        if self.until is not None:
            parts.append(f"ingested before {format_time(self.until)}")
        return "; ".join(parts)

    def to_dict(self) -> dict:
        return {"streams": list(self.streams), "reasons": list(self.reasons),
                "since": iso(self.since), "until": iso(self.until), "include_replayed": self.include_replayed}


def _configured_streams() -> list[str]:
    # Imported here: lakehouse.contracts.streams imports pyspark, which the dead-letter
    # filters and their checks never need (tests/unit/test_dlq.py).
    from lakehouse.contracts.streams import stream_names

    return stream_names()


def parse_filters(
    streams: Sequence[str] | None = None,
    reasons: Sequence[str] | None = None,
    since: str | None = None,
    until: str | None = None,
    include_replayed: bool = False,
    *,
    known_streams: Iterable[str] | None = None,
    now: datetime | None = None,
) -> Filters:
    """Checked filters; every mistake is a LakehouseError naming the option and what is allowed.

    ``known_streams`` defaults to the streams of the pipeline file.
    """
    if streams and known_streams is None:
        known_streams = _configured_streams()
    known = sorted(known_streams or ())
    chosen_streams = tuple(dict.fromkeys(streams or ()))
    for name in chosen_streams:
        if name not in known:
            raise LakehouseError(f"unknown stream {name!r} for --stream; configured streams: {', '.join(known)}")
    for code in reasons or ():
        if code.strip().upper() not in ERROR_CODES:
            raise LakehouseError(f"unknown reason {code!r} for --reason; reasons: {', '.join(ERROR_CODES)}")
    chosen_reasons = tuple(dict.fromkeys(code.strip().upper() for code in reasons or ()))
    now = now or datetime.now(UTC)
    start = parse_time(since, "--since", now) if since is not None else None
    end = parse_time(until, "--until", now) if until is not None else None
    if start is not None and end is not None and start >= end:
        raise LakehouseError(f"--since ({format_time(start)}) is not before --until ({format_time(end)}): "
                             "nothing could match")
    return Filters(chosen_streams, chosen_reasons, start, end, include_replayed)


def parse_record(parts: Sequence[str], known_streams: Iterable[str] | None = None) -> tuple[str, int, int]:
    """(stream, partition, offset) from ``STREAM PARTITION OFFSET`` or ``STREAM:PARTITION:OFFSET``."""
    usage = "give the dead letter as STREAM PARTITION OFFSET or STREAM:PARTITION:OFFSET, e.g. purchases:0:123"
    items = list(parts)
    if len(items) == 1 and items[0].count(":") == 2:
        items = items[0].split(":")
    if len(items) != 3:
        raise LakehouseError(f"{usage} (got {' '.join(parts)!r})")
    stream, partition, offset = items
    if not (partition.isdigit() and offset.isdigit()):
        raise LakehouseError(f"partition and offset must be whole numbers >= 0: {usage}")
    known = sorted(_configured_streams() if known_streams is None else known_streams)
    if stream not in known:
        raise LakehouseError(f"unknown stream {stream!r}; configured streams: {', '.join(known)}")
    return stream, int(partition), int(offset)
