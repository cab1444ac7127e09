"""A source table whose primary key has two columns (order lines: order_id, line_no), mirrored
and historized by the project's own `cdc_mirror` materialization and `cdc_history_versions`
macro, its live rows kept by the `cdc_live` materialization, run by dbt on Spark; the history's
runs read only the open versions of the keys they touch (the re-sent and late changes below are
copies of open versions), matched on both key columns.

Two lines of one order share `order_id`: a key of one column would conflate them (and the
materialization refused a list before). Three increments bring inserts, updates, a delete and
a re-insert of one line while the other line of its order changes, a re-sent duplicate and a
late older change. The oracle is the source table computed in Python in commit order.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SCHEMA = "cdc_composite"
KEYS = ("order_id", "line_no")

MIRROR_MODEL = """
{%- set cdc = {'unique_key': ['order_id', 'line_no'], 'sequence_by': '_seq', 'delete_when': "op = 'D'",
               'except_columns': ['_kafka_topic']} -%}
{{ config(materialized='cdc_mirror', buckets=4, **cdc) }}
with changelog as (
    select * from {{ ref('lines_changelog') }}
    {% if is_incremental() %} where {{ ingested_since_last_run(this) }} {% endif %}
)
{{ cdc_mirror_changes('changelog', this, is_incremental(), **cdc) }}
"""

HISTORY_MODEL = """
{{ config(materialized='incremental', incremental_strategy='merge',
          unique_key=['order_id', 'line_no', '_seq'], partition_by=['bucket(4, order_id)', 'years(valid_to)'],
          tblproperties=merge_on_read_properties(),
          pre_hook=["{{ ensure_merge_on_read(this) }}", "{{ ensure_partition_fields(this) }}"]) }}
{%- set increment = ingested_since_last_run(this) if is_incremental() else none -%}
{%- set reads_all = cdc_history_reads_all(this, ref('lines_changelog'), ['order_id', 'line_no'], increment) -%}
with changelog as (
    select * from {{ ref('lines_changelog') }}
    {% if increment %} where {{ increment }} {% endif %}
)
{{ cdc_history_versions('changelog', ['order_id', 'line_no'], existing=this if is_incremental() else none,
                        open_versions_only=not reads_all) }}
"""

LIVE_MODEL = """
{{ config(materialized='cdc_live', unique_key=['order_id', 'line_no'], buckets=4) }}
select * from {{ ref('lines_mirror') }}
"""

# (lsn, op, order_id, line_no, qty), per increment in landing order; lsn is the commit order
INCREMENTS = [
    [(10, "I", 1, 1, 5), (11, "I", 1, 2, 7), (12, "I", 2, 1, 1), (13, "U", 1, 1, 6)],
    [(14, "D", 1, 2, 7), (15, "U", 1, 1, 8), (13, "U", 1, 1, 6), (16, "I", 2, 2, 3)],  # 13: re-sent
    [(17, "I", 1, 2, 9), (18, "D", 2, 1, 1), (12, "I", 2, 1, 1)],  # 12: late and older than the delete
]


def source_table() -> dict[tuple[int, int], int]:
    table: dict[tuple[int, int], int] = {}
    changes = {c[0]: c for increment in INCREMENTS for c in increment}
    for _, op, order_id, line_no, qty in sorted(changes.values()):
        if op == "D":
            table.pop((order_id, line_no), None)
        else:
            table[(order_id, line_no)] = qty
    return table


def live_rows(spark) -> list[tuple]:
    return sorted(map(tuple, spark.table(f"{SCHEMA}.lines").collect()))


def mirror_live_rows(spark) -> list[tuple]:
    rows = spark.table(f"{SCHEMA}.lines_mirror").where("not _is_deleted").drop("_is_deleted")
    return sorted(map(tuple, rows.collect()))


@pytest.fixture(scope="module")
def project(spark, tmp_path_factory):
    from dbt.cli.main import dbtRunner

    folder = tmp_path_factory.mktemp("cdc-composite")
    (folder / "macros").symlink_to(REPO / "macros")
    (folder / "models").mkdir()
    (folder / "models" / "lines_mirror.sql").write_text(MIRROR_MODEL)
    (folder / "models" / "lines_history.sql").write_text(HISTORY_MODEL)
    (folder / "models" / "lines_history_open.sql").write_text(HISTORY_MODEL.replace(
        "open_versions_only=not reads_all", "open_versions_only=is_incremental()"))
    (folder / "models" / "lines.sql").write_text(LIVE_MODEL)
    # never run: the test creates and fills this relation itself, as ingestion fills bronze
    (folder / "models" / "lines_changelog.sql").write_text("select 1 as never_run\n")
    (folder / "dbt_project.yml").write_text(yaml.safe_dump({
        "name": "cdc_composite", "version": "1.0", "config-version": 2, "profile": "cdc_composite",
        "model-paths": ["models"], "macro-paths": ["macros"], "flags": {"send_anonymous_usage_stats": False},
        # the project's vars (bronze's column names, which the macros read, among them)
        "vars": {**yaml.safe_load((REPO / "dbt_project.yml").read_text())["vars"], "overlap_minutes": 10,
                 "cdc_tombstone_retention_hours": 168},
        "models": {"cdc_composite": {"+file_format": "iceberg"}},
    }))
    (folder / "profiles.yml").write_text(yaml.safe_dump({"cdc_composite": {
        "target": "session",
        "outputs": {"session": {"type": "spark", "method": "session", "host": "localhost",
                                "schema": SCHEMA, "threads": 1}}}}))
    flags = ["--project-dir", str(folder), "--profiles-dir", str(folder),
             "--target-path", str(folder / "target"), "--log-path", str(folder / "logs")]
    spark.sql(f"create namespace if not exists {SCHEMA}")
    for table in ("lines", "lines_mirror", "lines_mirror__dbt_changes", "lines_history", "lines_history_open",
                  "lines_history_evolved", "lines_changelog"):
        spark.sql(f"drop table if exists {SCHEMA}.{table} purge")
    # the live view an earlier version of the project built: the first run replaces it by the table
    spark.sql(f"drop view if exists {SCHEMA}.lines")
    spark.sql(f"create view {SCHEMA}.lines as select 1 as earlier_live_view")
    spark.sql(f"create table {SCHEMA}.lines_changelog (order_id bigint, line_no bigint, qty bigint, op string, "
              "_seq struct<lsn: bigint>, _source_ts timestamp, _ingested_at timestamp, _kafka_topic string) "
              "using iceberg")
    runner = dbtRunner()

    def run(*args: str, succeed: bool = True) -> list[str]:
        """`dbt run` of the models named first (default: mirror, history, live table), then the
        flags (a flag list with its own --select selects by itself)."""
        models = list(itertools.takewhile(lambda arg: not arg.startswith("--"), args))
        flags_given = list(args[len(models):])
        if not models and "--select" not in flags_given:
            models = ["lines_mirror", "lines_history", "lines"]
        selection = ["--select", *models] if models else []
        result = runner.invoke(["run", *selection, *flags_given, *flags])
        errors = [r.message for r in getattr(result.result, "results", None) or [] if str(r.status) != "success"]
        assert result.success == succeed, f"dbt run: {result.exception or errors}"
        return errors

    run.folder = folder
    return run


def test_a_composite_key_is_mirrored_and_historized_per_key(spark, project):
    start = datetime.now(UTC).replace(tzinfo=None, microsecond=0) - timedelta(hours=2)
    committed = {lsn: start + timedelta(seconds=lsn) for increment in INCREMENTS for lsn, *_ in increment}
    for number, increment in enumerate(INCREMENTS):
        ingested = start + timedelta(minutes=20 * (number + 1))  # beyond the 10-minute overlap
        spark.sql(f"insert into {SCHEMA}.lines_changelog values " + ", ".join(
            f"({order_id}, {line_no}, {qty}, '{op}', named_struct('lsn', {lsn}L), "
            f"timestamp'{committed[lsn]}', timestamp'{ingested}', 'lines')"
            for lsn, op, order_id, line_no, qty in increment))
        project()
        # the live table, kept by MERGEs run after run, is the mirror without its tombstones
        assert live_rows(spark) == mirror_live_rows(spark), f"after increment {number + 1}"

    expected = source_table()
    assert expected == {(1, 1): 8, (1, 2): 9, (2, 2): 3}  # the scenario is what it claims
    mirror = spark.table(f"{SCHEMA}.lines_mirror").collect()
    assert len(mirror) == len({(r.order_id, r.line_no) for r in mirror}), "a key has two rows"
    assert {(r.order_id, r.line_no): r.qty for r in mirror if not r._is_deleted} == expected
    assert {(r.order_id, r.line_no) for r in mirror if r._is_deleted} == {(2, 1)}, "the late insert resurrected"

    history = spark.table(f"{SCHEMA}.lines_history").collect()
    versions: dict[tuple[int, int], list] = {}
    for row in sorted(history, key=lambda r: r._seq.lsn):
        versions.setdefault((row.order_id, row.line_no), []).append(row)
    assert {key: [v._seq.lsn for v in rows] for key, rows in versions.items()} == {
        (1, 1): [10, 13, 15], (1, 2): [11, 14, 17], (2, 1): [12, 18], (2, 2): [16]}
    for rows in versions.values():
        assert [v.valid_to for v in rows] == [*(v.valid_from for v in rows[1:]), None]
    current = {key: rows[-1].qty for key, rows in versions.items() if rows[-1].is_current}
    assert current == expected
    assert sum(v.is_current for rows in versions.values() for v in rows) == len(expected)
    assert {(r.order_id, r.line_no): r.qty for r in spark.table(f"{SCHEMA}.lines").collect()} == expected


def test_the_live_table_deletes_a_key_whose_tombstone_was_purged_before_it_ran(spark, project):
    """A tombstone written and purged by one mirror run (retention 0) without the live model:
    the live table never sees it, yet drops the key (the purge stamps the mirror); then the
    run-by-run table equals a full refresh, and a run with nothing new commits nothing."""
    ingested = datetime.now(UTC).replace(tzinfo=None) - timedelta(minutes=1)
    spark.sql(f"insert into {SCHEMA}.lines_changelog values (2, 2, 3, 'D', named_struct('lsn', 19L), "
              f"timestamp'{ingested}', timestamp'{ingested}', 'lines')")
    project("--select", "lines_mirror", "--vars", "{cdc_tombstone_retention_hours: 0}")
    assert spark.sql(f"select count(*) from {SCHEMA}.lines_mirror where _is_deleted or line_no = 2 "
                     "and order_id = 2").first()[0] == 0, "the scenario: the tombstone is purged already"
    assert (2, 2) in {(r.order_id, r.line_no) for r in spark.table(f"{SCHEMA}.lines").collect()}

    project("--select", "lines")
    incremental = live_rows(spark)
    assert incremental == mirror_live_rows(spark)
    assert {(r[0], r[1]): r[2] for r in incremental} == {(1, 1): 8, (1, 2): 9}

    snapshots = spark.sql(f"select count(*) from {SCHEMA}.lines.snapshots").first()[0]
    project("--select", "lines")
    assert spark.sql(f"select count(*) from {SCHEMA}.lines.snapshots").first()[0] == snapshots

    project("--select", "lines", "--full-refresh")
    assert live_rows(spark) == incremental


def test_a_change_before_an_open_version_fails_a_run_that_reads_open_versions_only(spark, project):
    """A run planned to read open versions only (no change of the increment at or before a
    closed version) must not meet a change older than its key's open version: one landing
    between the plan and the query would need the closed versions. Here the plan is forced
    (`lines_history_open`): the run fails with one `error:` line and writes nothing, rather than
    a history with two versions claiming the same interval. Runs after the test above (its
    changelog)."""
    project("lines_history_open")  # a first build: every change
    before = spark.table(f"{SCHEMA}.lines_history_open").count()
    late = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    spark.sql(f"insert into {SCHEMA}.lines_changelog values (1, 1, 4, 'U', named_struct('lsn', 9L), "
              f"timestamp'{late - timedelta(hours=3)}', timestamp'{late}', 'lines')")
    errors = project("lines_history_open", succeed=False)
    assert any("error: " in e and "older than the open version of its key" in e for e in errors), errors
    assert spark.table(f"{SCHEMA}.lines_history_open").count() == before


def partitioning(spark, table: str) -> list[str]:
    rows = spark.sql(f"describe table {table}").collect()
    start = next(i for i, r in enumerate(rows) if r[0] == "# Partitioning")
    return [r[1] for r in rows[start + 1:] if r[0].startswith("Part ")]


def test_a_history_built_before_the_valid_to_partitioning_gets_it_on_its_next_run(spark, project):
    """A history built partitioned by key bucket only (before years(valid_to)) gets the field on
    its next run (partition evolution, `ensure_partition_fields`), no full refresh, and its
    versions are then what a full build gives. Runs after the tests above (their changelog)."""
    model = project.folder / "models" / "lines_history_evolved.sql"
    model.write_text(HISTORY_MODEL.replace("partition_by=['bucket(4, order_id)', 'years(valid_to)']",
                                           "partition_by=['bucket(4, order_id)']"))
    project("lines_history_evolved")
    table = f"{SCHEMA}.lines_history_evolved"
    assert partitioning(spark, table) == ["bucket(4, order_id)"]
    model.write_text(HISTORY_MODEL)
    changed = datetime.now(UTC).replace(tzinfo=None, microsecond=0) + timedelta(hours=1)
    spark.sql(f"insert into {SCHEMA}.lines_changelog values (2, 2, 4, 'U', named_struct('lsn', 30L), "
              f"timestamp'{changed}', timestamp'{changed}', 'lines')")
    project("lines_history_evolved")
    assert partitioning(spark, table) == ["bucket(4, order_id)", "years(valid_to)"]
    incremental = sorted(map(tuple, spark.table(table).drop("_loaded_at", "_first_loaded_at").collect()), key=repr)
    # every distinct change of the key, the new one too (the live table's test deleted it at 19)
    changes = sorted({r.lsn for r in spark.sql(f"select _seq.lsn from {SCHEMA}.lines_changelog "
                                               "where order_id = 2 and line_no = 2").collect()})
    assert changes[-1] == 30
    assert [r.lsn for r in spark.sql(f"select _seq.lsn from {table} where order_id = 2 and line_no = 2 "
                                     "order by _seq").collect()] == changes
    project("lines_history_evolved", "--full-refresh")
    assert sorted(map(tuple, spark.table(table).drop("_loaded_at", "_first_loaded_at").collect()),
                  key=repr) == incremental
