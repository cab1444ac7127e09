"""A source database that changes: random transactions over `customers` and `accounts`.

The simulator owns a SQLite database (producers.cdc.source) and is the oracle of the CDC
streams (ARCHITECTURE §9): every change it returns was committed to that database, so the database
is, at any time, exactly what a correct mirror of the changes must hold.

Row generation is pure (a seeded ``random.Random`` and a commit instant in, a dict out); the
class around it does the SQLite I/O and the bookkeeping a real database does for its change
log: commit timestamps, transaction ids and log positions (LSN). Those counters live in a
small state table of the same database, so a second simulator on the same file continues
where the first stopped and two runs never produce the same LSN or transaction id.

Like a real database, it hands out a transaction id when a transaction *starts*, not when it
commits: two transactions that overlap commit in the other order than their ids with
probability ``overlap_share``, so only the log position (LSN, assigned as the changes are
written, in commit order here) orders commits; the transaction id does not.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from producers.cdc.source import TABLES, key_column, open_source, read_row, read_table

# A fixed default start keeps runs reproducible; a producer that streams "now" passes start_ms.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DEFAULT_START_MS = (datetime(2026, 11, 1, tzinfo=UTC) - EPOCH) // timedelta(milliseconds=1)
# Arbitrary but realistic first values (a fresh PostgreSQL cluster does not start at 0 either);
# distinct ranges make an LSN and a transaction id impossible to mix up in a test failure.
FIRST_LSN = 0x1_6B3748
FIRST_TX_ID = 750

CITIES = {
    "DE": ["Berlin", "München", "Hamburg", "Köln"],
    "US": ["New York", "Chicago", "Austin", "Seattle"],
    "FR": ["Paris", "Lyon", "Marseille"],
    "BR": ["São Paulo", "Rio de Janeiro", "Recife"],
    "JP": ["Tokyo", "Osaka", "Sapporo"],
    "IN": ["Mumbai", "Bengaluru", "Delhi"],
    "GB": ["London", "Manchester", "Edinburgh"],
    "ES": ["Madrid", "Barcelona", "Sevilla"],
    "IT": ["Roma", "Milano", "Torino"],
    "CA": ["Toronto", "Montréal", "Vancouver"],
}
COUNTRIES = list(CITIES)
TIERS = ["bronze", "silver", "gold"]
ACCOUNT_TYPES = ["checking", "savings", "credit"]
CURRENCIES = ["EUR", "USD", "GBP"]
STATUSES = ["active", "frozen", "closed"]
# Non-ASCII names on purpose: every encoder on the way must keep them intact.
FIRST_NAMES = ["Ana", "Ben", "Chloé", "Dmitri", "Emma", "Farid", "Grace", "Hiro", "Inés", "Jonas",
               "Kai", "Léa", "Mateo", "Nora", "Omar", "Priya", "Quinn", "Rosa", "Søren", "Yuki"]
LAST_NAMES = ["Almeida", "Brown", "Castillo", "Dubois", "Eriksen", "Fischer", "García", "Hughes",
              "Ivanova", "Jensen", "Kowalski", "Lee", "Müller", "Nakamura", "O'Brien", "Patel",
              "Rossi", "Schmidt", "Tanaka", "Weiß"]

CENT = Decimal("0.01")
# Tables whose updates may change the primary key: accounts, the DMS stream, whose update then
# names the old key in its before-image (producers/cdc/dms.py). Debezium sends a key change as
# a delete and a create of its own, which the customers stream already covers.
KEY_CHANGE_TABLES = ("accounts",)


@dataclass(frozen=True)
class Change:
    """One committed row change, with the log coordinates a CDC tool would read.

    ``lsn`` is strictly increasing over every change of the database, across runs (a WAL
    position), so in commit order; ``tx_id`` and ``commit_ts_ms`` are shared by the changes of
    one transaction and ``position`` is the change's index within it. Distinct transactions may
    share a ``commit_ts_ms`` (a millisecond clock; real databases do the same), never a
    ``tx_id``. Transaction ids are assigned at transaction start: not in commit order.
    """

    table: str
    op: str  # I, U, D, or R for a snapshot read
    key: int
    before: dict | None = field(hash=False)  # None for I and R
    after: dict | None = field(hash=False)  # None for D
    commit_ts_ms: int
    tx_id: int
    lsn: int
    position: int


def iso_ms(epoch_ms: int) -> str:
    """ISO-8601 UTC with milliseconds, the form of every instant in the source tables."""
    instant = EPOCH + timedelta(milliseconds=epoch_ms)  # integer arithmetic: no float rounding
    return instant.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def money(amount: Decimal) -> str:
    # "-0.00" is not the canonical form the DDL checks for.
    amount = amount.quantize(CENT)
    return str(abs(amount) if amount == 0 else amount)


def make_customer(rng: random.Random, customer_id: int, now: str) -> dict:
    first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
    country = rng.choice(COUNTRIES)
    return {
        "customer_id": customer_id,
        "name": f"{first} {last}",
        "email": _email(first, last, customer_id),
        "country": country,
        # a nullable column that is sometimes null, so images carry JSON nulls too
        "city": None if rng.random() < 0.1 else rng.choice(CITIES[country]),
        "tier": rng.choices(TIERS, [70, 22, 8])[0],
        "created_at": now,
        "updated_at": now,
    }


def _email(first: str, last: str, customer_id: int) -> str:
    local = "".join(c for c in f"{first}.{last}".lower() if c.isascii() and (c.isalnum() or c == "."))
    return f"{local}{customer_id}@example.com"


def change_customer(rng: random.Random, row: dict, now: str) -> dict:
    """The row after one realistic update; at least one business column really changes."""
    changed = dict(row, updated_at=now)
    what = rng.choices(["tier", "move", "city", "email", "name"], [35, 15, 25, 15, 10])[0]
    if what == "tier":
        changed["tier"] = rng.choice([t for t in TIERS if t != row["tier"]])
    elif what == "move":
        country = rng.choice([c for c in COUNTRIES if c != row["country"]])
        changed.update(country=country, city=rng.choice(CITIES[country]))
    elif what == "city":
        cities = [c for c in CITIES[row["country"]] if c != row["city"]]
        changed["city"] = None if row["city"] is not None and rng.random() < 0.2 else rng.choice(cities)
    elif what == "email":
        changed["email"] = row["email"].replace("@example.com", f"+{rng.randint(1, 99)}@example.com")
    else:
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        changed["name"] = f"{first} {last}" if f"{first} {last}" != row["name"] else f"{first} {last}-{last}"
    return changed


def make_account(rng: random.Random, account_id: int, customer_key_space: int, now: str) -> dict:
    account_type = rng.choices(ACCOUNT_TYPES, [50, 35, 15])[0]
    opening = Decimal(rng.randint(0, 500_000)) * CENT
    return {
        "account_id": account_id,
        "customer_id": rng.randint(1, customer_key_space),
        "account_type": account_type,
        "balance": money(-opening / 10 if account_type == "credit" else opening),
        "currency": rng.choices(CURRENCIES, [60, 30, 10])[0],
        "status": "active",
        "updated_at": now,
    }


def change_account(rng: random.Random, row: dict, now: str) -> dict:
    changed = dict(row, updated_at=now)
    if rng.random() < 0.85:  # money moves far more often than an account changes status
        balance = Decimal(row["balance"])
        amount = Decimal(rng.randint(1, 200_000)) * CENT
        # debit or credit, but only a credit account may go below zero
        if rng.random() < 0.5 and (row["account_type"] == "credit" or balance >= amount):
            amount = -amount
        changed["balance"] = money(balance + amount)
    else:
        changed["status"] = rng.choice([s for s in STATUSES if s != row["status"]])
    return changed


# --- the database -----------------------------------------------------------------------

_STATE_DDL = """
create table if not exists cdc_simulator_state (
    name text primary key,
    value integer not null
) strict
"""


class CdcSimulator:
    """Random committed transactions over the source tables, each returned as its changes.

    Per operation: the table is drawn uniformly; the operation is an insert, update or delete
    by ``op_weights``. Updates go to one of the ``hot_keys`` lowest keys with probability
    ``hot_key_share`` (a few customers and accounts change all the time). Inserts take the next
    new key until ``key_space`` is used up; with probability ``reinsert_share`` they re-insert a
    deleted key instead (keys come back: the mirror must not keep them deleted). With
    probability ``repeat_key_share`` an operation targets a key the same transaction already
    touched. An operation with no possible target (an update on an empty table) becomes an
    insert, or an update when the key space is full.

    The clock advances by 1..``max_gap_ms`` per transaction, or not at all with probability
    ``same_ts_share``: distinct transactions then share a commit timestamp. ``start_ms`` is the
    earliest the clock may read; on a database that already has a clock the later one wins.

    With probability ``key_change_share`` an update of a table of KEY_CHANGE_TABLES changes
    the row's primary key to a key never used or deleted (the change's ``key`` is the new one,
    its ``before`` image has the old).

    With probability ``overlap_share`` a transaction overlaps the next one to commit, which
    started before it: that one holds the lower transaction id, commits after it, and changes
    one of its rows first (it waited for that row's lock), so the two ids of one key's changes
    are in the opposite order of their commits.

    With probability ``transfer_share`` a transaction is a transfer instead: it moves an amount
    between two active accounts of one currency, two updates of ``accounts`` in one transaction
    (``transfer``). Transfers change no currency's sum of balances: a reader that sees one half
    of a transfer sees a sum that never existed (ARCHITECTURE §9, "Transactions").
    """

    def __init__(
        self,
        db_path: str | Path,
        seed: int | None = None,
        key_space: int = 1000,
        hot_key_share: float = 0.2,
        hot_keys: int = 20,
        max_tx_size: int = 4,
        op_weights: tuple[float, float, float] = (0.35, 0.5, 0.15),
        reinsert_share: float = 0.3,
        repeat_key_share: float = 0.1,
        same_ts_share: float = 0.15,
        overlap_share: float = 0.2,
        key_change_share: float = 0.05,
        max_gap_ms: int = 1500,
        start_ms: int = DEFAULT_START_MS,
        transfer_share: float = 0.0,
    ):
        if key_space < 1 or max_tx_size < 1 or max_gap_ms < 1 or not 0 <= hot_keys <= key_space:
            raise ValueError("key_space, max_tx_size, max_gap_ms must be >= 1 and hot_keys within [0, key_space]")
        for name, share in [("hot_key_share", hot_key_share), ("reinsert_share", reinsert_share),
                            ("repeat_key_share", repeat_key_share), ("same_ts_share", same_ts_share),
                            ("overlap_share", overlap_share), ("key_change_share", key_change_share),
                            ("transfer_share", transfer_share)]:
            if not 0.0 <= share <= 1.0:
                raise ValueError(f"{name} must be within [0, 1]")
        self.db_path = Path(db_path)
        self.key_space, self.hot_keys, self.max_tx_size = key_space, hot_keys, max_tx_size
        self.hot_key_share, self.op_weights = hot_key_share, op_weights
        self.reinsert_share, self.repeat_key_share = reinsert_share, repeat_key_share
        self.same_ts_share, self.max_gap_ms = same_ts_share, max_gap_ms
        self.overlap_share, self.key_change_share = overlap_share, key_change_share
        self.transfer_share = transfer_share
        self._previous: list[tuple[str, int]] = []  # the rows the last transaction changed
        self.conn = open_source(self.db_path)
        self.conn.execute(_STATE_DDL)
        self._init_state(start_ms)
        # Seeded by the seed and the position in the transaction log: the same seed on the same
        # database gives the same run, and a continuation does not replay the previous run's draws.
        tx_id = self._state()["next_tx_id"]
        self.rng = random.Random(None if seed is None else f"cdc-{seed}-{tx_id}")

    # -- bookkeeping

    def _init_state(self, start_ms: int) -> None:
        # started_tx_id: the id of a transaction that started before the last one committed and
        # has not committed yet (0: none); it commits next
        initial = {"next_lsn": FIRST_LSN, "next_tx_id": FIRST_TX_ID, "started_tx_id": 0, "clock_ms": start_ms}
        initial |= {f"{table}_high_water": 0 for table in TABLES}
        self.conn.executemany("insert or ignore into cdc_simulator_state (name, value) values (?, ?)",
                              list(initial.items()))
        self.conn.execute("update cdc_simulator_state set value = max(value, ?) where name = 'clock_ms'",
                          (start_ms,))

    def _state(self) -> dict[str, int]:
        return dict(self.conn.execute("select name, value from cdc_simulator_state").fetchall())

    def _save_state(self, state: dict[str, int]) -> None:
        self.conn.executemany("update cdc_simulator_state set value = ? where name = ?",
                              [(value, name) for name, value in state.items()])

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> CdcSimulator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def tables(self) -> dict[str, dict[int, dict]]:
        """The committed state of every source table: {table: {key: row}}."""
        return {table: read_table(self.conn, table) for table in TABLES}

    # -- the change log

    def snapshot(self) -> list[Change]:
        """Every existing row as a read (op R), tables in turn, keys ascending.

        What a CDC tool emits first when it starts on a database that already holds data. The
        snapshot takes its own transaction id, commit instant and LSNs, after every change
        committed so far and before every later one, so it orders correctly against both.
        """
        with self._locked():  # a consistent read that also owns the counters
            rows = [(table, key, row) for table in TABLES for key, row in read_table(self.conn, table).items()]
            if not rows:
                return []
            state = self._state()
            commit_ts_ms = self._tick(state)
            changes = []
            tx_id = state["next_tx_id"]  # the snapshot starts now: after any transaction still open
            state["next_tx_id"] += 1
            for position, (table, key, row) in enumerate(rows):
                changes.append(Change(table, "R", key, None, row, commit_ts_ms, tx_id,
                                      self._next_lsn(state), position))
            self._save_state(state)
        return changes

    def run(self, transactions: int) -> list[Change]:
        """Commit ``transactions`` random transactions; their changes in commit order."""
        if transactions < 0:
            raise ValueError("transactions must be >= 0")
        changes: list[Change] = []
        for _ in range(transactions):
            changes.extend(self._random_transaction())
        return changes

    def _random_transaction(self) -> list[Change]:
        # drawn only when it is not needed (0): a run without transfers draws what it always drew
        if self.transfer_share and self.rng.random() < self.transfer_share:
            changes = self.transfer()
            if changes:
                return changes
        with self._locked():
            state = self._state()
            commit_ts_ms = self._tick(state)
            now = iso_ms(commit_ts_ms)
            started_earlier = bool(state["started_tx_id"])
            tx_id = self._started_tx_id(state)
            touched: list[tuple[str, int]] = []
            changes: list[Change] = []
            for position in range(self.rng.randint(1, self.max_tx_size)):
                if position == 0 and started_earlier and self._previous:
                    # It overlapped the transaction committed just before and waited for a row
                    # lock that one held: it changes a row of it, after it, with the lower id.
                    table, op, key = self._again(self._previous, ("U",))
                else:
                    table, op, key = self._pick(state, touched)
                before = read_row(self.conn, table, key)
                after = None if op == "D" else self._new_image(table, key, before, now)
                new_key = self._changed_key(state, table, op)
                if new_key is not None:  # an update of the primary key: the row moves
                    after = dict(after or {}, **{key_column(table): new_key})
                self._write(table, op, key, after)
                key = key if new_key is None else new_key
                touched.append((table, key))
                changes.append(Change(table, op, key, before, after, commit_ts_ms, tx_id,
                                      self._next_lsn(state), position))
            self._save_state(state)
        self._previous = touched
        return changes

    def transfer(self) -> list[Change]:
        """Commit one transfer: an amount moved from one active account to another of the same
        currency (a credit account may go below zero, no other), two updates in one transaction,
        payer first; its changes, or none when no two such accounts exist (nothing committed)."""
        with self._locked():
            state = self._state()
            active: dict[str, list[dict]] = {}
            for row in read_table(self.conn, "accounts").values():
                if row["status"] == "active":
                    active.setdefault(row["currency"], []).append(row)

            def can_pay(row: dict) -> bool:
                return row["account_type"] == "credit" or Decimal(row["balance"]) > 0
            currencies = sorted(currency for currency, rows in active.items()
                                if len(rows) >= 2 and any(can_pay(row) for row in rows))
            if not currencies:
                return []
            accounts = active[self.rng.choice(currencies)]
            payer = self.rng.choice([row for row in accounts if can_pay(row)])
            payee = self.rng.choice([row for row in accounts if row is not payer])
            amount = Decimal(self.rng.randint(1, 100_000)) * CENT
            if payer["account_type"] != "credit":
                amount = min(amount, Decimal(payer["balance"]))
            commit_ts_ms = self._tick(state)
            now, tx_id = iso_ms(commit_ts_ms), self._started_tx_id(state)
            changes = []
            for position, (row, delta) in enumerate(((payer, -amount), (payee, amount))):
                after = dict(row, balance=money(Decimal(row["balance"]) + delta), updated_at=now)
                self._write("accounts", "U", row["account_id"], after)
                changes.append(Change("accounts", "U", row["account_id"], row, after, commit_ts_ms, tx_id,
                                      self._next_lsn(state), position))
            self._save_state(state)
        self._previous = [("accounts", change.key) for change in changes]
        return changes

    def _changed_key(self, state: dict[str, int], table: str, op: str) -> int | None:
        """The new key of an update that changes the row's primary key (``key_change_share`` of
        the updates of KEY_CHANGE_TABLES; a key never used or deleted), else None."""
        if op != "U" or table not in KEY_CHANGE_TABLES or self.rng.random() >= self.key_change_share:
            return None
        return self._insert_key(state, table, self._keys(table))

    def _started_tx_id(self, state: dict[str, int]) -> int:
        """The id of the transaction that commits now, given when it started: the one an
        earlier-started open transaction holds, or with probability ``overlap_share`` the one
        after it (another transaction started first and commits next with the lower id)."""
        if state["started_tx_id"]:
            tx_id, state["started_tx_id"] = state["started_tx_id"], 0
            return tx_id
        tx_id = state["next_tx_id"]
        if self.rng.random() < self.overlap_share:
            state["started_tx_id"], tx_id = tx_id, tx_id + 1
            state["next_tx_id"] = tx_id + 1
        else:
            state["next_tx_id"] = tx_id + 1
        return tx_id

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """One source transaction: BEGIN IMMEDIATE (it owns the counters too), then COMMIT, or
        ROLLBACK on any error so the database never holds half a transaction."""
        self.conn.execute("begin immediate")
        try:
            yield
        except BaseException:
            self.conn.execute("rollback")
            raise
        self.conn.execute("commit")

    def _tick(self, state: dict[str, int]) -> int:
        if self.rng.random() >= self.same_ts_share:
            state["clock_ms"] += self.rng.randint(1, self.max_gap_ms)
        return state["clock_ms"]

    def _next_lsn(self, state: dict[str, int]) -> int:
        # WAL positions are byte offsets: they grow by the size of each record, not by one.
        lsn = state["next_lsn"]
        state["next_lsn"] = lsn + self.rng.randint(24, 480)
        return lsn

    def _pick(self, state: dict[str, int], touched: list[tuple[str, int]]) -> tuple[str, str, int]:
        """(table, op, key) of the next operation; the op always fits whether the key exists."""
        if touched and self.rng.random() < self.repeat_key_share:
            return self._again(touched)
        table = self.rng.choice(list(TABLES))
        wanted = self.rng.choices(["I", "U", "D"], self.op_weights)[0]
        existing = self._keys(table)
        if wanted == "I" or not existing:
            key = self._insert_key(state, table, existing)
            if key is not None:
                return table, "I", key
            wanted = "U"  # the key space is full: nothing to insert
        if wanted == "U":
            hot = [k for k in existing if k <= self.hot_keys]
            pool = hot if hot and self.rng.random() < self.hot_key_share else existing
            return table, "U", self.rng.choice(pool)
        return table, "D", self.rng.choice(existing)

    def _again(self, touched: list[tuple[str, int]], ops: tuple[str, ...] = ("U", "D")) -> tuple[str, str, int]:
        """(table, op, key) of another change of a row already changed: one of ``ops`` if it
        exists, else its insert."""
        table, key = self.rng.choice(touched)
        op = self.rng.choice(ops) if self._exists(table, key) else "I"
        return table, op, key

    def _insert_key(self, state: dict[str, int], table: str, existing: list[int]) -> int | None:
        high_water = state[f"{table}_high_water"]
        deleted = sorted(set(range(1, high_water + 1)) - set(existing))
        if deleted and (high_water >= self.key_space or self.rng.random() < self.reinsert_share):
            return self.rng.choice(deleted)
        if high_water >= self.key_space:
            return None
        state[f"{table}_high_water"] = high_water + 1
        return high_water + 1

    def _exists(self, table: str, key: int) -> bool:
        return read_row(self.conn, table, key) is not None

    def _keys(self, table: str) -> list[int]:
        column = key_column(table)
        return [row[0] for row in self.conn.execute(f"select {column} from {table} order by {column}")]

    def _new_image(self, table: str, key: int, before: dict | None, now: str) -> dict:
        if table == "customers":
            return make_customer(self.rng, key, now) if before is None else change_customer(self.rng, before, now)
        if before is None:
            return make_account(self.rng, key, self.key_space, now)
        return change_account(self.rng, before, now)

    def _write(self, table: str, op: str, key: int, after: dict | None) -> None:
        column = key_column(table)
        if op == "D":
            self.conn.execute(f"delete from {table} where {column} = ?", (key,))
            return
        assert after is not None
        # Column names come from the simulator's own row dicts, never from outside.
        if op == "I":
            sql = f"insert into {table} ({', '.join(after)}) values ({', '.join('?' for _ in after)})"
            params = tuple(after.values())
        else:
            sql = f"update {table} set {', '.join(f'{name} = ?' for name in after)} where {column} = ?"
            params = (*after.values(), key)
        try:
            self.conn.execute(sql, params)
        except sqlite3.IntegrityError as exc:
            raise RuntimeError(f"simulator produced an invalid {table} row {after}: {exc}") from None
