"""Where a new checkpoint starts (ingestion/starting_offsets.py, ARCHITECTURE §8): after the last
offset bronze holds per partition, never the whole topic again in silence; a topic that cannot
follow on from bronze is refused in one line; a re-read is the operator's explicit choice."""

import json

import pytest

from ingestion.starting_offsets import AFTER_BRONZE, EARLIEST, LATEST, plan
from lakehouse.contracts.streams import get_stream
from lakehouse.core.errors import LakehouseError

SPEC = get_stream("employees")
AT = "/state/checkpoints/bronze_employees"


def test_an_empty_bronze_starts_at_the_earliest_offsets_without_a_word():
    assert plan(SPEC, AT, AFTER_BRONZE, {}, {}).option == EARLIEST
    assert plan(SPEC, AT, AFTER_BRONZE, {}, {}).warning is None
    assert plan(SPEC, AT, EARLIEST, {}, {}).warning is None


def test_a_new_checkpoint_follows_on_from_bronze_per_partition_and_says_so():
    start = plan(SPEC, AT, AFTER_BRONZE, {0: 99, 1: 49}, {0: (0, 150), 1: (0, 50), 2: (0, 10)})
    # partition 1 is read to its end already: it starts at its end; partition 2, which bronze has
    # none of, at its earliest offset (-2)
    assert json.loads(start.option) == {SPEC.topic: {"0": 100, "1": 50, "2": -2}}
    assert start.warning == (
        f"employees: new checkpoint at {AT} and bronze.employees holds topic {SPEC.topic} up to offsets 0: 99, "
        "1: 49 (partition: offset): reading from the next ones (partitions 2, which bronze has none of: from their "
        "earliest offset), nothing is ingested twice; to read the whole topic again on purpose: "
        "--starting-offsets earliest")


@pytest.mark.parametrize(("bronze_last", "marks", "why"), [
    ({0: 99}, {0: (0, 10)}, "partition 0 ends at offset 10: the topic was recreated or truncated"),
    ({3: 5}, {0: (0, 10)}, "the topic has no partition 3 now: it was recreated with fewer partitions"),
    ({0: 9}, {0: (20, 30)}, "partition 0 starts at offset 20 now: offsets 10 to 19 left the topic (retention)"),
])
def test_a_topic_that_cannot_follow_on_from_bronze_is_refused_in_one_line(bronze_last, marks, why):
    with pytest.raises(LakehouseError) as refused:
        plan(SPEC, AT, AFTER_BRONZE, bronze_last, marks)
    line = str(refused.value)
    assert "\n" not in line
    assert line.startswith(f"stream employees: its checkpoint at {AT} is new and bronze.employees holds topic")
    assert why in line and "Nothing is read (failOnDataLoss)" in line


def test_reading_again_or_skipping_is_explicit_and_warned():
    again = plan(SPEC, AT, EARLIEST, {0: 99}, {0: (0, 150)})
    assert again.option == EARLIEST
    assert "--starting-offsets earliest" in again.warning and "a second time" in again.warning
    skip = plan(SPEC, AT, LATEST, {0: 99}, {0: (0, 150)})
    assert skip.option == LATEST and "skipped" in skip.warning
