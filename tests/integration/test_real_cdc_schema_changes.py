"""A column added to a real source table mid-stream reaches silver (issue 42, items 1 and 7).

PostgreSQL and MariaDB through real Debezium (tests/integration/cdc_sources.py), the `customers`
stream in a lakehouse of its own, as test_real_cdc.py runs it. The table is mirrored, then
`ALTER TABLE customers ADD COLUMN ...` while Debezium streams, then rows are changed, inserted
and deleted: ingestion adds the columns to bronze (the stream's contract is additive by
default) and `dbt run`, with no --full-refresh, carries them to the mirror and the history.
The live mirror then equals the source table column for column, the new columns included:
values null before the ALTER, the source's after it.
"""

from __future__ import annotations

import pytest

from expectations.database_source import database_source, verify
from lakehouse.contracts.streams import get_stream
from tests.integration.cdc_sources import (
    MariaDbSource,
    PostgresSource,
    create_topics,
    debezium,
    mariadb_connector,
    mariadb_server,
    postgres_cluster,
    postgres_connector,
    wait_for_messages,
)
from tests.integration.own_lakehouse import lakehouse_fixture
from tests.integration.test_real_cdc import (
    CUSTOMERS_DDL,
    MARIADB_CUSTOMERS_DDL,
    SILVER_RENAMES,
    UTC_SESSION,
    assert_mirror_equals,
    customer,
    ingest_and_apply,
    maria_customer,
)

pytestmark = [pytest.mark.integration, pytest.mark.debezium]

ROWS = 12
# (statement, Kafka messages Debezium makes of it), committed one transaction each
BEFORE_THE_ALTER = [("update customers set tier = 'silver' where customer_id in (1, 2, 3)", 3),
                    ("delete from customers where customer_id = 4", 2)]
# run after ALTER TABLE customers ADD COLUMN loyalty_points (an integer), ADD COLUMN segment (text)
AFTER_THE_ALTER = [("update customers set loyalty_points = 10 * customer_id, segment = 'retail' "
                    "where customer_id in (1, 5, 6)", 3),
                   ("update customers set tier = 'gold' where customer_id = 7", 1),  # the new columns null
                   ("update customers set loyalty_points = 0, segment = null where customer_id = 8", 1),
                   ("delete from customers where customer_id = 2", 2)]


def new_customer(row: str, loyalty_points: int, segment: str) -> str:
    """A row of customer()/maria_customer() with the two added columns' values."""
    return f"{row[:-1]}, {loyalty_points}, '{segment}')"


def history_of(session, key: int) -> list[tuple]:
    return [tuple(r) for r in session.sql(
        "select loyalty_points, segment, is_current from silver.customers_history "
        f"where customer_id = {key} order by _seq").collect()]


def assert_the_columns_reached_silver(session, source, url: str) -> None:
    assert_mirror_equals(session, source)  # column for column: the source's columns are the new ones too
    # `lakehouse cdc verify`'s comparison: the added columns are compared too, not left out
    checked, not_compared = database_source(session, get_stream("customers"), url)
    assert {"loyalty_points", "segment"} <= set(checked.columns) and verify(session, checked).equal
    assert set(not_compared) == {"name", "country"}  # renamed in silver
    assert {"loyalty_points", "segment"} <= set(source.column_names())
    mirror = session.table("silver.customers_mirror")
    assert {"loyalty_points", "segment"} <= set(mirror.columns)
    live = {r.customer_id: r for r in session.table("silver.customers").collect()}
    assert (live[1].loyalty_points, live[1].segment) == (10, "retail")
    assert (live[50].loyalty_points, live[50].segment) == (500, "online")
    assert (live[7].loyalty_points, live[7].tier) == (None, "gold")
    # key 1: the snapshot read and the update before the ALTER without the columns, then with them
    assert history_of(session, 1) == [(None, None, False), (None, None, False), (10, "retail", True)]


def alter_mid_stream(lake, tmp_path, name: str, connector: dict, run_sql, alter: str, source, url: str,
                     newcomer: str) -> None:
    """The table (loaded, ROWS rows) mirrored through a started connector, then altered, changed and
    mirrored again; ``run_sql`` commits one statement, ``newcomer`` is a row of the table before
    the ALTER (customer() or maria_customer())."""
    own, session, target = lake
    bootstrap = own.kafka_bootstrap_servers
    create_topics(bootstrap, ["customers"])
    with debezium(own.jars_dir, tmp_path / "debezium", name, connector, bootstrap) as engine:
        expected = ROWS
        for statement, messages in BEFORE_THE_ALTER:
            run_sql(statement)
            expected += messages
        wait_for_messages(bootstrap, "customers", expected, engine)
        ingest_and_apply(own, session, target)
        assert_mirror_equals(session, source)

        run_sql(alter)
        for statement, messages in [*AFTER_THE_ALTER,
                                    (f"insert into customers values {new_customer(newcomer, 500, 'online')}", 1)]:
            run_sql(statement)
            expected += messages
        wait_for_messages(bootstrap, "customers", expected, engine)
    ingest_and_apply(own, session, target)
    assert_the_columns_reached_silver(session, source, url)


postgres_lake = lakehouse_fixture("real-cdc-add-column")


def test_a_column_added_to_a_postgres_table_mid_stream_reaches_the_mirror_and_the_history(postgres_lake, tmp_path):
    with postgres_cluster() as postgres:
        postgres.create_database("shop")
        postgres.sql(CUSTOMERS_DDL, "shop")
        postgres.sql("insert into customers values "
                     + ", ".join(customer(k, f"Customer {k}", minute=k) for k in range(1, ROWS + 1)), "shop")
        alter_mid_stream(postgres_lake, tmp_path, "shop", postgres_connector(postgres, "shop", ["customers"], "shop"),
                         lambda statement: postgres.sql(statement, "shop"),
                         "alter table customers add column loyalty_points integer, add column segment text",
                         PostgresSource(postgres, "shop", "customers", "customer_id", SILVER_RENAMES),
                         f"postgresql://{postgres.superuser}@127.0.0.1:{postgres.port}/shop",
                         customer(50, "Newcomer", minute=50))


maria_lake = lakehouse_fixture("real-cdc-maria-add-column")


def test_a_column_added_to_a_mariadb_table_mid_stream_reaches_the_mirror_and_the_history(maria_lake, tmp_path):
    with mariadb_server() as mariadb:
        mariadb.sql("create database crm;")
        mariadb.sql(MARIADB_CUSTOMERS_DDL, "crm")
        mariadb.sql(UTC_SESSION + "insert into customers values " + ", ".join(
            maria_customer(k, f"Customer {k}", minute=k) for k in range(1, ROWS + 1)) + ";", "crm")
        alter_mid_stream(maria_lake, tmp_path, "crm",
                         mariadb_connector(mariadb, "crm", ["customers"], "crm", tmp_path / "debezium"),
                         lambda statement: mariadb.sql(f"{UTC_SESSION}{statement};", "crm"),
                         "alter table customers add column loyalty_points int, add column segment varchar(20)",
                         MariaDbSource(mariadb, "crm", "customers", "customer_id", SILVER_RENAMES),
                         f"mariadb://{mariadb.user}:{mariadb.password}@127.0.0.1:{mariadb.port}/crm",
                         maria_customer(50, "Newcomer", minute=50))
