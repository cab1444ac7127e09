"""Whole source transactions: a dbt run cut inside a transaction publishes none of it (issue 58, item 3).

The simulator commits transactions to its SQLite database (the truth) and writes them as Debezium
with provide.transaction.metadata=true does: each change names its transaction, and the
transaction topic (one partition) holds a BEGIN and an END per transaction, END counting its
changes. A real broker carries them, the ingestion job lands them in bronze (`customers`, and
the transaction topic's `cdc_transactions`, which the job adds to a stream that names it), and
dbt, in this process, builds the transactions model and the customers models on a real Spark
session. Messages are held back on purpose, as a lagging partition or a lagging transaction
topic would, and after every run the live table equals the source database as of the last
transaction every earlier one of which has arrived whole (macros/cdc_transactions.sql).
"""

from __future__ import annotations

import json

import pytest

from expectations.mirror import check_mirror
from ingestion import job
from lakehouse.operations.status import existing_catalog, transactions_status
from producers.cdc import debezium
from producers.cdc.simulator import CdcSimulator, Change
from producers.cdc.source import as_source_rows, read_tables
from producers.cdc.stream import messages, simulator_source, source_path
from producers.delivery import ensure_topic, produce_to_topic, send_all
from producers.faults import FaultRates
from producers.message import Outgoing
from tests.integration.dbt_in_process import run_dbt
from tests.integration.own_lakehouse import lakehouse_fixture

pytestmark = pytest.mark.integration

KEY_SPACE = 60
MODELS = "cdc_transactions customers_changelog customers_mirror customers customers_history"
NO_OVERLAP = ["--vars", json.dumps({"overlap_minutes": 0})]

lake = lakehouse_fixture("cdc-transactions")


def land(own, session, target, outgoing: list[Outgoing]) -> None:
    """Send ``outgoing`` (each to its topic), ingest (available-now) and run the models."""
    if outgoing:
        send_all(own, debezium.TOPIC, outgoing, progress=False)
    job.run(session, own, ["customers"], available_now=True)
    run_dbt(own, ["run", "--select", MODELS, *NO_OVERLAP], target_dir=target)


def live(session) -> dict[int, dict]:
    return as_source_rows("customers", [row.asDict() for row in session.table("silver.customers").collect()])


def multi_key_transaction(simulator: CdcSimulator) -> list[Change]:
    """The customers changes of the next transaction that changes two customers or more."""
    while True:
        changes = [c for c in simulator.run(1) if c.table == "customers"]
        if len({c.key for c in changes}) >= 2:
            return changes


def one_customers_transaction(simulator: CdcSimulator) -> list[Change]:
    while not (changes := [c for c in simulator.run(1) if c.table == "customers"]):
        pass
    return changes


def data(changes: list[Change]) -> list[Outgoing]:
    return [Outgoing(key, value) for key, value in debezium.encode_changes(changes, table="customers")]


def events(changes: list[Change]) -> list[Outgoing]:
    return [Outgoing(key, value, topic=debezium.TRANSACTION_TOPIC)
            for key, value in debezium.encode_transactions(changes, table="customers")]


def published(session) -> dict[str, bool]:
    return {r.id: r.published for r in session.table("silver.cdc_transactions").collect()}


@pytest.fixture(scope="module")
def started(lake):
    """The source loaded, snapshotted and streamed with its transaction metadata, all applied."""
    own, session, target = lake
    ensure_topic(own, debezium.TRANSACTION_TOPIC, partitions=1)
    first = list(messages(own, "customers", 400, FaultRates(duplicate=0.1, out_of_order=0.2), 5, None, True,
                          KEY_SPACE, transactions=True))
    assert any(m.topic == debezium.TRANSACTION_TOPIC for m in first)
    produce_to_topic(own, debezium.TOPIC, first, FaultRates(), partitions=3, progress=False)
    land(own, session, target, [])
    assert check_mirror(session, simulator_source(own, "customers")).equal
    assert published(session) and all(published(session).values())
    return own, session, target


def test_a_run_cut_between_the_changes_of_a_transaction_publishes_none_of_it_nor_what_follows(started):
    own, session, target = started
    before = read_tables(source_path(own, "customers"))["customers"]
    with CdcSimulator(source_path(own, "customers"), seed=21, key_space=KEY_SPACE) as simulator:
        cut = multi_key_transaction(simulator)
        later = one_customers_transaction(simulator)
    cut_messages = data(cut)  # one transaction, encoded whole, as the connector writes it
    first_half, second_half = cut_messages[:1], cut_messages[1:]
    # The transaction topic is whole (the connector wrote both ENDs); the partition holding the
    # rest of the cut transaction lags: its first change and the later transaction arrive
    land(own, session, target, [*events(cut), *events(later), *first_half, *data(later)])
    assert live(session) == before  # neither half, nor the later transaction: the END order is the source's
    ids = {str(cut[0].tx_id), str(later[0].tx_id)}  # keyed by the xid (macros/cdc_transactions.sql)
    assert {i: p for i, p in published(session).items() if i in ids} == dict.fromkeys(ids, False)
    history = session.sql("select count(*) from silver.customers_history where _seq.change_pos in ({})".format(
        ", ".join(str(c.lsn) for c in [*cut, *later]))).first()[0]
    assert history == 0  # no version of them in the history either
    # `lakehouse status` names what waits (read through pyiceberg, as the command does)
    waiting = transactions_status(own, existing_catalog(own))
    assert [(w["table"], w["waiting"], w["oldest_waiting_id"]) for w in waiting] == [
        ("silver.cdc_transactions", 2, str(cut[0].tx_id))]

    land(own, session, target, second_half)  # the rest arrives: both transactions are published, whole
    assert check_mirror(session, simulator_source(own, "customers")).equal
    assert all(published(session).values())


def test_a_transaction_whose_end_has_not_arrived_waits_for_it(started):
    own, session, target = started
    before = read_tables(source_path(own, "customers"))["customers"]
    with CdcSimulator(source_path(own, "customers"), seed=22, key_space=KEY_SPACE) as simulator:
        waiting = multi_key_transaction(simulator)
    begin, end = events(waiting)
    land(own, session, target, [begin, *data(waiting)])  # every change, the END not yet
    assert live(session) == before
    land(own, session, target, [end])
    assert check_mirror(session, simulator_source(own, "customers")).equal
    # a re-run with nothing new changes nothing, and keeps every transaction published
    land(own, session, target, [])
    assert check_mirror(session, simulator_source(own, "customers")).equal
    assert all(published(session).values())
    # the history read the held changes again too: its current versions are the live rows
    current = session.sql("select customer_id, _seq from silver.customers_history where is_current").collect()
    mirror = session.sql("select customer_id, _seq from silver.customers_mirror "
                         "where not _is_deleted and customer_id is not null").collect()
    assert sorted(map(tuple, current)) == sorted(map(tuple, mirror))


no_metadata_lake = lakehouse_fixture("cdc-no-transaction-topic")


def test_without_a_transaction_topic_the_models_apply_changes_that_name_no_transaction(no_metadata_lake, caplog):
    """A connector without the metadata (or before its transaction topic exists): the job says it
    leaves the transaction stream out and goes on, the transactions model builds with no bronze
    table to read (none waits), and the changes, which name no transaction, are applied."""
    own, session, target = no_metadata_lake
    sent = list(messages(own, "customers", 300, FaultRates(), 9, None, True, KEY_SPACE))
    assert not any(m.topic for m in sent)
    produce_to_topic(own, debezium.TOPIC, sent, FaultRates(), partitions=3, progress=False)
    with caplog.at_level("WARNING", logger="lakehouse.ingest"):
        land(own, session, target, [])
    assert "the transaction topic lakehouse.transaction does not exist yet" in caplog.text
    assert not session.catalog.tableExists("bronze.cdc_transactions")
    assert session.table("silver.cdc_transactions").count() == 0
    assert check_mirror(session, simulator_source(own, "customers")).equal
