"""A producer changes a field's type: every value lands exactly in bronze and silver, or its record
is a dead row SCHEMA_MISMATCH naming the writer schema and the field, replayed once the contract
is fixed (issue 56, item 1; ARCHITECTURE §6 "Producer type changes").

The purchases stream in a lakehouse of its own (broker, catalog, state folder), its writer
schemas in a Confluent-API registry reached over HTTP (tests/support/registry_server.py, which
checks BACKWARD compatibility as Avro resolves schemas), its contract a copy of
purchases-v1.avsc (a pipeline file of the test's own), so the test can fix it. Registered under
`purchases-value` after the producer's v1 and v2, BACKWARD-compatible:

- quantity long, plus a `shipping` record {city, zip} and a `discount` decimal(5,2): int -> long;
- `shipping`'s fields in another order: cast by position, or a failed plan;
- `shipping` with a `country` added and `discount` decimal(9,2): a nested field added failed
  the plan of every batch, and the decimal stayed (5,2);
- quantity double (a promotion Avro allows): 2.7 became 2 in bronze, no dead letter, no word;

then, with the subject's compatibility NONE: customer_id a string ("123" became 123, "abc"
null), and `discount` an int where bronze has decimal(9,2) (no int fits 7 digits: cast, 2e9
became null). The fix for the last: the contract declares `discount` decimal(12,2), which bronze
widens to in place; `lakehouse dlq replay` (the real command, reaching the registry over HTTP)
lands those records with their exact values, and the next dbt run carries them into silver.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import subprocess
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from ingestion import job
from lakehouse.contracts.registry import registry_for
from producers import avro, purchases
from producers.delivery import ensure_topic, producer_config
from tests.conftest import REPO_ROOT
from tests.integration.dbt_in_process import run_dbt
from tests.integration.own_lakehouse import cli_env, own_lakehouse
from tests.support.registry_server import registry_server

pytestmark = pytest.mark.integration

LAKEHOUSE = str(Path(os.sys.executable).parent / "lakehouse")
NO_OVERLAP = ["--vars", '{"overlap_minutes": 0}']  # the run after the replay finds it by _ingested_at alone
SHIP = {"type": "record", "name": "Shipping", "fields": [{"name": "city", "type": "string"},
                                                        {"name": "zip", "type": "string"}]}
SHIP_REORDERED = {**SHIP, "fields": list(reversed(SHIP["fields"]))}
SHIP_WITH_COUNTRY = {**SHIP, "fields": [*SHIP["fields"], {"name": "country", "type": ["null", "string"],
                                                          "default": None}]}


def decimal(precision: int) -> dict:
    return {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": 2}


def version(quantity="long", customer_id="long", shipping=SHIP, discount=decimal(5)) -> str:
    """purchases v2 with these types, and the optional `shipping` and `discount` fields."""
    schema = json.loads(purchases.SCHEMAS[2].text)
    types = {"quantity": quantity, "customer_id": customer_id}
    schema["fields"] = [{**f, "type": types.get(f["name"], f["type"])} for f in schema["fields"]] + [
        {"name": "shipping", "type": ["null", shipping], "default": None},
        {"name": "discount", "type": ["null", discount], "default": None}]
    return json.dumps(schema)


# name: (schema, compatibility NONE first?, the records' changed fields)
WRITERS = {
    "long": (version(), False, [{"quantity": 2**40 + 7, "shipping": {"city": "Lyon", "zip": "69001"},
                                 "discount": Decimal("12.34")}]),
    "reordered": (version(shipping=SHIP_REORDERED), False, [{"shipping": {"zip": "75001", "city": "Paris"}}]),
    "nested_added": (version(shipping=SHIP_WITH_COUNTRY, discount=decimal(9)), False,
                     [{"shipping": {"city": "Nice", "zip": "06000", "country": "FR"},
                       "discount": Decimal("1234567.89")}]),
    "double": (version(quantity="double"), False, [{"quantity": 2.7}, {"quantity": 3.0}]),
    "string": (version(customer_id=["null", "string"]), True, [{"customer_id": "123"}, {"customer_id": "abc"},
                                                               {"customer_id": None}]),
    "int_discount": (version(discount="int"), True, [{"discount": 15}, {"discount": 2_000_000_000}]),
}


@pytest.fixture(scope="module")
def lake(spark, settings, tmp_path_factory):
    contracts = tmp_path_factory.mktemp("type-changes-contracts")
    shutil.copy(purchases.SCHEMAS_DIR / "purchases-v1.avsc", contracts)
    (contracts / "pipeline.yml").write_text(yaml.safe_dump({"schema_dir": str(contracts), "streams": {
        "purchases": {"format": "avro", "schema": "purchases-v1.avsc", "event_time": "transaction_time",
                      "identity": ["transaction_id"]}}}))
    with pytest.MonkeyPatch.context() as patch, registry_server() as (registry, url), \
            own_lakehouse(spark, settings, tmp_path_factory, "type-changes",
                          extra_env={"LAKEHOUSE_SCHEMA_REGISTRY_URL": url}) as (own, session, target):
        patch.setenv("LAKEHOUSE_PIPELINE_FILE", str(contracts / "pipeline.yml"))
        yield own, session, target, registry, contracts


@pytest.fixture(scope="module")
def ingested(lake):
    """Every writer's purchases produced and ingested once: {writer: [(transaction_id, record)]}, the
    writers' schema ids, and the ingestion's log lines."""
    own, session, target, registry, _ = lake
    client = registry_for(own)
    ids = purchases.register_schemas(client)  # v1 and v2, as the producer does
    schema_ids, sent = {"v1": ids[1], "v2": ids[2]}, {}
    rng, now = random.Random(56), datetime.now(UTC)
    messages = []
    for name in ("v1", "v2"):
        for _ in range(3):
            record = purchases.make_purchase(rng, now, int(name[1]))
            sent.setdefault(name, []).append((record["transaction_id"], record))
            messages.append((purchases.key(record), purchases.encode(record, schema_ids[name],
                                                                     purchases.SCHEMAS[int(name[1])].parsed)))
    for name, (text, none_first, changes) in WRITERS.items():
        if none_first:
            client.client.set_compatibility(purchases.SUBJECT, "NONE")
        schema_ids[name] = client.register(purchases.SUBJECT, text)
        for change in changes:
            record = {**purchases.make_purchase(rng, now, 2), "shipping": None, "discount": None, **change}
            sent.setdefault(name, []).append((record["transaction_id"], record))
            messages.append((purchases.key(record), avro.encode(record, schema_ids[name], avro.parsed(text))))
    assert registry.compatibility == {purchases.SUBJECT: "NONE"}  # set before the last two only
    from confluent_kafka import Producer

    ensure_topic(own, purchases.TOPIC)
    producer = Producer(producer_config(own))
    for key, value in messages:
        producer.produce(purchases.TOPIC, value, key)
    assert producer.flush(30) == 0
    logger = logging.getLogger("lakehouse.ingest")
    seen = _Lines()
    logger.addHandler(seen)
    try:
        job.run(session, own, ["purchases"], available_now=True)
    finally:
        logger.removeHandler(seen)
    run_dbt(own, ["run", "--select", "purchases", *NO_OVERLAP], target_dir=target)
    return sent, schema_ids, seen.lines


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def bronze_rows(session) -> dict[str, object]:
    """Bronze's rows by transaction id (good rows), and the dead rows by their Kafka key."""
    rows = session.table("bronze.purchases").collect()
    return {(r.transaction_id if r._error_code is None else bytes(r._raw_key).decode()): r for r in rows}


def silver_rows(session) -> dict[str, object]:
    return {r.transaction_id: r for r in session.table("silver.purchases").collect()}


def test_every_value_lands_exactly_or_is_a_dead_row_naming_the_writer_and_the_field(lake, ingested):
    own, session, *_ = lake
    sent, ids, log_lines = ingested
    bronze = bronze_rows(session)
    assert len(bronze) == sum(len(records) for records in sent.values())  # every offset once
    types = dict(session.table("bronze.purchases").dtypes)
    assert (types["quantity"], types["discount"]) == ("bigint", "decimal(9,2)")
    assert types["shipping"] == "struct<city:string,zip:string,country:string>"

    def good(name):
        return [bronze[tid] for tid, _ in sent[name]]

    # int -> long, exactly; v1 and v2 records as they were
    assert [r.quantity for r in good("long")] == [2**40 + 7]
    assert all(r._error_code is None and r.quantity == record["quantity"]
               for name in ("v1", "v2") for r, (_, record) in zip(good(name), sent[name], strict=True))
    # a nested record by name, whatever the order of its fields; a nested field a writer adds
    assert [r.shipping.asDict() for r in good("long") + good("reordered") + good("nested_added")] == [
        {"city": "Lyon", "zip": "69001", "country": None}, {"city": "Paris", "zip": "75001", "country": None},
        {"city": "Nice", "zip": "06000", "country": "FR"}]
    # decimal(5,2) then decimal(9,2): widened in place, both exact
    assert [r.discount for r in good("long") + good("nested_added")] == [Decimal("12.34"), Decimal("1234567.89")]
    # a string over a number: dead, but a null is held exactly and lands
    assert [(r._error_code, r.customer_id) for r in good("string")] == [
        ("SCHEMA_MISMATCH", None), ("SCHEMA_MISMATCH", None), (None, None)]

    dead = {name: [(r._error_code, r._schema_id, r._error_detail, r.quantity) for r in good(name)]
            for name in ("double", "int_discount")}
    # 2.7 and a whole 3.0 alike: the writer's type decides, not the value
    assert dead["double"] == [("SCHEMA_MISMATCH", ids["double"], f"writer schema id {ids['double']}: quantity is "
                               "double in the writer, bigint in bronze: not held exactly, never cast", None)] * 2
    assert dead["int_discount"] == [("SCHEMA_MISMATCH", ids["int_discount"], f"writer schema id {ids['int_discount']}"
                                     ": discount is int in the writer, decimal(9,2) in bronze: not held exactly, "
                                     "never cast", None)] * 2
    assert "customer_id is string in the writer, bigint in bronze" in good("string")[0]._error_detail
    assert all(bytes(r._raw_value)[1:5] == ids["double"].to_bytes(4, "big") for r in good("double"))  # replayable

    # said before the first record of it was decoded, naming the writer and the field
    assert [line for line in log_lines if f"writer schema id {ids['double']} under purchases-value sends quantity "
            "is double in the writer, bigint in bronze" in line]

    # silver: the good rows, their values exact; no dead one
    silver = silver_rows(session)
    good_ids = {tid for name, records in sent.items() for tid, _ in records if bronze[tid]._error_code is None}
    assert set(silver) == good_ids
    assert silver[sent["long"][0][0]].quantity == 2**40 + 7
    assert dict(session.table("silver.purchases").dtypes)["quantity"] == "bigint"


def test_a_contract_fix_and_a_replay_land_the_dead_records_exactly(lake, ingested):
    """discount: bronze decimal(9,2), a writer's int. The contract declares decimal(12,2); the
    replay widens bronze in place and lands them; the mismatches no type fixes stay dead."""
    own, session, target, _, contracts = lake
    sent, ids, _ = ingested
    contract = contracts / "purchases-v1.avsc"
    document = json.loads(contract.read_text())
    document["fields"].append({"name": "discount", "type": ["null", decimal(12)], "default": None})
    contract.write_text(json.dumps(document))

    replayed = subprocess.run([LAKEHOUSE, "dlq", "replay", "--stream", "purchases", "--reason", "SCHEMA_MISMATCH"],
                              cwd=REPO_ROOT, env=cli_env(own), capture_output=True, text=True, timeout=600)
    assert replayed.returncode == 0, replayed.stderr[-3000:]

    assert dict(session.table("bronze.purchases").dtypes)["discount"] == "decimal(12,2)"
    bronze = bronze_rows(session)
    fixed = [bronze[tid] for tid, _ in sent["int_discount"]]
    assert [(r._error_code, r.discount, r._replayed_error_code) for r in fixed] == [
        (None, Decimal("15.00"), "SCHEMA_MISMATCH"), (None, Decimal("2000000000.00"), "SCHEMA_MISMATCH")]
    assert [bronze[tid].discount for tid in (sent["long"][0][0], sent["nested_added"][0][0])] == [
        Decimal("12.34"), Decimal("1234567.89")]  # rows written before the widening read the same
    still = [bronze[tid] for name in ("double", "string") for tid, _ in sent[name][:2]]
    assert [(r._error_code, r._replay_attempts) for r in still] == [("SCHEMA_MISMATCH", 1)] * 4

    run_dbt(own, ["run", "--select", "purchases", *NO_OVERLAP], target_dir=target)
    silver = silver_rows(session)
    assert {tid for tid, _ in sent["int_discount"]} <= set(silver)
    assert not {tid for name in ("double",) for tid, _ in sent[name]} & set(silver)
    for tid, record in sent["int_discount"]:
        assert (silver[tid].quantity, silver[tid].customer_id) == (record["quantity"], record["customer_id"])
