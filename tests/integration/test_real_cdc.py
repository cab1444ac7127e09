"""Real CDC sources: PostgreSQL and MariaDB through Debezium into Kafka and the pipeline.

The servers, Debezium and the brokers are real and run on this machine (tests/integration/
cdc_sources.py); `make debezium` installs them and `make test-debezium` runs this module.
The pipeline tests drive ingestion and dbt in a lakehouse of their own, as
test_cdc_mirror.py does, with the `customers` stream fed from a PostgreSQL table of its shape.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from expectations.mirror import check_mirror
from expectations.runner import run_quality
from ingestion import job
from lakehouse.commands.cli import _database_sources
from lakehouse.core.errors import LakehouseError
from lakehouse.core.spark import relation_exists
from lakehouse.operations.dbt import run_dbt
from tests.integration.cdc_sources import (
    MariaDbSource,
    Postgres,
    PostgresSource,
    connect_standalone,
    create_topics,
    debezium,
    debezium_server,
    mariadb_connector,
    mariadb_server,
    postgres_cluster,
    postgres_connector,
    topic_size,
    wait_for_messages,
)
from tests.integration.kafka_read import read_topic
from tests.integration.own_lakehouse import cli_env, lakehouse_fixture

pytestmark = [pytest.mark.integration, pytest.mark.debezium]

REPO = Path(__file__).resolve().parents[2]

NO_OVERLAP = ["--vars", json.dumps({"overlap_minutes": 0})]
CUSTOMER_MODELS = "customers_changelog customers_mirror customers customers_history"
SILVER_RENAMES = {"customer_name": "name", "country_code": "country"}
# The `customers` stream's contract (lakehouse/contracts/schemas/customers.schema.json) as a
# PostgreSQL table. Instants are timestamptz: Debezium sends those as ISO-8601 text, which the
# contract declares; a `timestamp` column would arrive as epoch microseconds (issue 24, item 3).
CUSTOMERS_DDL = """
create table customers (
    customer_id integer primary key,
    name text not null,
    email text not null,
    country text not null,
    city text,
    tier text not null,
    created_at timestamptz not null,
    updated_at timestamptz not null
);
"""


@pytest.fixture(scope="module")
def postgres():
    with postgres_cluster() as server:
        yield server


def change_events(bootstrap: str, topic: str) -> dict[str, list[dict | None]]:
    """{message key (JSON text): its events in topic order, None for a tombstone}."""
    events: dict[str, list[dict | None]] = {}
    for message in sorted(read_topic(bootstrap, topic), key=lambda m: (m.partition(), m.offset())):
        value = None if message.value() is None else json.loads(message.value())
        # a truncate has no key (it changes the whole table)
        events.setdefault(message.key().decode() if message.key() is not None else "null", []).append(value)
    return events


# --- (a) PostgreSQL -> Debezium -> Kafka ------------------------------------------------------

def test_postgres_inserts_updates_and_deletes_reach_kafka_as_schemaless_json(postgres, kafka, settings, tmp_path):
    table = "debezium_smoke_items"  # also the topic: the session's broker is shared
    postgres.create_database("smoke")
    postgres.sql(f"create table {table} (item_id integer primary key, label text not null, price numeric(10, 2));"
                 f"insert into {table} values (1, 'before the snapshot', 1.50);", "smoke")
    create_topics(kafka, [table])
    connector = postgres_connector(postgres, "smoke", [table], "smoke")
    with debezium(settings.jars_dir, tmp_path / "debezium", "smoke", connector, kafka) as engine:
        postgres.sql(f"insert into {table} values (2, 'inserted', 2.00);"
                     f"update {table} set label = 'updated' where item_id = 1;"
                     f"delete from {table} where item_id = 2;", "smoke")
        # snapshot read of 1, insert of 2, update of 1, delete of 2 and its tombstone
        wait_for_messages(kafka, table, 5, engine)

    events = change_events(kafka, table)
    assert set(events) == {'{"item_id":1}', '{"item_id":2}'}
    one, two = events['{"item_id":1}'], events['{"item_id":2}']
    assert [e["op"] for e in one] == ["r", "u"]
    assert [e and e["op"] for e in two] == ["c", "d", None]
    assert one[1]["after"]["label"] == "updated" and two[1]["before"]["item_id"] == 2
    for event in [*one, *two[:2]]:
        # schemaless: the envelope itself, no {"schema": ..., "payload": ...} around it
        assert {"before", "after", "source", "op", "ts_ms"} <= event.keys()
        source = event["source"]
        assert source["connector"] == "postgresql" and source["table"] == table
        assert isinstance(source["lsn"], int) and isinstance(source["txId"], int)
        assert isinstance(source["sequence"], str) and len(json.loads(source["sequence"])) == 2
    assert one[0]["source"]["snapshot"] in ("true", "first", "last", "first_in_data_collection",
                                            "last_in_data_collection")
    assert two[0]["source"]["snapshot"] == "false"
    # NUMERIC in Debezium's default `precise` mode: base64 of the unscaled big-endian integer (150)
    assert base64.b64decode(one[0]["after"]["price"]) == (150).to_bytes(2, "big")


# --- (b) a PostgreSQL table through real Debezium into the customers mirror --------------------

@dataclass(frozen=True)
class Step:
    """One statement of a scripted transaction and the Kafka messages Debezium makes of it."""

    sql: str
    messages: int  # an insert or update: 1 per row; a delete: 2 (the delete and its tombstone)


def customer(key: int, name: str, tier: str = "bronze", city: str | None = "Berlin", minute: int = 0) -> str:
    city_sql = "null" if city is None else f"'{city}'"
    return (f"({key}, '{name}', '{name.lower().replace(' ', '.')}@example.com', 'DE', {city_sql}, '{tier}', "
            f"timestamptz '2024-05-01 10:00:00.123456+00' + interval '{minute} minutes', "
            f"timestamptz '2024-05-01 10:00:00.654321+00' + interval '{minute} minutes')")


SNAPSHOT_ROWS = 30
ONE_KEY_THREE_TIMES = [
    Step(f"update customers set {change}, updated_at = updated_at + interval '1 second' where customer_id = 101", 1)
    for change in ("tier = 'silver'", "tier = 'gold'", "city = 'Hamburg'")
]
TRANSACTIONS: list[list[Step]] = [
    # new customers, one multi-row insert
    [Step("insert into customers values " + ", ".join(customer(k, f"New {k}", minute=k) for k in range(101, 121)), 20)],
    # several updates of one key in one transaction, and of snapshot rows
    [*ONE_KEY_THREE_TIMES, Step("update customers set tier = 'gold' where customer_id between 1 and 10", 10)],
    # deletes, of snapshot rows and of new ones
    [Step("delete from customers where customer_id in (11, 12, 105, 106)", 8)],
    # a re-insert of a deleted key, with other values
    [Step("insert into customers values " + customer(105, "Back Again", tier="silver", city="Paris", minute=500), 1)],
    # delete and re-insert of one key in one transaction
    [Step("delete from customers where customer_id = 107", 2),
     Step("insert into customers values " + customer(107, "Reborn", tier="gold", city=None, minute=600), 1)],
    # a key born, changed and deleted within one transaction
    [Step("insert into customers values " + customer(130, "Ephemeral", minute=700), 1),
     Step("update customers set name = 'Still Ephemeral' where customer_id = 130", 1),
     Step("delete from customers where customer_id = 130", 2)],
    # a column set to null, and a key moved (Debezium: delete + tombstone of the old, create of the new)
    [Step("update customers set city = null where customer_id = 13", 1),
     Step("update customers set customer_id = 200 where customer_id = 102", 3)],
    # updates of the same keys again in later transactions
    [Step("update customers set email = 'x' || customer_id || '@example.org' where customer_id in (101, 105, 200)", 3)],
    [Step("update customers set tier = 'bronze', city = 'Lyon' where customer_id = 101", 1)],
]


def run_script(server: Postgres, database: str, transactions: list[list[Step]]) -> int:
    """Commits each transaction; the messages Debezium will make of them."""
    for steps in transactions:
        server.sql("begin;\n" + "".join(f"{step.sql};\n" for step in steps) + "commit;\n", database)
    return sum(step.messages for steps in transactions for step in steps)


def load_customers(server: Postgres, database: str, rows: int) -> None:
    server.sql(CUSTOMERS_DDL, database)
    server.sql("insert into customers values " + ", ".join(customer(k, f"Customer {k}", minute=k)
                                                          for k in range(1, rows + 1)), database)


def ingest_and_apply(own, session, target) -> None:
    job.run(session, own, ["customers"], available_now=True)
    run_dbt(own, ["run", "--select", CUSTOMER_MODELS, *NO_OVERLAP], target_dir=target, capture=True)


def assert_mirror_equals(session, source: PostgresSource) -> None:
    live = session.table(f"silver.{source.table}").toArrow().to_pylist()
    truth, mirrored = source.rows(), source.spelled(live)
    differing = {key: (truth.get(key), mirrored.get(key)) for key in truth.keys() | mirrored.keys()
                 if truth.get(key) != mirrored.get(key)}
    assert not differing, f"{len(differing)} rows differ (source, mirror): {dict(list(differing.items())[:5])}"
    assert check_mirror(session, source).equal


customers_lake = lakehouse_fixture("real-cdc-customers")


def test_customers_mirror_equals_the_postgres_table_through_real_debezium(postgres, customers_lake, tmp_path):
    own, session, target = customers_lake
    bootstrap = own.kafka_bootstrap_servers
    postgres.create_database("shop")
    load_customers(postgres, "shop", SNAPSHOT_ROWS)
    create_topics(bootstrap, ["customers"])
    connector = postgres_connector(postgres, "shop", ["customers"], "shop")
    with debezium(own.jars_dir, tmp_path / "debezium", "shop", connector, bootstrap) as engine:
        expected = SNAPSHOT_ROWS + run_script(postgres, "shop", TRANSACTIONS[:4])
        wait_for_messages(bootstrap, "customers", expected, engine)
        ingest_and_apply(own, session, target)
        assert_mirror_equals(session, PostgresSource(postgres, "shop", "customers", "customer_id", SILVER_RENAMES))

        # the rest while Debezium is down: the slot keeps the changes, the offsets say where to go on
        engine.stop()
        expected += run_script(postgres, "shop", TRANSACTIONS[4:])
        engine.start()
        wait_for_messages(bootstrap, "customers", expected, engine)
    assert topic_size(bootstrap, "customers") == expected  # nothing re-sent after the clean restart
    ingest_and_apply(own, session, target)
    source = PostgresSource(postgres, "shop", "customers", "customer_id", SILVER_RENAMES)
    assert_mirror_equals(session, source)
    # 30 + 20 inserted - 4 deleted + 105 back (107 and 200 replace themselves, 130 came and went)
    assert source.row_count() == 47
    # the deleted keys are tombstones in the mirror, not live rows
    tombstones = {row.customer_id for row in session.sql(
        "select customer_id from silver.customers_mirror where _is_deleted").collect()}
    assert tombstones == {11, 12, 106, 102, 130}


transactions_lake = lakehouse_fixture("real-cdc-transactions")


def test_real_transaction_metadata_lands_and_a_two_row_transaction_is_published_whole(
        postgres, transactions_lake, tmp_path):
    """Issue 58, item 3, against the real thing: PostgreSQL and Debezium with
    provide.transaction.metadata=true (what `cdc add` prints) write each change's `transaction`
    block and the BEGIN and END events to <topic.prefix>.transaction; the prefix `lakehouse`
    makes that the pipeline's `cdc_transactions` stream. Ingestion keeps the block (no dead
    letter: the shape is Debezium's own), END counts what bronze holds, and dbt publishes the
    transaction: the mirror equals the table."""
    own, session, target = transactions_lake
    bootstrap = own.kafka_bootstrap_servers
    postgres.create_database("ledger")
    load_customers(postgres, "ledger", 6)
    create_topics(bootstrap, ["customers"])
    create_topics(bootstrap, ["lakehouse.transaction"], partitions=1)
    connector = postgres_connector(postgres, "ledger", ["customers"], "lakehouse",
                                   **{"provide.transaction.metadata": "true"})
    with debezium(own.jars_dir, tmp_path / "debezium", "lakehouse", connector, bootstrap) as engine:
        wait_for_messages(bootstrap, "customers", 6, engine)  # the snapshot: no transaction
        postgres.sql("begin; update customers set tier = 'gold' where customer_id = 1;"
                     "update customers set tier = 'silver' where customer_id = 4; commit;", "ledger")
        wait_for_messages(bootstrap, "customers", 8, engine)
        wait_for_messages(bootstrap, "lakehouse.transaction", 2, engine)
    # the module's server has max_replication_slots=10, which its other connectors need
    postgres.sql("select pg_drop_replication_slot('lakehouse_slot')", "ledger")
    events = [json.loads(m.value()) for m in read_topic(bootstrap, "lakehouse.transaction")]
    assert [e["status"] for e in events] == ["BEGIN", "END"]
    end = events[1]
    assert end["event_count"] == 2 and [(c["data_collection"], c["event_count"]) for c in end["data_collections"]] \
        == [("public.customers", 2)]
    job.run(session, own, ["customers"], available_now=True)  # and cdc_transactions, which it names
    assert session.table("bronze.dead_letters").count() == 0
    # Debezium's PostgreSQL ids are `<xid>:<the event's own LSN>`: the changes and the END share the xid
    xid = end["id"].split(":")[0]
    blocks = session.sql("select _transaction, _seq.change_pos as lsn from bronze.customers where op = 'U'").collect()
    in_order = sorted(blocks, key=lambda b: b._transaction.total_order)
    assert [(b._transaction.id, b._transaction.total_order) for b in in_order] == [
        (f"{xid}:{b.lsn}", n) for b, n in zip(in_order, (1, 2), strict=True)]
    assert {b._transaction.id for b in blocks} != {end["id"]}
    reads = session.sql("select count(*), count(_transaction) from bronze.customers where op = 'R'").first()
    assert tuple(reads) == (6, 0)  # a snapshot's reads name no transaction
    assert session.table("bronze.cdc_transactions").count() == 2
    run_dbt(own, ["run", "--select", "cdc_transactions " + CUSTOMER_MODELS, *NO_OVERLAP], target_dir=target,
            capture=True)
    assert [tuple(r) for r in session.sql("select id, published from silver.cdc_transactions").collect()] \
        == [(xid, True)]
    assert_mirror_equals(session, PostgresSource(postgres, "ledger", "customers", "customer_id", SILVER_RENAMES))


# --- (c) a snapshot started while a transaction is in flight ---------------------------------

stale_lake = lakehouse_fixture("real-cdc-stale")


def test_snapshot_taken_while_a_transaction_is_in_flight_leaves_no_stale_row(postgres, stale_lake, tmp_path):
    own, session, target = stale_lake
    bootstrap = own.kafka_bootstrap_servers
    postgres.create_database("busy")
    load_customers(postgres, "busy", 5)
    create_topics(bootstrap, ["customers"])
    # As a DBA sets up Debezium without superuser rights (and as Debezium itself does at start-up):
    # publication and slot exist before the snapshot starts, so the slot holds every change that
    # commits after it, including those of transactions the snapshot cannot see.
    postgres.sql("create publication busy_publication for table customers;"
                 "select pg_create_logical_replication_slot('busy_slot', 'pgoutput');", "busy")
    in_flight = postgres.session("busy")
    try:
        in_flight.run("begin; update customers set name = 'Committed Later', tier = 'gold' where customer_id = 3;")
        # load: another commit moves the WAL's flushed end past the in-flight change, so the
        # snapshot point lies after it (without, the two share one LSN and the order is a coin toss)
        postgres.sql("create table other_work (n integer); insert into other_work values (1);", "busy")
        connector = postgres_connector(postgres, "busy", ["customers"], "busy")
        with debezium(own.jars_dir, tmp_path / "debezium", "busy", connector, bootstrap) as engine:
            # the snapshot is over: it read customer 3 as it was before the open transaction
            in_flight.run("commit;")
            wait_for_messages(bootstrap, "customers", 5 + 1, engine)
    finally:
        in_flight.close()

    events = change_events(bootstrap, "customers")['{"customer_id":3}']
    if [e["op"] for e in events] != ["r", "u"] or events[0]["after"]["name"] != "Customer 3":
        pytest.fail(f"not the scenario this test is about: {events}")
    if not events[1]["source"]["lsn"] < events[0]["source"]["lsn"]:
        pytest.fail(f"the committed change does not carry a lower LSN than the snapshot read: {events}")
    ingest_and_apply(own, session, target)
    assert_mirror_equals(session, PostgresSource(postgres, "busy", "customers", "customer_id", SILVER_RENAMES))


# --- (d) MariaDB -> Debezium's MariaDB connector -> Kafka --------------------------------------

@pytest.fixture(scope="module")
def mariadb():
    with mariadb_server() as server:
        yield server


def test_mariadb_changes_reach_kafka_with_their_binlog_positions(mariadb, kafka, settings, tmp_path):
    table = "debezium_smoke_orders"
    mariadb.sql(f"create database shop; create table shop.{table} (order_id integer primary key, "
                "status varchar(20) not null, amount decimal(10, 2), updated_at datetime(6));"
                f"insert into shop.{table} values (1, 'open', 9.99, '2024-05-01 10:00:00.123456');")
    create_topics(kafka, [table])
    connector = mariadb_connector(mariadb, "shop", [table], "maria", tmp_path / "debezium")
    with debezium(settings.jars_dir, tmp_path / "debezium", "maria", connector, kafka) as engine:
        # one transaction with several rows: the binlog `row` tells them apart within one event
        mariadb.sql(f"begin; insert into {table} values (2, 'open', 5.00, now(6)), (3, 'open', 7.50, now(6));"
                    f"update {table} set status = 'paid' where order_id in (1, 2); commit;"
                    f"delete from {table} where order_id = 3;", "shop")
        # 1 snapshot read, 2 inserts, 2 updates, 1 delete and its tombstone
        wait_for_messages(kafka, table, 7, engine)

    events = change_events(kafka, table)
    assert [e and e["op"] for e in events['{"order_id":1}']] == ["r", "u"]
    assert [e and e["op"] for e in events['{"order_id":2}']] == ["c", "u"]
    assert [e and e["op"] for e in events['{"order_id":3}']] == ["c", "d", None]
    streamed = [e for key_events in events.values() for e in key_events if e and e["op"] != "r"]
    for event in streamed:
        source = event["source"]
        assert source["connector"] == "mariadb" and source["db"] == "shop" and source["table"] == table
        # the binlog coordinates that order MySQL/MariaDB changes (issue 24, item 4)
        assert isinstance(source["file"], str) and source["file"].startswith("binlog.")
        assert isinstance(source["pos"], int) and isinstance(source["row"], int)
        assert source["server_id"] == 1
    inserts = sorted((e for e in streamed if e["op"] == "c"), key=lambda e: e["after"]["order_id"])
    # two rows of one insert statement: one binlog event (same file and pos), told apart by row
    assert (inserts[0]["source"]["file"], inserts[0]["source"]["pos"]) == \
        (inserts[1]["source"]["file"], inserts[1]["source"]["pos"])
    assert [e["source"]["row"] for e in inserts] == [0, 1]
    # a transaction's changes share its GTID (MariaDB's domain-server-sequence)
    assert {e["source"]["gtid"] for e in inserts} == {e["source"]["gtid"] for e in streamed if e["op"] == "u"}
    assert all(re.fullmatch(r"\d+-1-\d+", e["source"]["gtid"]) for e in streamed)
    # a snapshot read carries the binlog position of the snapshot, which every later change passes
    snapshot_read = events['{"order_id":1}'][0]["source"]
    assert snapshot_read["gtid"] is None
    assert all((e["source"]["file"], e["source"]["pos"]) > (snapshot_read["file"], snapshot_read["pos"])
               for e in streamed)


# --- (e) a MariaDB table through real Debezium into the customers mirror ------------------------

MARIADB_CUSTOMERS_DDL = """
create table customers (
    customer_id integer primary key,
    name varchar(100) not null,
    email varchar(200) not null,
    country varchar(2) not null,
    city varchar(100),
    tier varchar(20) not null,
    created_at timestamp(6) not null,
    updated_at timestamp(6) not null
);
"""
UTC_SESSION = "set time_zone = '+00:00';\n"  # TIMESTAMP values are written and read in UTC


def maria_customer(key: int, name: str, tier: str = "bronze", city: str | None = "Berlin", minute: int = 0) -> str:
    city_sql = "null" if city is None else f"'{city}'"
    return (f"({key}, '{name}', '{name.lower().replace(' ', '.')}@example.com', 'DE', {city_sql}, '{tier}', "
            f"timestamp '2024-05-01 10:00:00.123456' + interval {minute} minute, "
            f"timestamp '2024-05-01 10:00:00.654321' + interval {minute} minute)")


MARIADB_TRANSACTIONS: list[list[Step]] = [
    [Step("insert into customers values " + ", ".join(maria_customer(k, f"New {k}", minute=k) for k in range(101, 111)),
          10)],
    # one key three times in one transaction: one binlog event each, so (file, position) orders them
    [Step("update customers set tier = 'silver' where customer_id = 101", 1),
     Step("update customers set tier = 'gold' where customer_id = 101", 1),
     Step("update customers set city = 'Hamburg', updated_at = updated_at + interval 1 second "
          "where customer_id = 101", 1),
     Step("update customers set tier = 'gold' where customer_id between 1 and 5", 5)],
    [Step("delete from customers where customer_id in (6, 7, 105)", 6)],
    [Step("delete from customers where customer_id = 106", 2),
     Step("insert into customers values " + maria_customer(106, "Reborn", tier="gold", city=None, minute=600), 1)],
]
# after a binlog rotation: the same keys again, from the next binlog file
MARIADB_AFTER_ROTATION: list[list[Step]] = [
    [Step("update customers set name = 'Rotated', tier = 'bronze' where customer_id in (101, 106, 1)", 3)],
    [Step("insert into customers values " + maria_customer(105, "Back Again", tier="silver", minute=700), 1),
     Step("update customers set customer_id = 200 where customer_id = 102", 3)],
]


def run_maria_script(db, transactions: list[list[Step]]) -> int:
    for steps in transactions:
        db.sql(UTC_SESSION + "begin;\n" + "".join(f"{step.sql};\n" for step in steps) + "commit;\n", "crm")
    return sum(step.messages for steps in transactions for step in steps)


maria_lake = lakehouse_fixture("real-cdc-mariadb")


def test_customers_mirror_equals_the_mariadb_table_through_real_debezium(mariadb, maria_lake, tmp_path):
    """The binlog orders MariaDB's changes: file number, position, row (issue 24, item 2)."""
    own, session, target = maria_lake
    bootstrap = own.kafka_bootstrap_servers
    snapshot_rows = 20
    mariadb.sql("create database crm;")
    mariadb.sql(MARIADB_CUSTOMERS_DDL, "crm")
    mariadb.sql(UTC_SESSION + "insert into customers values " + ", ".join(
        maria_customer(k, f"Customer {k}", minute=k) for k in range(1, snapshot_rows + 1)) + ";", "crm")
    create_topics(bootstrap, ["customers"])
    connector = mariadb_connector(mariadb, "crm", ["customers"], "crm", tmp_path / "debezium")
    with debezium(own.jars_dir, tmp_path / "debezium", "crm", connector, bootstrap) as engine:
        expected = snapshot_rows + run_maria_script(mariadb, MARIADB_TRANSACTIONS)
        wait_for_messages(bootstrap, "customers", expected, engine)
        engine.stop()  # the rest while Debezium is down; it goes on from its binlog offset
        files_before = mariadb.sql("show binary logs;").splitlines()
        mariadb.sql("flush binary logs;")
        assert len(mariadb.sql("show binary logs;").splitlines()) == len(files_before) + 1
        expected += run_maria_script(mariadb, MARIADB_AFTER_ROTATION)
        engine.start()
        wait_for_messages(bootstrap, "customers", expected, engine)

    events = change_events(bootstrap, "customers")
    files = {e["source"]["file"] for key_events in events.values() for e in key_events if e}
    assert len(files) == 2, f"the changes do not span a binlog rotation: {files}"
    # the three updates of key 101 in one transaction are three binlog events: positions apart
    updates = [(e["source"]["file"], e["source"]["pos"], e["source"]["row"])
               for e in events['{"customer_id":101}'] if e["op"] == "u"]
    assert len(updates) == 4 and updates == sorted(set(updates)), updates
    ingest_and_apply(own, session, target)
    source = MariaDbSource(mariadb, "crm", "customers", "customer_id", SILVER_RENAMES)
    assert_mirror_equals(session, source)
    # 20 + 10 inserted - 3 deleted + 105 back (106 and 200 replace themselves)
    assert len(source.rows()) == 28
    live = {row.customer_id: row for row in session.table("silver.customers").collect()}
    # key 101: three updates in one transaction in the first binlog file, a fourth in the next one
    assert (live[101].customer_name, live[101].tier, live[101].city) == ("Rotated", "bronze", "Hamburg")


# --- (f) a TRUNCATE through real Debezium ------------------------------------------------------

truncate_lake = lakehouse_fixture("real-cdc-truncate")


def test_a_truncate_empties_the_mirror_and_is_a_version_in_the_history(postgres, truncate_lake, tmp_path):
    """Debezium sends a TRUNCATE when told to (skipped.operations=none): a change without a key, on
    any partition. Before: the mirror kept every truncated row, or the event was a dead letter."""
    own, session, target = truncate_lake
    bootstrap = own.kafka_bootstrap_servers
    postgres.create_database("trunc")
    load_customers(postgres, "trunc", 10)
    create_topics(bootstrap, ["customers"])
    connector = postgres_connector(postgres, "trunc", ["customers"], "trunc", **{"skipped.operations": "none"})
    source = PostgresSource(postgres, "trunc", "customers", "customer_id", SILVER_RENAMES)
    with debezium(own.jars_dir, tmp_path / "debezium", "trunc", connector, bootstrap) as engine:
        expected = 10 + run_script(postgres, "trunc", [
            [Step("update customers set tier = 'gold' where customer_id in (1, 2)", 2)],
            [Step("delete from customers where customer_id = 3", 2)]])
        wait_for_messages(bootstrap, "customers", expected, engine)
        ingest_and_apply(own, session, target)  # the mirror and history hold the rows to truncate
        assert_mirror_equals(session, source)

        # in one increment: changes before the truncate, the truncate, and changes after it,
        # one of them re-inserting a truncated key
        expected += run_script(postgres, "trunc", [
            [Step("update customers set tier = 'silver' where customer_id = 4", 1)],
            [Step("truncate customers", 1)],
            [Step("insert into customers values " + customer(1, "After Truncate", minute=900), 1),
             Step("insert into customers values " + customer(50, "New After", minute=950), 1)],
        ])
        wait_for_messages(bootstrap, "customers", expected, engine)

    truncates = [e for key_events in change_events(bootstrap, "customers").values()
                 for e in key_events if e and e["op"] == "t"]
    assert len(truncates) == 1, "Debezium sent no truncate event"
    ingest_and_apply(own, session, target)
    assert session.table("bronze.dead_letters").count() == 0
    assert_mirror_equals(session, source)
    assert source.row_count() == 2
    history = session.table("silver.customers_history")
    truncated = {r.customer_id for r in history.where("op = 'T'").collect()}
    # every row that existed just before the truncate (9 after the delete of 3), and only those
    assert truncated == {1, 2, 4, 5, 6, 7, 8, 9, 10}
    current = {r.customer_id: r.customer_name for r in history.where("is_current").collect()}
    assert current == {1: "After Truncate", 50: "New After"}
    # key 4's update before the truncate is a version of its own, closed by the truncate
    four = [(r.op, r.tier, r.valid_to is None) for r in history.where("customer_id = 4").orderBy("_seq").collect()]
    assert four == [("R", "bronze", False), ("U", "silver", False), ("T", "silver", True)], four

    # a rerun over the same input (the overlap window re-reads the truncate) changes nothing
    mirror_snapshots = session.table("silver.customers_mirror.snapshots").count()
    versions = sorted(map(tuple, history.select("customer_id", "_seq", "op", "is_current").collect()),
                      key=repr)
    run_dbt(own, ["run", "--select", CUSTOMER_MODELS], target_dir=target, capture=True)
    assert session.table("silver.customers_mirror.snapshots").count() == mirror_snapshots
    assert sorted(map(tuple, session.table("silver.customers_history")
                      .select("customer_id", "_seq", "op", "is_current").collect()), key=repr) == versions
    assert_mirror_equals(session, source)


# --- (g) Debezium with schemas enabled ------------------------------------------------------------

schemas_lake = lakehouse_fixture("real-cdc-schemas")


def test_debezium_with_schemas_enabled_mirrors_like_without(postgres, schemas_lake, tmp_path, monkeypatch):
    """JsonConverter's schemas.enable=true, key and value: each message {"schema", "payload"}."""
    own, session, target = schemas_lake
    bootstrap = own.kafka_bootstrap_servers
    postgres.create_database("withschemas")
    load_customers(postgres, "withschemas", 5)
    create_topics(bootstrap, ["customers"])
    connector = postgres_connector(postgres, "withschemas", ["customers"], "withschemas",
                                   **{"key.converter.schemas.enable": "true", "value.converter.schemas.enable": "true"})
    with debezium(own.jars_dir, tmp_path / "debezium", "withschemas", connector, bootstrap) as engine:
        expected = 5 + run_script(postgres, "withschemas", [
            [Step("update customers set tier = 'gold', city = null where customer_id = 1", 1)],
            [Step("delete from customers where customer_id = 2", 2)],
            [Step("insert into customers values " + customer(9, "Nine", minute=90), 1)]])
        wait_for_messages(bootstrap, "customers", expected, engine)
    messages = read_topic(bootstrap, "customers")
    values = [json.loads(m.value()) for m in messages if m.value() is not None]
    assert all(set(v) == {"schema", "payload"} for v in values)
    assert all(set(json.loads(m.key())) == {"schema", "payload"} for m in messages)
    ingest_and_apply(own, session, target)
    assert session.table("bronze.dead_letters").count() == 0
    assert_mirror_equals(session, PostgresSource(postgres, "withschemas", "customers", "customer_id", SILVER_RENAMES))

    # the quality suite's mirror check, fed from the database the stream's source_url_variable names
    pipeline = tmp_path / "pipeline.yml"
    pipeline.write_text((REPO / "lakehouse" / "contracts" / "pipeline.yml").read_text().replace(
        "schema_dir: schemas", f"schema_dir: {REPO / 'lakehouse' / 'contracts' / 'schemas'}").replace(
        "    schema: customers.schema.json\n",
        "    schema: customers.schema.json\n    source_url_variable: SHOP_URL\n"))
    monkeypatch.setenv("LAKEHOUSE_PIPELINE_FILE", str(pipeline))
    monkeypatch.setenv("SHOP_URL", f"postgresql://{postgres.superuser}@127.0.0.1:{postgres.port}/withschemas")

    def source_suite():
        report = run_quality(session, own, stream="customers", sources=_database_sources(session), record=False)
        (suite,) = [s for s in report.suites if s.name == "silver.customers.source"]
        return suite

    assert source_suite().success
    postgres.sql("update customers set email = 'changed@behind.its.back' where customer_id = 3", "withschemas")
    failed = source_suite()
    assert not failed.success
    assert failed.results[0].unexpected_sample == ("3: values differ",)


# --- (h) Debezium's types: epoch numbers, decimals as bytes, JSON, UUID -----------------------

TYPED_DDL = """
create table typed (
    id integer primary key,
    amount numeric(12,2),
    ratio numeric,
    born date,
    at_local timestamp,
    at_ms timestamp(3),
    at_zone timestamptz,
    wake time,
    wake_ms time(3),
    flag boolean,
    doc jsonb,
    uid uuid,
    note text
);
"""
# How PostgreSQL's types arrive from Debezium's defaults (decimal.handling.mode=precise,
# time.precision.mode=adaptive), declared for the schemaless stream; the stream with schemas
# enabled has the same columns without `x-debezium-type`: each event's schema says it.
TYPED_COLUMNS = {
    "id": ({"type": "integer"}, None),
    "amount": ({"type": "number", "format": "decimal(12,2)"}, "org.apache.kafka.connect.data.Decimal"),
    "ratio": ({"type": "number", "format": "decimal(30,6)"}, "io.debezium.data.VariableScaleDecimal"),
    "born": ({"type": "string", "format": "date"}, "io.debezium.time.Date"),
    "at_local": ({"type": "string", "format": "date-time"}, "io.debezium.time.MicroTimestamp"),
    "at_ms": ({"type": "string", "format": "date-time"}, "io.debezium.time.Timestamp"),
    "at_zone": ({"type": "string", "format": "date-time"}, "io.debezium.time.ZonedTimestamp"),
    "wake": ({"type": "string", "format": "time"}, "io.debezium.time.MicroTime"),
    "wake_ms": ({"type": "string", "format": "time"}, "io.debezium.time.Time"),
    "flag": ({"type": "boolean"}, None),
    "doc": ({"type": "string"}, None),
    "uid": ({"type": "string"}, None),
    "note": ({"type": "string"}, None),
}
TYPED_ROWS = [
    "(1, 1234.56, 3.14159, '1990-05-17', '2026-11-20 10:15:30.123456', '2026-11-20 10:15:30.123', "
    "'2026-11-20 10:15:30.123456+00', '07:05:09.5', '23:59:59', true, '{\"a\": [1, 2]}', "
    "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'first')",
    "(2, -0.01, -12345678901234567890.123456, '1969-12-31', '1969-12-31 23:59:59.999999', "
    "'1900-01-01 00:00:00', '2000-02-29 12:00:00+05', '00:00:00', '12:30:00.25', false, 'null', "
    "'00000000-0000-0000-0000-000000000000', 'second')",
    "(3, null, null, null, null, null, null, null, null, null, null, null, null)",
]
TYPED_CHANGES = [
    [Step("update typed set amount = 9999999999.99, ratio = 0, born = '2026-02-28', at_local = '2026-11-26 08:00:00', "
          "wake = '12:00:00.000001', doc = '{\"b\": {\"c\": true}}' where id = 1", 1),
     Step("insert into typed values (4, -1234.5, 1e-6, '2000-01-01', '2000-01-01 00:00:00.000001', "
          "'2000-01-01 00:00:00.001', '2000-01-01 00:00:00+00', '23:59:59.999999', '00:00:00.001', true, '[]', "
          "'123e4567-e89b-12d3-a456-426614174000', 'fourth')", 1)],
    [Step("delete from typed where id = 2", 2),
     Step("update typed set amount = 0.5, at_zone = '2030-06-30 23:00:00-07' where id = 3", 1)],
    # 7 digits after the point do not fit the declared decimal(30,6): a dead letter, not rounded
    [Step("insert into typed (id, ratio) values (99, 0.1234567)", 1)],
]


def typed_pipeline(folder) -> dict:
    """A pipeline file of two streams of the `typed` table: `typed` (schemaless, the semantic
    types in the contract) and `typed_schemas` (schemas enabled, none in the contract)."""
    for name, declared in (("typed", True), ("typed_plain", False)):
        properties = {column: {**prop, **({"x-debezium-type": semantic} if declared and semantic else {})}
                      for column, (prop, semantic) in TYPED_COLUMNS.items()}
        (folder / f"{name}.schema.json").write_text(json.dumps({"type": "object", "properties": properties}))
    stream = {"format": "debezium", "event_time": "_source_ts", "identity": ["id"], "source_table": "typed"}
    return {"schema_dir": str(folder), "streams": {
        "typed": {**stream, "schema": "typed.schema.json"},
        "typed_schemas": {**stream, "schema": "typed_plain.schema.json"}}}


def comparable(column: str, value):
    """A value of the table (PostgreSQL's JSON) or of bronze (Arrow) in one spelling."""
    if value is None:
        return None
    if column == "doc":
        return json.loads(value) if isinstance(value, str) else value
    if column in ("at_local", "at_ms", "at_zone"):
        instant = datetime.fromisoformat(value) if isinstance(value, str) else value
        return instant.astimezone(UTC) if instant.tzinfo else instant.replace(tzinfo=UTC)
    if column == "born":
        return value if isinstance(value, str) else value.isoformat()
    if column in ("amount", "ratio"):
        return Decimal(value) if isinstance(value, str) else value
    return value


types_lake = lakehouse_fixture("real-cdc-types")


@pytest.mark.parametrize("stream, schemas", [("typed", False), ("typed_schemas", True)])
def test_debezium_types_land_in_bronze_as_the_source_holds_them(postgres, types_lake, tmp_path, monkeypatch,
                                                               stream, schemas):
    own, session, _ = types_lake
    bootstrap = own.kafka_bootstrap_servers
    pipeline = tmp_path / "pipeline.yml"
    pipeline.write_text(yaml.safe_dump(typed_pipeline(tmp_path)))
    monkeypatch.setenv("LAKEHOUSE_PIPELINE_FILE", str(pipeline))
    database = f"types_{stream}"
    postgres.create_database(database)
    postgres.sql(TYPED_DDL + "insert into typed values " + ", ".join(TYPED_ROWS) + ";", database)
    create_topics(bootstrap, [stream])
    converter = {"key.converter.schemas.enable": "true", "value.converter.schemas.enable": "true"} if schemas else {}
    connector = postgres_connector(postgres, database, ["typed"], database,
                                   **{"transforms.route.replacement": stream, **converter})
    with debezium(own.jars_dir, tmp_path / "debezium", database, connector, bootstrap) as engine:
        expected = len(TYPED_ROWS) + run_script(postgres, database, TYPED_CHANGES)
        wait_for_messages(bootstrap, stream, expected, engine)
    job.run(session, own, [stream], available_now=True)

    dead = session.sql(f"select error_code, error_detail from bronze.dead_letters where topic = '{stream}'").collect()
    # the digit the decimal cannot keep, named (issue 56: the scale the change carries)
    assert [(d.error_code, d.error_detail) for d in dead] == [(
        "SCHEMA_MISMATCH", "a field of the change has a value of the wrong type: ratio (0.1234567: 7 digits after "
                           "the point, the contract's decimal(30,6) keeps 6)")]
    # the last change of each key (a tombstone has no _seq: it sorts last, after its delete), of
    # the good rows: the dead letter is a row of the same table (ARCHITECTURE §8)
    latest = session.sql(f"""select * from (select *, row_number() over (partition by id order by _seq desc) as n
        from bronze.{stream} where _error_code is null) where n = 1""").toArrow().to_pylist()
    mirrored = {row["id"]: {column: comparable(column, row[column]) for column in TYPED_COLUMNS}
                for row in latest if row["op"] != "D" and not row["_is_tombstone"]}
    truth = {row["id"]: {column: comparable(column, value) for column, value in row.items()}
             for row in json.loads(postgres.sql("select json_agg(t) from typed t", database), parse_float=Decimal)}
    del truth[99]  # its change is the dead letter
    assert mirrored == truth


# --- (i) a table added by one command: `lakehouse cdc add` --------------------------------------

ORDERS_DDL = """
create table orders (
    order_id integer,
    line_no smallint,
    amount numeric(10,2) not null,
    placed_at timestamp(3) not null,
    shipped date,
    note text,
    waited interval,
    primary key (order_id, line_no)
);
insert into orders values (1, 1, 10.50, '2026-11-20 10:00:00.125', null, 'one', '1 day'),
    (1, 2, 20.00, '2026-11-20 10:00:01', '2026-11-21', null, null),
    (2, 1, -3.25, '2026-11-20 11:00:00', null, 'two', '2 hours');
"""
ORDER_CHANGES = [
    [Step("update orders set amount = 11.75, note = 'one, changed' where order_id = 1 and line_no = 1", 1),
     Step("insert into orders values (2, 2, 99999999.99, '2026-11-22 09:30:00.5', '2026-11-23', 'big', null)", 1)],
    [Step("delete from orders where order_id = 1 and line_no = 2", 2),
     Step("update orders set shipped = '2026-11-24' where order_id = 2", 2)],
]


def project_copy(folder: Path) -> Path:
    """The dbt project with its models copied (the command writes into them) and its macros linked."""
    folder.mkdir()
    for name in ("dbt_project.yml", "profiles.yml"):
        shutil.copy(REPO / name, folder / name)
    shutil.copytree(REPO / "models", folder / "models")
    for name in ("macros", "seeds"):
        (folder / name).symlink_to(REPO / name)
    return folder


def pipeline_copy(folder: Path) -> Path:
    """The shipped pipeline file with its schemas, copied (the command adds to both)."""
    shutil.copytree(REPO / "lakehouse" / "contracts" / "schemas", folder / "schemas")
    (folder / "pipeline.yml").write_text((REPO / "lakehouse" / "contracts" / "pipeline.yml").read_text())
    return folder / "pipeline.yml"


def printed_text(output: str) -> str:
    """The properties file `lakehouse cdc add` printed, as it printed it: the lines between its
    header (and the blank line after it) and the `Then:` line."""
    after_header = output.split("\nDebezium connector ", 1)[1].split("\n\n", 1)[1]
    return after_header.split("\nThen: ", 1)[0]


def printed_value_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


added_lake = lakehouse_fixture("real-cdc-add")


def test_a_table_added_by_one_command_is_mirrored_with_its_composite_key(postgres, added_lake, tmp_path, monkeypatch):
    own, session, target = added_lake
    bootstrap = own.kafka_bootstrap_servers
    postgres.create_database("sales")
    postgres.sql(ORDERS_DDL, "sales")
    project = project_copy(tmp_path / "project")
    pipeline = pipeline_copy(tmp_path)
    monkeypatch.setenv("LAKEHOUSE_PIPELINE_FILE", str(pipeline))
    url = f"postgresql://{postgres.superuser}:not-printed@127.0.0.1:{postgres.port}/sales"
    env = {**cli_env(own), "LAKEHOUSE_PIPELINE_FILE": str(pipeline)}
    command = [str(Path(sys.executable).with_name("lakehouse")), "cdc", "add", "orders", "--from", url,
               "--stream", "shop_orders", "--project-dir", str(project)]
    refused = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and refused.stderr.strip().splitlines() == [
        "error: column waited: type INTERVAL is not supported yet (docs/connect-a-database.md lists the supported "
        "types): leave it out with --exclude-columns"]
    assert not (tmp_path / "schemas" / "shop_orders.schema.json").exists()
    command += ["--exclude-columns", "waited"]
    added = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert added.returncode == 0, added.stderr
    assert "not-printed" not in added.stdout + added.stderr
    contract = json.loads((tmp_path / "schemas" / "shop_orders.schema.json").read_text())
    # the printed connector sends decimals as text (decimal.handling.mode=string): no semantic type
    assert contract["properties"]["amount"] == {"type": "number", "format": "decimal(10,2)"}
    assert contract["properties"]["placed_at"]["x-debezium-type"] == "io.debezium.time.Timestamp"  # timestamp(3)
    assert topic_size(bootstrap, "shop_orders") == 0  # the topic exists
    # the same command again changes nothing and says why
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode != 0 and "stream 'shop_orders' is already in" in again.stderr

    # Debezium with exactly the properties file the command printed (the runner's offsets and
    # Kafka appended; the trusted superuser needs no password)
    with debezium(own.jars_dir, tmp_path / "debezium", "shop_orders", {}, bootstrap,
                  text=printed_text(added.stdout)) as engine:
        expected = 3 + run_script(postgres, "sales", ORDER_CHANGES)
        wait_for_messages(bootstrap, "shop_orders", expected, engine)
    job.run(session, own, ["shop_orders"], available_now=True)
    assert session.table("bronze.dead_letters").count() == 0
    # build: the models and the data tests `cdc add` wrote for them (models/silver/_shop_orders__models.yml)
    run_dbt(own, ["build", "--project-dir", str(project), "--select", "shop_orders_changelog+", *NO_OVERLAP],
            target_dir=target, capture=True)
    tests = {r["unique_id"].split(".")[2]: r["status"]
             for r in json.loads((target / "run_results.json").read_text())["results"]
             if r["unique_id"].startswith("test.")}
    composite = {"unique_key_columns_shop_orders_mirror_order_id__line_no",
                 "unique_key_columns_shop_orders_order_id__line_no",
                 "unique_key_columns_shop_orders_history_order_id__line_no___seq",
                 "shop_orders_history_one_current_version_per_key"}
    assert composite <= set(tests) and set(tests.values()) == {"pass"}, tests
    # a key of the mirror twice: its composite-key test fails, by name; the table is rolled back after
    # main's head, not the newest snapshot: that may be a dropped audit branch's (a run with nothing new)
    built = session.sql("select snapshot_id from silver.shop_orders_mirror.refs "
                        "where name = 'main'").first()[0]
    session.sql("insert into silver.shop_orders_mirror select * from silver.shop_orders_mirror "
                "where order_id = 1 and line_no = 1")
    try:
        with pytest.raises(LakehouseError,
                           match="Failure in test unique_key_columns_shop_orders_mirror_order_id__line_no"):
            run_dbt(own, ["test", "--project-dir", str(project), "--select", "shop_orders_mirror"],
                    target_dir=target, capture=True)
        # the quality run checks the added stream's composite key too (unique together)
        report = run_quality(session, own, layer="silver", stream="shop_orders", record=False)
        compound = "expect_compound_columns_to_be_unique"
        assert report.result("silver.shop_orders_mirror", compound, "order_id, line_no").unexpected_count == 2
        assert report.result("silver.shop_orders_history", compound, "order_id, line_no, _seq").success
    finally:
        session.sql(f"call lake.system.rollback_to_snapshot('silver.shop_orders_mirror', {built})")

    live = session.table("silver.shop_orders").toArrow().to_pylist()
    mirrored = {(r["order_id"], r["line_no"]): (r["amount"], r["placed_at"].replace(tzinfo=None), r["shipped"],
                                                r["note"]) for r in live}
    truth = {(r["order_id"], r["line_no"]): (Decimal(str(r["amount"])), datetime.fromisoformat(r["placed_at"]),
                                             None if r["shipped"] is None else date.fromisoformat(r["shipped"]),
                                             r["note"])
             for r in json.loads(postgres.sql("select json_agg(t) from orders t", "sales"), parse_float=Decimal)}
    assert "waited" not in live[0]
    assert len(truth) == 3 and mirrored == truth
    history = session.sql("select order_id, line_no, count(*) as versions from silver.shop_orders_history "
                          "group by order_id, line_no").collect()
    assert {(r.order_id, r.line_no): r.versions for r in history} == {(1, 1): 2, (1, 2): 2, (2, 1): 2, (2, 2): 2}

    # `lakehouse cdc verify`: equal now, read two keys at a time (keyset pages over a composite key)
    verify = [str(Path(sys.executable).with_name("lakehouse")), "cdc", "verify", "shop_orders", "--source", url,
              "--table", "public.orders", "--chunk-rows", "2"]
    verified = subprocess.run(verify, env=env, capture_output=True, text=True, timeout=300)
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.splitlines()[0] == "shop_orders: 3 source rows, 3 live rows; equal"
    assert "not-printed" not in verified.stdout + verified.stderr
    # changes the mirror has not seen (Debezium is stopped): found, named, exit 1; the URL this
    # time from the environment variable the stream names
    postgres.sql("update orders set note = 'changed behind its back' where order_id = 2 and line_no = 1;"
                 "delete from orders where order_id = 1 and line_no = 1;"
                 "insert into orders values (3, 1, 1.00, '2026-11-25 00:00:00', null, null, null);", "sales")
    pipeline.write_text(pipeline.read_text() + "    source_url_variable: SALES_DB_URL\n")
    verified = subprocess.run(verify[:4] + verify[6:], env={**env, "SALES_DB_URL": url}, capture_output=True,
                              text=True, timeout=300)
    assert verified.returncode == 1, verified.stderr
    assert verified.stdout.splitlines()[0] == (
        "shop_orders: 3 source rows, 3 live rows; 1 missing, 1 extra, 1 different (first keys: "
        "(1, 1): not in the source; (2, 1): values differ; (3, 1): missing from the mirror)")


# --- (j) pgbench: a snapshot under load, Debezium and the ingestion restarted ------------------

PGBENCH_TABLES = ["pgbench_accounts", "pgbench_branches", "pgbench_tellers"]  # pgbench_history has no key
PGBENCH_SECONDS = 40


def wait_for(condition, what: str, timeout_s: float = 300, every_s: float = 1.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(every_s)
    pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what}")


pgbench_lake = lakehouse_fixture("real-cdc-pgbench")


def test_pgbench_mirrors_equal_their_tables_after_a_snapshot_under_load_and_restarts(
        postgres, pgbench_lake, tmp_path, monkeypatch):
    """The trial of issue 24 as a test: pgbench's tables, added by `lakehouse cdc add`, mirrored
    while pgbench runs; Debezium's snapshot starts under that load, Debezium is restarted during
    it, the ingestion is killed (-9) after its first commits and run again. After catch-up,
    every mirror equals its table (`cdc verify`) and every Kafka offset is in bronze once."""
    from expectations.database_source import database_source, verify
    from ingestion.invariant import check_every_offset_once, offset_ranges
    from lakehouse.contracts.streams import get_stream
    from lakehouse.core.kafka_admin import end_offsets

    own, session, target = pgbench_lake
    bootstrap = own.kafka_bootstrap_servers
    postgres.create_database("bench")
    pgbench = [str(postgres.bin_dir / "pgbench"), "-h", "127.0.0.1", "-p", str(postgres.port), "-U", postgres.superuser]
    subprocess.run([*pgbench, "-i", "-s", "1", "-q", "bench"], check=True, capture_output=True, timeout=300)
    project, pipeline = project_copy(tmp_path / "project"), pipeline_copy(tmp_path)
    monkeypatch.setenv("LAKEHOUSE_PIPELINE_FILE", str(pipeline))
    env = {**cli_env(own), "LAKEHOUSE_PIPELINE_FILE": str(pipeline)}
    lakehouse = str(Path(sys.executable).with_name("lakehouse"))
    url = f"postgresql://{postgres.superuser}@127.0.0.1:{postgres.port}/bench"
    for table in PGBENCH_TABLES:
        added = subprocess.run([lakehouse, "cdc", "add", table, "--from", url, "--project-dir", str(project)],
                               env=env, capture_output=True, text=True, timeout=120)
        assert added.returncode == 0, added.stderr

    load = subprocess.Popen([*pgbench, "-n", "-c", "2", "-T", str(PGBENCH_SECONDS), "bench"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ingest = None
    try:
        time.sleep(3)
        connector = postgres_connector(postgres, "bench", PGBENCH_TABLES, "bench", **{"skipped.operations": "none"})
        with debezium(own.jars_dir, tmp_path / "debezium", "bench", connector, bootstrap) as engine:
            assert load.poll() is None, "pgbench ended before the snapshot"
            ingest = subprocess.Popen([lakehouse, "ingest", *PGBENCH_TABLES, "--trigger", "2 seconds"], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            wait_for(lambda: relation_exists(session, "bronze.pgbench_accounts")
                     and session.table("bronze.pgbench_accounts").count() > 0, "the first bronze commit")
            os.killpg(ingest.pid, signal.SIGKILL)  # kill -9, mid-stream
            ingest.wait(timeout=60)
            engine.stop()
            engine.start()
            output, _ = load.communicate(timeout=PGBENCH_SECONDS + 120)
            done = int(re.search(r"number of transactions actually processed: (\d+)", output)[1])
            assert done > 0, output
            # the last change: when it is in Kafka, every change committed before it is too
            postgres.sql("update pgbench_branches set filler = 'done' where bid = 1", "bench")
            wait_for(lambda: any(m.value() and b'"done' in m.value()
                                 for m in read_topic(bootstrap, "pgbench_branches")),
                     "the last change in Kafka", every_s=3)
    finally:
        for process in (load, ingest):
            if process is not None and process.poll() is None:
                process.kill()
    job.run(session, own, PGBENCH_TABLES, available_now=True)  # the killed ingestion, run again

    run_dbt(own, ["run", "--project-dir", str(project), "--select",
                  *[f"{table}_changelog+" for table in PGBENCH_TABLES], *NO_OVERLAP], target_dir=target, capture=True)
    assert session.table("bronze.dead_letters").count() == 0
    for table in PGBENCH_TABLES:
        spec = get_stream(table)
        offsets = check_every_offset_once(session, spec, offset_ranges({}, end_offsets(own, spec.topic)))
        assert offsets.holds, offsets.describe()
        source, not_compared = database_source(session, spec, url)
        check = verify(session, source, chunk_rows=20_000)
        assert check.equal and not not_compared, f"{table}: {check.describe()}"
    assert verify(session, database_source(session, get_stream("pgbench_accounts"), url)[0]).source_rows == 100_000


# --- (k) servers not in UTC, several tables in one connector, the printed properties unedited ----

def added_by_cdc_add(own, tmp_path: Path, monkeypatch, url: str, *arguments: str) -> tuple[dict, Path, str]:
    """`lakehouse cdc add ARGUMENTS --from URL` into a copy of the project and pipeline file: (the
    environment of a `lakehouse` command on them, the project, the properties text it printed)."""
    project, pipeline = project_copy(tmp_path / "project"), pipeline_copy(tmp_path)
    monkeypatch.setenv("LAKEHOUSE_PIPELINE_FILE", str(pipeline))
    env = {**cli_env(own), "LAKEHOUSE_PIPELINE_FILE": str(pipeline)}
    lakehouse = str(Path(sys.executable).with_name("lakehouse"))
    added = subprocess.run([lakehouse, "cdc", "add", *arguments, "--from", url, "--project-dir", str(project)],
                           env=env, capture_output=True, text=True, timeout=120)
    assert added.returncode == 0, added.stderr
    text = printed_text(added.stdout)
    assert not [line for line in printed_value_lines(text) if "#" in line]  # no comment after a value
    return env, project, text


def ingest_and_build(lake, project: Path, streams: list[str]) -> None:
    """The streams through ingestion (no dead letter) and their dbt models."""
    own, session, target = lake
    job.run(session, own, streams, available_now=True)
    assert session.table("bronze.dead_letters").count() == 0
    run_dbt(own, ["run", "--project-dir", str(project), "--select", *[f"{stream}_changelog+" for stream in streams],
                  *NO_OVERLAP], target_dir=target, capture=True)


def cdc_verify(env: dict, url: str, stream: str) -> subprocess.CompletedProcess:
    lakehouse = str(Path(sys.executable).with_name("lakehouse"))
    return subprocess.run([lakehouse, "cdc", "verify", stream, "--source", url], env=env, capture_output=True,
                          text=True, timeout=300)


def assert_verified_equal(env: dict, url: str, streams: dict[str, int]) -> None:
    """`lakehouse cdc verify` finds each stream's live table equal to its table, of that many rows."""
    for stream, rows in streams.items():
        verified = cdc_verify(env, url, stream)
        assert (verified.returncode, verified.stdout.splitlines()) == (
            0, [f"{stream}: {rows:,} source rows, {rows:,} live rows; equal"]), verified.stderr


def assert_verify_names_the_column_not_mirrored(env: dict, url: str, stream: str, rows: int, column: str) -> None:
    """A column the table gained since `cdc add`: the rows compare equal, the column is named, exit 1."""
    verified = cdc_verify(env, url, stream)
    assert (verified.returncode, verified.stdout.splitlines()) == (1, [
        f"{stream}: {rows:,} source rows, {rows:,} live rows; equal",
        f"not mirrored (in the source table, not in the stream's contract): {column}"]), verified.stderr


MARIADB_ZONE = "+02:00"
MARIADB_SHOP_DDL = """
create table orders (
    order_id integer primary key,
    placed_at timestamp(6) not null,
    due datetime(3),
    amount decimal(8, 2) not null,
    note varchar(50)
);
create table clients (
    client_id integer primary key,
    name varchar(50) not null,
    seen_at timestamp not null
);
"""


def maria_shop_rows(first: int, count: int) -> str:
    """Rows of both tables, written in the server's zone (+02:00): its TIMESTAMPs are stored in UTC."""
    orders = ", ".join(f"({k}, timestamp '2026-03-29 00:30:00.250000' + interval {k * 7} minute, "
                       f"'2026-04-01 12:00:00.5', {k}.25, 'order {k}')" for k in range(first, first + count))
    clients = ", ".join(f"({k}, 'Client {k}', timestamp '2026-10-25 01:00:00' + interval {k * 13} minute)"
                        for k in range(first, first + count))
    return f"insert into orders values {orders}; insert into clients values {clients};"


# One lakehouse for the tests of servers not in UTC: their streams have names of their own.
zoned_lake = lakehouse_fixture("real-cdc-zoned")


def test_a_mariadb_server_not_in_utc_two_tables_one_connector_from_the_printed_properties(
        zoned_lake, tmp_path, monkeypatch):
    """Issue 42, items 2 and 3 on MariaDB: a server at +02:00; `cdc add` of two tables prints one
    connector (MariaDB's class, comments on lines of their own), which the runner reads as a
    properties file unedited but for the password appended; `cdc verify` finds both mirrors
    equal (TIMESTAMP read in UTC) and names a column added to the table since."""
    own, session, target = zoned_lake
    bootstrap = own.kafka_bootstrap_servers
    with mariadb_server(time_zone=MARIADB_ZONE) as db:
        assert db.sql("select @@global.time_zone").strip() == MARIADB_ZONE
        db.sql("create database shop;")
        db.sql(MARIADB_SHOP_DDL + maria_shop_rows(1, 30), "shop")
        url = f"mariadb://{db.user}:{db.password}@127.0.0.1:{db.port}/shop"
        env, project, text = added_by_cdc_add(own, tmp_path, monkeypatch, url, "orders", "clients")
        assert "database.password=<the password>" in text.splitlines()  # never the URL's
        assert "connector.class=io.debezium.connector.mariadb.MariaDbConnector" in text.splitlines()
        assert "table.include.list=shop[.]orders,shop[.]clients" in text.splitlines()

        # the password, appended as a user fills it in: the printed lines stay as they are
        connector = {"database.password": db.password}
        with debezium(own.jars_dir, tmp_path / "debezium", "shop", connector, bootstrap, text=text) as engine:
            db.sql(maria_shop_rows(31, 5) + "update orders set note = 'changed', placed_at = placed_at + "
                   "interval 1 hour where order_id <= 3; delete from clients where client_id = 2;", "shop")
            wait_for_messages(bootstrap, "orders", 35 + 3, engine)
            wait_for_messages(bootstrap, "clients", 35 + 2, engine)  # the delete and its tombstone
        ingest_and_build(zoned_lake, project, ["orders", "clients"])
        # the instant the mirror holds: 2026-03-29 00:30:00.25 at +02:00, plus 4 * 7 minutes
        placed = session.sql("select placed_at from silver.orders where order_id = 4").toArrow()["placed_at"][0].as_py()
        assert placed == datetime(2026, 3, 28, 22, 58, 0, 250000, tzinfo=UTC)
        assert_verified_equal(env, url, {"orders": 35, "clients": 34})

        # a column the table gains: not in the contract, so not mirrored; verify says so
        db.sql("alter table clients add column vip boolean not null default false;", "shop")
        assert_verify_names_the_column_not_mirrored(env, url, "clients", 34, "vip")


PG_ZONE = "Asia/Kolkata"  # +05:30 all year
PG_SHOP_DDL = """
create table visits (
    visit_id bigint primary key,
    at timestamptz not null,
    local_at timestamp(6) not null,
    day date not null
);
create table wallets (
    wallet_id integer primary key,
    balance numeric(12, 2) not null,
    updated_at timestamptz(3) not null
);
"""


def pg_shop_rows(first: int, count: int) -> str:
    visits = ", ".join(f"({k}, timestamptz '2026-11-20 00:15:00.5+05:30' + interval '{k * 11} minutes', "
                       f"timestamp '2026-11-20 00:15:00.5' + interval '{k} minutes', date '2026-11-20')"
                       for k in range(first, first + count))
    wallets = ", ".join(f"({k}, {k}.75, timestamptz '2026-11-19 23:59:59.999+00' + interval '{k} hours')"
                        for k in range(first, first + count))
    return f"insert into visits values {visits}; insert into wallets values {wallets};"


def test_a_postgres_server_not_in_utc_two_tables_one_debezium_server_configuration(
        zoned_lake, tmp_path, monkeypatch):
    """Issue 42, items 2 and 3 on PostgreSQL: a cluster whose `timezone` is Asia/Kolkata; `cdc add
    --runtime debezium-server` of two tables prints one Debezium Server configuration, which real
    Debezium Server (jvm/debezium-server) runs as its application.properties, as printed plus
    the password line, stopped and started again: it goes on from its offsets in data/, no
    second snapshot. `cdc verify` finds both mirrors equal and names a column added since."""
    own, session, target = zoned_lake
    bootstrap = own.kafka_bootstrap_servers
    with postgres_cluster(timezone=PG_ZONE) as server:
        server.create_database("shop")
        server.sql(PG_SHOP_DDL + pg_shop_rows(1, 30), "shop")
        url = f"postgresql://{server.superuser}@127.0.0.1:{server.port}/shop"
        env, project, text = added_by_cdc_add(own, tmp_path, monkeypatch, url, "visits", "public.wallets",
                                              "--connector", "pgshop", "--runtime", "debezium-server")
        assert not [line for line in printed_value_lines(text) if not line.startswith("debezium.")]
        assert f"debezium.sink.kafka.producer.bootstrap.servers={bootstrap}" in text.splitlines()
        # the password appended as a user fills it in (the cluster trusts loopback: any will do)
        application = text + "debezium.source.database.password=trusted\n"
        folder = tmp_path / "debezium-server"
        with debezium_server(own.jars_dir, folder, application) as engine:
            assert engine.config.read_text() == application
            server.sql(pg_shop_rows(31, 5) + "update visits set at = at + interval '1 hour' where visit_id <= 3;"
                       "delete from wallets where wallet_id = 2;", "shop")
            wait_for_messages(bootstrap, "visits", 35 + 3, engine)
            wait_for_messages(bootstrap, "wallets", 35 + 2, engine)
        assert (folder / "data" / "pgshop-offsets.dat").stat().st_size > 0  # the printed relative path

        server.sql(pg_shop_rows(36, 5), "shop")
        with debezium_server(own.jars_dir, folder, application) as engine:
            wait_for_messages(bootstrap, "visits", 38 + 5, engine)
            wait_for_messages(bootstrap, "wallets", 37 + 5, engine)
        # the rows added while it was stopped, once each: no second snapshot
        assert (topic_size(bootstrap, "visits"), topic_size(bootstrap, "wallets")) == (43, 42)

        ingest_and_build(zoned_lake, project, ["visits", "wallets"])
        at = session.sql("select at from silver.visits where visit_id = 4").toArrow()["at"][0].as_py()
        assert at == datetime(2026, 11, 19, 19, 29, 0, 500000, tzinfo=UTC)  # 00:15:00.5+05:30 + 4 * 11 minutes
        assert_verified_equal(env, url, {"visits": 40, "wallets": 39})

        server.sql("alter table wallets add column note text", "shop")
        assert_verify_names_the_column_not_mirrored(env, url, "wallets", 39, "note")


# --- (l) the privileges docs/connect-a-database.md lists, and no more -----------------------------

def test_postgres_connector_runs_with_the_documented_privileges(postgres, kafka, settings, tmp_path):
    """A role with LOGIN and REPLICATION that owns the tables and may create in the database
    (the publication `publication.autocreate.mode=filtered` makes): snapshot and stream."""
    table = "debezium_grants_items"  # also the topic: the session's broker is shared
    postgres.create_database("grants")
    postgres.sql("create role cdc_user with login replication;"
                 f"create table {table} (item_id integer primary key, label text not null);"
                 f"insert into {table} values (1, 'before the snapshot');"
                 f"alter table {table} owner to cdc_user; grant create on database grants to cdc_user;", "grants")
    create_topics(kafka, [table])
    connector = postgres_connector(postgres, "grants", [table], "grants", **{"database.user": "cdc_user"})
    with debezium(settings.jars_dir, tmp_path / "debezium", "grants", connector, kafka) as engine:
        postgres.sql(f"insert into {table} values (2, 'streamed')", "grants")
        wait_for_messages(kafka, table, 2, engine)
    assert [e["op"] for events in change_events(kafka, table).values() for e in events] == ["r", "c"]


def test_mariadb_connector_runs_with_the_documented_privileges(mariadb, kafka, settings, tmp_path):
    """SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE and BINLOG MONITOR: snapshot and stream."""
    table = "debezium_grants_orders"
    mariadb.sql(f"create database grants; create table grants.{table} (order_id integer primary key, "
                f"status varchar(20) not null); insert into grants.{table} values (1, 'open');"
                "create user 'cdc_user'@'%' identified by 'cdc-password';"
                "grant select, reload, show databases, replication slave, binlog monitor on *.* to 'cdc_user'@'%';")
    create_topics(kafka, [table])
    connector = mariadb_connector(mariadb, "grants", [table], "grants", tmp_path / "debezium",
                                  **{"database.user": "cdc_user", "database.password": "cdc-password"})
    with debezium(settings.jars_dir, tmp_path / "debezium", "grants", connector, kafka) as engine:
        mariadb.sql(f"insert into {table} values (2, 'streamed')", "grants")
        wait_for_messages(kafka, table, 2, engine)
    assert [e["op"] for events in change_events(kafka, table).values() for e in events] == ["r", "c"]


# --- (m) the printed connector file run by a real Kafka Connect worker ----------------------------

connect_lake = lakehouse_fixture("real-cdc-connect")


def test_the_printed_connector_file_runs_in_a_real_kafka_connect_worker(connect_lake, tmp_path, monkeypatch):
    """Issue 42, item 3: `cdc add` of two MariaDB tables prints a Kafka Connect connector file;
    written to disk as printed plus the password line a user adds, a real standalone worker
    (ConnectStandalone, Debezium from its plugin.path) runs it: snapshot, changes, a restart that
    goes on from its offsets and the printed schema history file, no second snapshot. The
    worker's own converters are JSON with schemas (as Kafka ships them): the messages are
    schemaless because the printed lines say so. Both mirrors equal by `cdc verify`. Issue 56:
    `lakehouse cdc snapshot` through the printed signal table has MariaDB's connector read a table
    again, its reads ordered with the binlog."""
    from lakehouse.commands.cdc import signal_table_ddl

    own, session, target = connect_lake
    bootstrap = own.kafka_bootstrap_servers
    with mariadb_server(time_zone=MARIADB_ZONE) as db:
        db.sql("create database shop;")
        db.sql(MARIADB_SHOP_DDL + maria_shop_rows(1, 30), "shop")
        url = f"mariadb://{db.user}:{db.password}@127.0.0.1:{db.port}/shop"
        env, project, text = added_by_cdc_add(own, tmp_path, monkeypatch, url, "orders", "clients")
        assert "signal.data.collection=shop.shop_signal" in text.splitlines()
        db.sql(signal_table_ddl("shop.shop_signal"), "shop")  # the DDL `cdc add` printed
        connector_file = text + f"database.password={db.password}\n"
        folder = tmp_path / "connect"

        with connect_standalone(own.jars_dir, folder, connector_file, bootstrap) as worker:
            assert worker.connector_file.read_text() == connector_file
            db.sql(maria_shop_rows(31, 5) + "update orders set note = 'changed', placed_at = placed_at + "
                   "interval 1 hour where order_id <= 3; delete from clients where client_id = 2;", "shop")
            wait_for_messages(bootstrap, "orders", 35 + 3, worker)
            wait_for_messages(bootstrap, "clients", 35 + 2, worker)  # the delete and its tombstone
        assert (folder / "shop-schema-history.dat").stat().st_size > 0  # the printed relative path

        db.sql(maria_shop_rows(36, 5) + "update clients set name = 'renamed' where client_id = 7;", "shop")
        with connect_standalone(own.jars_dir, folder, connector_file, bootstrap) as worker:
            wait_for_messages(bootstrap, "orders", 38 + 5, worker)
            wait_for_messages(bootstrap, "clients", 37 + 6, worker)
            # the changes made while it was stopped, once each: no second snapshot
            assert (topic_size(bootstrap, "orders"), topic_size(bootstrap, "clients")) == (43, 43)
            snapshot = subprocess.run([str(Path(sys.executable).with_name("lakehouse")), "cdc", "snapshot", "clients",
                                       "--source", url], env=env, capture_output=True, text=True, timeout=120)
            assert snapshot.returncode == 0, snapshot.stderr
            wait_for_messages(bootstrap, "clients", 43 + 39, worker)  # a read of each of its 39 rows
        reads = [event for events in change_events(bootstrap, "clients").values() for event in events
                 if event and event["source"]["snapshot"] == "incremental"]
        assert sorted(e["after"]["client_id"] for e in reads) == [k for k in range(1, 41) if k != 2]
        # keys and values as the printed converters make them, not the worker's {"schema", "payload"}
        first = change_events(bootstrap, "orders")['{"order_id":4}'][0]
        assert {"before", "after", "source", "op"} <= set(first) and "payload" not in first

        ingest_and_build(connect_lake, project, ["orders", "clients"])
        assert_verified_equal(env, url, {"orders": 40, "clients": 39})
