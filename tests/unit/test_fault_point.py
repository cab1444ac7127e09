"""The job's fault points (ARCHITECTURE §8) are off unless a test sets them, and checked;
tests/integration/test_fault_points.py kills the job at each."""

import pytest

from ingestion.job import read_fault_point
from lakehouse.core.errors import LakehouseError


def test_the_fault_point_is_off_unless_set_and_an_unknown_one_is_refused():
    assert read_fault_point({}) is None and read_fault_point({"LAKEHOUSE_FAULT_POINT": " "}) is None
    assert read_fault_point({"LAKEHOUSE_FAULT_POINT": "after-iceberg-commit"}) == "after-iceberg-commit"
    # the points of the two-commit protocol are gone with it
    assert read_fault_point({"LAKEHOUSE_FAULT_POINT": "after-replay-commit"}) == "after-replay-commit"
    assert read_fault_point({"LAKEHOUSE_FAULT_POINT": "stop-inside-append-commit"}) == "stop-inside-append-commit"
    with pytest.raises(LakehouseError,
                       match="known: after-iceberg-commit, after-replay-commit, stop-inside-append-commit$"):
        read_fault_point({"LAKEHOUSE_FAULT_POINT": "after-bronze"})

