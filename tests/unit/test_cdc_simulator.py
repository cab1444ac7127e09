"""The CDC simulator: a SQLite source database and the changes it commits (ARCHITECTURE §9 oracle)."""

import re
import sqlite3
from collections import Counter, defaultdict
from decimal import Decimal
from itertools import pairwise

import pytest

from producers.cdc.simulator import FIRST_LSN, FIRST_TX_ID, CdcSimulator, Change, iso_ms
from producers.cdc.source import TABLES, open_source, read_tables

ISO_MS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


def simulator(path, seed=3, **options) -> CdcSimulator:
    options = {"key_space": 40, "hot_keys": 5, **options}
    return CdcSimulator(path, seed=seed, **options)


def replay(state: dict[str, dict[int, dict]], changes: list[Change]) -> dict[str, dict[int, dict]]:
    """Apply changes in commit order to a copy of ``state``, checking every before-image."""
    state = {table: dict(rows) for table, rows in state.items()}
    for change in changes:
        rows = state[change.table]
        if change.op == "I":
            assert change.key not in rows and change.before is None, change
            rows[change.key] = change.after
        elif change.op == "U" and change.before[TABLES[change.table]] != change.key:  # the key changed
            old = change.before[TABLES[change.table]]
            assert rows.get(old) == change.before and change.key not in rows, change
            del rows[old]
            rows[change.key] = change.after
        elif change.op in ("U", "D"):
            assert rows.get(change.key) == change.before, change
            if change.op == "U":
                rows[change.key] = change.after
            else:
                assert change.after is None
                del rows[change.key]
        else:
            raise AssertionError(f"unexpected op in a run: {change}")
    return state


def transactions(changes: list[Change]) -> dict[int, list[Change]]:
    grouped: dict[int, list[Change]] = defaultdict(list)
    for change in changes:
        grouped[change.tx_id].append(change)
    return grouped


def test_same_seed_same_run_and_database(tmp_path):
    first = simulator(tmp_path / "a.db", seed=11)
    second = simulator(tmp_path / "b.db", seed=11)
    other = simulator(tmp_path / "c.db", seed=12)
    run = first.run(120)
    assert len(run) > 120
    assert second.run(120) == run
    assert first.tables() == second.tables()
    assert other.run(120) != run


def test_one_long_run_equals_two_short_ones(tmp_path):
    assert simulator(tmp_path / "a.db").run(80) == [
        *(sim := simulator(tmp_path / "b.db")).run(30), *sim.run(50)]


def test_log_coordinates_are_ordered_like_a_database_commit_log(tmp_path):
    sim = simulator(tmp_path / "s.db")
    changes = [*sim.run(60), *sim.snapshot(), *sim.run(300)]
    assert len(set(changes)) == len(changes)  # hashable, and no two changes alike
    lsns = [c.lsn for c in changes]
    assert lsns[0] == FIRST_LSN
    assert all(a < b for a, b in pairwise(lsns)), "LSN must be strictly increasing per change"
    assert all(a.commit_ts_ms <= b.commit_ts_ms for a, b in pairwise(changes))
    grouped = transactions(changes)
    assert sorted(grouped) == list(range(FIRST_TX_ID, FIRST_TX_ID + 361)), "one id per transaction"
    # ids are given at transaction start: of two overlapping transactions the one with the
    # lower id can commit second, in the same millisecond too; only the LSN orders commits
    swapped = [(a, b) for a, b in pairwise(grouped.values()) if a[0].tx_id > b[0].tx_id]
    assert len(swapped) >= 20
    assert any(a[0].commit_ts_ms == b[0].commit_ts_ms for a, b in swapped)
    for tx in grouped.values():
        assert [c.position for c in tx] == list(range(len(tx)))
        assert len({c.commit_ts_ms for c in tx}) == 1
    assert max(len(tx) for tx in grouped.values() if tx[0].op != "R") == 4  # max_tx_size
    # Distinct transactions committed in the same millisecond: ordering by time alone is ambiguous.
    per_ts = Counter(tx[0].commit_ts_ms for tx in grouped.values())
    assert sum(1 for n in per_ts.values() if n > 1) >= 10


def test_database_is_previous_state_plus_the_runs_changes_in_order(tmp_path):
    sim = simulator(tmp_path / "s.db")
    sim.run(50)
    before = sim.tables()
    changes = sim.run(400)
    assert sim.tables() == replay(before, changes)
    assert read_tables(tmp_path / "s.db") == sim.tables()  # committed, visible to another connection


def test_runs_contain_what_a_mirror_must_handle(tmp_path):
    sim = simulator(tmp_path / "s.db", op_weights=(0.3, 0.45, 0.25))
    changes = sim.run(500)
    ops = Counter(c.op for c in changes)
    assert ops["I"] > 50 and ops["U"] > 150 and ops["D"] > 50
    assert {c.table for c in changes} == set(TABLES)
    assert any(len({c.table for c in tx}) == 2 for tx in transactions(changes).values())
    assert any(len(tx) != len({(c.table, c.key) for c in tx}) for tx in transactions(changes).values()), \
        "some transaction touches one key twice"
    deleted: set[tuple[str, int]] = set()
    reinserts = 0
    for change in changes:
        if change.op == "D":
            deleted.add((change.table, change.key))
        elif change.op == "I" and (change.table, change.key) in deleted:
            reinserts += 1
    assert reinserts > 10
    # updates of the primary key, accounts only (the DMS stream), to a key not in use
    moved = [c for c in changes if c.op == "U" and c.before[TABLES[c.table]] != c.key]
    assert len(moved) >= 5 and {c.table for c in moved} == {"accounts"}
    # hot keys (1..5 of 40) take far more than their 1/8 share of the updates
    updates = [c for c in changes if c.op == "U"]
    assert sum(c.key <= 5 for c in updates) > len(updates) / 8 * 1.5


def test_images_carry_the_commit_time_and_valid_values(tmp_path):
    sim = simulator(tmp_path / "s.db")
    for change in sim.run(200):
        if change.after is None:
            continue
        assert change.after["updated_at"] == iso_ms(change.commit_ts_ms)
        assert change.after[TABLES[change.table]] == change.key
        if change.table == "customers":
            assert ISO_MS.match(change.after["created_at"])
            if change.op == "U":
                assert change.after["created_at"] == change.before["created_at"]
                business = set(change.after) - {"updated_at"}
                assert any(change.after[c] != change.before[c] for c in business)
        else:
            assert re.match(r"^-?\d+\.\d{2}$", change.after["balance"])
            assert change.after["balance"] != "-0.00"


def test_second_simulator_on_the_same_file_continues(tmp_path):
    path = tmp_path / "s.db"
    with simulator(path) as first:
        earlier = first.run(40)
        state = first.tables()
    with simulator(path) as second:
        assert second.tables() == state
        later = second.run(40)
        assert second.tables() == replay(state, later)
    # no id twice across the two (an id given to a transaction still open at the end stays unused)
    ids = {c.tx_id for c in earlier + later}
    assert len(ids) == 80 and ids <= set(range(FIRST_TX_ID, FIRST_TX_ID + 81))
    assert later[0].lsn > earlier[-1].lsn
    assert later[0].commit_ts_ms >= earlier[-1].commit_ts_ms
    # the same seed continues with fresh draws instead of replaying the first run's choices
    assert [(c.table, c.op, c.key) for c in later[:10]] != [(c.table, c.op, c.key) for c in earlier[:10]]


def test_start_ms_moves_the_clock_forward_never_back(tmp_path):
    path = tmp_path / "s.db"
    late = 1_900_000_000_000
    with simulator(path, start_ms=late) as first:
        first_ts = first.run(5)[-1].commit_ts_ms
    assert first_ts >= late
    with simulator(path, start_ms=late - 86_400_000) as second:
        assert second.run(1)[0].commit_ts_ms >= first_ts


def test_snapshot_yields_exactly_the_rows(tmp_path):
    sim = simulator(tmp_path / "s.db")
    assert sim.snapshot() == []  # an empty database has nothing to read
    earlier = sim.run(80)
    snapshot = sim.snapshot()
    tables = sim.tables()
    assert sum(len(rows) for rows in tables.values()) == len(snapshot) > 20
    assert {c.op for c in snapshot} == {"R"} and all(c.before is None for c in snapshot)
    for table, rows in tables.items():
        reads = [c for c in snapshot if c.table == table]
        assert [c.key for c in reads] == list(rows)  # key order
        assert {c.key: c.after for c in reads} == rows
    assert len({c.tx_id for c in snapshot}) == 1
    assert [c.position for c in snapshot] == list(range(len(snapshot)))
    later = sim.run(5)
    assert earlier[-1].lsn < snapshot[0].lsn and snapshot[-1].lsn < later[0].lsn
    assert snapshot[0].tx_id not in {c.tx_id for c in earlier + later}


def test_run_of_nothing_changes_nothing(tmp_path):
    sim, twin = simulator(tmp_path / "s.db"), simulator(tmp_path / "t.db")
    assert sim.run(10) == twin.run(10)
    state = sim.tables()
    assert sim.run(0) == []
    assert sim.tables() == state
    assert sim.run(1) == twin.run(1)  # no id, LSN or draw taken


def test_full_key_space_turns_inserts_into_updates(tmp_path):
    sim = simulator(tmp_path / "s.db", key_space=3, hot_keys=1, op_weights=(1, 0, 0), repeat_key_share=0)
    changes = sim.run(30)
    assert [c.key for c in changes if c.op == "I"].count(1) == 2  # once per table
    assert {c.op for c in changes} == {"I", "U"}
    assert {t: sorted(rows) for t, rows in sim.tables().items()} == {t: [1, 2, 3] for t in TABLES}


def test_source_schema_rejects_what_the_contract_forbids(tmp_path):
    conn = open_source(tmp_path / "s.db")
    good = (1, 7, "checking", "10.50", "EUR", "active", "2026-11-01T00:00:00.000Z")
    conn.execute("insert into accounts values (?, ?, ?, ?, ?, ?, ?)", good)
    for field, bad in [(3, "10.5"), (3, "1e3"), (4, "CHF"), (5, "open"), (6, "2026-11-01 00:00:00"), (1, "seven")]:
        row = list(good)
        row[0], row[field] = 2, bad
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute("insert into accounts values (?, ?, ?, ?, ?, ?, ?)", row)
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("insert into customers values (1, 'A', 'a@x', 'XX', null, 'gold', ?, ?)", (good[-1],) * 2)


def balances_by_currency(tables: dict[str, dict[int, dict]]) -> dict[str, Decimal]:
    sums: dict[str, Decimal] = defaultdict(Decimal)
    for row in tables["accounts"].values():
        sums[row["currency"]] += Decimal(row["balance"])
    return dict(sums)


def test_transfers_move_money_between_two_accounts_in_one_transaction_and_keep_every_sum(tmp_path):
    with simulator(tmp_path / "s.db", seed=11) as sim:
        sim.run(120)  # accounts to move money between
        before = sim.tables()
        sums = balances_by_currency(before)
        sim.transfer_share = 1.0
        changes = sim.run(60)
        after = sim.tables()
    assert replay(before, changes) == after
    grouped = transactions(changes)
    assert len(grouped) == 60
    for tx_changes in grouped.values():
        payer, payee = tx_changes
        assert (payer.table, payer.op, payee.table, payee.op) == ("accounts", "U", "accounts", "U")
        assert payer.key != payee.key and payer.before["currency"] == payee.before["currency"]
        moved = Decimal(payee.after["balance"]) - Decimal(payee.before["balance"])
        assert moved > 0 and Decimal(payer.before["balance"]) - Decimal(payer.after["balance"]) == moved
        assert payer.commit_ts_ms == payee.commit_ts_ms and payer.lsn < payee.lsn
    assert balances_by_currency(after) == sums  # no currency's sum changed


def test_without_transfers_a_run_draws_what_it_always_drew(tmp_path):
    with simulator(tmp_path / "a.db", seed=4) as plain, \
            simulator(tmp_path / "b.db", seed=4, transfer_share=0.0) as zero:
        assert plain.run(80) == zero.run(80)


@pytest.mark.parametrize("options", [{"key_space": 0}, {"max_tx_size": 0}, {"hot_keys": 50},
                                     {"hot_key_share": 1.5}, {"same_ts_share": -0.1}, {"transfer_share": 2.0}])
def test_invalid_options_are_refused(tmp_path, options):
    with pytest.raises(ValueError):
        simulator(tmp_path / "s.db", **options)
