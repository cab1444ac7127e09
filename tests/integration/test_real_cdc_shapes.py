"""Tables of the shapes real schemas have, added by `lakehouse cdc add` and run by real Debezium
with the properties it prints (issue 56, item 7).

- A key of dates, instants, times, decimals, a UUID, text and a boolean: every change was a
  dead letter ("unreadable message key"), the key read without its semantic type. Schemaless
  and with schemas enabled, through the embedded engine.
- A partitioned table, its key a date and a numeric, through Debezium Server: the printed
  publication published the partitions' changes under their own names, which the connector
  filtered out, so every change after the snapshot was lost in silence. Rows inserted,
  updated, deleted and moved between partitions.

Each ends with `lakehouse cdc verify` equal and the models' data tests passing.
"""

from __future__ import annotations

import json
import subprocess
import sys
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
from tests.integration.own_lakehouse import cli_env, own_lakehouse
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


@pytest.fixture(scope="module")
def keys_lake(spark, settings, tmp_path_factory):
    with own_lakehouse(spark, settings, tmp_path_factory, "real-cdc-keys") as lakehouse:
        yield lakehouse


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


@pytest.fixture(scope="module")
def ledger_lake(spark, settings, tmp_path_factory):
    with own_lakehouse(spark, settings, tmp_path_factory, "real-cdc-partitioned") as lakehouse:
        yield lakehouse


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
