"""A bronze history for every stream, and increments on it, written straight into the bronze
tables the ingestion creates (its own code: the decoders' schemas, ingestion/bronze.py).

Millions of rows in seconds, where a producer run through Kafka would take an hour: the
history of benchmarks/dbt_scaling.py's lakehouses and of the incremental runs of
tests/integration/test_incremental_models.py. Every value derives from a hash of the row's id,
so a history is the same every time. `load_history` writes `rows` rows per stream: events
for the event streams; for the CDC changelogs (customers, accounts) a snapshot read per key,
then updates until the changelog holds `rows` changes. `load_increment` lands one increment:
events (a share of them late) and CDC changes drawn by a pattern (tests/support/
change_patterns.py). The rows go through tests/support/bronze_rows.py, which refuses rows
that no longer fit the table.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from lakehouse.core.settings import Settings
from tests.support.bronze_rows import append_rows
from tests.support.change_patterns import CHANGE_MIX, hot_keys

STREAMS = ("user_events", "purchases", "employees", "customers", "accounts")
EVENT_STREAMS = ("user_events", "purchases", "employees")
EVENT_TYPES = ("page_view", "search", "add_to_cart", "checkout", "login", "logout")
DEVICES = ("web", "ios", "android")
STORES = (("S-001", "EUR"), ("S-002", "EUR"), ("S-005", "GBP"), ("S-007", "USD"), ("S-009", "PLN"), ("S-010", "SEK"))
TEAMS = (("Payments", "Berlin"), ("Checkout", "Berlin"), ("Search", "Amsterdam"), ("Analytics", "Lisbon"),
         ("Mobile", "Warsaw"), ("Security", "Dublin"))
ROLES = ("DEVELOPER", "MANAGER", "ARCHITECT")
ACCOUNT_TYPES = ("checking", "savings", "credit")
STATUSES = ("active", "frozen", "closed")
CURRENCIES = ("EUR", "USD", "GBP")
TIERS = ("bronze", "silver", "gold")
COUNTRIES = ("DE", "US", "FR", "BR", "JP", "IN", "GB", "ES", "IT", "CA")  # the country_regions seed's


def iso_text(column):
    """The simulator's instants: ISO-8601 UTC with milliseconds, as text."""
    from pyspark.sql import functions as F

    return F.date_format(column, "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'")


def create_bronze(spark, settings: Settings) -> dict[str, str]:
    """Every stream's bronze table, created by the ingestion's own code; {stream: table}."""
    from ingestion import bronze
    from ingestion.decoders import decoder_for
    from lakehouse.contracts.streams import get_stream
    from lakehouse.core.spark import ensure_namespaces

    ensure_namespaces(spark)
    tables = {}
    for stream in STREAMS:
        spec = get_stream(stream)
        decoder = decoder_for(spark, settings, spec)
        decoder.refresh()
        bronze.ensure_table(spark, spec.bronze_table, decoder.bronze_schema(), spec.partitioning)
        tables[stream] = spec.bronze_table
    # purchases v2 (payment_method) as the ingestion adds it when the producer registers v2
    if "payment_method" not in spark.table(tables["purchases"]).columns:
        spark.sql(f"alter table {tables['purchases']} add column payment_method string")
    return tables


def pick(values, salt, column="id"):
    """A value of `values` chosen by a hash of `column`: deterministic, evenly spread."""
    from pyspark.sql import functions as F

    index = F.pmod(F.xxhash64(F.col(column), F.lit(salt)), F.lit(len(values))) + 1
    return F.element_at(F.array(*[F.lit(v) for v in values]), index.cast("int"))


def spread(column, low, high, salt):
    """An integer in [low, high) from a hash of `column`."""
    from pyspark.sql import functions as F

    return F.lit(low) + F.pmod(F.xxhash64(F.col(column), F.lit(salt)), F.lit(high - low))


def kafka_columns(topic: str, ingested_at, batch_id):
    from pyspark.sql import functions as F

    return [
        F.lit(topic).alias("_kafka_topic"),
        F.pmod(F.col("id"), F.lit(3)).cast("int").alias("_kafka_partition"),
        F.col("id").cast("bigint").alias("_kafka_offset"),
        (ingested_at - F.expr("interval 2 seconds")).alias("_kafka_timestamp"),
        F.col("id").cast("string").alias("_kafka_key"),
        ingested_at.alias("_ingested_at"),
        batch_id.cast("bigint").alias("_batch_id"),
    ]


def ingested_times(start: datetime, end: datetime, count: int):
    """Row `id` (0..count-1) ingested evenly between start and end, in whole seconds."""
    from pyspark.sql import functions as F

    span = max(1, int((end - start).total_seconds()))
    offset = (F.col("id") * F.lit(span) / F.lit(max(count, 1))).cast("bigint")
    return F.lit(start) + F.make_interval(secs=offset), (offset / 3600).cast("bigint")


def event_rows(spark, stream: str, ids, ingested_at, batch_id, keys: int, late_days):
    """Bronze rows of an event stream for the ids of DataFrame `ids` (column id)."""
    from pyspark.sql import functions as F

    # the event happened up to a minute before it landed; a late one `late_days` days before
    happened = ingested_at - F.make_interval(secs=spread("id", 1, 60, 11)) - F.make_interval(days=late_days)
    customer = spread("id", 1, keys + 1, 12)
    if stream == "user_events":
        columns = [
            F.concat(F.lit("e-"), F.col("id").cast("string")).alias("event_id"),
            customer.cast("bigint").alias("customer_id"),
            F.concat(F.lit("s-"), customer.cast("string"), F.lit("-"), spread("id", 1, 21, 13).cast("string"))
             .alias("session_id"),
            pick(EVENT_TYPES, 14).alias("event_type"),
            happened.alias("event_timestamp"),
            F.concat(F.lit("/products/P-"), spread("id", 1, 501, 15).cast("string")).alias("page"),
            pick(DEVICES, 16).alias("device"),
            spread("id", 5, 120_000, 17).cast("bigint").alias("duration_ms"),
            F.lit(None).cast("string").alias("_rescued"),
        ]
    elif stream == "purchases":
        store = spread("id", 0, len(STORES), 18).cast("int")
        price = (spread("id", 100, 20_000, 19) / F.lit(100.0))
        quantity = spread("id", 1, 6, 20).cast("int")
        columns = [
            F.concat(F.lit("t-"), F.col("id").cast("string")).alias("transaction_id"),
            customer.cast("bigint").alias("customer_id"),
            F.concat(F.lit("P-"), spread("id", 1, 501, 21).cast("string")).alias("product_id"),
            quantity.alias("quantity"),
            price.alias("unit_price"),
            F.round(price * quantity, 2).alias("amount"),
            F.element_at(F.array(*[F.lit(c) for _, c in STORES]), store + 1).alias("currency"),
            happened.alias("transaction_time"),
            F.element_at(F.array(*[F.lit(s) for s, _ in STORES]), store + 1).alias("store_id"),
            F.lit(2).alias("_schema_id"),
            pick(("card", "wallet", "cash", "voucher"), 22).alias("payment_method"),
        ]
    else:
        team = spread("id", 0, len(TEAMS), 23).cast("int")
        columns = [
            spread("id", 1, keys + 1, 24).cast("int").alias("id"),
            F.concat(F.lit("Employee "), F.col("id").cast("string")).alias("name"),
            F.concat(spread("id", 1, 200, 25).cast("string"), F.lit(" Main Street")).alias("address"),
            spread("id", 18, 66, 26).cast("int").alias("employee_age"),
            happened.alias("start_date"),
            F.struct(F.element_at(F.array(*[F.lit(t) for t, _ in TEAMS]), team + 1).alias("name"),
                     F.element_at(F.array(*[F.lit(loc) for _, loc in TEAMS]), team + 1).alias("location"))
             .alias("team"),
            pick(ROLES, 27).alias("role"),
        ]
    # `id` is the Kafka offset; the employees' own id column is computed above from it
    return ids.select(*columns, *kafka_columns(stream, ingested_at, batch_id))


def change_rows(stream: str, changes, ingested_at, batch_id):
    """Bronze rows of a CDC stream: `changes` has key, op, position (the change's sequence)."""
    from pyspark.sql import functions as F

    key = F.col("key")
    committed = ingested_at - F.expr("interval 30 seconds")
    if stream == "customers":
        columns = [
            F.col("op"),
            key.cast("bigint").alias("customer_id"),
            F.concat(F.lit("Customer "), key.cast("string")).alias("name"),
            F.concat(F.lit("c"), key.cast("string"), F.lit("-"), F.col("position").cast("string"),
                     F.lit("@example.com")).alias("email"),
            pick(COUNTRIES, 31, "position").alias("country"),  # an update may move the customer
            pick(("Berlin", "Paris", "Madrid", "Rome", "Lisbon"), 32, "key").alias("city"),
            pick(TIERS, 33, "position").alias("tier"),
            iso_text(F.lit(datetime(2026, 1, 1, tzinfo=UTC))).alias("created_at"),
            iso_text(committed).alias("updated_at"),
            committed.alias("_source_ts"),
            # a streamed PostgreSQL change's place (ingestion/formats/debezium.py debezium_seq)
            F.struct(F.lit(1).alias("phase"), F.col("position").cast("bigint").alias("commit_pos"),
                     F.col("position").cast("bigint").alias("change_pos")).alias("_seq"),
        ]
    else:
        from ingestion.formats.dms import log_position_key

        position_text = F.format_string("mysql-bin-changelog.%06d:%d", F.floor(F.col("position") / 65536),
                                        (F.col("position") % 65536).cast("bigint"))
        columns = [
            F.col("op"),
            key.cast("bigint").alias("account_id"),
            # three accounts per customer (keys 1-3, 4-6, ...), so a customer may hold two in one
            # type, currency and status: account_balance_summary's distinct customers are then fewer
            # than its accounts
            ((key + F.lit(2)) / F.lit(3)).cast("bigint").alias("customer_id"),
            pick(ACCOUNT_TYPES, 35, "key").alias("account_type"),
            F.format_number(spread("position", 0, 1_000_000, 36) / F.lit(100.0), 2).alias("balance"),
            pick(CURRENCIES, 37, "key").alias("currency"),
            pick(STATUSES, 38, "position").alias("status"),
            iso_text(committed).alias("updated_at"),
            committed.alias("_source_ts"),
            # a DMS change's place (ingestion/formats/dms.py decode_dms): the log position as DMS
            # writes a MySQL source's, and the form of it that sorts as text
            F.struct(log_position_key(position_text).alias("log_position"),
                     (F.unix_micros(committed) + F.col("position") % 1000).cast("bigint").alias("commit_us"),
                     position_text.alias("stream_position"),
                     F.col("position").cast("bigint").alias("transaction_id"),
                     F.lit(0).cast("bigint").alias("record_id")).alias("_seq"),
        ]
    return changes.withColumn("id", F.col("position")).select(
        *columns, F.lit(False).alias("_is_tombstone"), *kafka_columns(stream, ingested_at, batch_id))


def append(spark, table: str, rows) -> None:
    # `format_number` writes thousands separators: not in the source's decimal text
    if "balance" in rows.columns:
        from pyspark.sql import functions as F
        rows = rows.withColumn("balance", F.regexp_replace("balance", ",", ""))
    append_rows(spark, table, rows)


def history_slices(rows: int, start: datetime, end: datetime, recent: timedelta, batch: timedelta) -> list[tuple]:
    """Id ranges of the appends that write the history: the old part in a few large appends
    (as compaction leaves old data: files that cover hours or days), the `recent` part in one
    append per `batch` (as the streaming job's micro-batches leave it: one file per batch and
    partition), so the newest files are as small in time as they are in production."""
    span = (end - start).total_seconds()
    cut = int(rows * max(0.0, 1 - recent.total_seconds() / span))
    old = max(1, cut // 2_000_000)  # at most ~2M rows per append: bounded memory per write
    bounds = [cut * i // old for i in range(old)] if cut else []
    recent_batches = max(1, int(recent / batch))
    bounds += [cut + (rows - cut) * i // recent_batches for i in range(recent_batches)]
    bounds.append(rows)
    return [(low, high) for low, high in zip(bounds, bounds[1:], strict=False) if high > low]


def load_history(spark, tables: dict[str, str], rows: int, start: datetime, end: datetime,
                 keys: int | None = None) -> dict:
    """`rows` rows per stream ingested between start and end; returns seconds per stream.

    CDC changelogs: `keys` keys (default `rows`: one snapshot read each), each read once, then
    updated until the changelog holds `rows` changes: key k's versions are rows k, k + keys,
    k + 2 keys..., so every key's versions spread over the whole history."""
    from pyspark.sql import functions as F

    keys = keys or rows
    took = {}
    for stream in STREAMS:
        began = time.perf_counter()
        for low, high in history_slices(rows, start, end, timedelta(hours=2), timedelta(minutes=10)):
            ids = spark.range(low, high, 1, max(1, (high - low) // 500_000))
            ingested_at, hour = ingested_times(start, end, rows)
            if stream in EVENT_STREAMS:
                frame = event_rows(spark, stream, ids, ingested_at, hour, keys, F.lit(0))
            else:
                # keys 1..keys, a snapshot read each, then updates in the rows after them
                changes = ids.select((F.col("id") % keys + 1).alias("key"),
                                     F.when(F.col("id") < keys, F.lit("R")).otherwise(F.lit("U")).alias("op"),
                                     (F.col("id") + 1).alias("position"))
                frame = change_rows(stream, changes, ingested_at.cast("timestamp"), hour)
            append(spark, tables[stream], frame)
        took[stream] = round(time.perf_counter() - began, 1)
    return took


def load_increment(spark, tables: dict[str, str], size: int, count: int, round_number: int, ingested: datetime,
                   late_share: float, late_days: int, keys: int | None = None, pattern: str = "uniform",
                   hot: int = 100, hot_share: float = 0.9) -> None:
    """One increment: `count` events per event stream, `count` changes per CDC stream, on a
    history of `size` rows per stream and `keys` CDC keys (default `size`).

    CDC changes by `pattern`: "uniform", 80% updates and 10% deletes of distinct existing keys
    drawn evenly over the key space and 10% inserts of new keys; "skewed", a `hot_share` of the
    changes are updates of `hot` hot keys (each updated many times in one increment), the rest
    as in "uniform" (a hot key is never deleted)."""
    from pyspark.sql import functions as F

    keys = keys or size
    first_id = size + (round_number - 1) * count  # new offsets, event ids, transaction ids
    ids = spark.range(first_id, first_id + count, 1, 2)
    late = F.when(F.pmod(F.xxhash64(F.col("id"), F.lit(41)), F.lit(10_000)) < F.lit(int(late_share * 10_000)),
                  spread("id", 1, late_days + 1, 42)).otherwise(F.lit(0)).cast("int")
    for stream in EVENT_STREAMS:
        append(spark, tables[stream], event_rows(spark, stream, ids, F.lit(ingested), F.lit(10_000 + round_number),
                                                 keys, late))
    # CDC: updates and deletes of existing keys (hash-drawn, distinct), inserts of new keys
    hot_changes = round(count * hot_share) if pattern == "skewed" else 0
    rest = count - hot_changes
    updates, deletes = int(rest * CHANGE_MIX["U"]), int(rest * CHANGE_MIX["D"])
    inserts = rest - updates - deletes
    stride = max(1, keys // (updates + deletes))
    position = F.lit(10 * size * (round_number + 1)) + F.col("id")
    existing = spark.range(0, updates + deletes, 1, 2).select(
        ((F.col("id") * stride + round_number * 7) % keys + 1).alias("key"),
        F.when(F.col("id") < updates, F.lit("U")).otherwise(F.lit("D")).alias("op"),
        position.alias("position"))
    new = spark.range(updates + deletes, rest, 1, 1).select(
        (F.lit(keys + (round_number - 1) * inserts) + F.col("id") - (updates + deletes) + 1).alias("key"),
        F.lit("I").alias("op"), position.alias("position"))
    changes = existing.unionByName(new)
    if hot_changes:
        hot_list = hot_keys(keys, hot)
        changes = changes.where(~((F.col("op") == "D") & F.col("key").isin(hot_list))).unionByName(
            spark.range(rest, count, 1, 1).select(
                F.element_at(F.array(*[F.lit(k) for k in hot_list]),
                             (F.pmod(F.xxhash64(F.col("id"), F.lit(43)), F.lit(len(hot_list))) + 1).cast("int"))
                .cast("bigint").alias("key"),
                F.lit("U").alias("op"), position.alias("position")))
    for stream in ("customers", "accounts"):
        append(spark, tables[stream], change_rows(stream, changes, F.lit(ingested), F.lit(10_000 + round_number)))
