"""Reading a streaming query's checkpoint: which batches are committed and up to which offsets.

Spark's checkpoint layout: ``offsets/<batch>`` is written before a batch runs (a version
line, a metadata line, then one JSON line per source: ``{"topic": {"partition": offset}}``,
the offsets the batch reads up to, exclusive); ``commits/<batch>`` after it succeeded.
Local folders only (the state folder); a remote checkpoint reads as "unknown".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path


@dataclass(frozen=True)
class BatchCommit:
    batch_id: int
    committed_at: datetime
    offsets: dict[str, dict[int, int]]  # topic -> partition -> next offset to read


def _batch_files(folder: Path) -> list[int]:
    try:
        return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())
    except OSError:
        return []


def batch_offsets(checkpoint: str | Path, batch_id: int) -> dict[str, dict[int, int]]:
    """The end offsets of a batch, or {} when its offsets file is missing or unreadable."""
    try:
        lines = (Path(checkpoint) / "offsets" / str(batch_id)).read_text().splitlines()
    except OSError:
        return {}
    offsets: dict[str, dict[int, int]] = {}
    for line in lines[2:]:
        try:
            source = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(source, dict):
            for topic, partitions in source.items():
                if isinstance(partitions, dict):
                    offsets[topic] = {int(p): int(o) for p, o in partitions.items()}
    return offsets


def parse_initial_offsets(text: str) -> dict[str, dict[int, int]]:
    """The starting offsets Spark's Kafka source records before batch 0 (``sources/0/0``).

    The file is a version line (after a NUL byte kept for Spark 2.1 compatibility) and one
    JSON object ``{"topic": {"partition": offset}}``; {} when it is not that.
    """
    for line in text.replace("\0", "").splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            source = json.loads(line)
            return {topic: {int(p): int(o) for p, o in partitions.items()}
                    for topic, partitions in source.items() if isinstance(partitions, dict)}
        except (json.JSONDecodeError, AttributeError, TypeError, ValueError):
            return {}
    return {}


def batch_records(end_offsets: dict[int, int], previous_end_offsets: dict[int, int] | None) -> int | None:
    """Records a batch read: per partition, its end offset minus where the batch started.

    A batch starts where the previous one ended; a partition the previous batch did not know
    started at 0. None when the start is unknown (the previous offsets file was purged).
    """
    if previous_end_offsets is None or not end_offsets:
        return None
    return sum(max(0, end - previous_end_offsets.get(partition, 0)) for partition, end in end_offsets.items())


def records_of_batch(checkpoint: str | Path, batch_id: int, topic: str) -> int | None:
    """Records batch ``batch_id`` of a checkpoint reads (or read) from ``topic``, from its offsets
    file and the one before it (batch 0: the source's starting offsets); None where unknown."""
    folder = Path(checkpoint)
    end = batch_offsets(folder, batch_id).get(topic, {})
    if batch_id == 0:
        try:
            initial = parse_initial_offsets((folder / "sources" / "0" / "0").read_text(errors="replace"))
        except OSError:
            initial = {}
        previous: dict[int, int] | None = initial.get(topic, {})  # unknown start: offsets begin at 0
    else:
        previous = batch_offsets(folder, batch_id - 1).get(topic)  # None: purged with old batches
    return batch_records(end, previous)


def last_commit(checkpoint: str | Path) -> BatchCommit | None:
    """The last committed batch of a checkpoint, or None if it has committed nothing."""
    commits = Path(checkpoint) / "commits"
    batches = _batch_files(commits)
    if not batches:
        return None
    batch_id = batches[-1]
    committed_at = datetime.fromtimestamp((commits / str(batch_id)).stat().st_mtime, UTC)
    return BatchCommit(batch_id, committed_at, batch_offsets(checkpoint, batch_id))


def last_planned_batch(checkpoint: str | Path) -> int | None:
    """The last batch a checkpoint planned (its offsets written before the batch ran), or None."""
    batches = _batch_files(Path(checkpoint) / "offsets")
    return batches[-1] if batches else None


def lag(end_offsets: dict[int, int], read_up_to: dict[int, int]) -> int:
    """Messages in Kafka not yet read: per partition, the end minus the read position."""
    return sum(max(0, end - read_up_to.get(partition, 0)) for partition, end in end_offsets.items())
