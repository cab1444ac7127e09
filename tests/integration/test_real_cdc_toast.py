"""Unchanged TOASTed PostgreSQL columns through real Debezium (issue 42, item 8).

With REPLICA IDENTITY DEFAULT, pgoutput leaves out of an UPDATE a column stored out of line
(TOAST) whose value did not change, and Debezium sends its placeholder instead
(`__debezium_unavailable_value`). Ingestion keeps no placeholder as a value (bronze: null, the
column named in `_unavailable`); the mirror and the history carry the value the key had.
The servers, Debezium and the pipeline plumbing are test_real_cdc.py's and cdc_sources.py's.
"""

from __future__ import annotations

import pytest

from tests.integration.cdc_sources import PostgresSource, create_topics, debezium, postgres_connector, wait_for_messages
from tests.integration.own_lakehouse import lakehouse_fixture
from tests.integration.test_real_cdc import (  # noqa: F401  (postgres: the module's PostgreSQL cluster fixture)
    SILVER_RENAMES,
    Step,
    assert_mirror_equals,
    change_events,
    customer,
    ingest_and_apply,
    load_customers,
    postgres,
    run_script,
)

pytestmark = [pytest.mark.integration, pytest.mark.debezium]

PLACEHOLDER = "__debezium_unavailable_value"  # Debezium's default unavailable.value.placeholder
# ~10 KB: stored out of line (SET STORAGE EXTERNAL: no compression, so past ~2 KB it is TOASTed)
LONG = "repeat(' toasted', 1250)"


toast_lake = lakehouse_fixture("real-cdc-toast")


def test_unchanged_toasted_column_keeps_its_value_in_mirror_and_history(postgres, toast_lake, tmp_path):  # noqa: F811
    own, session, target = toast_lake
    bootstrap = own.kafka_bootstrap_servers
    postgres.create_database("toasty")
    load_customers(postgres, "toasty", 5)
    # REPLICA IDENTITY DEFAULT (the primary key) is PostgreSQL's default: said here for the reader
    postgres.sql("alter table customers replica identity default;"
                 "alter table customers alter column name set storage external;"
                 f"update customers set name = name || {LONG};", "toasty")
    create_topics(bootstrap, ["customers"])
    connector = postgres_connector(postgres, "toasty", ["customers"], "toasty")
    source = PostgresSource(postgres, "toasty", "customers", "customer_id", SILVER_RENAMES)
    with debezium(own.jars_dir, tmp_path / "debezium", "toasty", connector, bootstrap) as engine:
        # one increment: the snapshot reads carry the long names, the updates after them do not
        expected = 5 + run_script(postgres, "toasty", [
            [Step("update customers set tier = 'gold' where customer_id in (1, 2)", 2)],
            [Step("update customers set tier = 'silver' where customer_id = 1", 1)],
            # a new long name, then an update that leaves it: the increment's earlier change has it
            [Step(f"update customers set name = 'Renamed 4' || {LONG} where customer_id = 4", 1)],
            [Step("update customers set city = 'Oslo' where customer_id = 4", 1)],
            # a key inserted with a long name and updated, in one increment
            [Step("insert into customers values " + customer(6, "Six", minute=60), 1),
             Step(f"update customers set name = 'Six' || {LONG} where customer_id = 6", 1)],
            [Step("update customers set tier = 'gold' where customer_id = 6", 1)],
        ])
        wait_for_messages(bootstrap, "customers", expected, engine)
        ingest_and_apply(own, session, target)
        assert_mirror_equals(session, source)

        # the next increment: only the mirror (and the history) know the long names
        expected += run_script(postgres, "toasty", [
            [Step("update customers set tier = 'bronze' where customer_id in (1, 3, 6)", 3)],
            [Step("update customers set city = 'Rome' where customer_id = 2", 1)],
            [Step("update customers set city = 'Bergen' where customer_id = 4", 1)],
        ])
        wait_for_messages(bootstrap, "customers", expected, engine)

    events = change_events(bootstrap, "customers")
    placeholders = {key for key, key_events in events.items()
                    for e in key_events if e and e["op"] == "u" and e["after"]["name"] == PLACEHOLDER}
    if placeholders != {f'{{"customer_id":{k}}}' for k in (1, 2, 3, 4, 6)}:
        pytest.fail(f"not the scenario this test is about: updates with the placeholder for {placeholders}")
    ingest_and_apply(own, session, target)
    assert session.table("bronze.dead_letters").count() == 0
    assert_mirror_equals(session, source)

    # bronze keeps no placeholder as a value: null, and the column named
    bronze = session.table("bronze.customers").where("not _is_tombstone")
    assert bronze.where(f"name = '{PLACEHOLDER}'").count() == 0
    unavailable = bronze.where("_unavailable is not null").collect()
    assert len(unavailable) == 10
    assert all(row._unavailable == ["name"] and row.name is None for row in unavailable)
    # every version in the history has the name the source had then
    names = {key: name for key, name in session.sql(
        "select customer_id, min(customer_name) from silver.customers_history "
        "where customer_id <> 4 and op <> 'I' group by customer_id having count(distinct customer_name) = 1"
    ).collect()}
    truth = {key: row["name"] for key, row in source.rows().items()}
    assert names == {key: truth[key] for key in (1, 2, 3, 5, 6)}
    four = [row.customer_name for row in session.sql(
        "select customer_name from silver.customers_history where customer_id = 4 order by _seq").collect()]
    assert [name[:9] for name in four] == ["Customer ", "Renamed 4", "Renamed 4", "Renamed 4"]
    assert four[-1] == truth[4]
