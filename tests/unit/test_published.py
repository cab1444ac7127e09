"""`lakehouse published` (lakehouse/operations/published.py): the cut's name, and the reading
instructions it prints, without a lakehouse (tests/integration/test_audit_publish.py runs them)."""

from pathlib import Path

import yaml

from lakehouse.core.settings import Settings
from lakehouse.operations.published import PUBLICATIONS_TABLE, Cut, duckdb_python, format_cut, spark_sql

ROOT = Path(__file__).resolve().parents[2]
CUT = Cut(publication="audit_1f2e", published_at="2026-12-04T23:50:00+00:00", cut_snapshot_id=7,
          tables={"gold.sales_by_region_daily": 42, "silver.purchases": 41})


def test_the_macros_and_the_command_name_the_same_table():
    project = yaml.safe_load((ROOT / "dbt_project.yml").read_text())
    assert project["vars"]["publications_table"] == PUBLICATIONS_TABLE


def test_spark_reads_every_table_at_the_snapshot_of_the_cut():
    assert spark_sql(CUT) == ["select * from lake.gold.sales_by_region_daily version as of 42;",
                              "select * from lake.silver.purchases version as of 41;"]


def test_duckdb_reads_through_the_catalog_the_lakehouse_uses(tmp_path):
    local = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)})
    lines = duckdb_python(CUT, local)
    assert "from pyiceberg.catalog.sql import SqlCatalog" in lines
    assert f'uri="sqlite:///{local.catalog_uri.removeprefix("jdbc:sqlite:")}"' in lines[2]
    assert lines[-1] == 'catalog.load_table("silver.purchases").scan(snapshot_id=41).to_duckdb("silver_purchases", ' \
                        "connection)"
    compile("\n".join(lines), "duckdb_python", "exec")  # what it prints is Python

    rest = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_CATALOG_TYPE": "rest",
                              "LAKEHOUSE_CATALOG_URI": "http://catalog:8181"})
    assert 'catalog = RestCatalog("lake", uri="http://catalog:8181", ' in duckdb_python(CUT, rest)[2]


def test_the_report_names_the_publication_and_every_table(tmp_path):
    shown = format_cut(CUT, Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)}))
    first = shown.splitlines()[0]
    assert first.startswith("publication audit_1f2e, published 2026-12-04T23:50:00+00:00") and "2 table(s)" in first
    assert f"  {'silver.purchases':<26}  snapshot 41\n" in shown  # aligned on the longest name
    assert all(query in shown for query in spark_sql(CUT))
