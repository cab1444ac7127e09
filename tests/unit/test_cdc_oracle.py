"""The oracle (ARCHITECTURE §9): any delivery of the change streams converges to the source database.

Simulate, encode, break the delivery (duplicates, reordering, partitions), decode, apply:
the result must equal the simulator's SQLite tables exactly, for Debezium and for DMS.
"""

import random
import tempfile
from collections import Counter, defaultdict, deque
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from producers.cdc import debezium, dms
from producers.cdc.faults import Placed, duplicate, key_partition, reorder
from producers.cdc.oracle import InvalidChange, NormalizedChange, apply, latest_by_key
from producers.cdc.simulator import CdcSimulator, Change
from producers.cdc.source import TABLES

FORMATS = {"customers": debezium, "accounts": dms}


def decode_all(table: str, messages) -> list[NormalizedChange]:
    decoded = (FORMATS[table].decode(key, value) for key, value in messages)
    return [change for change in decoded if change is not None]  # tombstones carry nothing


def consume(placed: list[Placed], rng: random.Random) -> list[tuple[bytes | None, bytes | None]]:
    """What one consumer may read: each partition in order, partitions interleaved at random."""
    queues: dict[int, deque] = defaultdict(deque)
    for message in placed:
        queues[message.partition].append((message.key, message.value))
    read = []
    while queues:
        partition = rng.choice(sorted(queues))
        read.append(queues[partition].popleft())
        if not queues[partition]:
            del queues[partition]
    return read


def simulate(path: Path, seed: int, history: int, streamed: int, key_space: int):
    """(changes streamed: snapshot + run, the database's tables afterwards)."""
    with CdcSimulator(path, seed=seed, key_space=key_space, hot_keys=5, op_weights=(0.35, 0.45, 0.2)) as sim:
        sim.run(history)  # committed before the connector started: reaches the stream via the snapshot
        changes = [*sim.snapshot(), *sim.run(streamed)]
        return changes, sim.tables()


def encode_table(table: str, changes: list[Change]):
    return FORMATS[table].encode_changes(changes, table=table)


# --- apply, on hand-made changes -------------------------------------------------------------


def change(op: str, key: int, seq: int, **image) -> NormalizedChange:
    return NormalizedChange("t", op, key, {"id": key, **image}, (seq,))


def test_apply_keeps_the_change_with_the_highest_seq_whatever_the_order():
    changes = [change("I", 1, 1, v="a"), change("U", 1, 5, v="c"), change("U", 1, 3, v="b"),
               change("I", 2, 2, v="x")]
    for order in (changes, changes[::-1], changes[1:] + changes[:1]):
        assert apply(order) == {1: {"id": 1, "v": "c"}, 2: {"id": 2, "v": "x"}}


def test_a_delete_with_the_highest_seq_removes_the_key_and_older_changes_cannot_resurrect_it():
    changes = [change("U", 1, 3, v="b"), change("D", 1, 4, v="b"), change("I", 1, 1, v="a")]
    assert apply(changes) == {}
    assert latest_by_key(changes)[1].op == "D"  # the tombstone a mirror keeps
    assert apply([*changes, change("I", 1, 6, v="again")]) == {1: {"id": 1, "v": "again"}}


def test_duplicates_are_harmless_but_a_seq_shared_by_different_changes_is_an_error():
    one = change("I", 1, 1, v="a")
    assert apply([one, one, change("I", 1, 1, v="a")]) == {1: {"id": 1, "v": "a"}}
    with pytest.raises(ValueError, match="share seq"):
        apply([one, change("U", 1, 1, v="b")])
    with pytest.raises(ValueError, match="two tables"):
        apply([one, NormalizedChange("u", "I", 2, {}, (2,))])


def test_an_update_of_the_primary_key_ends_the_old_key():
    moved = NormalizedChange("t", "U", 2, {"id": 2, "v": "b"}, (5,), before_key=1)
    changes = [change("I", 1, 1, v="a"), moved]
    for order in (changes, changes[::-1]):
        assert apply(order) == {2: {"id": 2, "v": "b"}}
    assert latest_by_key(changes)[1].op == "D"  # a tombstone at the update's seq: an older change cannot revive it
    assert apply([*changes, change("U", 1, 3, v="late")]) == {2: {"id": 2, "v": "b"}}
    assert apply([*changes, change("I", 1, 7, v="again")]) == {1: {"id": 1, "v": "again"}, 2: {"id": 2, "v": "b"}}
    # an update that names its own key is an ordinary update
    assert apply([change("I", 1, 1, v="a"), NormalizedChange("t", "U", 1, {"id": 1, "v": "b"}, (2,), before_key=1)]) \
        == {1: {"id": 1, "v": "b"}}
    with pytest.raises(InvalidChange, match="only an update changes a key"):
        NormalizedChange("t", "I", 2, {}, (1,), before_key=1)


def test_seq_compares_as_a_tuple_not_as_text():
    # DMS seqs: the same commit microsecond, the later log position (transaction 9, started
    # first, committed second) after the earlier one
    older = NormalizedChange("accounts", "U", 1, {"v": "old"}, (1_000_000, "00000000/0000FF00", 10, 3))
    newer = NormalizedChange("accounts", "U", 1, {"v": "new"}, (1_000_000, "00000000/00010000", 9, 0))
    assert apply([newer, older]) == {1: {"v": "new"}}


# --- faults --------------------------------------------------------------------------------

MESSAGES = [(f"k{i % 7}".encode(), f"v{i}".encode()) for i in range(200)]


def test_duplicate_keeps_every_original_in_order_and_sends_copies_later():
    out = duplicate(MESSAGES, 0.2, random.Random(1))
    originals = [out.index(m) for m in MESSAGES]  # first occurrence of each
    assert originals == sorted(originals)
    copies = Counter(out) - Counter(MESSAGES)
    assert 20 <= sum(copies.values()) <= 60 and len(out) == 200 + sum(copies.values())
    for message in copies:
        assert max(i for i, m in enumerate(out) if m == message) > out.index(message)
    assert duplicate(MESSAGES, 0.0, random.Random(1)) == MESSAGES
    assert len(duplicate(MESSAGES, 1.0, random.Random(1))) == 400
    assert duplicate(MESSAGES, 0.2, random.Random(1)) == out  # same seed, same faults


def test_reorder_moves_messages_within_twice_the_window_and_spreads_them_over_partitions():
    out = reorder(MESSAGES, 0.5, random.Random(2), window=5, partitions=3)
    assert sorted((p.key, p.value) for p in out) == sorted(MESSAGES)  # a permutation
    moved = 0
    for position, placed in enumerate(out):
        original = MESSAGES.index((placed.key, placed.value))
        assert abs(position - original) <= 10
        moved += position != original
        assert 0 <= placed.partition < 3
    assert moved > 50
    by_key = Counter((p.key, p.partition) for p in out)
    assert len(by_key) > 7, "moved messages leave their key's partition"


def test_reorder_at_rate_zero_is_a_keyed_producer():
    out = reorder(MESSAGES, 0.0, random.Random(2), window=5, partitions=3)
    assert [(p.key, p.value) for p in out] == MESSAGES
    assert all(p.partition == key_partition(p.key, 3) for p in out)
    assert len({p.partition for p in out}) > 1


@pytest.mark.parametrize("call", [
    lambda: duplicate(MESSAGES, 1.5, random.Random()), lambda: reorder(MESSAGES, -1, random.Random(), 3),
    lambda: reorder(MESSAGES, 0.1, random.Random(), -1), lambda: reorder(MESSAGES, 0.1, random.Random(), 1, 0)])
def test_fault_parameters_are_checked(call):
    with pytest.raises(ValueError):
        call()


# --- THE ORACLE TEST -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    return simulate(tmp_path_factory.mktemp("cdc") / "source.db", seed=9, history=150, streamed=600,
                    key_space=150)


def hard_cases(table: str, changes: list[Change], rows: dict) -> dict[str, int]:
    """How often a stream has what could make a naive mirror wrong."""
    mine = [c for c in changes if c.table == table]
    deleted, reinserted, inverted, last = set(), 0, 0, {}
    for c in mine:
        if c.op == "D":
            deleted.add(c.key)
        elif c.op == "I" and c.key in deleted:
            reinserted += 1
        # a key changed by two transactions committed in one instant, the later one holding the
        # lower id (it started first): ordered by transaction id, the earlier change would win
        previous = last.get(c.key)
        inverted += previous is not None and previous.commit_ts_ms == c.commit_ts_ms and previous.tx_id > c.tx_id
        last[c.key] = c
    return {
        "inverted": inverted,
        "key_changed": sum(1 for c in mine if c.op == "U" and c.before[TABLES[table]] != c.key),
        **{op: n for op, n in Counter(c.op for c in mine).items()},
        "reinserted": reinserted,
        "deleted_at_end": len({c.key for c in mine} - set(rows)),
        "rows_at_end": len(rows),
    }


@pytest.mark.parametrize("table", ["customers", "accounts"])
def test_the_stream_exercises_every_hard_case(simulated, table):
    """Guards the oracle test below against passing on an easy stream."""
    changes, tables = simulated
    cases = hard_cases(table, changes, tables[table])
    assert cases["R"] > 20 and cases["I"] > 100 and cases["U"] > 200 and cases["D"] > 100, cases
    assert cases["reinserted"] > 20 and cases["deleted_at_end"] > 10 and cases["rows_at_end"] > 100, cases
    assert cases["inverted"] >= 5, cases  # only the log position orders these (DMS: not the transaction id)
    assert table != "accounts" or cases["key_changed"] >= 10, cases  # updates of the primary key
    timestamps_of_tx = {c.tx_id: c.commit_ts_ms for c in changes}
    assert len(set(timestamps_of_tx.values())) < len(timestamps_of_tx) - 50, "transactions sharing a timestamp"
    assert any(n > 1 for n in Counter((c.tx_id, c.table, c.key) for c in changes).values()), \
        "a key changed twice in one transaction"


@pytest.mark.parametrize("table", ["customers", "accounts"])
def test_faulty_delivery_converges_to_the_source_database(simulated, table):
    changes, tables = simulated
    rng = random.Random(f"delivery-{table}")
    messages = encode_table(table, changes)
    duplicated = duplicate(messages, 0.2, rng)
    assert len(duplicated) - len(messages) > 0.15 * len(messages)
    shuffled = reorder(duplicated, 1.0, rng, window=len(duplicated), partitions=3)
    delivered = consume(shuffled, rng)
    decoded = decode_all(table, delivered)

    assert apply(decoded) == tables[table]
    # ...and the faults were real: taking changes in arrival order gives a different state.
    naive: dict[int, dict] = {}
    for c in decoded:
        if c.op == "D":
            naive.pop(c.key, None)
        else:
            naive[c.key] = c.image
    assert naive != tables[table]


@pytest.mark.parametrize("table", ["customers", "accounts"])
def test_in_order_delivery_converges_too(simulated, table):
    changes, tables = simulated
    assert apply(decode_all(table, encode_table(table, changes))) == tables[table]


def test_a_continued_run_on_the_same_database_extends_the_same_oracle(tmp_path):
    path = tmp_path / "source.db"
    first, _ = simulate(path, seed=8, history=50, streamed=100, key_space=30)
    with CdcSimulator(path, seed=8, key_space=30, hot_keys=5) as sim:
        later = sim.run(150)
        tables = sim.tables()
    for table in FORMATS:
        messages = encode_table(table, first) + encode_table(table, later)
        random.Random(table).shuffle(messages)
        assert apply(decode_all(table, messages)) == tables[table]


# --- property: every permutation and duplication of one stream gives one state --------------


@cache
def fixed_stream() -> dict[str, tuple[list, dict]]:
    with tempfile.TemporaryDirectory() as folder:
        changes, tables = simulate(Path(folder) / "source.db", seed=29, history=60, streamed=120, key_space=40)
    return {table: (encode_table(table, changes), tables[table], hard_cases(table, changes, tables[table]))
            for table in FORMATS}


@st.composite
def deliveries(draw, table: str):
    messages, _state, _cases = fixed_stream()[table]
    order = draw(st.permutations(messages))
    copies = draw(st.lists(st.tuples(st.integers(0, len(messages) - 1), st.integers(0, len(messages))),
                           max_size=len(messages) // 2))
    delivered = list(order)
    for index, position in copies:
        delivered.insert(position, messages[index])
    return delivered


@pytest.mark.parametrize("table", ["customers", "accounts"])
def test_fixed_stream_is_not_trivial(table):
    messages, _state, cases = fixed_stream()[table]
    assert len(messages) > 150
    assert min(cases["R"], cases["I"], cases["U"], cases["D"]) >= 10, cases
    assert cases["reinserted"] >= 5 and cases["deleted_at_end"] >= 3 and cases["rows_at_end"] >= 20, cases
    assert cases["inverted"] >= 1, cases


@pytest.mark.parametrize("table", ["customers", "accounts"])
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_any_permutation_with_duplicates_applies_to_the_database_state(table, data):
    messages, state, _cases = fixed_stream()[table]
    delivered = data.draw(deliveries(table))
    assert len(delivered) >= len(messages)
    assert apply(decode_all(table, delivered)) == state
