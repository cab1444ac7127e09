import io
import random
import uuid
from datetime import UTC, datetime, timedelta

import fastavro
import pytest

from lakehouse.contracts import wire
from lakehouse.contracts.registry import LocalSchemaRegistry, SchemaNotFound
from producers import avro, purchases
from producers.purchases import SCHEMAS, decode, encode, key, make_purchase, payloads, register_schemas
from tests.support.deliveries import capture_sends

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


@pytest.fixture
def registry(tmp_path):
    return LocalSchemaRegistry(tmp_path / "registry" / "schemas.json")


@pytest.fixture
def schema_ids(registry):
    return register_schemas(registry)


def as_written(decoded: dict) -> dict:
    """A decoded purchase as make_purchase wrote it: timestamp-millis reads back as a datetime."""
    return {**decoded, "transaction_time": int(decoded["transaction_time"].timestamp() * 1000)}


def test_both_versions_register_once_under_the_value_subject(registry, schema_ids):
    assert schema_ids == {1: 1, 2: 2}
    assert register_schemas(LocalSchemaRegistry(registry.path)) == schema_ids
    assert registry.subject_versions("purchases-value") == [1, 2]


@pytest.mark.parametrize("version", [1, 2])
def test_round_trip_with_the_writer_schema(registry, schema_ids, version):
    rng = random.Random(version)
    for _ in range(500):
        purchase = make_purchase(rng, NOW, version)
        data = encode(purchase, schema_ids[version], SCHEMAS[version].parsed)
        assert data[:5] == wire.frame(schema_ids[version], b"")
        schema_id, decoded = decode(data, registry)
        assert schema_id == schema_ids[version]
        assert decoded["transaction_time"].tzinfo is not None
        assert as_written(decoded) == purchase


def test_v2_adds_only_an_optional_payment_method():
    v1 = [make_purchase(random.Random(3), NOW, 1)]
    v2 = [make_purchase(rng := random.Random(4), NOW, 2)] + [make_purchase(rng, NOW, 2) for _ in range(999)]
    assert "payment_method" not in v1[0]
    assert set(v2[0]) == set(v1[0]) | {"payment_method"}
    methods = {p["payment_method"] for p in v2}
    assert None in methods and {"card", "cash", "wallet", "voucher"} <= methods
    v2_fields = [f["name"] for f in SCHEMAS[2].parsed["fields"]]
    assert v2_fields == [f["name"] for f in SCHEMAS[1].parsed["fields"]] + ["payment_method"]


def test_v2_readers_read_v1_data():
    """Backward compatible: a consumer already on v2 reads what v1 producers still write."""
    purchase = make_purchase(random.Random(5), NOW, 1)
    body = io.BytesIO()
    fastavro.schemaless_writer(body, SCHEMAS[1].parsed, purchase)
    body.seek(0)
    read = fastavro.schemaless_reader(body, SCHEMAS[1].parsed, SCHEMAS[2].parsed)
    assert as_written(read) == {**purchase, "payment_method": None}


def test_generated_purchases_are_consistent():
    rng = random.Random(6)
    batch = [make_purchase(rng, NOW, 2) for _ in range(3000)]
    assert len({p["transaction_id"] for p in batch}) == len(batch)
    assert all(uuid.UUID(p["transaction_id"]).version == 4 for p in batch)
    assert all(p["amount"] == round(p["quantity"] * p["unit_price"], 2) for p in batch)
    assert all(purchases.STORES[p["store_id"]][0] == p["currency"] for p in batch)
    assert all(1 <= p["customer_id"] <= purchases.CUSTOMERS and 1 <= p["quantity"] <= 5 for p in batch)
    earliest = NOW - timedelta(milliseconds=purchases.MAX_DELAY_MS)
    assert all(earliest.timestamp() * 1000 <= p["transaction_time"] <= NOW.timestamp() * 1000 for p in batch)
    # A product costs the same in every purchase at the same store.
    prices = {}
    for p in batch:
        assert prices.setdefault((p["product_id"], p["store_id"]), p["unit_price"]) == p["unit_price"]
    assert key(batch[0]) == batch[0]["transaction_id"].encode()


def test_same_seed_same_purchases():
    assert [make_purchase(random.Random(7), NOW, 2) for _ in range(3)] == \
        [make_purchase(random.Random(7), NOW, 2) for _ in range(3)]


def test_fast_uuid_matches_the_standard_library():
    rng = random.Random(8)
    for _ in range(1000):
        raw = rng.randbytes(16)
        assert purchases._uuid4(raw) == str(uuid.UUID(bytes=raw, version=4))


def test_unknown_version_is_refused():
    with pytest.raises(ValueError, match="unknown purchases schema version 3"):
        make_purchase(random.Random(), NOW, 3)


def test_payloads_mix_versions(registry, schema_ids):
    seen = {}
    for message_key, value in payloads(random.Random(9), NOW, 400, schema_ids):
        schema_id, decoded = decode(value, registry)
        assert message_key == decoded["transaction_id"].encode()
        assert ("payment_method" in decoded) == (schema_id == schema_ids[2])
        seen[schema_id] = seen.get(schema_id, 0) + 1
    assert set(seen) == {1, 2} and min(seen.values()) > 100


def test_decode_refuses_what_is_not_a_framed_purchase(registry, schema_ids):
    good = encode(make_purchase(random.Random(10), NOW, 1), schema_ids[1], SCHEMAS[1].parsed)
    with pytest.raises(ValueError, match="magic byte"):
        decode(b"\x01" + good[1:], registry)
    with pytest.raises(ValueError, match="need at least 5"):
        decode(good[:3], registry)
    with pytest.raises(SchemaNotFound):
        decode(wire.frame(99, good[5:]), registry)
    with pytest.raises(ValueError, match="not a lakehouse.demo.Purchase Avro body"):
        decode(good[:20], registry)
    with pytest.raises(ValueError, match="bytes left after"):
        decode(good + b"\x00\x00", registry)


def test_parsed_schemas_are_reused():
    assert avro.parsed(SCHEMAS[2].text) is avro.parsed(SCHEMAS[2].text)


def test_produce_registers_both_versions_then_sends_a_mix(monkeypatch, registry):
    sent = capture_sends(monkeypatch)
    purchases.produce(None, 2500, seed=3, progress=False, registry=registry)
    assert registry.subject_versions("purchases-value") == [1, 2]
    batch = sent["purchases"]
    assert len(batch) == 2500
    ids = [decode(value, registry)[0] for _k, value, _p, _f in batch]
    assert set(ids) == {1, 2}

    purchases.produce(None, 100, seed=4, progress=False, registry=registry, versions=[1])
    assert {decode(value, registry)[0] for _k, value, _p, _f in sent["purchases"]} == {1}


def test_produce_refuses_unknown_versions(registry):
    with pytest.raises(ValueError, match="non-empty subset"):
        purchases.produce(None, 10, registry=registry, versions=[3])


def test_fault_hooks_break_purchases_the_promised_way(registry):
    """Truncated bodies never decode, garbled bytes have no magic byte, unknown ids are unknown,
    and evolution switches a record to schema v2."""
    import random
    from datetime import UTC, datetime

    from lakehouse.contracts import wire
    from lakehouse.contracts.registry import SchemaNotFound
    from producers.avro import decode_body

    ids = purchases.register_schemas(registry)
    hooks = purchases.fault_hooks(ids)
    rng = random.Random(2)
    now = datetime(2026, 11, 21, tzinfo=UTC)
    for _ in range(300):
        record = (1, purchases.make_purchase(rng, now, 1))
        schema_id, body = wire.unframe(hooks.corrupt["truncated"](record, rng))
        assert schema_id == ids[1]
        with pytest.raises(ValueError):
            decode_body(body, purchases.SCHEMAS[1].parsed)
        with pytest.raises(ValueError):
            wire.unframe(hooks.corrupt["garbled"](record, rng))
        unknown_id, _ = wire.unframe(hooks.unknown_schema_id(record, rng))
        with pytest.raises(SchemaNotFound):
            registry.get_schema(unknown_id)
        version, evolved = hooks.evolve(record, rng)
        assert version == 2 and "payment_method" in evolved
        schema_id, decoded = purchases.decode(hooks.encode((version, evolved)), registry)
        assert schema_id == ids[2] and decoded["payment_method"] == evolved["payment_method"]
