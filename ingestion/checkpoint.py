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


def last_commit(checkpoint: str | Path) -> BatchCommit | None:
    """The last committed batch of a checkpoint, or None if it has committed nothing."""
    commits = Path(checkpoint) / "commits"
    batches = _batch_files(commits)
    if not batches:
        return None
    batch_id = batches[-1]
    committed_at = datetime.fromtimestamp((commits / str(batch_id)).stat().st_mtime, UTC)
    return BatchCommit(batch_id, committed_at, batch_offsets(checkpoint, batch_id))


def lag(end_offsets: dict[int, int], read_up_to: dict[int, int]) -> int:
    """Messages in Kafka not yet read: per partition, the end minus the read position."""
    return sum(max(0, end - read_up_to.get(partition, 0)) for partition, end in end_offsets.items())
