"""benchmarks/ingest_throughput.py's own helpers: the order of each round's runs, the batch
size that makes every run span at least N micro-batches, the faults of a batch that fails
whole. A test of a benchmark's own code, so it imports the benchmark (tests/unit/
test_suite_layout.py names it); the raw ceiling's rows, which need Spark, are checked in
tests/integration/test_ingest_benchmark.py."""

from __future__ import annotations

from collections import Counter

import pytest

from benchmarks.ingest_throughput import (
    JOB,
    RAW_CEILING,
    STEPS,
    parse_args,
    records_per_batch,
    round_names,
    run_orders,
    whole_bad_rates,
)
from producers.faults import DEAD_LETTER_CODES


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 6])
def test_each_name_runs_once_in_every_position_and_after_every_other_as_often(count):
    names = [f"run{i}" for i in range(count)]
    rounds = 2 * count if count % 2 else count  # the square's rows
    orders = run_orders(names, rounds, seed=7)
    assert all(sorted(order) == names for order in orders)
    for position in range(count):
        assert Counter(order[position] for order in orders) == Counter({name: rounds // count for name in names})
    follows = Counter((order[i], order[i + 1]) for order in orders for i in range(count - 1))
    if count > 1:
        assert set(follows) == {(a, b) for a in names for b in names if a != b}
        assert len(set(follows.values())) == 1, follows
    if count > 1:  # more rounds than rows: from the first row again, never the same order twice in a row
        longer = run_orders(names, 3 * rounds + 1, seed=7)
        assert all(a != b for a, b in zip(longer, longer[1:], strict=False))
        assert longer[:rounds] == orders


def test_the_orders_depend_on_the_seed_only():
    names = [RAW_CEILING, *STEPS, JOB]
    assert run_orders(names, 4, seed=3) == run_orders(names, 4, seed=3)
    assert len({tuple(order) for order in run_orders(names, 4, seed=3)}) == 4
    assert any(run_orders(names, 4, seed=seed) != run_orders(names, 4, seed=3) for seed in range(4, 20))
    assert run_orders([], 2, seed=1) == [[], []]


def test_a_round_runs_the_ceiling_and_steps_asked_for_and_the_job():
    assert round_names(parse_args(["--ceiling", "--steps"])) == [RAW_CEILING, *STEPS, JOB]
    assert round_names(parse_args(["--ceiling"])) == [RAW_CEILING, JOB]
    assert round_names(parse_args([])) == [JOB]


@pytest.mark.parametrize("records", [1, 9, 10, 11, 19_999, 20_000, 20_007, 1_000_000, 1_010_000])
@pytest.mark.parametrize("batches", [1, 3, 10])
def test_every_run_spans_at_least_the_batches_asked_for(records, batches):
    size = records_per_batch(records, batches)
    assert size >= 1
    if records >= batches:
        assert -(-records // size) >= batches  # ceil: the batches the topic's records fill
        assert size == records // batches
    capped = records_per_batch(records, batches, cap=3)
    assert capped == min(size, 3)


def test_a_whole_bad_batch_fails_every_record_for_one_reason():
    assert whole_bad_rates("purchases").unknown_schema_id == 1.0  # the case
    for stream in ("employees", "user_events"):
        rates = whole_bad_rates(stream)
        assert rates.corrupt == 1.0 and rates.invalid == 0.0 and rates.unknown_schema_id == 0.0
    assert {DEAD_LETTER_CODES[kind] for kind in ("truncated", "garbled")} == {"CORRUPT_PAYLOAD"}


def test_the_options_of_a_whole_bad_batch_run():
    args = parse_args(["--whole-bad-batch"])
    assert args.streams == ["purchases"] and args.max_offsets_per_trigger is None
    assert parse_args([]).streams == ["employees", "purchases", "user_events"]
    for wrong in (["--whole-bad-batch", "--ceiling"], ["--whole-bad-batch", "--streams", "customers"],
                  ["--batches", "0"]):
        with pytest.raises(SystemExit):
            parse_args(wrong)
