"""What a real PostgreSQL source showed a new user (issue 56, item 7), through the properties
`lakehouse cdc add` prints, unedited but for the password line:

- a numeric column whose scale an ALTER raises (numeric(18,4) -> numeric(20,6)): every later
  value lands exactly, or is a SCHEMA_MISMATCH dead letter naming the scale it came with; the
  connector sends decimals as text, their scale with them. Before, Debezium's precise decimals
  (base64 of the unscaled digits, no scale without schemas) were read at the contract's scale:
  5302757.904500 became 530275790.45;
- an explicit NULL in a column with a DEFAULT stays NULL in bronze and the mirror, in both
  runtime forms (Kafka's JsonConverter wrote the default in its place:
  `replace.null.with.default`);
- a column added with a DEFAULT: the rows not changed since are null in the mirror while the
  source holds the default; `lakehouse cdc snapshot` has Debezium read the table again (an
  incremental snapshot through the connector's signal table, whose DDL `cdc add` prints), and
  the mirror then equals the table by `lakehouse cdc verify`, a change made after the snapshot
  included (its reads are ordered with the stream, ARCHITECTURE §9).

Real PostgreSQL, Debezium Server and a Kafka Connect worker (tests/integration/cdc_sources.py),
each test in a lakehouse of its own.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from ingestion import job
from lakehouse.contracts.streams import get_stream
from lakehouse.operations.dbt import run_dbt
from tests.integration.cdc_sources import (
    PostgresSource,
    connect_standalone,
    debezium_server,
    postgres_cluster,
    wait_for_messages,
)
from tests.integration.kafka_read import read_topic
from tests.integration.own_lakehouse import cli_env, lakehouse_fixture
from tests.integration.test_real_cdc import (
    NO_OVERLAP,
    cdc_verify,
    pipeline_copy,
    printed_text,
    printed_value_lines,
    project_copy,
)

pytestmark = [pytest.mark.integration, pytest.mark.debezium]

LAKEHOUSE = str(Path(sys.executable).with_name("lakehouse"))


def cdc_add(own, tmp_path: Path, monkeypatch, url: str, *arguments: str) -> tuple[dict, Path, str, str | None]:
    """`lakehouse cdc add ARGUMENTS --from URL` into a copy of the project and pipeline file: (the
    environment of a `lakehouse` command on them, the project, the properties text it printed,
    the signal table's DDL it printed, if any: the tests check it after what they are about)."""
    project, pipeline = project_copy(tmp_path / "project"), pipeline_copy(tmp_path)
    monkeypatch.setenv("LAKEHOUSE_PIPELINE_FILE", str(pipeline))
    env = {**cli_env(own), "LAKEHOUSE_PIPELINE_FILE": str(pipeline)}
    added = subprocess.run([LAKEHOUSE, "cdc", "add", *arguments, "--from", url, "--project-dir", str(project)],
                           env=env, capture_output=True, text=True, timeout=120)
    assert added.returncode == 0, added.stderr
    text = printed_text(added.stdout)
    assert not [line for line in printed_value_lines(text) if "#" in line]
    ddl = [line for line in added.stdout.splitlines() if line.startswith("create table ")]
    assert len(ddl) <= 1, added.stdout
    return env, project, text, ddl[0] if ddl else None


def build(lake, project: Path, stream: str, *extra: str) -> None:
    own, _, target = lake
    run_dbt(own, ["run", "--project-dir", str(project), "--select", f"{stream}_changelog+", *NO_OVERLAP, *extra],
            target_dir=target, capture=True)


def numbers(rows: dict) -> dict:
    """Rows spelled by PostgresSource, their decimals as numbers: the source's numeric(20,6) spells
    5302758.904500 what the mirror's decimal(18,4) spells 5302758.9045."""
    return {key: {column: Decimal(value) if column in ("amount", "fee") and value is not None else value
                  for column, value in row.items()} for key, row in rows.items()}


def live_rows(session, stream: str, key: str) -> dict:
    return {row[key]: row for row in session.table(f"silver.{stream}").toArrow().to_pylist()}


# --- a numeric column's scale raised, explicit NULLs: Debezium Server's printed configuration ------

LEDGER_DDL = """
create table ledger (
    entry_id integer primary key,
    amount numeric(18,4) not null,
    note text default 'none',
    settled boolean default false,
    fee numeric(8,2) default 1.50
);
insert into ledger values (1, 5302757.9045, 'first', true, 2.25), (2, 0.0001, null, null, null);
"""
# (statement, messages), one transaction each; the explicit NULLs go to columns with a DEFAULT
BEFORE_THE_ALTER = [("insert into ledger values (3, 12.5, null, null, null)", 1),
                    ("update ledger set note = null where entry_id = 1", 1),
                    ("insert into ledger (entry_id, amount) values (4, 7)", 1)]  # the defaults, as they are
SCALE_RAISED = "alter table ledger alter column amount type numeric(20,6)"
AFTER_THE_ALTER = [("insert into ledger (entry_id, amount) values (5, 5302757.9045)", 1),
                   ("update ledger set amount = amount + 1 where entry_id = 1", 1),
                   ("insert into ledger (entry_id, amount) values (6, 1.123456)", 1)]  # needs the new digits


ledger_lake = lakehouse_fixture("real-cdc-ledger")


def test_a_scale_change_and_explicit_nulls_land_exactly_through_debezium_server(ledger_lake, tmp_path, monkeypatch):
    own, session, _ = ledger_lake
    bootstrap = own.kafka_bootstrap_servers
    with postgres_cluster() as server:
        server.create_database("books")
        server.sql(LEDGER_DDL, "books")
        url = f"postgresql://{server.superuser}@127.0.0.1:{server.port}/books"
        env, project, text, ddl = cdc_add(own, tmp_path, monkeypatch, url, "ledger", "--connector", "books",
                                          "--runtime", "debezium-server")
        if ddl:
            server.sql(ddl, "books")  # the signal table, as printed
        folder = tmp_path / "debezium-server"
        with debezium_server(own.jars_dir, folder, text + "debezium.source.database.password=trusted\n") as engine:
            for statement, _ in BEFORE_THE_ALTER:
                server.sql(statement, "books")
            server.sql(SCALE_RAISED, "books")
            for statement, _ in AFTER_THE_ALTER:
                server.sql(statement, "books")
            wait_for_messages(bootstrap, "ledger", 2 + len(BEFORE_THE_ALTER) + len(AFTER_THE_ALTER), engine)

        job.run(session, own, ["ledger"], available_now=True)
        bronze = session.sql("select entry_id, op, amount, note, settled, fee from bronze.ledger "
                             "where _error_code is null order by _seq, entry_id").collect()
        assert [(r.entry_id, r.op, r.amount) for r in bronze] == [
            (1, "R", Decimal("5302757.9045")), (2, "R", Decimal("0.0001")), (3, "I", Decimal("12.5000")),
            (1, "U", Decimal("5302757.9045")), (4, "I", Decimal("7.0000")),
            # after the ALTER Debezium writes 5302757.904500: its new digits are zeros, the value exact
            (5, "I", Decimal("5302757.9045")), (1, "U", Decimal("5302758.9045"))]
        # the explicit NULLs stay NULL, in the snapshot and streamed; a value left out takes the DEFAULT
        nulls = {(r.entry_id, r.op): (r.note, r.settled, r.fee) for r in bronze}
        assert nulls[(2, "R")] == nulls[(3, "I")] == (None, None, None)
        assert nulls[(1, "U")][0] is None
        assert nulls[(4, "I")] == ("none", False, Decimal("1.50"))
        dead = session.sql("select key, error_code, error_detail from bronze.dead_letters "
                           "where stream = 'ledger'").collect()
        assert [(bytes(d.key).decode(), d.error_code, d.error_detail) for d in dead] == [
            ('{"entry_id":6}', "SCHEMA_MISMATCH", "a field of the change has a value of the wrong type: amount "
             "(1.123456: 6 digits after the point, the contract's decimal(18,4) keeps 4)")]
        contract = json.loads((tmp_path / "schemas" / "ledger.schema.json").read_text())
        assert contract["properties"]["amount"] == {"type": "number", "format": "decimal(18,4)"}  # no base64

        build(ledger_lake, project, "ledger")
        source = PostgresSource(server, "books", "ledger", "entry_id")
        truth, mirrored = (numbers(rows) for rows in (
            source.rows(), source.spelled(list(live_rows(session, "ledger", "entry_id").values()))))
        assert set(truth) - set(mirrored) == {6}  # the dead letter's row only
        assert {key: truth[key] for key in mirrored} == mirrored
        assert mirrored[2]["note"] is None and mirrored[3]["fee"] is None

        # the new scale said in the contract: bronze cannot change a decimal's scale in place, so the
        # stream is read again from its topic (docs/connect-a-database.md, "Decimals"), every row exact
        contract["properties"]["amount"]["format"] = "decimal(20,6)"
        (tmp_path / "schemas" / "ledger.schema.json").write_text(json.dumps(contract))
        session.sql("drop table bronze.ledger purge")
        shutil.rmtree(job.checkpoint_location(own, get_stream("ledger")))
        job.run(session, own, ["ledger"], available_now=True)
        assert session.sql("select count(*) from bronze.dead_letters where stream = 'ledger'").first()[0] == 0
        build(ledger_lake, project, "ledger", "--full-refresh")
        verified = cdc_verify(env, url, "ledger")
        assert (verified.returncode, verified.stdout.splitlines()[:1]) == (
            0, ["ledger: 6 source rows, 6 live rows; equal"]), verified.stdout + verified.stderr
        assert live_rows(session, "ledger", "entry_id")[6]["amount"] == Decimal("1.123456")


# --- explicit NULLs and a column added with a DEFAULT: the Kafka Connect worker's printed file ----

MEMBERS_DDL = """
create table members (
    member_id integer primary key,
    name text not null,
    tier text default 'basic',
    points integer default 0
);
insert into members select k, 'Member ' || k, 'gold', k from generate_series(1, 40) k;
insert into members values (41, 'Snapshot nulls', null, null);
"""
ADD_COLUMNS = "alter table members add column region text not null default 'EU', add column visits integer default 7"


members_lake = lakehouse_fixture("real-cdc-members")


def events_of(bootstrap: str, topic: str) -> list[dict]:
    return [json.loads(m.value()) for m in sorted(read_topic(bootstrap, topic), key=lambda m: (m.partition(),
                                                                                            m.offset()))
            if m.value() is not None]


def test_a_column_added_with_a_default_reaches_the_mirror_through_one_command(
        members_lake, tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="lakehouse.ingest")
    own, session, _ = members_lake
    bootstrap = own.kafka_bootstrap_servers
    with postgres_cluster() as server:
        server.create_database("club")
        server.sql(MEMBERS_DDL, "club")
        url = f"postgresql://{server.superuser}@127.0.0.1:{server.port}/club"
        env, project, text, ddl = cdc_add(own, tmp_path, monkeypatch, url, "members")
        if ddl:  # before the connector starts: its publication lists the tables there are then
            server.sql(ddl, "club")
        connector_file = text + "database.password=trusted\n"
        with connect_standalone(own.jars_dir, tmp_path / "connect", connector_file, bootstrap) as worker:
            server.sql("insert into members values (42, 'Streamed nulls', null, null)", "club")
            server.sql("update members set tier = null where member_id = 1", "club")
            wait_for_messages(bootstrap, "members", 41 + 2, worker)

            job.run(session, own, ["members"], available_now=True)
            build(members_lake, project, "members")
            live = live_rows(session, "members", "member_id")
            assert [(live[k]["tier"], live[k]["points"]) for k in (41, 42)] == [(None, None), (None, None)]
            assert live[1]["tier"] is None
            assert session.sql("select count(*) from bronze.members where tier is null and op != 'D' "
                               "and _error_code is null").first()[0] == 3
            verified = cdc_verify(env, url, "members")
            assert verified.returncode == 0, verified.stdout + verified.stderr

            # the ALTER fills every row with the defaults and sends no change: one row changes after it
            server.sql(ADD_COLUMNS, "club")
            server.sql("update members set points = points + 1 where member_id = 2", "club")
            wait_for_messages(bootstrap, "members", 44, worker)
            job.run(session, own, ["members"], available_now=True)
            build(members_lake, project, "members")
            announced = [r.getMessage() for r in caplog.records if "the source added field(s)" in r.getMessage()]
            assert len(announced) == 1 and "region" in announced[0] and "visits" in announced[0]
            assert "`lakehouse cdc snapshot members` reads the table again" in announced[0], announced
            live = live_rows(session, "members", "member_id")
            assert (live[2]["region"], live[2]["visits"]) == ("EU", 7)
            assert sum(row["region"] is None for row in live.values()) == 41  # the source holds 'EU' in each
            differ = cdc_verify(env, url, "members")
            assert differ.returncode == 1 and "41 different" in differ.stdout, differ.stdout + differ.stderr

            # one command: Debezium reads the table again, ordered with the stream
            assert ddl == ("create table public.members_signal (id varchar(42) primary key, type varchar(32) "
                           "not null, data varchar(2048));")
            snapshot = subprocess.run([LAKEHOUSE, "cdc", "snapshot", "members", "--source", url], env=env,
                                      capture_output=True, text=True, timeout=120)
            assert snapshot.returncode == 0, snapshot.stderr
            assert snapshot.stdout.startswith("members: incremental snapshot of public.members requested (signal ")
            wait_for_messages(bootstrap, "members", 44 + 42, worker)
            server.sql("update members set region = 'APAC' where member_id = 4", "club")  # after its read
            wait_for_messages(bootstrap, "members", 44 + 42 + 1, worker)
        reads = [e for e in events_of(bootstrap, "members") if e["source"]["snapshot"] == "incremental"]
        assert sorted(e["after"]["member_id"] for e in reads) == list(range(1, 43))
        assert {e["op"] for e in reads} == {"r"} and all(e["after"]["region"] == "EU" for e in reads)

        job.run(session, own, ["members"], available_now=True)
        assert session.sql("select count(*) from bronze.dead_letters where stream = 'members'").first()[0] == 0
        build(members_lake, project, "members")
        verified = cdc_verify(env, url, "members")
        assert (verified.returncode, verified.stdout.splitlines()[:1]) == (
            0, ["members: 42 source rows, 42 live rows; equal"]), verified.stdout + verified.stderr
        ops = {r.member_id: (r.op, r.region) for r in session.sql(
            "select member_id, op, region from silver.members_mirror").collect()}
        assert ops[4] == ("U", "APAC") and ops[5] == ("R", "EU")
