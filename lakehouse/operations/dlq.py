"""`lakehouse dlq`: inspect bronze.dead_letters and replay fixed records into bronze (ARCHITECTURE §7).

    stats    dead letters counted by stream and reason, pending and replayed, oldest/newest
    list     one line per dead letter: where it came from, why it failed, its replay state
    show     one dead letter in full, its key and value as a hex dump and as escaped text
    replay   decode the original bytes again with the stream's current decoder (schemas as
             they are now) and append what now reads to the stream's bronze table

Every command takes the same filters (--stream, --reason, --since, --until); by default only
pending dead letters (never successfully replayed) count. A dead letter stays in the table
after its replay, as the record of what happened: ``replayed_at`` says when its record
reached bronze, ``replay_attempts`` and ``last_replay_at`` how often and when it was tried; a
record that still fails keeps ``replayed_at`` null and gets the new reason.

Replay is idempotent and crash safe. Replayed records keep their Kafka coordinates (and the
batch id that first read them), so silver's deduplication treats them like any record; their
``_ingested_at`` is the replay time, so the incremental silver models see them as new. Before
appending, the records are anti-joined with the bronze rows already holding their
coordinates: a crash between the bronze append and the dead-letter update, or a second
replay, never lands a record twice. One MERGE then marks the selected dead letters.

This module is imported when the CLI starts: pyspark (and everything that imports it) is
imported inside the functions that need it. The pure parts (filters, time parsing, hex dump,
escaping, summaries and their formatting) take plain values, for tests without Spark.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import logging
import re
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, timedelta

from lakehouse.contracts.error_codes import ERROR_CODES
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings

log = logging.getLogger("lakehouse.dlq")

TABLE = "bronze.dead_letters"  # ingestion.dead_letters.TABLE, without importing pyspark
REPLAY_ID_PROPERTY = "lakehouse.replay-id"  # snapshot property of a replay's bronze append
REPLAY_COLUMNS = ("replayed_at", "replay_attempts", "last_replay_at")
TIMESTAMP_COLUMNS = ("kafka_timestamp", "ingested_at", "replayed_at", "last_replay_at")
DEFAULT_LIMIT = 50
DETAIL_WIDTH = 60
DEFAULT_MAX_BYTES = 4096
MERGE_ATTEMPTS = 3
TIME_HELP = ("an ISO time (2024-05-01T12:00, UTC unless it says otherwise), a date (2024-05-01) "
             "or a time ago (30m, 2h, 7d)")


# --- filters (pure) ---------------------------------------------------------------------------

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


def _sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def timestamp_sql(at: datetime) -> str:
    """A Spark SQL timestamp literal of an aware datetime."""
    return f"timestamp'{at.astimezone(UTC).strftime('%Y-%m-%d %H:%M:%S.%f')}+00:00'"


@dataclass(frozen=True)
class Filters:
    """Which dead letters a command reads; empty tuples mean all streams / all reasons."""

    streams: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    since: datetime | None = None  # ingested_at >= since
    until: datetime | None = None  # ingested_at < until
    include_replayed: bool = False

    def where_sql(self, has_replay_columns: bool = True) -> str:
        """The SQL predicate over bronze.dead_letters (a table without the replay columns,
        created before replay existed, holds only pending dead letters)."""
        parts = []
        if self.streams:
            parts.append(f"stream in ({', '.join(map(_sql_string, self.streams))})")
        if self.reasons:
            parts.append(f"error_code in ({', '.join(map(_sql_string, self.reasons))})")
        if self.since is not None:
            parts.append(f"ingested_at >= {timestamp_sql(self.since)}")
        if self.until is not None:
            parts.append(f"ingested_at < {timestamp_sql(self.until)}")
        if not self.include_replayed and has_replay_columns:
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
        from lakehouse.contracts.streams import stream_names

        known_streams = stream_names()
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
    if known_streams is None:
        from lakehouse.contracts.streams import stream_names

        known_streams = stream_names()
    known = sorted(known_streams)
    if stream not in known:
        raise LakehouseError(f"unknown stream {stream!r}; configured streams: {', '.join(known)}")
    return stream, int(partition), int(offset)


# --- safe display of bytes and text (pure) ------------------------------------------------------

_NAMED_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_text(text: str, quote: str = "") -> str:
    """Text safe for a terminal: every non-printable character (control bytes, escape
    sequences, bidi overrides, ...) as a Python-style escape; backslashes (and ``quote``) escaped.
    Lone surrogates from ``surrogateescape`` decoding are the undecodable bytes: ``\\xNN``."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch in _NAMED_ESCAPES:
            out.append(_NAMED_ESCAPES[ch])
        elif quote and ch == quote:
            out.append("\\" + ch)
        elif 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch.isprintable():
            out.append(ch)
        elif code < 0x100:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return "".join(out)


def escape_bytes(data: bytes | None, max_bytes: int | None = None) -> str:
    """Bytes as one quoted line: valid UTF-8 shown as text, everything else escaped; '(null)' for None."""
    if data is None:
        return "(null)"
    shown = bytes(data[:max_bytes] if max_bytes else data)
    text = '"' + escape_text(shown.decode("utf-8", errors="surrogateescape"), quote='"') + '"'
    return text + (f" ... {len(data) - len(shown):,} more bytes" if len(shown) < len(data) else "")


def hex_dump(data: bytes | None, max_bytes: int | None = None) -> list[str]:
    """`hexdump -C` lines: offset, 16 bytes in hex, the printable-ASCII column ('.' otherwise)."""
    if data is None:
        return ["(null)"]
    if len(data) == 0:
        return ["(empty)"]
    shown = bytes(data[:max_bytes] if max_bytes else data)
    lines = []
    for start in range(0, len(shown), 16):
        chunk = shown[start:start + 16]
        left = " ".join(f"{b:02x}" for b in chunk[:8])
        right = " ".join(f"{b:02x}" for b in chunk[8:])
        printable = "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in chunk)
        lines.append(f"{start:08x}  {left:<23}  {right:<23}  |{printable}|")
    lines.append(f"{len(shown):08x}")
    if len(shown) < len(data):
        lines.append(f"... {len(data) - len(shown):,} more bytes (--max-bytes 0 shows all)")
    return lines


def truncate(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(width - 3, 0)] + "..."


# --- times ---------------------------------------------------------------------------------------

def from_micros(micros: int | None) -> datetime | None:
    """A timestamp read as epoch microseconds (not through PySpark, which uses the local zone)."""
    return None if micros is None else datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros)


def format_time(at: datetime | None) -> str:
    return "-" if at is None else at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def iso(at: datetime | None) -> str | None:
    return None if at is None else at.astimezone(UTC).isoformat()


# --- stats (pure) ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Count:
    """Dead letters of one stream and reason, pending or replayed, as one aggregate row."""

    stream: str
    reason: str
    replayed: bool
    count: int
    oldest: datetime | None
    newest: datetime | None


def _bucket(counts: list[Count]) -> dict:
    oldest = [c.oldest for c in counts if c.oldest is not None]
    newest = [c.newest for c in counts if c.newest is not None]
    return {"pending": sum(c.count for c in counts if not c.replayed),
            "replayed": sum(c.count for c in counts if c.replayed),
            "oldest_ingested_at": iso(min(oldest)) if oldest else None,
            "newest_ingested_at": iso(max(newest)) if newest else None}


def summarize(counts: Iterable[Count], filters: Filters | None = None) -> dict:
    """The stats as plain data (what `dlq stats --json` prints)."""
    counts = list(counts)
    streams = {}
    for stream in sorted({c.stream for c in counts}):
        mine = [c for c in counts if c.stream == stream]
        reasons = {reason: _bucket([c for c in mine if c.reason == reason])
                   for reason in sorted({c.reason for c in mine})}
        streams[stream] = {**_bucket(mine), "reasons": reasons}
    return {"filters": (filters or Filters()).to_dict(), "total": _bucket(counts), "streams": streams}


def _time_text(value: str | None) -> str:
    return format_time(datetime.fromisoformat(value)) if value else "-"


def format_stats(summary: dict) -> str:
    """An aligned table: one line per stream and reason, a subtotal per stream, a total."""
    filters = summary["filters"]
    if not summary["streams"]:
        hint = "" if filters["include_replayed"] else " (pending only; --include-replayed counts replayed ones too)"
        return f"no dead letters match{hint}"
    rows = [("STREAM", "REASON", "PENDING", "REPLAYED", "OLDEST INGESTED (UTC)", "NEWEST INGESTED (UTC)")]

    def line(stream, reason, bucket):
        rows.append((stream, reason, f"{bucket['pending']:,}", f"{bucket['replayed']:,}",
                     _time_text(bucket["oldest_ingested_at"]), _time_text(bucket["newest_ingested_at"])))

    for stream, entry in summary["streams"].items():
        for reason, bucket in entry["reasons"].items():
            line(stream, reason, bucket)
        if len(entry["reasons"]) > 1:
            line(stream, "(all reasons)", entry)
    line("total", "", summary["total"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    numeric = {2, 3}
    return "\n".join("  ".join(cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i])
                               for i, cell in enumerate(row)).rstrip() for row in rows)


# --- list and show (pure) ------------------------------------------------------------------------

@dataclass(frozen=True)
class DeadLetter:
    stream: str
    topic: str
    partition: int
    offset: int
    kafka_timestamp: datetime | None
    key: bytes | None
    value: bytes | None
    error_code: str
    error_detail: str | None
    schema_id: int | None
    ingested_at: datetime | None
    batch_id: int
    replayed_at: datetime | None = None
    replay_attempts: int | None = None
    last_replay_at: datetime | None = None

    @property
    def coordinates(self) -> str:
        return f"{self.stream}:{self.partition}:{self.offset}"

    def state(self) -> str:
        attempts = self.replay_attempts or 0
        tried = f"{attempts} attempt{'s' if attempts != 1 else ''}"
        if self.replayed_at is not None:
            return f"replayed {format_time(self.replayed_at)} ({tried})"
        if attempts:
            return f"pending ({tried}, last {format_time(self.last_replay_at)})"
        return "pending"

    def to_dict(self, with_bytes: bool = False) -> dict:
        data = {name: getattr(self, name) for name in (
            "stream", "topic", "partition", "offset", "error_code", "error_detail", "schema_id", "batch_id",
            "replay_attempts")}
        for name in ("kafka_timestamp", "ingested_at", "replayed_at", "last_replay_at"):
            data[name] = iso(getattr(self, name))
        data["state"] = "replayed" if self.replayed_at is not None else "pending"
        for name in ("key", "value"):
            raw = getattr(self, name)
            data[f"{name}_size"] = None if raw is None else len(raw)
            if with_bytes:
                data[f"{name}_hex"] = None if raw is None else raw.hex()
                data[f"{name}_text"] = None if raw is None else escape_bytes(raw)
        return data


def format_list(letters: Sequence[DeadLetter], total: int, limit: int) -> str:
    """One aligned line per dead letter, and how many more there are beyond ``limit``."""
    if not letters:
        return "no dead letters match"
    rows = [("STREAM", "PARTITION:OFFSET", "KAFKA TIME (UTC)", "INGESTED (UTC)", "REASON", "DETAIL", "STATE")]
    for d in letters:
        rows.append((d.stream, f"{d.partition}:{d.offset}", format_time(d.kafka_timestamp), format_time(d.ingested_at),
                     d.error_code, truncate(escape_text(d.error_detail or ""), DETAIL_WIDTH), d.state()))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    if total > len(letters):
        lines.append(f"showing {len(letters):,} of {total:,}: {total - len(letters):,} more "
                     "(--limit 0 shows all, or narrow the filters)")
    else:
        lines.append(f"{total:,} dead letter{'s' if total != 1 else ''}")
    return "\n".join(lines)


def format_show(letter: DeadLetter, max_bytes: int | None = DEFAULT_MAX_BYTES) -> str:
    """One dead letter in full; key and value never reach the terminal raw."""
    reason = letter.error_code + (f" ({ERROR_CODES[letter.error_code]})" if letter.error_code in ERROR_CODES else "")
    fields = [
        ("stream", letter.stream),
        ("topic", escape_text(letter.topic)),
        ("partition", str(letter.partition)),
        ("offset", str(letter.offset)),
        ("kafka timestamp", format_time(letter.kafka_timestamp) + (" UTC" if letter.kafka_timestamp else "")),
        ("ingested at", format_time(letter.ingested_at) + (" UTC" if letter.ingested_at else "")),
        ("batch id", str(letter.batch_id)),
        ("schema id", "-" if letter.schema_id is None else str(letter.schema_id)),
        ("reason", reason),
        ("detail", escape_text(letter.error_detail or "-")),
        ("replay", letter.state()),
    ]
    width = max(len(name) for name, _ in fields)
    lines = [f"dead letter {letter.coordinates}"]
    lines += [f"  {name:<{width}}  {value}" for name, value in fields]
    for name in ("key", "value"):
        raw = getattr(letter, name)
        size = "null" if raw is None else f"{len(raw):,} byte{'s' if len(raw) != 1 else ''}"
        lines.append(f"{name} ({size}):")
        if raw is not None:
            lines += [f"  {line}" for line in hex_dump(raw, max_bytes)]
            lines.append(f"  escaped: {escape_bytes(raw, max_bytes)}")
    return "\n".join(lines)


# --- replay report (pure) ------------------------------------------------------------------------

@dataclass
class StreamReplay:
    stream: str
    bronze_table: str
    selected: int = 0
    replayed: int = 0  # in bronze now: appended by this replay, or found there already
    appended: int = 0
    already_in_bronze: int = 0  # a crash after the bronze append, before the dead letters were marked
    still_failing: dict[str, int] = field(default_factory=dict)
    schema_changes: list[str] = field(default_factory=list)


@dataclass
class ReplayReport:
    replay_id: str
    dry_run: bool
    started_at: datetime
    filters: Filters = field(default_factory=Filters)
    streams: list[StreamReplay] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # stream -> why not replayed
    marked: int = 0  # selected dead letters the MERGE marked (replayed, or attempted again)

    @property
    def selected(self) -> int:
        return sum(s.selected for s in self.streams)

    @property
    def replayed(self) -> int:
        return sum(s.replayed for s in self.streams)

    @property
    def still_failing(self) -> int:
        return sum(sum(s.still_failing.values()) for s in self.streams)

    def to_dict(self) -> dict:
        return {"replay_id": self.replay_id, "dry_run": self.dry_run, "started_at": iso(self.started_at),
                "filters": self.filters.to_dict(), "selected": self.selected, "replayed": self.replayed,
                "still_failing": self.still_failing, "marked": self.marked,
                "streams": [asdict(s) for s in self.streams], "skipped": self.skipped}


def format_replay(report: ReplayReport) -> str:
    would = "would be " if report.dry_run else ""
    head = f"replay {report.replay_id}" + (" (dry run: decoded only, nothing written)" if report.dry_run else "")
    lines = [head]
    for stream, why in report.skipped.items():
        lines.append(f"{stream}: skipped: {why}")
    if not report.streams:
        lines.append(f"nothing to replay: no dead letters match ({report.filters.describe()})")
        return "\n".join(lines)
    for s in report.streams:
        text = f"{s.stream}: {s.selected:,} selected, {s.replayed:,} {would}replayed into {s.bronze_table}"
        if s.already_in_bronze:
            text += f" ({s.already_in_bronze:,} already there: only marked)"
        failing = sum(s.still_failing.values())
        reasons = ", ".join(f"{code} {n:,}" for code, n in sorted(s.still_failing.items()))
        text += f", {failing:,} still failing" + (f": {reasons}" if failing else "")
        lines.append(text)
        for change in s.schema_changes:
            lines.append(f"  schema: {change}")
    if len(report.streams) > 1:
        lines.append(f"total: {report.selected:,} selected, {report.replayed:,} {would}replayed, "
                     f"{report.still_failing:,} still failing")
    if not report.dry_run:
        lines.append(f"{report.marked:,} dead letter{'s' if report.marked != 1 else ''} marked in {TABLE}"
                     + (" (still-failing ones stay pending, with their new reason)" if report.still_failing else ""))
    return "\n".join(lines)


# --- Spark I/O -----------------------------------------------------------------------------------

def _dead_letters(spark):
    """bronze.dead_letters with every column of the current schema (replay columns null on a
    table created before replay existed), and whether the table has those columns; None if
    there is no table yet."""
    from ingestion import bronze, dead_letters
    from lakehouse.core.spark import relation_exists

    if not relation_exists(spark, TABLE):
        return None, False
    table = spark.table(TABLE)
    has_replay = set(REPLAY_COLUMNS) <= set(table.columns)
    return bronze.conform_to_schema(table, dead_letters.SCHEMA), has_replay


def _selected(spark, filters: Filters):
    frame, has_replay = _dead_letters(spark)
    return None if frame is None else frame.where(filters.where_sql(has_replay))


def _timestamps_as_micros(frame):
    from pyspark.sql import functions as F

    return frame.select(*[F.unix_micros(c).alias(c) if c in TIMESTAMP_COLUMNS else F.col(f"`{c}`")
                          for c in frame.columns])


def _letter(row) -> DeadLetter:
    values = row.asDict()
    for name in TIMESTAMP_COLUMNS:
        values[name] = from_micros(values[name])
    for name in ("key", "value"):
        values[name] = None if values[name] is None else bytes(values[name])
    return DeadLetter(**values)


def stats(spark, filters: Filters) -> dict:
    from pyspark.sql import functions as F

    selected = _selected(spark, filters)
    if selected is None:
        return summarize([], filters)
    rows = (selected.groupBy("stream", F.col("error_code").alias("reason"),
                             F.col("replayed_at").isNotNull().alias("replayed"))
            .agg(F.count(F.lit(1)).alias("count"), F.unix_micros(F.min("ingested_at")).alias("oldest"),
                 F.unix_micros(F.max("ingested_at")).alias("newest"))
            .collect())
    return summarize([Count(r.stream, r.reason, bool(r.replayed), r["count"], from_micros(r.oldest),
                            from_micros(r.newest)) for r in rows], filters)


ORDER = ("ingested_at", "stream", "partition", "offset")


def list_dead_letters(spark, filters: Filters, limit: int = DEFAULT_LIMIT) -> tuple[list[DeadLetter], int]:
    """The first ``limit`` (0: all) matching dead letters, oldest first, and how many match."""
    selected = _selected(spark, filters)
    if selected is None:
        return [], 0
    ordered = _timestamps_as_micros(selected.orderBy(*ORDER))
    rows = (ordered.limit(limit + 1) if limit else ordered).collect()
    letters = [_letter(r) for r in rows[:limit or None]]
    total = len(rows) if len(rows) <= len(letters) else selected.count()
    return letters, total


def find_dead_letters(spark, stream: str, partition: int, offset: int, filters: Filters) -> list[DeadLetter]:
    from pyspark.sql import functions as F

    selected = _selected(spark, filters)
    if selected is None:
        return []
    rows = _timestamps_as_micros(
        selected.where((F.col("stream") == stream) & (F.col("partition") == partition) & (F.col("offset") == offset))
        .orderBy(*ORDER)).collect()
    return [_letter(r) for r in rows]


@contextmanager
def replay_lock(settings: Settings) -> Iterator[None]:
    """One replay at a time per lakehouse: two at once could both find a record missing from bronze."""
    path = settings.home / "locks" / "dlq-replay.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LakehouseError(f"another `lakehouse dlq replay` is running on this lakehouse (lock {path}): "
                                 "wait for it to finish") from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _current_snapshot(spark, table: str) -> int | None:
    rows = spark.sql(f"select snapshot_id from {table}.refs where name = 'main'").collect()
    return rows[0].snapshot_id if rows else None


COORDINATES = ("topic", "partition", "offset")
BRONZE_COORDINATES = ("_kafka_topic", "_kafka_partition", "_kafka_offset")


def replay(spark, settings: Settings, filters: Filters, dry_run: bool = False) -> ReplayReport:
    """Decode the selected pending dead letters again and put what now reads into bronze."""
    filters = Filters(filters.streams, filters.reasons, filters.since, filters.until, include_replayed=False)
    report = ReplayReport(str(uuid.uuid4()), dry_run, datetime.now(UTC), filters)
    if dry_run:
        return _replay(spark, settings, report)
    with replay_lock(settings):
        return _replay(spark, settings, report)


def _replay(spark, settings: Settings, report: ReplayReport) -> ReplayReport:
    from pyspark.sql import functions as F

    from ingestion import bronze, dead_letters, job
    from ingestion.decoders import KAFKA_SOURCE_SCHEMA, decoder_for
    from ingestion.formats import to_bronze
    from lakehouse.contracts.streams import get_stream
    from lakehouse.core.spark import relation_exists

    if not relation_exists(spark, TABLE):
        log.info("%s does not exist yet: nothing to replay", TABLE)
        return report
    if not report.dry_run:
        for change in bronze.ensure_table(spark, TABLE, dead_letters.SCHEMA, dead_letters.PARTITIONING):
            log.info("%s", change)
    has_replay = set(REPLAY_COLUMNS) <= set(spark.table(TABLE).columns)
    snapshot = _current_snapshot(spark, TABLE)
    if snapshot is None:
        return report
    # One snapshot of the dead letters for the whole replay: the ingestion may append more
    # meanwhile; those wait for the next replay.
    pinned = bronze.conform_to_schema(spark.sql(f"select * from {TABLE} version as of {snapshot}"), dead_letters.SCHEMA)
    selected = pinned.where(report.filters.where_sql(has_replay))
    per_stream = {r.stream: r for r in selected.groupBy("stream").agg(
        F.count(F.lit(1)).alias("n"),
        F.unix_micros(F.min("ingested_at")).alias("oldest"),
        F.unix_micros(F.max("ingested_at")).alias("newest"),
        F.min("offset").alias("first_offset"), F.max("offset").alias("last_offset")).collect()}
    if not per_stream:
        log.info("no dead letters match (%s): nothing to replay", report.filters.describe())
        return report
    now = report.started_at
    ingested_at = F.lit(now).cast("timestamp")
    outcomes, cached = [], []
    try:
        for name in sorted(per_stream):
            try:
                spec = get_stream(name)
            except LakehouseError as exc:
                report.skipped[name] = str(exc)
                log.warning("%s: skipped: %s", name, exc)
                continue
            result = StreamReplay(name, spec.bronze_table)
            report.streams.append(result)
            log.info("%s: %d dead letter(s) selected; decoding with the current schemas", name, per_stream[name].n)
            decoder = decoder_for(spark, settings, spec)
            if report.dry_run:
                decoder.refresh()
            else:
                result.schema_changes = job.ensure_tables(spark, spec, decoder)
                for change in result.schema_changes:
                    log.info("%s: %s", name, change)
            # Records first read twice (a reset checkpoint) have two dead letters: decode once.
            mine = (selected.where(F.col("stream") == name)
                    .groupBy(*COORDINATES)
                    .agg(F.min("batch_id").alias("batch_id"), F.first("key").alias("key"),
                         F.first("value").alias("value"), F.first("kafka_timestamp").alias("kafka_timestamp")))
            raw = mine.select(F.col("key"), F.col("value"), F.col("topic"), F.col("partition").cast("int"),
                              F.col("offset").cast("long"), F.col("kafka_timestamp").alias("timestamp"),
                              F.lit(0).alias("timestampType"))
            raw = raw.select(*[F.col(f.name).cast(f.dataType).alias(f.name)
                               for f in spark.createDataFrame([], KAFKA_SOURCE_SCHEMA).schema.fields])
            decoded = decoder.decode(raw).persist()
            cached.append(decoded)
            coordinates = decoded.select(*COORDINATES)
            if relation_exists(spark, spec.bronze_table):
                # The offset range lets Iceberg skip most data files by their column bounds.
                span = per_stream[name]
                in_bronze = (spark.table(spec.bronze_table)
                             .where(F.col("_kafka_offset").between(span.first_offset, span.last_offset))
                             .select(*BRONZE_COORDINATES).toDF(*COORDINATES)
                             .join(coordinates, list(COORDINATES), "left_semi")
                             .distinct().withColumn("_in_bronze", F.lit(True)))
            else:
                in_bronze = spark.createDataFrame([], "topic string, partition int, offset long, _in_bronze boolean")
            outcome = (decoded.select(*COORDINATES, "_error_code", "_error_detail")
                       .join(in_bronze, list(COORDINATES), "left")
                       .select(F.lit(name).alias("stream"), *COORDINATES,
                               (F.col("_error_code").isNull() | F.col("_in_bronze").isNotNull()).alias("replayed"),
                               F.col("_in_bronze").isNotNull().alias("in_bronze"),
                               F.col("_error_code").alias("error_code"), F.col("_error_detail").alias("error_detail"))
                       .persist())
            cached.append(outcome)
            for row in outcome.groupBy("replayed", "in_bronze", "error_code").count().collect():
                result.selected += row["count"]
                if row.in_bronze:
                    result.already_in_bronze += row["count"]
                    result.replayed += row["count"]
                elif row.replayed:
                    result.appended += row["count"]
                    result.replayed += row["count"]
                else:
                    result.still_failing[row.error_code] = result.still_failing.get(row.error_code, 0) + row["count"]
            if result.appended and not report.dry_run:
                batch_ids = mine.select(*[F.col(c).alias(b) for c, b in zip(COORDINATES, BRONZE_COORDINATES,
                                                                              strict=True)],
                                        F.col("batch_id").alias("_batch_id"))
                appended = outcome.where(F.col("replayed") & ~F.col("in_bronze")).select(
                    *[F.col(c).alias(b) for c, b in zip(COORDINATES, BRONZE_COORDINATES, strict=True)])
                rows = (to_bronze(decoded, 0, ingested_at).drop("_batch_id")
                        .join(appended, list(BRONZE_COORDINATES), "left_semi")
                        .join(batch_ids, list(BRONZE_COORDINATES)))
                log.info("%s: appending %d record(s) to %s", name, result.appended, spec.bronze_table)
                (bronze.conform_to_schema(rows, spark.table(spec.bronze_table).schema).writeTo(spec.bronze_table)
                    .option(f"snapshot-property.{REPLAY_ID_PROPERTY}", report.replay_id)
                    .append())
            log.info("%s: %d replayed (%d appended, %d already in bronze), %d still failing", name,
                     result.replayed, result.appended, result.already_in_bronze, sum(result.still_failing.values()))
            outcomes.append(outcome)
        if outcomes and not report.dry_run:
            oldest = min(per_stream[s.stream].oldest for s in report.streams)
            newest = max(per_stream[s.stream].newest for s in report.streams)
            report.marked = _mark(spark, report, outcomes, oldest, newest)
    finally:
        for frame in cached:
            frame.unpersist()
    return report


def _mark(spark, report: ReplayReport, outcomes: list, oldest: int, newest: int) -> int:
    """One MERGE: replayed dead letters get replayed_at; still-failing ones their new reason."""
    source = outcomes[0]
    for outcome in outcomes[1:]:
        source = source.unionByName(outcome)
    view = f"lakehouse_dlq_replay_{report.replay_id.replace('-', '')}"
    source.createOrReplaceTempView(view)
    now = timestamp_sql(report.started_at)
    streams = ", ".join(_sql_string(s.stream) for s in report.streams)
    # The stream and ingestion-time bounds prune the partitions read, and keep dead letters
    # the ingestion appends meanwhile (later ingested_at) out of the commit's conflict check.
    statement = f"""
        merge into {TABLE} t
        using {view} s
        on t.stream = s.stream and t.topic = s.topic and t.`partition` = s.`partition` and t.`offset` = s.`offset`
            and t.stream in ({streams})
            and t.ingested_at between timestamp_micros({oldest}) and timestamp_micros({newest})
        when matched and t.replayed_at is null then update set
            replayed_at = case when s.replayed then {now} end,
            replay_attempts = coalesce(t.replay_attempts, 0) + 1,
            last_replay_at = {now},
            error_code = case when s.replayed then t.error_code else s.error_code end,
            error_detail = case when s.replayed then t.error_detail else s.error_detail end
    """
    total = sum(s.selected for s in report.streams)
    log.info("marking %d dead letter(s) in %s", total, TABLE)
    try:
        for attempt in range(1, MERGE_ATTEMPTS + 1):
            try:
                spark.sql(statement)
                break
            except Exception as exc:  # a concurrent commit to the same partitions: plan again
                text = str(exc)
                if attempt == MERGE_ATTEMPTS or not any(
                        word in text for word in ("ValidationException", "CommitFailedException", "conflicting")):
                    raise
                log.warning("marking the dead letters conflicted with another commit (%s); retrying",
                            text.strip().splitlines()[0][:200])
                time.sleep(attempt)
    finally:
        spark.catalog.dropTempView(view)
    return total


# --- command line ----------------------------------------------------------------------------------

def _add_filters(parser: argparse.ArgumentParser, replayed_option: bool = True) -> None:
    group = parser.add_argument_group("filters (default: every pending dead letter)")
    group.add_argument("--stream", action="append", dest="streams", metavar="NAME",
                       help="only this stream of the pipeline file (repeatable)")
    group.add_argument("--reason", action="append", dest="reasons", metavar="CODE",
                       help=f"only this reason (repeatable): {', '.join(ERROR_CODES)}")
    group.add_argument("--since", metavar="TIME", help=f"ingested at or after TIME: {TIME_HELP}")
    group.add_argument("--until", metavar="TIME", help="ingested before TIME (same forms as --since)")
    if replayed_option:
        group.add_argument("--include-replayed", action="store_true",
                           help="also dead letters whose records were replayed into bronze")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="dlq_command", required=True, metavar="ACTION")

    stats_parser = sub.add_parser(
        "stats", help="dead letters counted by stream and reason, pending and replayed",
        description="Counts of bronze.dead_letters by stream and reason: pending (never replayed) and "
                    "replayed, with the oldest and newest ingestion time.")
    _add_filters(stats_parser)
    stats_parser.add_argument("--json", action="store_true", help="as JSON, for machines")

    list_parser = sub.add_parser(
        "list", help="one line per dead letter: where from, why, replay state",
        description="One line per dead letter, oldest first: stream, partition:offset, Kafka timestamp, "
                    "ingestion time, reason, detail (shortened; `dlq show` has it all), replay state.")
    _add_filters(list_parser)
    list_parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT, metavar="N",
                             help=f"at most N lines (default {DEFAULT_LIMIT}; 0: all); says how many more match")
    list_parser.add_argument("--json", action="store_true", help="as JSON, for machines")

    show_parser = sub.add_parser(
        "show", help="one dead letter in full, its key and value as hex dump and escaped text",
        description="Everything about one dead letter: metadata, reason and detail, replay state, then the "
                    "key and the value as a hex dump (offset, bytes, printable ASCII, like `hexdump -C`) and "
                    "as escaped text (valid UTF-8 as text, every control or undecodable byte as an escape: "
                    "nothing raw reaches the terminal). Name the record by its Kafka coordinates, e.g. "
                    "`lakehouse dlq show purchases 0 123` or `lakehouse dlq show purchases:0:123` (any replay "
                    "state); without them, the first dead letters matching the filters (--limit, default 1).")
    show_parser.add_argument("record", nargs="*", metavar="RECORD",
                             help="STREAM PARTITION OFFSET, or STREAM:PARTITION:OFFSET (as `dlq list` prints)")
    _add_filters(show_parser)
    show_parser.add_argument("--limit", type=int, default=1, metavar="N",
                             help="without RECORD: show the first N matching dead letters (default 1)")
    show_parser.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_BYTES, metavar="N",
                             help=f"show at most N bytes of the key and of the value (default {DEFAULT_MAX_BYTES}; "
                                  "0: all)")
    show_parser.add_argument("--json", action="store_true", help="as JSON (bytes as hex and escaped text)")

    replay_parser = sub.add_parser(
        "replay", help="decode pending dead letters again with the current schemas; readable ones go to bronze",
        description="Re-process the original bytes of the selected pending dead letters with each stream's "
                    "current decoder (e.g. after registering the missing schema or fixing the schema file). "
                    "Records that now read are appended to the stream's bronze table with their original "
                    "Kafka coordinates and the replay time as _ingested_at, so the next `dbt run` picks "
                    "them up; their dead letters are marked replayed (they stay in the table, as the "
                    "record of what happened). Records that still fail stay pending, with the new reason. "
                    "Idempotent: a record already in bronze is never appended again. Exit status 0 when the "
                    "replay ran, even if some records still fail (they are reported).")
    _add_filters(replay_parser, replayed_option=False)
    replay_parser.add_argument("--dry-run", action="store_true",
                               help="decode and report what would happen, write nothing")
    replay_parser.add_argument("--json", action="store_true", help="the report as JSON")


def filters_from_args(args: argparse.Namespace, include_replayed: bool | None = None) -> Filters:
    return parse_filters(args.streams, args.reasons, args.since, args.until,
                         getattr(args, "include_replayed", False) if include_replayed is None else include_replayed)


def checked_arguments(args: argparse.Namespace) -> tuple[Filters, tuple[str, int, int] | None]:
    """The filters and the record named (show), or a LakehouseError: all before Spark starts."""
    record = None
    if args.dlq_command == "show" and args.record:
        record = parse_record(args.record)
        # A record named by its coordinates is shown whatever its replay state.
        filters = filters_from_args(args, include_replayed=True)
    else:
        filters = filters_from_args(args)
    limit = getattr(args, "limit", None)
    if limit is not None and limit < 0:
        raise LakehouseError("--limit must be 0 (all) or more")
    if getattr(args, "max_bytes", 0) < 0:
        raise LakehouseError("--max-bytes must be 0 (all) or more")
    return filters, record


def main(args: argparse.Namespace, settings: Settings) -> int:
    checked_arguments(args)  # everything the user can get wrong, before paying for a Spark start-up
    from lakehouse.core.spark import get_spark

    return run(args, settings, get_spark(settings, app_name="lakehouse-dlq"))


def run(args: argparse.Namespace, settings: Settings, spark) -> int:
    """The command on a given Spark session (main's, or a test's session of its own lakehouse)."""
    filters, record = checked_arguments(args)
    command = args.dlq_command
    if command == "stats":
        summary = stats(spark, filters)
        print(json.dumps(summary, indent=2) if args.json else format_stats(summary))
    elif command == "list":
        letters, total = list_dead_letters(spark, filters, args.limit)
        if args.json:
            print(json.dumps({"total": total, "shown": len(letters), "filters": filters.to_dict(),
                              "dead_letters": [d.to_dict() for d in letters]}, indent=2))
        else:
            print(format_list(letters, total, args.limit))
    elif command == "show":
        if record is not None:
            letters = find_dead_letters(spark, *record, filters)
            if not letters:
                stream, partition, offset = record
                raise LakehouseError(f"no dead letter at {stream}:{partition}:{offset} (stream {stream}, "
                                     f"partition {partition}, offset {offset}); `lakehouse dlq list "
                                     f"--stream {stream} --include-replayed` lists them")
        else:
            letters, _ = list_dead_letters(spark, filters, args.limit)
            if not letters:
                raise LakehouseError(f"no dead letters match ({filters.describe()})")
        max_bytes = args.max_bytes or None
        if args.json:
            print(json.dumps([d.to_dict(with_bytes=True) for d in letters], indent=2))
        else:
            print("\n\n".join(format_show(d, max_bytes) for d in letters))
    else:
        report = replay(spark, settings, filters, dry_run=args.dry_run)
        print(json.dumps(report.to_dict(), indent=2) if args.json else format_replay(report))
    return 0
