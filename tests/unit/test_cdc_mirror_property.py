"""Property: however a change set is delivered, the CDC mirror converges to the same state.

Hypothesis draws a small change set (a few keys, each through inserts, updates, deletes and
re-inserts, in source commit order), then a delivery of it: every change sent one to three
times, in any order, cut into one to four increments. Each increment is applied the way the
mirror model applies it: the exact SQL of macros/ (rendered with plain Jinja from the same
files dbt reads) runs on Spark over the changelog delivered so far, with the increment filter
of `ingested_since_last_run`, and its rows are upserted with the MERGE's own guard (a row
replaces the stored one only when its sequence is higher). After the last increment the mirror
must equal the reference semantics (producers.cdc.oracle): per key the change with the highest
sequence, deletes as tombstones; and a rerun with nothing new must write nothing.

Both sequence shapes are drawn: Debezium's {lsn} and DMS's {commit_us, transaction_id,
record_id}, whose ties on the commit time are what the struct order has to break.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import jinja2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from producers.cdc.oracle import NormalizedChange, apply, latest_by_key

MACROS = Path(__file__).resolve().parents[2] / "macros"
OVERLAP_MINUTES = 10
T0 = datetime(2026, 11, 1, 10, 0, 0)


class _Exceptions:
    @staticmethod
    def raise_compiler_error(message: str):
        raise AssertionError(message)


def _macro(file: str, name: str, **context):
    env = jinja2.Environment(extensions=["jinja2.ext.do"], undefined=jinja2.StrictUndefined)
    template = env.from_string((MACROS / file).read_text(),
                               globals={"execute": True, "exceptions": _Exceptions, **context})
    return getattr(template.module, name)


MIRROR_CHANGES = _macro("cdc_mirror_changes.sql", "cdc_mirror_changes")
HIGH_WATER_MARK, AS_TEXT, TIMESTAMP_LITERAL, INGESTED_AFTER = (
    _macro("ingested_since_last_run.sql", name, var=lambda name: {"overlap_minutes": OVERLAP_MINUTES}[name])
    for name in ("high_water_mark_sql", "as_text_sql", "timestamp_literal", "ingested_after"))


# --- drawing change sets and deliveries ---------------------------------------------------------

def seq_of(position: int, shape: str) -> tuple[int, ...]:
    """The source sequence of the n-th committed change; strictly increasing in n."""
    if shape == "lsn":
        return (1000 + 7 * position,)
    # DMS: three changes per commit instant, two per transaction: ties on commit_us and on
    # transaction_id, so the order rests on all three fields
    return (position // 3, position // 2, position % 2)


@st.composite
def change_sets(draw) -> list[NormalizedChange]:
    shape = draw(st.sampled_from(["lsn", "dms"]))
    keys = draw(st.integers(1, 4))
    # per key a life: created, then updated / deleted / re-created
    lives = {key: ["I"] for key in range(1, keys + 1)}
    for key in lives:
        for _ in range(draw(st.integers(0, 5))):
            lives[key].append("I" if lives[key][-1] == "D" else draw(st.sampled_from(["U", "U", "D"])))
    # interleave the keys' lives into one commit order
    pending = {key: list(ops) for key, ops in lives.items()}
    changes = []
    while pending:
        key = draw(st.sampled_from(sorted(pending)))
        op = pending[key].pop(0)
        if not pending[key]:
            del pending[key]
        position = len(changes)
        changes.append(NormalizedChange("t", op, key, {"key": key, "name": f"k{key} v{position}"},
                                        seq_of(position, shape)))
    return changes


@st.composite
def deliveries(draw, changes: list[NormalizedChange]) -> list[list[NormalizedChange]]:
    """Every change one to three times, in any order, cut into one to four increments."""
    copies = [c for c in changes for _ in range(draw(st.integers(1, 3)))]
    order = draw(st.permutations(copies))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(order) - 1)), max_size=3))) if len(order) > 1 else []
    bounds = [0, *cuts, len(order)]
    return [order[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if a < b]


# --- applying increments with the project's SQL ------------------------------------------------

def _seq_sql(seq: tuple[int, ...]) -> str:
    names = ("lsn",) if len(seq) == 1 else ("commit_us", "transaction_id", "record_id")
    return "named_struct(" + ", ".join(f"'{n}', {v}L" for n, v in zip(names, seq, strict=True)) + ")"


def _ts(value: datetime) -> str:
    return f"timestamp'{value.isoformat(sep=' ')}'"


def _changelog_sql(delivered: list[tuple[NormalizedChange, datetime]]) -> str:
    rows = ", ".join(f"({c.key}, '{c.image['name']}', '{c.op}', {_seq_sql(c.seq)}, {_ts(at)})"
                     for c, at in delivered)
    return f"select * from values {rows} as changelog(customer_id, customer_name, op, _seq, _ingested_at)"


def _mirror_sql(state: dict[int, dict]) -> str:
    if not state:
        return "select 1 as customer_id, '' as customer_name, '' as op, named_struct('lsn', 0L) as _seq, " \
               "timestamp'1970-01-01 00:00:00' as _ingested_at, false as _is_deleted where false"
    rows = ", ".join(f"({k}, '{r['customer_name']}', '{r['op']}', {_seq_sql(r['_seq'])}, "
                     f"{_ts(r['_ingested_at'])}, {str(r['_is_deleted']).lower()})" for k, r in state.items())
    return f"select * from values {rows} as mirror(customer_id, customer_name, op, _seq, _ingested_at, _is_deleted)"


def increment_start(spark, state: dict[int, dict]) -> str:
    """The bound as macros/ingested_since_last_run.sql's increment_start computes it in a dbt
    run (its scan form: the stored mirror here is in-line data, not a table with metadata)."""
    stored_mirror = f"({_mirror_sql(state)}) as stored_mirror"
    return TIMESTAMP_LITERAL(spark.sql(AS_TEXT(HIGH_WATER_MARK(stored_mirror))).first()[0])


def increment_sql(delivered, state: dict[int, dict], incremental: bool, start: str | None) -> str:
    """The mirror model's select, as customers_mirror.sql composes it, over in-line data."""
    where = f"where {INGESTED_AFTER(start)}" if incremental else ""
    return f"""
        with
        bronze as ({_changelog_sql(delivered)}),
        stored_mirror as ({_mirror_sql(state)}),
        changelog as (select * from bronze {where})
        {MIRROR_CHANGES('changelog', 'stored_mirror', incremental, unique_key='customer_id', delete_when="op = 'D'")}
    """


def run_increment(spark, delivered, state, incremental: bool) -> list[dict]:
    start = increment_start(spark, state) if incremental else None
    rows = [r.asDict(recursive=False) for r in spark.sql(increment_sql(delivered, state, incremental, start)).collect()]
    for row in rows:
        row["_seq"] = tuple(row["_seq"])
    return rows


def merge(state: dict[int, dict], rows: list[dict]) -> None:
    """The MERGE of macros/cdc_mirror.sql: insert when absent, update only when newer."""
    for row in rows:
        stored = state.get(row["customer_id"])
        if stored is None or row["_seq"] > stored["_seq"]:
            state[row["customer_id"]] = row


@pytest.fixture(scope="module")
def small_spark(spark):
    """A session of the test Spark tuned for a few dozen rows per query: one shuffle partition,
    no adaptive re-planning, and interpreted rather than generated code (compiling code for
    every new query cost more than running it; about 3x faster per example)."""
    session = spark.newSession()
    for key, value in {"spark.sql.shuffle.partitions": "1", "spark.sql.adaptive.enabled": "false",
                       "spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}.items():
        session.conf.set(key, value)
    return session


@settings(max_examples=300, deadline=None, derandomize=False,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
@given(data=st.data())
def test_any_delivery_converges_to_the_oracle(small_spark, data):
    changes = data.draw(change_sets(), label="changes")
    increments = data.draw(deliveries(changes), label="increments")

    state: dict[int, dict] = {}
    delivered: list[tuple[NormalizedChange, datetime]] = []
    for number, increment in enumerate(increments):
        # one hour apart, far more than the overlap: the filter really narrows each read
        delivered += [(change, T0 + timedelta(hours=number)) for change in increment]
        merge(state, run_increment(small_spark, delivered, state, incremental=number > 0))

    latest = latest_by_key(changes)
    assert {k: (r["op"], r["_seq"], r["customer_name"], r["_is_deleted"]) for k, r in state.items()} == {
        k: (c.op, c.seq, c.image["name"], c.op == "D") for k, c in latest.items()}
    live = {k: r["customer_name"] for k, r in state.items() if not r["_is_deleted"]}
    assert live == {k: image["name"] for k, image in apply(changes).items()}
    # idempotent: a rerun over the same changelog (nothing new) writes no row
    assert run_increment(small_spark, delivered, state, incremental=True) == []
