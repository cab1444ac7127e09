"""A column added at the CDC source mid-stream is never dropped (issue 42, item 1).

Hand-made Debezium change events on the real broker, into real Spark and Iceberg: a table
gains columns while the query runs. An additive stream (the CDC default) turns them into bronze
columns, typed from the events (schemas enabled: Kafka Connect's types; disabled: the JSON
types), filled from the very batch they first appear in, without a restart or a dead letter; a
field no column type holds stays in `_rescued`. A stream whose contract is fixed keeps every
such field in `_rescued`. Both say so in the log and in `lakehouse status`.

Then silver (`dbt run`, no --full-refresh): the changelog passes the added column through, the
mirror and the history add it (values before the ALTER null, after it filled), a type widened in
bronze (Avro int -> long) widens an incremental model's column, and a type change that cannot
be carried over stops the run with one line naming the command. dbt runs in this process
(tests/integration/dbt_in_process.py: the same project and SQL on the test's warm Spark session).
"""

import json
import logging
import random
from datetime import UTC, datetime

import pytest
import yaml

from ingestion import job
from ingestion.bronze import ADDED_FIELDS_PROPERTY
from ingestion.decoders import decoder_for
from lakehouse.contracts.registry import registry_for
from lakehouse.contracts.streams import get_stream
from lakehouse.operations.status import stream_status
from producers import avro, purchases
from tests.integration.dbt_in_process import run_dbt
from tests.integration.own_lakehouse import lakehouse_fixture
from tests.integration.test_schema_evolution import count, send, started, wait_for

pytestmark = pytest.mark.integration

TABLE = "wallets"


@pytest.fixture
def pipeline(tmp_path, monkeypatch):
    (tmp_path / "wallets.schema.json").write_text(json.dumps({"type": "object", "properties": {
        "wallet_id": {"type": "integer"}, "owner": {"type": "string"}}}))
    entry = {"format": "debezium", "schema": "wallets.schema.json", "event_time": "_source_ts",
             "identity": ["wallet_id"], "source_table": TABLE}
    document = {"schema_dir": str(tmp_path), "streams": {
        "wallets_additive": entry, "wallets_fixed": {**entry, "contract": "fixed"}, "wallets_own_names": entry}}
    path = tmp_path / "pipeline.yml"
    path.write_text(yaml.safe_dump(document))
    monkeypatch.setenv("LAKEHOUSE_PIPELINE_FILE", str(path))
    return tmp_path


def change(wallet_id: int, lsn: int, row: dict, connect_fields: list[dict] | None = None) -> tuple[bytes, bytes]:
    """An insert as Debezium's PostgreSQL connector writes it; with ``connect_fields`` (the row's
    Connect schema) as with schemas enabled."""
    event = {"before": None, "after": {"wallet_id": wallet_id, **row}, "op": "c", "ts_ms": 1_790_000_000_000 + lsn,
             "source": {"connector": "postgresql", "table": TABLE, "ts_ms": 1_790_000_000_000 + lsn, "lsn": lsn,
                        "snapshot": "false", "sequence": json.dumps([str(lsn - 1), str(lsn)])}}
    if connect_fields is not None:
        schema = {"type": "struct", "name": "wallets.Envelope", "fields": [
            {"field": "after", "type": "struct", "optional": True, "fields": connect_fields}]}
        event = {"schema": schema, "payload": event}
    return json.dumps({"wallet_id": wallet_id}).encode(), json.dumps(event).encode()


CONNECT_FIELDS = [{"field": "wallet_id", "type": "int64"}, {"field": "owner", "type": "string", "optional": True},
                  {"field": "tier", "type": "string", "optional": True},
                  {"field": "opened", "type": "int32", "name": "io.debezium.time.Date", "optional": True},
                  {"field": "limit_cents", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
                   "parameters": {"scale": "2", "connect.decimal.precision": "12"}, "optional": True}]


def changes_before_and_after_the_alter():
    before = [change(n, 100 + n, {"owner": f"o{n}"}) for n in range(10)]
    # ALTER TABLE wallets ADD COLUMN tier text, opened date, limit_cents numeric(12,2): with schemas
    after = [change(n, 200 + n, {"owner": f"o{n}", "tier": f"t{n % 3}", "opened": 20_000 + n,
                                 "limit_cents": "AYag"}, CONNECT_FIELDS) for n in range(10, 20)]
    # ... and a JSON column (no column type: rescued) and a count, without schemas
    later = [change(n, 300 + n, {"owner": f"o{n}", "tier": "t9", "visits": n, "prefs": {"dark": True}})
             for n in range(20, 25)]
    return before, after, later


def run(spark, settings, name, batches):
    spec, query = started(spark, settings, name)
    try:
        total = 0
        for messages in batches:  # each after the previous one is in bronze: a batch of its own
            send(settings, name, messages)
            total += len(messages)
            wait_for(lambda n=total: count(spark, spec.bronze_table) == n, f"{total} rows in {spec.bronze_table}")
    finally:
        query.stop()
    assert count(spark, "bronze.dead_letters", f"stream = '{name}'") == 0
    return spec, {r.wallet_id: r for r in spark.table(spec.bronze_table).collect()}


def test_an_additive_stream_adds_the_sources_new_columns_and_fills_them_from_the_first_batch(
        spark, settings, kafka, pipeline, caplog):
    caplog.set_level(logging.INFO, logger="lakehouse.ingest")
    before, after, later = changes_before_and_after_the_alter()
    spec, rows = run(spark, settings, "wallets_additive", [before, after, later])
    types = dict(spark.table(spec.bronze_table).dtypes)
    assert {c: types[c] for c in ("tier", "opened", "limit_cents", "visits")} == {
        "tier": "string", "opened": "date", "limit_cents": "decimal(12,2)", "visits": "bigint"}
    assert all(rows[n].tier is None and rows[n]._rescued is None for n in range(10))  # before the ALTER
    assert [rows[n].tier for n in range(10, 13)] == ["t1", "t2", "t0"]
    assert str(rows[10].opened) == "2024-10-14" and str(rows[10].limit_cents) == "1000.00"  # 0x0186a0 = 100000
    assert [rows[n].visits for n in range(20, 25)] == list(range(20, 25))
    assert [json.loads(rows[n]._rescued) for n in range(20, 25)] == [{"prefs": {"dark": True}}] * 5
    messages = [r.getMessage() for r in caplog.records]
    assert any("the source added field(s) limit_cents" in m and "opened" in m and "tier" in m
               for m in messages), messages
    assert any("5 record(s) with field(s) the contract lacks, kept in bronze's _rescued: prefs" in m
               for m in messages), messages
    # recorded with the table: a restarted job (a new decoder) reads the same columns
    recorded = json.loads(dict(spark.sql(f"show tblproperties {spec.bronze_table}").collect())[ADDED_FIELDS_PROPERTY])
    assert recorded["opened"] == {"type": "string", "format": "date", "x-debezium-type": "io.debezium.time.Date"}
    assert decoder_for(spark, settings, get_stream("wallets_additive")).bronze_schema()["visits"]
    (status,) = stream_status(settings, ["wallets_additive"])
    assert status.added_fields == {"limit_cents": "decimal(12,2)", "opened": "date", "tier": "string",
                                   "visits": "integer"}
    assert (status.rescued_rows, status.rescued_fields) == (5, ["prefs"])


def test_a_fixed_contract_keeps_the_sources_new_columns_in_rescued(spark, settings, kafka, pipeline, caplog):
    caplog.set_level(logging.INFO, logger="lakehouse.ingest")
    before, after, later = changes_before_and_after_the_alter()
    spec, rows = run(spark, settings, "wallets_fixed", [before, after + later])
    assert "tier" not in spark.table(spec.bronze_table).columns
    assert all(rows[n]._rescued is None for n in range(10))
    assert json.loads(rows[10]._rescued) == {"tier": "t1", "opened": 20_010, "limit_cents": "AYag"}
    assert json.loads(rows[20]._rescued) == {"tier": "t9", "visits": 20, "prefs": {"dark": True}}
    assert any("15 record(s) with field(s) the contract lacks, kept in bronze's _rescued: limit_cents, opened, "
               "prefs, tier, visits" in r.getMessage() for r in caplog.records)
    (status,) = stream_status(settings, ["wallets_fixed"])
    assert status.added_fields == {} and status.rescued_rows == 15
    assert status.rescued_fields == ["limit_cents", "opened", "prefs", "tier", "visits"]


# --- through silver: the changelog, the mirror and the history follow, no full refresh -------

CUSTOMER_MODELS = "customers_changelog customers_mirror customers customers_history"


lake = lakehouse_fixture("source-columns")


def customer_change(op: str, customer_id: int, lsn: int, row: dict | None) -> tuple[bytes, bytes]:
    """A change of the demo's customers table as Debezium's PostgreSQL connector writes it."""
    image = None if row is None else {"customer_id": customer_id, "name": f"n{customer_id}",
                                      "email": f"c{customer_id}@example.com", "country": "DE", "city": None,
                                      "tier": "basic", "created_at": "2026-11-01T10:00:00Z",
                                      "updated_at": "2026-11-01T10:00:00Z", **row}
    event = {"before": image if op == "d" else None, "after": None if op == "d" else image, "op": op,
             "ts_ms": 1_790_000_000_000 + lsn * 1000,
             "source": {"connector": "postgresql", "table": "customers", "ts_ms": 1_790_000_000_000 + lsn * 1000,
                        "lsn": lsn, "snapshot": "false", "sequence": json.dumps([str(lsn - 1), str(lsn)])}}
    return json.dumps({"customer_id": customer_id}).encode(), json.dumps(event).encode()


def ingest_and_run(lake, messages):
    own, session, target = lake
    send(own, "customers", messages)
    job.run(session, own, ["customers"], available_now=True)
    return run_dbt(own, ["run", "--select", CUSTOMER_MODELS], target_dir=target, capture=True)


def test_a_column_added_at_the_source_reaches_the_mirror_and_the_history_without_a_full_refresh(lake):
    own, session, target = lake
    source = {n: {"loyalty_points": None} for n in range(1, 6)}  # the source table, as the test changes it
    ingest_and_run(lake, [customer_change("c", n, 10 + n, {}) for n in source])
    # ALTER TABLE customers ADD COLUMN loyalty_points bigint; then updates, an insert, a delete
    source.update({1: {"loyalty_points": 10}, 2: {"loyalty_points": 20}, 6: {"loyalty_points": 60}})
    deleted = source.pop(5)
    run = ingest_and_run(lake, [customer_change("u", 1, 31, source[1]), customer_change("u", 2, 32, source[2]),
                                customer_change("c", 6, 33, source[6]), customer_change("d", 5, 34, deleted)])
    models = [r for r in run.result.results if r.node.unique_id.startswith("model.")]  # not the on-run-start hook
    assert [str(r.status) for r in models] == ["success"] * 4  # no model stopped to ask for a rebuild
    assert dict(session.table("bronze.customers").dtypes)["loyalty_points"] == "bigint"
    live = {r.customer_id: r.asDict() for r in session.table("silver.customers").collect()}
    assert {key: {"loyalty_points": row["loyalty_points"]} for key, row in live.items()} == source
    assert all(row["customer_name"] == f"n{key}" for key, row in live.items())  # the other columns kept
    history = session.sql("select customer_id, loyalty_points, is_current from silver.customers_history "
                          "where customer_id in (1, 3, 6) order by customer_id, _seq").collect()
    assert [tuple(r) for r in history] == [(1, None, False), (1, 10, True), (3, None, True), (6, 60, True)]
    # and a run with nothing new writes nothing, the column stays
    again = run_dbt(own, ["run", "--select", CUSTOMER_MODELS], target_dir=target, capture=True)
    assert "loyalty_points" in session.table("silver.customers_history").columns and again.success


def test_a_type_change_silver_cannot_carry_over_names_the_full_refresh_in_one_line(lake, capsys):
    own, session, target = lake
    if "loyalty_points" not in session.table("silver.customers_mirror").columns:
        ingest_and_run(lake, [customer_change("u", 1, 41, {"loyalty_points": 1})])
    # the mirror's column of another type than the changelog's (bigint): no lossless widening
    session.sql("alter table silver.customers_mirror drop column loyalty_points")
    session.sql("alter table silver.customers_mirror add column loyalty_points string")
    send(own, "customers", [customer_change("u", 1, 51, {"loyalty_points": 11})])
    job.run(session, own, ["customers"], available_now=True)
    capsys.readouterr()
    with pytest.raises(AssertionError, match="customers_mirror: error"):
        run_dbt(own, ["run", "--select", CUSTOMER_MODELS], target_dir=target, capture=True)
    # dbt's console output, as `dbt run` prints it (its logger writes to this process's stdout)
    (line,) = [line for line in capsys.readouterr().out.splitlines() if "not a lossless widening" in line]
    assert "column loyalty_points changed type from string to bigint" in line
    assert line.endswith("rebuild the model with `lakehouse dbt run --full-refresh --select customers_mirror`")


def test_a_type_widened_in_bronze_reaches_an_incremental_silver_model_without_a_full_refresh(lake):
    """Item 7: Avro's quantity promoted from int to long mid-stream: bronze widens the column, and
    silver.purchases (appended, deduplicated against its stored rows) widens it on its next run."""
    own, session, target = lake
    registry, rng, now = registry_for(own), random.Random(7), datetime.now(UTC)
    v3 = json.loads(purchases.SCHEMAS[2].text)
    next(f for f in v3["fields"] if f["name"] == "quantity")["type"] = "long"
    v3_text = json.dumps(v3)

    def framed(text, version, n, **fields):
        schema_id, parsed = registry.register("purchases-value", text), avro.parsed(text)
        return [(b"k", avro.encode({**purchases.make_purchase(rng, now, version), **fields}, schema_id, parsed))
                for _ in range(n)]

    def ingest_and_run_purchases(messages):
        send(own, "purchases", messages)
        job.run(session, own, ["purchases"], available_now=True)
        run_dbt(own, ["run", "--select", "purchases"], target_dir=target, capture=True)

    registry.register("purchases-value", purchases.SCHEMAS[2].text)  # the model reads v2's payment_method
    ingest_and_run_purchases(framed(purchases.SCHEMAS[1].text, 1, 20))
    assert dict(session.table("silver.purchases").dtypes)["quantity"] == "int"
    ingest_and_run_purchases(framed(v3_text, 2, 20, quantity=2**40))
    silver = session.table("silver.purchases")
    assert dict(silver.dtypes)["quantity"] == "bigint"
    assert silver.where("quantity = 1099511627776").count() == 20 and silver.count() == 40


def test_a_source_column_named_like_one_of_bronzes_own_is_kept_in_rescued_never_over_bronzes_value(
        spark, settings, kafka, pipeline, caplog):
    """A source table gains columns named op, _seq and _error_code (bronze's own: the change's
    kind, its order, a dead row's reason). They cannot be columns beside bronze's: each stays in
    ``_rescued``, bronze's own values stay as the change set them, and the log names them."""
    caplog.set_level(logging.INFO, logger="lakehouse.ingest")
    before = [change(n, 100 + n, {"owner": f"o{n}"}) for n in range(3)]
    after = [change(n, 200 + n, {"owner": f"o{n}", "op": "x", "_seq": n, "_error_code": "E", "tier": "t"})
             for n in range(3, 6)]
    spec, rows = run(spark, settings, "wallets_own_names", [before, after])
    assert [(rows[n].op, rows[n]._error_code, rows[n].tier) for n in range(3, 6)] == [("I", None, "t")] * 3
    assert [rows[n]._seq.change_pos for n in range(3, 6)] == [203, 204, 205]  # the change's own order
    assert [json.loads(rows[n]._rescued) for n in range(3, 6)] == [
        {"op": "x", "_seq": n, "_error_code": "E"} for n in range(3, 6)]
    assert any("3 record(s) with field(s) the contract lacks, kept in bronze's _rescued: _error_code, _seq, op"
               in r.getMessage() for r in caplog.records)
    (status,) = stream_status(settings, ["wallets_own_names"])
    assert status.added_fields == {"tier": "string"}
    assert status.rescued_fields == ["_error_code", "_seq", "op"]
