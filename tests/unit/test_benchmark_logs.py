"""benchmarks/freshness.py reads the ingestion's per-batch log lines to report batch sizes and
seconds: a test of a benchmark's own code, so it imports the benchmark (tests/unit/
test_suite_layout.py names it).

The job writes its counts with thousands separators, which the first version of the pattern
did not accept: its report said "0 micro-batches with data" for a run of thousands."""

from __future__ import annotations

from benchmarks.freshness import parse_batch_lines

LOG = """\
16:02:11 lakehouse.ingest user_events batch 41: read 987, good 980, dead 7, 2.4s, 411 rows/s
16:02:41 lakehouse.ingest user_events batch 42: read 301,254, good 298,240, dead 3,014, 27.9s, 10,797 rows/s
16:02:42 lakehouse.ingest user_events batch 43: already committed: skipped
16:02:43 lakehouse.ingest purchases batch 9: read 12,000, good 12,000, dead 0, 1.0s, 12,000 rows/s
"""


def test_batch_lines_with_thousands_separators():
    assert parse_batch_lines(LOG) == [
        {"batch_id": 41, "read": 987, "good": 980, "dead": 7, "seconds": 2.4},
        {"batch_id": 42, "read": 301_254, "good": 298_240, "dead": 3_014, "seconds": 27.9},
    ]
