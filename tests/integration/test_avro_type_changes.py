"""A producer's Avro type changes through the stream's decoder (ingestion/decoders.py
AvroStreamDecoder, ingestion/formats/avro.py decode_avro), in Spark: every value lands exactly or its
record is a dead row SCHEMA_MISMATCH naming the writer schema id, the field and both types.

Each test registers its writer schemas under a subject of its own (the local file registry),
decodes framed records and checks the decoded rows value by value. Before this, the union of
the writer schemas kept the first type of a field and every value was cast with ANSI off: 2.7
became 2, "abc" over a number null, a nested record's fields were cast by position, a nested
field a writer added failed the plan.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from ingestion.decoders import AvroStreamDecoder
from lakehouse.contracts.registry import LocalSchemaRegistry, registry_path
from lakehouse.contracts.streams import StreamSpec
from lakehouse.core.settings import Settings
from producers import avro

pytestmark = pytest.mark.integration  # Spark in this process (tests/unit starts no JVM)

NOW = datetime(2026, 12, 3, 12, tzinfo=UTC)
NOW_MS = int(NOW.timestamp() * 1000)
SHIP = {"type": "record", "name": "Ship", "fields": [{"name": "city", "type": "string"},
                                                     {"name": "zip", "type": "string"}]}
ITEM = {"type": "record", "name": "Item", "fields": [{"name": "sku", "type": "string"}, {"name": "n", "type": "int"}]}
PRICE = {"type": "record", "name": "Price", "fields": [{"name": "currency", "type": "string"},
                                                       {"name": "cents", "type": "long"}]}


def decimal(precision: int, scale: int) -> dict:
    return {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}


def schema(**fields) -> str:
    """A record of ``id`` (string), ``ts`` (timestamp-millis) and ``fields``, each nullable."""
    return json.dumps({"type": "record", "name": "Order", "namespace": "test", "fields": [
        {"name": "id", "type": "string"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        *[{"name": name, "type": ["null", kind], "default": None} for name, kind in fields.items()]]})


class Stream:
    """A stream of its own: contract file, subject, decoder; ``send`` frames records by writer."""

    def __init__(self, tmp_path: Path, spark, contract: str):
        self.spark, self.contract = spark, tmp_path / "order.avsc"
        self.contract.write_text(contract)
        self.settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path / "home")})
        registry_path(self.settings).parent.mkdir(parents=True)
        self.registry = LocalSchemaRegistry(registry_path(self.settings))
        spec = StreamSpec(name="orders", topic="orders", format="avro", schema_path=self.contract,
                          bronze_table="bronze.orders", event_time_column="ts", identity_columns=("id",),
                          required_columns=("id", "ts"), subject="orders-value")
        self.decoder = AvroStreamDecoder(spark, self.settings, spec)
        self.messages: list[bytes] = []

    def register(self, text: str) -> int:
        return self.registry.register("orders-value", text)

    def send(self, schema_id: int, text: str, **values) -> None:
        record = {"id": f"r{len(self.messages)}", "ts": NOW_MS, **values}
        self.messages.append(avro.encode(record, schema_id, avro.parsed(text)))

    def decoded(self) -> list:
        """The decoded rows, in the order sent."""
        self.decoder.refresh()
        rows = [(b"k", value, "orders", 0, offset, NOW) for offset, value in enumerate(self.messages)]
        raw = self.spark.createDataFrame(rows, "key binary, value binary, topic string, partition int, "
                                               "offset long, timestamp timestamp")
        return self.decoder.decode(raw, NOW).orderBy("offset").collect()


@pytest.fixture
def stream(tmp_path, spark):
    return lambda contract: Stream(tmp_path, spark, contract)


def test_a_double_where_bronze_holds_an_int_is_a_dead_row_naming_the_writer_and_the_field(stream, caplog):
    """int -> double, which a BACKWARD registry accepts: 2.7 became 2 in bronze, in silence. A
    whole double (3.0) is dead too: the rule is the writer's type, not the value, so a writer's
    records never land or die by their numbers; a null holds exactly and lands."""
    caplog.set_level(logging.INFO, logger="lakehouse.ingest")
    v1, v2 = schema(quantity="int"), schema(quantity="double")
    orders = stream(v1)
    first, second = orders.register(v1), orders.register(v2)
    orders.send(first, v1, quantity=4)
    orders.send(second, v2, quantity=2.7)
    orders.send(second, v2, quantity=3.0)
    orders.send(second, v2, quantity=None)
    rows = orders.decoded()
    assert [(r._error_code, r.quantity) for r in rows] == [
        (None, 4), ("SCHEMA_MISMATCH", None), ("SCHEMA_MISMATCH", None), (None, None)]
    assert rows[1]._error_detail == rows[2]._error_detail == (
        f"writer schema id {second}: quantity is double in the writer, int in bronze: not held exactly, never cast")
    assert rows[1]._schema_id == second
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [m for m in warned if f"writer schema id {second} under orders-value sends quantity is double in the "
            "writer, int in bronze" in m]


def test_a_string_over_a_number_is_a_dead_row(stream):
    """A subject with compatibility NONE (or a local registry) takes any change: "7" became 7 and
    "abc" null."""
    v1, v2 = schema(customer="long"), schema(customer="string")
    orders = stream(v1)
    first, second = orders.register(v1), orders.register(v2)
    orders.send(first, v1, customer=2**40)
    orders.send(second, v2, customer="7")
    orders.send(second, v2, customer="abc")
    orders.send(second, v2, customer=None)
    rows = orders.decoded()
    assert [(r._error_code, r.customer) for r in rows] == [
        (None, 2**40), ("SCHEMA_MISMATCH", None), ("SCHEMA_MISMATCH", None), (None, None)]
    assert "customer is string in the writer, bigint in bronze" in rows[2]._error_detail


def test_nested_records_are_fitted_by_name_never_by_position(stream):
    """A writer whose nested record lists its fields in another order (in a struct, in an array's
    elements, in a map's values): each value under its own name (before: cast by position, the
    city in the zip column and the zip in the city column)."""
    item_reordered = {**ITEM, "fields": list(reversed(ITEM["fields"]))}
    price_reordered = {**PRICE, "fields": list(reversed(PRICE["fields"]))}
    v1 = schema(ship=SHIP, items={"type": "array", "items": ITEM}, prices={"type": "map", "values": PRICE})
    v2 = schema(ship={**SHIP, "fields": list(reversed(SHIP["fields"]))},
                items={"type": "array", "items": item_reordered}, prices={"type": "map", "values": price_reordered})
    orders = stream(v1)
    first, second = orders.register(v1), orders.register(v2)
    orders.send(first, v1, ship={"city": "Lyon", "zip": "69001"}, items=[{"sku": "a", "n": 1}],
                prices={"eu": {"currency": "EUR", "cents": 10}})
    orders.send(second, v2, ship={"city": "Paris", "zip": "75001"}, items=[{"sku": "b", "n": 2}, {"sku": "c", "n": 3}],
                prices={"us": {"currency": "USD", "cents": 20}})
    rows = orders.decoded()
    assert [r._error_code for r in rows] == [None, None]
    assert [r.ship.asDict() for r in rows] == [{"city": "Lyon", "zip": "69001"}, {"city": "Paris", "zip": "75001"}]
    assert [[i.asDict() for i in r.items] for r in rows] == [
        [{"sku": "a", "n": 1}], [{"sku": "b", "n": 2}, {"sku": "c", "n": 3}]]
    assert [{k: v.asDict() for k, v in r.prices.items()} for r in rows] == [
        {"eu": {"currency": "EUR", "cents": 10}}, {"us": {"currency": "USD", "cents": 20}}]


def test_a_nested_field_a_writer_adds_is_a_new_nested_column_filled_from_its_records(stream):
    """Before: the union kept the first nested record, and casting the writer's wider one to it
    failed the plan of every batch."""
    v1 = schema(ship=SHIP, items={"type": "array", "items": ITEM})
    ship_v2 = {**SHIP, "fields": [*SHIP["fields"], {"name": "country", "type": ["null", "string"], "default": None}]}
    item_v2 = {**ITEM, "fields": [*ITEM["fields"], {"name": "color", "type": ["null", "string"], "default": None}]}
    v2 = schema(ship=ship_v2, items={"type": "array", "items": item_v2})
    orders = stream(v1)
    first, second = orders.register(v1), orders.register(v2)
    orders.send(first, v1, ship={"city": "Lyon", "zip": "69001"}, items=[{"sku": "a", "n": 1}])
    orders.send(second, v2, ship={"city": "Paris", "zip": "75001", "country": "FR"},
                items=[{"sku": "b", "n": 2, "color": "red"}])
    rows = orders.decoded()
    assert [r._error_code for r in rows] == [None, None]
    assert [r.ship.asDict() for r in rows] == [{"city": "Lyon", "zip": "69001", "country": None},
                                              {"city": "Paris", "zip": "75001", "country": "FR"}]
    assert [[i.asDict() for i in r.items] for r in rows] == [
        [{"sku": "a", "n": 1, "color": None}], [{"sku": "b", "n": 2, "color": "red"}]]
    assert orders.decoder.bronze_schema()["ship"].dataType.names == ["city", "zip", "country"]


def test_a_decimal_precision_widening_lands_exactly_and_a_scale_change_is_dead(stream):
    """decimal(5,2) then decimal(9,2): the column widens in place (before: kept at (5,2), and
    1234567.89 cast into it became null). decimal(6,3) has another scale, which Iceberg never
    changes: 1.234 is not rounded to 1.23, its record is dead."""
    v1, v2, v3 = schema(discount=decimal(5, 2)), schema(discount=decimal(9, 2)), schema(discount=decimal(6, 3))
    orders = stream(v1)
    ids = [orders.register(text) for text in (v1, v2, v3)]
    orders.send(ids[0], v1, discount=Decimal("123.45"))
    orders.send(ids[1], v2, discount=Decimal("1234567.89"))
    orders.send(ids[2], v3, discount=Decimal("1.234"))
    rows = orders.decoded()
    assert orders.decoder.bronze_schema()["discount"].dataType.simpleString() == "decimal(9,2)"
    assert [(r._error_code, r.discount) for r in rows] == [
        (None, Decimal("123.45")), (None, Decimal("1234567.89")), ("SCHEMA_MISMATCH", None)]
    assert "discount is decimal(6,3) in the writer, decimal(9,2) in bronze" in rows[2]._error_detail


def test_narrower_types_the_column_holds_and_int_to_long_land_exactly(stream):
    v1 = schema(price="double", quantity="int", amount=decimal(12, 2))
    v2 = schema(price="int", quantity="long", amount="int")
    v3 = schema(price="float", quantity="int", amount=decimal(4, 1))
    orders = stream(v1)
    ids = [orders.register(text) for text in (v1, v2, v3)]
    orders.send(ids[0], v1, price=2.7, quantity=1, amount=Decimal("10.05"))
    orders.send(ids[1], v2, price=2**31 - 1, quantity=2**40 + 3, amount=-(2**31))
    orders.send(ids[2], v3, price=0.5, quantity=2, amount=Decimal("999.9"))
    rows = orders.decoded()
    assert [r._error_code for r in rows] == [None, None, None]
    assert [(r.price, r.quantity, r.amount) for r in rows] == [
        (2.7, 1, Decimal("10.05")), (2**31 - 1, 2**40 + 3, Decimal("-2147483648.00")), (0.5, 2, Decimal("999.90"))]


def test_a_contract_that_declares_a_type_wide_enough_lands_the_dead_records_again(stream, caplog):
    """A writer sends whole units as an int where bronze has decimal(9,2) (7 digits before the
    point: no int fits): dead, and nothing invents a wider type. The contract's fix: declare the
    field decimal(12,2) in the stream's schema file, a precision widening Iceberg makes in place;
    the same bytes decoded again (what `lakehouse dlq replay` does) land exactly."""
    caplog.set_level(logging.INFO, logger="lakehouse.ingest")
    v1, v2 = schema(discount=decimal(9, 2)), schema(discount="int")
    orders = stream(schema())
    first, second = orders.register(v1), orders.register(v2)
    orders.send(first, v1, discount=Decimal("1234567.89"))
    orders.send(second, v2, discount=2_000_000_000)
    before = orders.decoded()
    assert [(r._error_code, r.discount) for r in before] == [(None, Decimal("1234567.89")), ("SCHEMA_MISMATCH", None)]
    assert "discount is int in the writer, decimal(9,2) in bronze" in before[1]._error_detail

    orders.contract.write_text(schema(discount=decimal(12, 2)))
    after = orders.decoded()
    assert orders.decoder.bronze_schema()["discount"].dataType.simpleString() == "decimal(12,2)"
    assert [(r._error_code, r.discount) for r in after] == [
        (None, Decimal("1234567.89")), (None, Decimal("2000000000.00"))]
    assert any(f"writer schema id {second} under orders-value now fits bronze" in r.getMessage()
               for r in caplog.records)


def test_a_misfit_inside_an_array_or_a_map_is_found_in_any_element(stream):
    """The check looks into every element of an array and every value of a map: a record with a
    value of the wrong type in any of them is dead; one whose elements hold null there lands."""
    item_text = {**ITEM, "fields": [{"name": "sku", "type": "string"}, {"name": "n", "type": ["null", "string"]}]}
    price_double = {**PRICE, "fields": [{"name": "currency", "type": "string"}, {"name": "cents", "type": "double"}]}
    v1 = schema(items={"type": "array", "items": ITEM}, prices={"type": "map", "values": PRICE})
    v2 = schema(items={"type": "array", "items": item_text}, prices={"type": "map", "values": price_double})
    orders = stream(v1)
    first, second = orders.register(v1), orders.register(v2)
    orders.send(second, v2, items=[{"sku": "a", "n": None}, {"sku": "b", "n": "2"}])
    orders.send(second, v2, prices={"eu": {"currency": "EUR", "cents": 1.5}})
    orders.send(second, v2, items=[{"sku": "c", "n": None}], prices={})
    orders.send(first, v1, items=[{"sku": "d", "n": 4}])
    rows = orders.decoded()
    assert [r._error_code for r in rows] == ["SCHEMA_MISMATCH", "SCHEMA_MISMATCH", None, None]
    assert rows[0]._error_detail == (f"writer schema id {second}: items.element.n is string in the writer, int in "
                                     "bronze: not held exactly, never cast")
    assert "prices.value.cents is double in the writer, bigint in bronze" in rows[1]._error_detail
    assert [[i.asDict() for i in r.items] for r in rows[2:]] == [[{"sku": "c", "n": None}], [{"sku": "d", "n": 4}]]
