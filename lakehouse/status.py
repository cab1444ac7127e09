"""`lakehouse status`: where each stream stands, without starting Spark.

Per stream: the last committed micro-batch (from the query's checkpoint), the offsets it
committed against the topic's end offsets (lag), bronze rows, and dead letters by reason
(read through pyiceberg from the same catalog). Each source may be missing (no run yet,
broker stopped): that part then says so, the rest is still shown.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lakehouse.config import Settings
from lakehouse.errors import LakehouseError


@dataclass
class StreamStatus:
    stream: str
    topic: str
    bronze_table: str
    last_batch: int | None = None
    last_batch_at: str | None = None
    committed_offsets: dict[int, int] = field(default_factory=dict)
    end_offsets: dict[int, int] | None = None
    lag: int | None = None
    bronze_rows: int | None = None
    dead_letters: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def pyiceberg_catalog(settings: Settings):
    """The catalog the Spark jobs use, opened by pyiceberg (same SQLite database, same name)."""
    from pyiceberg.catalog.sql import SqlCatalog

    from lakehouse.config import CATALOG_NAME

    if not settings.catalog_uri.startswith("jdbc:sqlite:"):
        raise LakehouseError(f"pyiceberg reads only the local SQLite catalog; LAKEHOUSE_CATALOG_URI is "
                             f"{settings.catalog_uri}")
    database = settings.catalog_uri.removeprefix("jdbc:sqlite:")
    return SqlCatalog(CATALOG_NAME, uri=f"sqlite:///{database}", warehouse=settings.warehouse)


def _table(catalog, name: str):
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return catalog.load_table(name)
    except NoSuchTableError:
        return None


def stream_status(settings: Settings, names: list[str] | None = None) -> list[StreamStatus]:
    from ingestion import checkpoint
    from ingestion.job import checkpoint_location
    from ingestion.streams import resolve_streams
    from lakehouse.kafka_admin import end_offsets

    specs = resolve_streams(names or ["all"])
    # No catalog database yet (nothing ingested): don't create an empty one just to look.
    catalog = pyiceberg_catalog(settings) if Path(settings.catalog_uri.removeprefix("jdbc:sqlite:")).exists() \
        else None
    dead = _dead_letters_by_stream(catalog)
    result = []
    kafka_down: str | None = None  # one broker for all streams: don't wait for it per stream
    for spec in specs:
        status = StreamStatus(spec.name, spec.topic, spec.bronze_table, dead_letters=dead.get(spec.name, {}))
        commit = checkpoint.last_commit(checkpoint_location(settings, spec))
        if commit is None:
            status.problems.append("no batch committed yet")
        else:
            status.last_batch = commit.batch_id
            status.last_batch_at = commit.committed_at.isoformat(timespec="seconds")
            status.committed_offsets = commit.offsets.get(spec.topic, {})
        try:
            if kafka_down:
                raise LakehouseError(kafka_down)
            status.end_offsets = end_offsets(settings, spec.topic)
            status.lag = checkpoint.lag(status.end_offsets, status.committed_offsets)
        except LakehouseError as exc:
            kafka_down = str(exc) if "cannot reach" in str(exc) else kafka_down
            status.problems.append(str(exc))
        table = _table(catalog, spec.bronze_table) if catalog is not None else None
        if table is not None and table.current_snapshot() is not None:
            status.bronze_rows = int(table.current_snapshot().summary.additional_properties.get("total-records", 0))
        elif table is not None:
            status.bronze_rows = 0
        result.append(status)
    return result


def _dead_letters_by_stream(catalog) -> dict[str, dict[str, int]]:
    from ingestion.dead_letters import TABLE

    table = _table(catalog, TABLE) if catalog is not None else None
    if table is None or table.current_snapshot() is None:
        return {}
    rows = table.scan(selected_fields=("stream", "error_code")).to_arrow()
    counts = Counter(zip(rows.column("stream").to_pylist(), rows.column("error_code").to_pylist(), strict=True))
    by_stream: dict[str, dict[str, int]] = {}
    for (stream, code), n in sorted(counts.items()):
        by_stream.setdefault(stream, {})[code] = n
    return by_stream


def as_json(statuses: list[StreamStatus]) -> list[dict]:
    return [asdict(s) for s in statuses]


def _number(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def format_table(statuses: list[StreamStatus]) -> str:
    lines = [f"{'stream':<14} {'last batch':<30} {'committed / end offsets':>27} {'lag':>10} {'bronze rows':>12}"
             "  dead letters"]
    for s in statuses:
        batch = "-" if s.last_batch is None else f"#{s.last_batch} at {s.last_batch_at}"
        committed = sum(s.committed_offsets.values()) if s.committed_offsets else None
        end = sum(s.end_offsets.values()) if s.end_offsets is not None else None
        offsets = f"{_number(committed)} / {_number(end)}"
        dead = ", ".join(f"{code} {n:,}" for code, n in s.dead_letters.items()) or "none"
        lines.append(f"{s.stream:<14} {batch:<30} {offsets:>27} {_number(s.lag):>10} {_number(s.bronze_rows):>12}"
                     f"  {dead}")
        if s.end_offsets:
            lines.append(f"{'':<14} partitions: " + ", ".join(
                f"{p}: {s.committed_offsets.get(p, 0):,}/{end:,}" for p, end in sorted(s.end_offsets.items())))
        for problem in s.problems:
            lines.append(f"{'':<14} note: {problem}")
    return "\n".join(lines)
