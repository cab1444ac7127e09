"""Bronze's own columns are declared once (lakehouse/contracts/bronze_columns.py, ARCHITECTURE §6):
Python imports them, dbt reads the var that copies them, and no other product file spells them."""

import re
from pathlib import Path

import yaml

from lakehouse.contracts import bronze_columns

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("ingestion", "lakehouse", "macros", "models", "expectations", "producers")
DECLARATION = Path("lakehouse/contracts/bronze_columns.py")
# `op` is a word too common to grep for (Python's operator, `op` variables): it is left out.
GREPPED = [column.name for column in bronze_columns.COLUMNS.values() if column.name != bronze_columns.OP]


def spellers(name: str, root: Path = ROOT) -> set[str]:
    """The product files (code, SQL and the templates of SQL) that spell ``name`` as a word."""
    word = re.compile(rf"(?<![\w]){re.escape(name)}(?![\w])")
    found = set()
    for folder in PRODUCT:
        for path in (root / folder).rglob("*"):
            source = path.suffix in {".py", ".sql", ".j2"} and "__pycache__" not in path.parts
            if source and word.search(path.read_text()):
                found.add(path.relative_to(root).as_posix())
    return found


def test_each_name_is_spelled_in_one_product_file():
    extra = {name: sorted(spellers(name) - {DECLARATION.as_posix()}) for name in GREPPED}
    assert {name: files for name, files in extra.items() if files} == {}


def test_the_dbt_var_is_the_declaration():
    project = yaml.safe_load((ROOT / "dbt_project.yml").read_text())
    assert project["vars"]["bronze_columns"] == bronze_columns.dbt_var()


def test_yaml_names_only_declared_bronze_columns():
    """YAML that must spell a name (dbt sources and models' docs, the pipeline file, the `cdc add`
    templates) names none bronze does not have: a `_kafka_` name or one of the metadata's prefix
    is a declared one."""
    declared = {column.name for column in bronze_columns.COLUMNS.values()}
    shaped = re.compile(r"(?<![\w])(_kafka_\w+|_replay\w*|_raw_\w+|_error_\w+|_dead_\w+)")
    undeclared = {}
    for path in [ROOT / "dbt_project.yml", *[p for folder in PRODUCT for pattern in ("*.yml", "*.yml.j2")
                                                        for p in (ROOT / folder).rglob(pattern)]]:
        unknown = set(shaped.findall(path.read_text())) - declared
        if unknown:
            undeclared[path.relative_to(ROOT).as_posix()] = sorted(unknown)
    assert undeclared == {}


def test_every_column_has_a_type_and_one_key():
    assert len({c.name for c in bronze_columns.COLUMNS.values()}) == len(bronze_columns.COLUMNS)
    untyped = {c.name for c in bronze_columns.COLUMNS.values() if not c.type}
    assert untyped == {bronze_columns.SEQ, bronze_columns.BEFORE_KEY}  # their struct is the format's


def test_cdc_added_columns_skips_every_declared_column_but_the_avro_schema_id():
    """macros/column_evolution.sql builds its skip list from the var: rendered here with the
    declaration, it holds a dead row's and a replay's columns (before the list named them, the
    changelogs carried all ten into silver) and the metadata, and a `_kafka_` prefix."""
    from jinja2 import Environment

    macro = (ROOT / "macros" / "column_evolution.sql").read_text()
    start = macro.index("{%- set own = var('bronze_columns') -%}")
    end = macro.index("{%- for name in named + except -%}")
    env = Environment(extensions=["jinja2.ext.do"])
    text = env.from_string(macro[start:end] + "{{ skip | join(',') }}|{{ kafka_prefix }}").render(
        var=lambda name: bronze_columns.dbt_var())
    skipped, prefix = text.strip().split("|")
    assert prefix == bronze_columns.KAFKA_PREFIX
    assert set(skipped.split(",")) == {
        *bronze_columns.DEAD_COLUMNS, *bronze_columns.REPLAY_COLUMNS, *bronze_columns.CDC_COLUMNS,
        bronze_columns.INGESTED_AT, bronze_columns.BATCH_ID, bronze_columns.RESCUED}
