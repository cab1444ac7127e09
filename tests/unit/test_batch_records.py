"""A batch's size, read from the checkpoint's offsets, decides whether the bronze pass brings
its dead letters home (ingestion/job.py, ARCHITECTURE §8)."""

import json

from ingestion.checkpoint import records_of_batch


def _offsets(checkpoint, batch_id: int, partitions: dict[int, int], topic: str = "t") -> None:
    folder = checkpoint / "offsets"
    folder.mkdir(parents=True, exist_ok=True)
    metadata = {"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}}
    (folder / str(batch_id)).write_text(
        f"v1\n{json.dumps(metadata)}\n{json.dumps({topic: {str(p): o for p, o in partitions.items()}})}")


def test_a_batch_counts_its_records_from_its_predecessor_s_offsets(tmp_path):
    _offsets(tmp_path, 0, {0: 40, 1: 35})
    _offsets(tmp_path, 1, {0: 100, 1: 35, 2: 7})  # partition 2 added since: read from 0
    assert records_of_batch(str(tmp_path), 0, "t") == 75  # the first batch counts from offset 0
    assert records_of_batch(str(tmp_path), 1, "t") == 60 + 0 + 7


def test_a_batch_without_offsets_or_on_a_remote_checkpoint_is_unknown(tmp_path):
    assert records_of_batch(str(tmp_path), 3, "t") is None
    assert records_of_batch("s3://bucket/checkpoints/bronze_x", 0, "t") is None


def test_the_first_batch_starts_at_the_source_s_starting_offsets_and_a_purged_predecessor_is_unknown(tmp_path):
    _offsets(tmp_path, 0, {0: 40, 1: 35})
    (tmp_path / "sources" / "0").mkdir(parents=True)
    (tmp_path / "sources" / "0" / "0").write_text('v1\n\0{"t":{"0":10}}')  # a topic truncated up to 10
    assert records_of_batch(str(tmp_path), 0, "t") == 30 + 35
    _offsets(tmp_path, 7, {0: 90, 1: 35})  # batch 6's offsets file was purged
    assert records_of_batch(str(tmp_path), 7, "t") is None
