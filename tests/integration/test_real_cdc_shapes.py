"""Tables of the shapes real schemas have, added by `lakehouse cdc add` and run by real Debezium
with the properties it prints (issue 56, item 7): keys of every type the row takes, a table
partitioned by date, columns named like bronze's own.

- A key of dates, instants, times, decimals, a UUID, text and a boolean: every change was a
  dead letter ("unreadable message key"), the key read without its semantic type. Schemaless
  and with schemas enabled, through the embedded engine.
- A partitioned table, its key a date and a numeric, through Debezium Server: the printed
  publication published the partitions' changes under their own names, which the connector
  filtered out, so every change after the snapshot was lost in silence. Rows inserted,
  updated, deleted and moved between partitions.
- Columns named `key`, `value` and `timestamp`, all refused in one line, then renamed in the
  stream by `cdc add --rename-columns`; `cdc verify` counting the differing values per column.

Each ends with `lakehouse cdc verify` equal and the models' data tests passing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from ingestion import job
from lakehouse.operations.dbt import run_dbt
from tests.integration.cdc_sources import (
    debezium,
    debezium_server,
    postgres_cluster,
    topic_size,
    wait_for_messages,
)
from tests.integration.own_lakehouse import cli_env, lakehouse_fixture
from tests.integration.test_real_cdc import (
    NO_OVERLAP,
    Step,
    pipeline_copy,
    printed_text,
    project_copy,
    run_script,
)

pytestmark = [pytest.mark.integration, pytest.mark.debezium]

LAKEHOUSE = str(Path(sys.executable).with_name("lakehouse"))


@pytest.fixture(scope="module")
def postgres():
    with postgres_cluster() as server:
        yield server


class Added:
    """A copy of the project and the pipeline file that `lakehouse cdc add` adds streams to."""

    def __init__(self, own, tmp_path: Path, monkeypatch, url: str):
        self.project, self.pipeline = project_copy(tmp_path / "project"), pipeline_copy(tmp_path)
        monkeypatch.setenv("LAKEHOUSE_PIPELINE_FILE", str(self.pipeline))
        self.env = {**cli_env(own), "LAKEHOUSE_PIPELINE_FILE": str(self.pipeline)}
        self.url = url

    def cdc(self, *arguments: str) -> subprocess.CompletedProcess:
        return subprocess.run([LAKEHOUSE, "cdc", *arguments], env=self.env, capture_output=True, text=True,
                              timeout=300)

    def add(self, *arguments: str) -> str:
        """`lakehouse cdc add ARGUMENTS --from URL`: the properties it printed."""
        added = self.cdc("add", *arguments, "--from", self.url, "--project-dir", str(self.project))
        assert added.returncode == 0, added.stderr
        return printed_text(added.stdout)

    def build(self, lake, streams: list[str]) -> dict[str, str]:
        """Ingest the streams (no dead letter) and `dbt build` their models: the data tests' statuses."""
        own, session, target = lake
        job.run(session, own, streams, available_now=True)
        dead = session.sql("select stream, error_code, error_detail, count(*) as n from bronze.dead_letters "
                           "group by all").collect()
        assert not dead, [tuple(d) for d in dead]
        run_dbt(own, ["build", "--project-dir", str(self.project), "--select",
                      *[f"{stream}_changelog+" for stream in streams], *NO_OVERLAP], target_dir=target, capture=True)
        return {r["unique_id"]: r["status"] for r in json.loads((target / "run_results.json").read_text())["results"]
                if r["unique_id"].startswith("test.")}

    def assert_verified_equal(self, streams: dict[str, int]) -> None:
        for stream, rows in streams.items():
            verified = self.cdc("verify", stream, "--source", self.url, "--chunk-rows", "3")
            assert (verified.returncode, verified.stdout.splitlines()[:1]) == (
                0, [f"{stream}: {rows:,} source rows, {rows:,} live rows; equal"]), verified.stdout + verified.stderr


# --- a key of every type --------------------------------------------------------------------------

KEYED_DDL = """
create table keyed (
    day date,
    at timestamp,
    at_ms timestamp(3),
    at_zone timestamptz,
    wake time,
    amount numeric(10,2),
    ratio numeric,
    uid uuid,
    code text,
    n bigint,
    flag boolean,
    label text,
    primary key (day, at, at_ms, at_zone, wake, amount, ratio, uid, code, n, flag)
);
"""


def keyed_row(k: int, day: str = "2026-11-20") -> str:
    return (f"(date '{day}' - {k * 400}, timestamp '1970-01-01 00:00:00.5' - interval '{k * 7} hours', "
            f"timestamp '2026-11-20 10:15:30.125' + interval '{k} minutes', "
            f"timestamptz '2026-11-20 10:15:30.123456+05:30' - interval '{k} days', "
            f"time '07:05:09.5' + interval '{k} seconds', {k}.25 - 3, {k}.000123, "
            f"'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a{k:02d}', 'code {k}', {k} * 10000000000, {str(k % 2 == 0).lower()}, "
            f"'label {k}')")


KEYED_ROWS = 6
KEYED_CHANGES = [
    [Step(f"insert into keyed values {keyed_row(7)}, {keyed_row(8)}", 2)],
    [Step("update keyed set label = 'changed' where n = 20000000000", 1)],
    [Step("delete from keyed where n = 30000000000", 2)],  # the delete and its tombstone
    # a key changed: the old key's delete and tombstone, the new key's create
    [Step("update keyed set day = day + 1, amount = amount + 100 where n = 40000000000", 3)],
]


keys_lake = lakehouse_fixture("real-cdc-keys")


def test_a_key_of_every_type_is_mirrored_with_and_without_schemas(postgres, keys_lake, tmp_path, monkeypatch):
    """Eleven key columns, one of each type the row image takes; two streams of the table, the
    printed properties as they are and with schemas enabled. Before, every change of such a
    table was a dead letter (INVALID_CDC_ENVELOPE: unreadable message key)."""
    own, session, _ = keys_lake
    bootstrap = own.kafka_bootstrap_servers
    postgres.create_database("keys")
    postgres.sql(KEYED_DDL + "insert into keyed values "
                 + ", ".join(keyed_row(k) for k in range(1, KEYED_ROWS + 1)) + ";", "keys")
    added = Added(own, tmp_path, monkeypatch, f"postgresql://{postgres.superuser}@127.0.0.1:{postgres.port}/keys")
    plain = added.add("keyed")
    with_schemas = added.add("keyed", "--stream", "keyed_schemas")
    schemas = {"key.converter.schemas.enable": "true", "value.converter.schemas.enable": "true"}
    with debezium(own.jars_dir, tmp_path / "plain", "keyed", {}, bootstrap, text=plain) as first, \
            debezium(own.jars_dir, tmp_path / "schemas", "keyed_schemas", schemas, bootstrap,
                     text=with_schemas) as second:
        expected = KEYED_ROWS + run_script(postgres, "keys", KEYED_CHANGES)
        wait_for_messages(bootstrap, "keyed", expected, first)
        wait_for_messages(bootstrap, "keyed_schemas", expected, second)
    assert topic_size(bootstrap, "keyed") == topic_size(bootstrap, "keyed_schemas") == expected
    tests = added.build(keys_lake, ["keyed", "keyed_schemas"])
    assert tests and set(tests.values()) == {"pass"}, tests
    # the key-changed row's old key is a tombstone of the mirror, its new key live
    assert session.sql("select count(*) from silver.keyed_mirror where _is_deleted").first()[0] == 2
    added.assert_verified_equal({"keyed": KEYED_ROWS + 2 - 1, "keyed_schemas": KEYED_ROWS + 2 - 1})


# --- a partitioned table ----------------------------------------------------------------------------

LEDGER_DDL = """
create table ledger (
    day date not null,
    account numeric(10) not null,
    entry_no integer not null,
    amount numeric(14,4) not null,
    note text,
    primary key (day, account, entry_no)
) partition by range (day);
create table ledger_2026_11 partition of ledger for values from ('2026-11-01') to ('2026-12-01');
create table ledger_2026_12 partition of ledger for values from ('2026-12-01') to ('2027-01-01');
create table ledger_later partition of ledger default;
"""
LEDGER_ROWS = 20


def ledger_rows(first: int, count: int) -> str:
    """Rows of both months (odd entries in November, even in December)."""
    return "insert into ledger values " + ", ".join(
        f"(date '2026-11-{10 + k % 20:02d}' + {(k + 1) % 2 * 30}, {1000000 + k % 3}, {k}, {k}.1234, 'entry {k}')"
        for k in range(first, first + count)) + ";"


LEDGER_CHANGES = [
    [Step(ledger_rows(LEDGER_ROWS + 1, 4), 4)],
    [Step("update ledger set amount = amount * 2, note = 'doubled' where entry_no in (3, 4)", 2)],
    [Step("delete from ledger where entry_no = 6", 2)],
    # moved between partitions: an update of the partition key, which is part of the primary key
    [Step("update ledger set day = day + 30 where entry_no = 7", 3)],  # November -> December
    [Step("update ledger set day = date '2027-03-01' where entry_no = 8", 3)],  # December -> the default
    [Step("update ledger set note = 'moved back', day = date '2026-11-30' where entry_no = 10", 3)],
]


ledger_lake = lakehouse_fixture("real-cdc-partitioned")


def test_a_partitioned_table_keyed_by_a_date_is_mirrored_through_debezium_server(
        postgres, ledger_lake, tmp_path, monkeypatch):
    """A table partitioned by month, its key (day, account, entry_no): a date and a numeric.
    `cdc add --runtime debezium-server` prints a publication that publishes through the root
    (publish.via.partition.root): the changes come under the table's name. Before, they came
    under the partitions' names and the connector filtered them out: the snapshot arrived, no
    change after it."""
    own, session, _ = ledger_lake
    bootstrap = own.kafka_bootstrap_servers
    postgres.create_database("books")
    postgres.sql(LEDGER_DDL + ledger_rows(1, LEDGER_ROWS), "books")
    added = Added(own, tmp_path, monkeypatch, f"postgresql://{postgres.superuser}@127.0.0.1:{postgres.port}/books")
    application = added.add("ledger", "--runtime", "debezium-server") + "debezium.source.database.password=trusted\n"
    with debezium_server(own.jars_dir, tmp_path / "debezium-server", application) as engine:
        wait_for_messages(bootstrap, "ledger", LEDGER_ROWS, engine)  # the snapshot
        expected = LEDGER_ROWS + run_script(postgres, "books", LEDGER_CHANGES)
        try:
            wait_for_messages(bootstrap, "ledger", expected, engine, timeout_s=120)
        except pytest.fail.Exception:
            pytest.fail(f"{topic_size(bootstrap, 'ledger')} of {expected} messages in ledger after 120 s: changes "
                        f"after the {LEDGER_ROWS} rows of the snapshot lost")
    assert postgres.sql("select pubviaroot from pg_publication where pubname = 'ledger_publication'",
                        "books").strip() == "t"
    tests = added.build(ledger_lake, ["ledger"])
    assert tests and set(tests.values()) == {"pass"}, tests
    rows = LEDGER_ROWS + 4 - 1
    assert session.table("silver.ledger").count() == rows
    moved = session.sql("select entry_no, cast(day as string) from silver.ledger where entry_no in (7, 8, 10) "
                        "order by entry_no").collect()
    assert [tuple(r) for r in moved] == [(7, "2026-12-17"), (8, "2027-03-01"), (10, "2026-11-30")]
    added.assert_verified_equal({"ledger": rows})

    # a partition is no stream of its own: its changes come under the table's name
    refused = added.cdc("add", "ledger_2026_11", "--from", added.url, "--project-dir", str(added.project), "--no-topic")
    assert refused.returncode == 1 and refused.stderr.splitlines() == [
        "error: table public.ledger_2026_11 in books at 127.0.0.1 is a partition of public.ledger: add "
        "public.ledger, whose changes are its partitions' (docs/connect-a-database.md, \"Partitioned tables\")"]
    # a publication made before, without the option, which the connector would use as it is
    postgres.sql("create publication older_publication for table ledger", "books")
    again = added.cdc("add", "ledger", "--stream", "ledger_again", "--connector", "older", "--from", added.url,
                      "--project-dir", str(added.project), "--no-topic")
    assert again.returncode == 0 and again.stderr.splitlines()[-1] == (
        "warning: publication older_publication exists and publishes ledger under its partitions' names, which the "
        "connector leaves out: run `alter publication older_publication set (publish_via_partition_root = true)` "
        "before starting it")


# --- columns named like bronze's own, renamed by `cdc add` -----------------------------------------

READINGS_DDL = """
create table readings (
    key integer primary key,
    value numeric(12,3) not null,
    "timestamp" timestamptz not null,
    note text
);
"""


def readings(first: int, count: int) -> str:
    return "insert into readings values " + ", ".join(
        f"({k}, {k}.125, timestamptz '2026-11-20 10:00:00+00' + interval '{k} minutes', 'reading {k}')"
        for k in range(first, first + count)) + ";"


READINGS_CHANGES = [
    [Step(readings(7, 2), 2)],
    [Step("update readings set value = value * 2, \"timestamp\" = \"timestamp\" + interval '1 day' where key = 2", 1)],
    [Step("delete from readings where key = 3", 2)],
]


names_lake = lakehouse_fixture("real-cdc-names")


def test_columns_named_like_bronzes_own_are_named_at_once_and_renamed_in_the_stream(
        postgres, names_lake, tmp_path, monkeypatch):
    """A table whose key is `key`, with `value` and `timestamp` (Kafka's record fields, bronze's own
    names). `cdc add` names all three in one line (one per run before); `--rename-columns`
    calls them otherwise in the stream while the table keeps its names: bronze, the models and
    `cdc verify` use the new names, the ingestion reads each from its source field. Then
    `cdc verify` counts, per column, the values changed behind the mirror's back."""
    own, session, _ = names_lake
    bootstrap = own.kafka_bootstrap_servers
    postgres.create_database("meters")
    postgres.sql(READINGS_DDL + readings(1, 6), "meters")
    added = Added(own, tmp_path, monkeypatch, f"postgresql://{postgres.superuser}@127.0.0.1:{postgres.port}/meters")
    refused = added.cdc("add", "readings", "--from", added.url, "--project-dir", str(added.project))
    assert refused.returncode == 1 and refused.stderr.splitlines() == [
        "error: table readings: columns key, value, timestamp are named like columns bronze writes itself: name them "
        "otherwise in the stream with --rename-columns key=NAME,value=NAME,timestamp=NAME (the table keeps its names), "
        "or leave them out with --exclude-columns key,value,timestamp"]
    text = added.add("readings", "--rename-columns", "key=reading_id,value=reading",
                     "--rename-columns", "timestamp=read_at")
    contract = json.loads((added.pipeline.parent / "schemas" / "readings.schema.json").read_text())
    assert {name: prop.get("x-source-column") for name, prop in contract["properties"].items()} == {
        "reading_id": "key", "reading": "value", "read_at": "timestamp", "note": None}
    with debezium(own.jars_dir, tmp_path / "debezium", "readings", {}, bootstrap, text=text) as engine:
        expected = 6 + run_script(postgres, "meters", READINGS_CHANGES)
        wait_for_messages(bootstrap, "readings", expected, engine)
    tests = added.build(names_lake, ["readings"])
    assert tests and set(tests.values()) == {"pass"}, tests
    live = session.table("silver.readings")
    assert live.columns[:4] == ["reading_id", "reading", "read_at", "note"]
    assert not {"key", "value", "timestamp"} & set(live.columns)
    assert [tuple(r) for r in live.where("reading_id = 2").select("reading", "note").collect()] == [
        (Decimal("4.250"), "reading 2")]
    added.assert_verified_equal({"readings": 7})

    # behind the mirror's back (Debezium stopped): two values and a note changed, a row deleted
    postgres.sql("update readings set value = 0 where key in (4, 5); update readings set note = null where key = 6;"
                 "delete from readings where key = 8;", "meters")
    verified = added.cdc("verify", "readings", "--source", added.url)
    assert verified.returncode == 1, verified.stderr
    assert verified.stdout.splitlines() == [
        "readings: 6 source rows, 7 live rows; 1 extra, 3 different (first keys: 4: values differ; 5: values differ; "
        "6: values differ; 8: not in the source)",
        "values that differ, by column:",
        "  reading: 2 rows differ (first keys: 4; 5)",
        "  note: 1 row differs (first keys: 6)"]
