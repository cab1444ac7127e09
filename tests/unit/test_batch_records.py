"""A batch's size, read from the checkpoint's offsets, decides whether the bronze pass brings
its dead letters home (ingestion/job.py, ARCHITECTURE §8)."""

import json

from ingestion.job import batch_records


def _offsets(checkpoint, batch_id: int, partitions: dict[int, int], topic: str = "t") -> None:
    folder = checkpoint / "offsets"
    folder.mkdir(parents=True, exist_ok=True)
    metadata = {"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}}
    (folder / str(batch_id)).write_text(
        f"v1\n{json.dumps(metadata)}\n{json.dumps({topic: {str(p): o for p, o in partitions.items()}})}")


def test_a_batch_counts_its_records_from_its_predecessor_s_offsets(tmp_path):
    _offsets(tmp_path, 0, {0: 40, 1: 35})
    _offsets(tmp_path, 1, {0: 100, 1: 35, 2: 7})  # partition 2 added since: read from 0
    assert batch_records(str(tmp_path), 0) == 75  # the first batch counts from offset 0
    assert batch_records(str(tmp_path), 1) == 60 + 0 + 7


def test_a_batch_without_offsets_or_on_a_remote_checkpoint_is_unknown(tmp_path):
    assert batch_records(str(tmp_path), 3) is None
    assert batch_records("s3://bucket/checkpoints/bronze_x", 0) is None
