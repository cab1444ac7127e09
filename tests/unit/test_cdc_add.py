"""`lakehouse cdc add`, its pure parts: what each column type becomes in the contract (as the
printed connector sends it), the properties it prints, and the pipeline files it refuses to
touch; `lakehouse cdc snapshot`'s signal. The whole commands run against a real PostgreSQL and
Debezium in tests/integration/test_real_cdc.py and test_real_cdc_exact.py."""

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy.dialects import mysql
from sqlalchemy.dialects import postgresql as pg

from lakehouse.commands import cdc, cdc_models
from lakehouse.contracts import source_tables
from lakehouse.contracts.streams import EXCLUDED_KEYWORD, SOURCE_COLUMN_KEYWORD
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings


@pytest.mark.parametrize("kind, sql_type, expected", [
    ("postgresql", pg.INTEGER(), {"type": "integer"}),
    ("postgresql", pg.BOOLEAN(), {"type": "boolean"}),
    ("postgresql", pg.DOUBLE_PRECISION(), {"type": "number"}),
    # decimal.handling.mode=string (the printed properties): digits, read as they are, no semantic type
    ("postgresql", pg.NUMERIC(12, 2), {"type": "number", "format": "decimal(12,2)"}),
    ("postgresql", pg.NUMERIC(), {"type": "number", "format": "decimal(38,10)"}),
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
    ("mysql", mysql.DECIMAL(8, 3), {"type": "number", "format": "decimal(8,3)"}),
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


@pytest.mark.parametrize("sql_type", [pg.DATE(), pg.TIMESTAMP(), pg.TIMESTAMP(timezone=True), pg.TIME(),
                                      pg.NUMERIC(12, 2), pg.NUMERIC(), pg.UUID(), pg.TEXT(), pg.BIGINT(),
                                      pg.BOOLEAN(), mysql.DATETIME(fsp=6), mysql.DECIMAL(8, 3)])
def test_a_key_column_takes_every_type_a_row_takes(sql_type):
    """A date in the key (every table partitioned by date has one), a numeric, an instant: each
    is read from the message key as the row image reads it (ingestion/formats/debezium.py debezium_key_json)."""
    kind = "mysql" if type(sql_type).__module__.endswith("mysql.types") else "postgresql"
    assert source_tables.column_property(kind, "k", sql_type, key=True) == source_tables.column_property(
        kind, "k", sql_type)


@pytest.mark.parametrize("sql_type, message", [
    (pg.JSONB(), "column k of the primary key: type JSONB cannot key a stream (its values are compared as JSON, "
                 "not as the text Debezium sends; docs/connect-a-database.md lists the types a key takes)"),
    (pg.INTERVAL(), "column k of the primary key: type INTERVAL is not supported (docs/connect-a-database.md lists "
                    "the types a key takes)"),
])
def test_a_key_column_of_a_type_no_key_takes_is_refused_in_one_line(sql_type, message):
    """Not "leave it out with --exclude-columns": a key column cannot be left out."""
    with pytest.raises(LakehouseError) as refused:
        source_tables.column_property("postgresql", "k", sql_type, key=True)
    assert str(refused.value) == message


def java_properties(text: str) -> dict[str, str]:
    """``text`` read as java.util.Properties reads the lines `cdc add` prints: `#` starts a comment
    only at the start of a line; a backslash escapes the next character; the last of a key's lines
    wins. (The real runtime reads the printed text in tests/integration/test_real_cdc.py.)"""
    properties = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith(("#", "!")):
            continue
        key, _, value = line.partition("=")
        properties[key.strip()] = re.sub(r"\\(.)", r"\1", value.lstrip())
    return properties


ORDERS = source_tables.SourceTable("postgresql", "shop", "public", "orders", {"id": {"type": "integer"}}, ("id",),
                                   excluded=("blob",))
ORDERS_PATH = Path("orders.schema.json")
CLIENTS = source_tables.SourceTable("postgresql", "shop", "sales", "clients", {"id": {"type": "integer"}}, ("id",))


def test_the_printed_properties_route_the_table_to_the_stream_and_leave_out_excluded_columns():
    text = cdc.debezium_properties("shop_orders", [("shop_orders", ORDERS)], "postgresql://me:s3cr3t@db:5433/shop",
                                   Settings.from_env({}))
    properties = java_properties(text)
    assert "s3cr3t" not in text
    assert properties["connector.class"] == "io.debezium.connector.postgresql.PostgresConnector"
    assert properties["transforms"] == "drop_signals,route_shop_orders"
    assert re.fullmatch(properties["transforms.route_shop_orders.regex"], "shop_orders.public.orders")
    assert not re.fullmatch(properties["transforms.route_shop_orders.regex"], "shop_orders.public_orders")
    assert properties["transforms.route_shop_orders.replacement"] == "shop_orders"
    assert re.fullmatch(properties["column.exclude.list"], "public.orders.blob")
    assert (properties["database.hostname"], properties["database.port"], properties["database.dbname"]) == (
        "db", "5433", "shop")
    assert properties["skipped.operations"] == "none"  # truncates are changes


@pytest.mark.parametrize("runtime", cdc.RUNTIMES)
@pytest.mark.parametrize("url", ["postgresql://me@db/shop", "mysql://me@db/shop", "mariadb://me@db/shop"])
def test_no_comment_follows_a_value_in_either_runtime_form(runtime, url):
    """A `#` after a value is part of the value in a properties file (issue 42: include.schema.changes
    refused)."""
    kind = "postgresql" if url.startswith("postgresql") else "mysql"
    source = source_tables.SourceTable(kind, "shop", "public" if kind == "postgresql" else None, "orders",
                                       {"id": {"type": "integer"}}, ("id",))
    text = cdc.debezium_properties("shop", [("orders", source)], url, Settings.from_env({}), runtime)
    values = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    assert values and not [line for line in values if "#" in line]
    if runtime == "debezium-server":
        assert all(line.startswith("debezium.") for line in values)


@pytest.mark.parametrize("url, connector_class", [
    ("postgresql://me@db/shop", "io.debezium.connector.postgresql.PostgresConnector"),
    ("mysql://me@db/shop", "io.debezium.connector.mysql.MySqlConnector"),
    ("mariadb://me@db/shop", "io.debezium.connector.mariadb.MariaDbConnector"),  # MySQL's refuses MariaDB
])
def test_the_connector_class_is_the_database_s_own(url, connector_class):
    kind = "postgresql" if url.startswith("postgresql") else "mysql"
    source = source_tables.SourceTable(kind, "shop", "public" if kind == "postgresql" else None, "orders",
                                       {"id": {"type": "integer"}}, ("id",))
    for runtime, key in (("kafka-connect", "connector.class"), ("debezium-server", "debezium.source.connector.class")):
        text = cdc.debezium_properties("shop", [("orders", source)], url, Settings.from_env({}), runtime)
        assert java_properties(text)[key] == connector_class


def test_several_tables_are_one_connector_each_routed_to_its_stream():
    streams = [("orders", ORDERS), ("clients", CLIENTS)]
    server = java_properties(cdc.debezium_properties("shop", streams, "postgresql://me@db/shop",
                                                     Settings.from_env({"LAKEHOUSE_KAFKA_PORT": "9999"}),
                                                     "debezium-server"))
    include = server["debezium.source.table.include.list"].split(",")
    assert [table for table in ("public.orders", "sales.clients", "public.clients")
            if any(re.fullmatch(pattern, table) for pattern in include)] == ["public.orders", "sales.clients"]
    assert server["debezium.source.topic.prefix"] == "shop"
    assert server["debezium.source.slot.name"] == "shop_slot"
    assert server["debezium.transforms"] == "drop_signals,route_orders,route_clients"
    routed = {}
    for alias in server["debezium.transforms"].split(",")[1:]:
        for topic in ("shop.public.orders", "shop.sales.clients"):
            if re.fullmatch(server[f"debezium.transforms.{alias}.regex"], topic):
                routed[topic] = server[f"debezium.transforms.{alias}.replacement"]
    assert routed == {"shop.public.orders": "orders", "shop.sales.clients": "clients"}
    assert server["debezium.sink.kafka.producer.bootstrap.servers"] == "127.0.0.1:9999"
    assert server["debezium.format.value.schemas.enable"] == "false"


@pytest.mark.parametrize("url, signal", [("postgresql://me@db/shop", "public.shop_signal"),
                                         ("mariadb://me@db/shop", "shop.shop_signal")])
def test_the_printed_properties_keep_decimals_scales_and_nulls_and_name_the_signal_table(url, signal):
    """Issue 56, item 7: decimals as text (their scale with them), a NULL kept NULL by the JSON
    converter in either runtime form, the connector's signal table (`lakehouse cdc snapshot`),
    whose own changes are dropped before they reach a topic no stream reads."""
    kind = "postgresql" if url.startswith("postgresql") else "mysql"
    source = source_tables.SourceTable(kind, "shop", "public" if kind == "postgresql" else None, "orders",
                                       {"id": {"type": "integer"}}, ("id",))
    assert cdc.signal_table("Shop", source) == signal
    for runtime, prefix, converter in (("kafka-connect", "", "value.converter."),
                                       ("debezium-server", "debezium.source.", "debezium.format.value.")):
        properties = java_properties(cdc.debezium_properties("Shop", [("orders", source)], url, Settings.from_env({}),
                                                             runtime))
        transforms = "debezium." if runtime == "debezium-server" else ""
        assert properties[f"{prefix}decimal.handling.mode"] == "string"
        # issue 58, item 3: the transaction metadata whole-transaction reads rest on
        assert properties[f"{prefix}provide.transaction.metadata"] == "true"
        assert properties[f"{converter}replace.null.with.default"] == "false"
        assert properties[f"{prefix}signal.data.collection"] == signal
        aliases = properties[f"{transforms}transforms"].split(",")
        assert aliases[0] == "drop_signals"
        assert properties[f"{transforms}transforms.drop_signals.type"] == "org.apache.kafka.connect.transforms.Filter"
        predicate = properties[f"{transforms}transforms.drop_signals.predicate"]
        assert properties[f"{transforms}predicates"] == predicate
        pattern = properties[f"{transforms}predicates.{predicate}.pattern"]
        assert re.fullmatch(pattern, f"Shop.{signal}")
        assert not re.fullmatch(pattern, f"Shop.{signal.split('.')[0]}.orders")
        assert not re.fullmatch(pattern, "orders")


def test_the_signal_table_ddl_has_debezium_s_three_columns():
    assert cdc.signal_table_ddl("public.shop_signal") == (
        "create table public.shop_signal (id varchar(42) primary key, type varchar(32) not null, "
        "data varchar(2048));")


def test_the_pipeline_entry_names_the_signal_table_and_reads_back(tmp_path):
    from lakehouse.contracts.streams import load_pipeline

    (tmp_path / "orders.schema.json").write_text(cdc.contract(ORDERS))
    (tmp_path / "pipeline.yml").write_text("streams:" + cdc.pipeline_entry("orders", ORDERS, 3, "public.shop_signal"))
    assert load_pipeline(tmp_path / "pipeline.yml")["orders"].signal_table == "public.shop_signal"


@pytest.mark.parametrize("entry, message", [
    ({"format": "dms", "signal_table": "public.s"}, "only a debezium stream has one"),
    ({"format": "debezium", "signal_table": "s"}, "expected the connector's signal.data.collection"),
    ({"format": "debezium", "signal_table": "a.b.c"}, "expected the connector's signal.data.collection"),
])
def test_a_signal_table_that_cannot_be_the_connector_s_is_refused(tmp_path, entry, message):
    import yaml

    from lakehouse.contracts.streams import load_pipeline

    (tmp_path / "t.schema.json").write_text(json.dumps({"type": "object", "properties": {"id": {"type": "integer"}}}))
    stream = {"schema": "t.schema.json", "event_time": "_source_ts", "identity": ["id"], **entry}
    (tmp_path / "pipeline.yml").write_text(yaml.safe_dump({"streams": {"t": stream}}))
    with pytest.raises(LakehouseError, match=f"streams.t.signal_table: {message}"):
        load_pipeline(tmp_path / "pipeline.yml")


def test_the_snapshot_signal_asks_for_an_incremental_snapshot_of_the_table():
    first, second = cdc.snapshot_signal("public.orders"), cdc.snapshot_signal("public.orders")
    assert first[1:] == ("execute-snapshot", '{"data-collections": ["public.orders"], "type": "incremental"}')
    assert first[0] != second[0] and len(first[0]) <= 42  # Debezium takes each signal id once; id varchar(42)


def test_a_snapshot_of_a_stream_without_a_signal_table_or_not_debezium_is_refused_in_one_line():
    from lakehouse.contracts.streams import StreamSpec

    spec = StreamSpec("orders", "orders", "debezium", ORDERS_PATH, "bronze.orders", "_source_ts", ("id",), ("id",))
    with pytest.raises(LakehouseError, match="stream 'orders' names no signal table: create the connector's"):
        cdc.request_snapshot(spec, "postgresql://me@db/shop")
    with pytest.raises(LakehouseError, match="stream 'orders' is a dms stream"):
        cdc.request_snapshot(replace(spec, format="dms", signal_table="public.s"), "postgresql://me@db/shop")


def test_excluded_columns_name_their_table_when_there_are_several():
    assert cdc.excluded_columns(["orders"], ("blob",)) == {"orders": ("blob",)}
    assert cdc.excluded_columns(["orders", "public.clients"], ("public.clients.note", "orders.blob")) == {
        "orders": ("blob",), "public.clients": ("note",)}
    with pytest.raises(LakehouseError, match="with several tables, name its table"):
        cdc.excluded_columns(["orders", "clients"], ("blob",))
    with pytest.raises(LakehouseError, match="'items' is not one of the tables added"):
        cdc.excluded_columns(["orders"], ("items.blob",))


def test_the_contract_names_the_columns_left_out():
    """`cdc verify` names any other column the contract lacks (test_real_cdc.py, against real databases)."""
    assert json.loads(cdc.contract(ORDERS))[EXCLUDED_KEYWORD] == ["blob"]
    assert EXCLUDED_KEYWORD not in json.loads(cdc.contract(CLIENTS))


def test_a_pipeline_file_whose_streams_are_not_its_last_section_is_not_appended_to(tmp_path):
    pipeline = tmp_path / "pipeline.yml"
    pipeline.write_text("streams:\n  a: {format: json}\nextra: 1\n")
    with pytest.raises(LakehouseError, match="`streams:` must be its last section"):
        cdc._schema_dir(pipeline)


def test_the_key_ordered_walk_counts_every_kind_of_difference_and_names_the_first_keys():
    from expectations.database_source import _merge

    def rows(pairs):
        return iter([(key, digest, {"v": digest.decode()}) for key, digest in pairs])

    source = [((1,), b"a"), ((2,), b"b"), ((4,), b"d"), ((5,), b"e")]
    mirror = [((1,), b"a"), ((2,), b"x"), ((3,), b"c"), ((3,), b"c"), ((5,), b"e"), ((6,), b"f")]
    check = _merge("t", rows(source), rows(mirror))
    assert (check.source_rows, check.mirror_rows) == (4, 6)
    assert (check.missing, check.extra, check.different, check.duplicated) == (1, 2, 1, 1)
    assert check.first_differing == ((2, "values differ"), (3, "not in the source"), (4, "missing from the mirror"),
                                     (6, "not in the source"))
    assert _merge("t", rows(source), rows(source)).equal


def test_the_walk_counts_the_differing_values_of_each_column_with_their_first_keys():
    """`cdc verify` says which columns differ, in how many rows, and where: not the totals alone
    (issue 56). Values compare as the digest does (1 and 1.00 alike); a missing key is no column's."""
    from decimal import Decimal

    from expectations.database_source import _digests, _merge

    def keyed(rows):
        return _digests(((key,), {"id": key, **row}) for key, row in rows)

    source = [(n, {"amount": Decimal(n), "note": f"n{n}", "day": "2026-11-20"}) for n in range(1, 10)]
    mirror = [(n, {**row, "amount": row["amount"] * (2 if n % 2 else 1) + Decimal("0.00"),
                   "note": row["note"] if n != 4 else None}) for n, row in source if n != 9]
    check = _merge("t", keyed(source), keyed(mirror), ["id", "day", "note", "amount"])
    assert (check.missing, check.different) == (1, 5)
    assert check.differing_columns == (("note", 1, (4,)), ("amount", 4, (1, 3, 5, 7)))
    assert check.describe_columns() == ["  note: 1 row differs (first keys: 4)",
                                        "  amount: 4 rows differ (first keys: 1; 3; 5; 7)"]
    many = [(n, {"v": n}) for n in range(20)]
    check = _merge("t", keyed(many), keyed([(n, {"v": -n - 1}) for n in range(20)]))
    assert check.differing_columns == (("v", 20, (0, 1, 2, 3, 4)),)  # the first five keys named


def test_the_models_yaml_tests_each_key_composite_keys_unique_together():
    """`cdc add` writes data tests for the mirror, the live table and the history: the key unique
    (together, for a composite key; macros/unique_key_columns.sql) and not null, the operations
    in their closed set, one current version per key. A name that needs quoting stays one name."""
    import yaml

    source = source_tables.SourceTable("postgresql", "sales", "public", "orders",
                                       {"order id": {"type": "integer"}, "line_no": {"type": "integer"},
                                        "qty": {"type": "integer"}}, key=("order id", "line_no"))
    written = cdc.models("shop_orders", source)
    models = {m["name"]: m for m in yaml.safe_load(written["models/silver/_shop_orders__models.yml"])["models"]}
    assert set(models) == {"shop_orders_mirror", "shop_orders", "shop_orders_history"}

    def key_tests(model):
        return [t["unique_key_columns"] for t in models[model]["data_tests"]]

    assert key_tests("shop_orders_mirror") == [{"arguments": {"columns": ["order id", "line_no"]}}]
    assert key_tests("shop_orders") == [{"arguments": {"columns": ["order id", "line_no"]}}]
    assert key_tests("shop_orders_history") == [
        {"arguments": {"columns": ["order id", "line_no", "_seq"]}},
        {"name": "shop_orders_history_one_current_version_per_key",
         "arguments": {"columns": ["order id", "line_no"]}, "config": {"where": "is_current"}}]
    for model in models:
        columns = {c["name"]: c for c in models[model]["columns"]}
        for key in ("order id", "line_no"):
            assert columns[key]["quote"] is True and "not_null" in str(columns[key]["data_tests"]), (model, key)
    mirror_ops = {c["name"]: c for c in models["shop_orders_mirror"]["columns"]}["op"]["data_tests"]
    assert {"accepted_values": {"arguments": {"values": ["I", "U", "D", "R", "T"]}}} in mirror_ops
    # the mirror's truncation marker, the one row without a key, is not a null key
    assert {c["name"]: c for c in models["shop_orders_mirror"]["columns"]}["line_no"]["data_tests"] == [
        {"not_null": {"config": {"where": "op <> 'T'"}}}]


def test_the_live_model_is_an_iceberg_table_kept_from_its_mirror_by_the_whole_key():
    """The live model `cdc add` writes is the `cdc_live` materialization (an Iceberg table every
    engine reads, macros/cdc_live.sql), not a view: keyed and bucketed as its mirror."""
    source = source_tables.SourceTable("postgresql", "sales", "public", "orders",
                                       {"order_id": {"type": "integer"}, "line_no": {"type": "integer"}},
                                       key=("order_id", "line_no"))
    written = cdc.models("shop_orders", source)
    live, mirror = written["models/silver/shop_orders.sql"], written["models/silver/shop_orders_mirror.sql"]
    config = re.search(r"config\((.*?)\) \}\}", live, re.S).group(1)
    assert config == f"materialized='cdc_live', unique_key={['order_id', 'line_no']!r}, buckets={cdc_models.BUCKETS}"
    assert f"buckets={cdc_models.BUCKETS}" in mirror and "cdc_mirror_config(['order_id', 'line_no']," in mirror
    assert re.search(r"^select \* from \{\{ ref\('shop_orders_mirror'\) \}\}$", live, re.M)


def test_the_quality_run_checks_an_added_stream_s_composite_key_unique_together():
    import dataclasses

    from expectations.suites import added_cdc_suites
    from lakehouse.contracts.streams import load_pipeline

    customers = load_pipeline()["customers"]
    added = dataclasses.replace(customers, name="shop_orders", identity_columns=("order_id", "line_no"))
    suites = {s.name: s for s in added_cdc_suites([customers, added])}
    assert set(suites) == {"silver.shop_orders_mirror", "silver.shop_orders", "silver.shop_orders.source",
                           "silver.shop_orders_history"}  # customers has its suites already
    compound = "expect_compound_columns_to_be_unique"
    for name in ("silver.shop_orders_mirror", "silver.shop_orders"):
        assert [e.kwargs["column_list"] for e in suites[name].expectations if e.type == compound] == [
            ["order_id", "line_no"]], name
    history = [dict(e.kwargs) for e in suites["silver.shop_orders_history"].expectations if e.type == compound]
    assert history == [{"column_list": ["order_id", "line_no", "_seq"]},
                       {"column_list": ["order_id", "line_no"], "row_condition": "is_current",
                        "condition_parser": "spark"}]


def test_a_table_with_a_column_named_like_one_bronze_writes_itself_is_refused_in_one_line():
    """Its contract would declare `op` beside the changelog's own `op`: the stream stopped at its
    first batch (an ambiguous column), and a field added so stayed recorded with the table. Every
    such column of every table is named at once (issue 56: one per run before), with the option
    that keeps it under another name."""
    table = source_tables.SourceTable("postgresql", "shop", "public", "orders",
                                      {"id": {"type": "integer"}, "op": {"type": "string"},
                                       "_SEQ": {"type": "integer"}}, ("id",))
    with pytest.raises(LakehouseError) as refused:
        cdc.check_source_column_names([table])
    assert str(refused.value) == (
        "table orders: columns op, _SEQ are named like columns bronze writes itself: name them otherwise in the "
        "stream with --rename-columns op=NAME,_SEQ=NAME (the table keeps its names), or leave them out with "
        "--exclude-columns op,_SEQ")
    readings = source_tables.SourceTable("postgresql", "shop", "public", "readings",
                                         {"id": {"type": "integer"}, "value": {"type": "number"},
                                          "timestamp": {"type": "string"}, "key": {"type": "string"}}, ("id",))
    with pytest.raises(LakehouseError) as refused:
        cdc.check_source_column_names([table, ORDERS, readings])
    assert str(refused.value) == (
        "columns named like one bronze writes itself: orders.op, orders._SEQ, readings.value, readings.timestamp, "
        "readings.key: name them otherwise in their streams with --rename-columns TABLE.COLUMN=NAME (the tables keep "
        "their names), or leave them out with --exclude-columns TABLE.COLUMN")
    cdc.check_source_column_names([ORDERS])  # no such column: nothing to refuse


def test_renamed_columns_name_their_table_when_there_are_several():
    assert cdc.renamed_columns(["readings"], ("value=reading", "timestamp = read_at")) == {
        "readings": {"value": "reading", "timestamp": "read_at"}}
    assert cdc.renamed_columns(["readings", "public.meters"], ("public.meters.key=meter_key", "readings.value=v")) == {
        "readings": {"value": "v"}, "public.meters": {"key": "meter_key"}}
    for entries, message in [(("value",), "expected COLUMN=NAME"), (("value=",), "expected COLUMN=NAME"),
                             (("value=a", "value=b"), "value is renamed twice"),
                             (("meters.key=k",), "'meters' is not one of the tables added")]:
        with pytest.raises(LakehouseError, match=message):
            cdc.renamed_columns(["readings"], entries)
    with pytest.raises(LakehouseError, match="with several tables, name its table"):
        cdc.renamed_columns(["readings", "meters"], ("value=v",))


def test_a_renamed_columns_contract_reads_its_source_field():
    """The contract declares the stream's name and the row field it reads (x-source-column): bronze,
    the models and `cdc verify` call the column by the stream's name, Debezium sends the table's."""
    readings = source_tables.SourceTable("postgresql", "shop", "public", "readings",
                                         {"id": {"type": "integer"}, "reading": {"type": "number"}}, ("id",),
                                         renamed={"reading": "value"})
    assert json.loads(cdc.contract(readings))["properties"] == {
        "id": {"type": "integer"}, "reading": {"type": "number", SOURCE_COLUMN_KEYWORD: "value"}}
    assert [source_tables.check_renames(renames, ["id", "value", "key"], exclude, "t") for renames, exclude in (
        ({"value": "reading"}, ()), ({"value": "value"}, ()))] == [{"value": "reading"}, {}]
    for renames, exclude, message in [({"nope": "x"}, (), "table t has no column nope"),
                                      ({"value": "x"}, ("value",), "value is left out"),
                                      ({"value": "key"}, (), "would have two columns named key"),
                                      ({"value": "x", "key": "x"}, (), "would have two columns named x")]:
        with pytest.raises(LakehouseError, match=message):
            source_tables.check_renames(renames, ["id", "value", "key"], exclude, "t")


@pytest.mark.parametrize("runtime, key", [("kafka-connect", "publish.via.partition.root"),
                                          ("debezium-server", "debezium.source.publish.via.partition.root")])
def test_the_printed_publication_publishes_a_partitioned_table_under_its_own_name(runtime, key):
    """Without it, the publication the connector creates publishes a partitioned table's changes
    under its partitions' names, which table.include.list leaves out: every change after the
    snapshot lost in silence (issue 56). PostgreSQL only: MySQL has no publication."""
    text = cdc.debezium_properties("shop", [("orders", ORDERS)], "postgresql://me@db/shop", Settings.from_env({}),
                                   runtime)
    assert java_properties(text)[key] == "true"
    assert java_properties(text)[key.replace("publish.via.partition.root", "publication.autocreate.mode")] == "filtered"
    maria = source_tables.SourceTable("mysql", "shop", None, "orders", {"id": {"type": "integer"}}, ("id",))
    assert "partition" not in cdc.debezium_properties("shop", [("orders", maria)], "mariadb://me@db/shop",
                                                      Settings.from_env({}), runtime)
