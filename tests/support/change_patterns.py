"""The CDC change patterns the dbt benchmarks and tests draw: which keys a round changes, and how.

Uniform: every change on a distinct key drawn evenly over the key space, 80% updates and 10%
deletes of live keys, 10% inserts of new keys. Skewed: most of the changes update a few hot
keys many times (the few busy customers), the rest as in uniform. Never an update of a key
deleted before (a change after a delete would be a resurrection no source sends). Used by
benchmarks/merge_scaling.py (KeySpace) and tests/support/bronze_history.py (hot_keys);
tests/unit/test_change_patterns.py checks both.
"""

from __future__ import annotations

import random

CHANGE_MIX = {"U": 0.8, "D": 0.1, "I": 0.1}  # updates and deletes of live keys, inserts of new keys


class KeySpace:
    """Which keys exist and which are deleted, to draw realistic changes (no update of a
    deleted key, inserts beyond the largest key).

    Two patterns (`--patterns`): "uniform", every change on a distinct key drawn evenly over
    the key space; "skewed", a `hot_share` of the changes are updates of `hot_keys` hot keys
    (drawn once, evenly over the key space, never deleted: the few busy customers), each
    updated many times in one round, the rest drawn as in "uniform"."""

    def __init__(self, size: int, seed: int, hot_keys: int = 100, hot_share: float = 0.9):
        self.max_key = size
        self.deleted: set[int] = set()
        self.rng = random.Random(seed)
        self.hot = self.rng.sample(range(1, size + 1), min(hot_keys, size))
        self.hot_share = hot_share

    def draw(self, count: int, pattern: str = "uniform") -> list[tuple[int, str]]:
        hot = round(count * self.hot_share) if pattern == "skewed" else 0
        rest = count - hot
        updates = round(rest * CHANGE_MIX["U"])
        deletes = round(rest * CHANGE_MIX["D"])
        inserts = rest - updates - deletes
        taken = self.deleted | set(self.hot)
        existing: list[int] = []
        while len(existing) < updates + deletes:  # distinct live keys, uniformly over the key space
            drawn = self.rng.sample(range(1, self.max_key + 1), updates + deletes + len(taken) + 16)
            existing = [k for k in dict.fromkeys(drawn) if k not in taken][: updates + deletes]
        plan = [(k, "U") for k in existing[:updates]] + [(k, "D") for k in existing[updates:]]
        plan += [(self.max_key + 1 + i, "I") for i in range(inserts)]
        plan += [(self.rng.choice(self.hot), "U") for _ in range(hot)]
        self.deleted.update(k for k, op in plan if op == "D")
        self.max_key += inserts
        self.rng.shuffle(plan)
        return plan


def hot_keys(keys: int, count: int) -> list[int]:
    """The skewed pattern's hot keys: `count` keys spread evenly over 1..keys (the few busy
    customers and accounts), the same in every round."""
    return [1 + i * max(1, keys // count) for i in range(min(count, keys))]
