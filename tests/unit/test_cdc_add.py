"""`lakehouse cdc add`, its pure parts: what each column type becomes in the contract (Debezium's
defaults), the properties it prints, and the pipeline files it refuses to touch. The whole
command runs against a real PostgreSQL and Debezium in tests/integration/test_real_cdc.py."""

import pytest
from sqlalchemy.dialects import mysql
from sqlalchemy.dialects import postgresql as pg

from lakehouse.commands import cdc
from lakehouse.contracts import source_tables
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings


@pytest.mark.parametrize("kind, sql_type, expected", [
    ("postgresql", pg.INTEGER(), {"type": "integer"}),
    ("postgresql", pg.BOOLEAN(), {"type": "boolean"}),
    ("postgresql", pg.DOUBLE_PRECISION(), {"type": "number"}),
    ("postgresql", pg.NUMERIC(12, 2), {"type": "number", "format": "decimal(12,2)",
                                       "x-debezium-type": "org.apache.kafka.connect.data.Decimal"}),
    ("postgresql", pg.NUMERIC(), {"type": "number", "format": "decimal(38,10)",
                                  "x-debezium-type": "io.debezium.data.VariableScaleDecimal"}),
    ("postgresql", pg.TIMESTAMP(), {"type": "string", "format": "date-time",
                                    "x-debezium-type": "io.debezium.time.MicroTimestamp"}),
    ("postgresql", pg.TIMESTAMP(precision=3), {"type": "string", "format": "date-time",
                                               "x-debezium-type": "io.debezium.time.Timestamp"}),
    ("postgresql", pg.TIMESTAMP(timezone=True), {"type": "string", "format": "date-time",
                                                 "x-debezium-type": "io.debezium.time.ZonedTimestamp"}),
    ("postgresql", pg.DATE(), {"type": "string", "format": "date", "x-debezium-type": "io.debezium.time.Date"}),
    ("postgresql", pg.TIME(), {"type": "string", "format": "time", "x-debezium-type": "io.debezium.time.MicroTime"}),
    ("postgresql", pg.TIME(precision=0), {"type": "string", "format": "time",
                                          "x-debezium-type": "io.debezium.time.Time"}),
    ("postgresql", pg.UUID(), {"type": "string"}),
    ("postgresql", pg.JSONB(), {"type": "string"}),
    ("postgresql", pg.TEXT(), {"type": "string"}),
    ("mysql", mysql.DATETIME(), {"type": "string", "format": "date-time",
                                 "x-debezium-type": "io.debezium.time.Timestamp"}),
    ("mysql", mysql.DATETIME(fsp=6), {"type": "string", "format": "date-time",
                                      "x-debezium-type": "io.debezium.time.MicroTimestamp"}),
    ("mysql", mysql.TIMESTAMP(), {"type": "string", "format": "date-time",
                                  "x-debezium-type": "io.debezium.time.ZonedTimestamp"}),
    ("mysql", mysql.TIME(), {"type": "string", "format": "time", "x-debezium-type": "io.debezium.time.MicroTime"}),
    ("mysql", mysql.TINYINT(), {"type": "integer"}),  # Debezium sends TINYINT(1) as a number too
    ("mysql", mysql.DECIMAL(8, 3), {"type": "number", "format": "decimal(8,3)",
                                    "x-debezium-type": "org.apache.kafka.connect.data.Decimal"}),
])
def test_each_column_type_is_declared_as_debezium_sends_it(kind, sql_type, expected):
    assert source_tables.column_property(kind, "c", sql_type) == expected


@pytest.mark.parametrize("sql_type, message", [
    (pg.INTERVAL(), "column c: type INTERVAL is not supported yet"),
    (pg.BYTEA(), "column c: type BYTEA is not supported yet"),
    (pg.NUMERIC(40, 2), "more digits than Spark's decimals hold (38)"),
])
def test_a_type_it_cannot_read_is_refused_by_name(sql_type, message):
    with pytest.raises(LakehouseError, match=message.replace("(", r"\(").replace(")", r"\)")):
        source_tables.column_property("postgresql", "c", sql_type)


def test_the_printed_properties_route_the_table_to_the_stream_and_leave_out_excluded_columns():
    source = source_tables.SourceTable("postgresql", "shop", "public", "orders", {"id": {"type": "integer"}}, ("id",),
                             excluded=("blob",))
    text = cdc.debezium_properties("shop_orders", source, "postgresql://me:secret@db:5433/shop", Settings.from_env({}))
    properties = dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
    assert "secret" not in text
    assert properties["transforms.route.regex"] == r"shop_orders\.public\.orders"
    assert properties["transforms.route.replacement"] == "shop_orders"
    assert properties["column.exclude.list"] == r"public\.orders\.blob"
    assert (properties["database.hostname"], properties["database.port"], properties["database.dbname"]) == (
        "db", "5433", "shop")
    assert properties["skipped.operations"] == "none"  # truncates are changes


def test_a_pipeline_file_whose_streams_are_not_its_last_section_is_not_appended_to(tmp_path):
    pipeline = tmp_path / "pipeline.yml"
    pipeline.write_text("streams:\n  a: {format: json}\nextra: 1\n")
    with pytest.raises(LakehouseError, match="`streams:` must be its last section"):
        cdc._schema_dir(pipeline)


def test_the_key_ordered_walk_counts_every_kind_of_difference_and_names_the_first_keys():
    from expectations.database_source import _merge

    source = [((1,), b"a"), ((2,), b"b"), ((4,), b"d"), ((5,), b"e")]
    mirror = [((1,), b"a"), ((2,), b"x"), ((3,), b"c"), ((3,), b"c"), ((5,), b"e"), ((6,), b"f")]
    check = _merge("t", iter(source), iter(mirror))
    assert (check.source_rows, check.mirror_rows) == (4, 6)
    assert (check.missing, check.extra, check.different, check.duplicated) == (1, 2, 1, 1)
    assert check.first_differing == ((2, "values differ"), (3, "not in the source"), (4, "missing from the mirror"),
                                     (6, "not in the source"))
    assert _merge("t", iter(source), iter(source)).equal
