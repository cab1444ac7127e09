"""What `lakehouse dlq` prints (pure): times, bytes made safe for a terminal, and the text of
stats, list, show and replay.

Nothing a record holds reaches the terminal raw: control bytes, escape sequences and bidi
overrides are shown as escapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from lakehouse.contracts.error_codes import ERROR_CODES

if TYPE_CHECKING:  # the types only: queries and replay import pyspark
    from lakehouse.operations.dead_letters.queries import DeadLetter
    from lakehouse.operations.dead_letters.replay import ReplayReport

DETAIL_WIDTH = 60
DEFAULT_MAX_BYTES = 4096


# --- times ---------------------------------------------------------------------------------------

def format_time(at: datetime | None) -> str:
    return "-" if at is None else at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def iso(at: datetime | None) -> str | None:
    return None if at is None else at.astimezone(UTC).isoformat()


# --- bytes and text made safe ------------------------------------------------------------------

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


# --- stats ---------------------------------------------------------------------------------------

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


# --- list and show -------------------------------------------------------------------------------

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


# --- replay --------------------------------------------------------------------------------------

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
        lines.append(f"{report.marked:,} dead row{'s' if report.marked != 1 else ''} replaced or marked, one "
                     "commit per stream table"
                     + (" (still-failing ones stay dead, with their new reason)" if report.still_failing else ""))
    return "\n".join(lines)
