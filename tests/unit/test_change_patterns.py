"""The change patterns the dbt benchmarks and tests draw (tests/support/change_patterns.py): a skewed
round puts its hot share on the hot keys and never deletes one, a uniform round changes
distinct keys, and neither updates a key deleted in an earlier round (a change after a delete
would be a resurrection no source sends)."""

from __future__ import annotations

from collections import Counter

from tests.support.change_patterns import KeySpace, hot_keys


def test_a_uniform_round_changes_distinct_keys():
    plan = KeySpace(100_000, seed=1).draw(1_000, "uniform")
    ops = Counter(op for _, op in plan)
    assert len(plan) == 1_000 and len({k for k, _ in plan}) == 1_000
    assert ops == {"U": 800, "D": 100, "I": 100}


def test_a_skewed_round_puts_its_hot_share_on_the_hot_keys():
    space = KeySpace(100_000, seed=1, hot_keys=10, hot_share=0.9)
    plan = space.draw(1_000, "skewed")
    hot = [k for k, _ in plan if k in set(space.hot)]
    assert len(plan) == 1_000 and len(hot) >= 900
    assert all(op == "U" for k, op in plan if k in set(space.hot))  # a hot key is never deleted
    assert len({k for k, _ in plan}) <= 10 + 100  # the hot keys, and the rest distinct


def test_no_round_changes_a_key_deleted_before():
    space = KeySpace(2_000, seed=3, hot_keys=10, hot_share=0.5)
    deleted: set[int] = set()
    for pattern in ("uniform", "skewed", "uniform", "skewed"):
        plan = space.draw(400, pattern)
        assert not {k for k, _ in plan} & deleted
        deleted |= {k for k, op in plan if op == "D"}


def test_the_hot_keys_spread_over_the_key_space():
    keys = hot_keys(1_000_000, 100)
    assert len(set(keys)) == 100 and min(keys) == 1 and max(keys) > 900_000
