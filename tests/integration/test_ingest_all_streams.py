"""Every stream of the pipeline, produced with the demo's fault mix, ingested by one runner.

The issue's "done when": for every stream, bronze rows + dead letters = messages produced,
dead letters carry the manifest's codes, duplicates are kept in bronze, and the CDC
changelogs carry the `_seq` the producers' reference decoders give each message.
"""

from collections import Counter

import pytest

from ingestion import job
from lakehouse.contracts.streams import get_stream, stream_names
from lakehouse.core.errors import LakehouseError
from lakehouse.core.kafka_admin import end_offsets
from producers.cdc import debezium, dms
from producers.faults import FaultRates
from producers.run import produce
from tests.integration.kafka_read import read_topic

pytestmark = pytest.mark.integration

COUNTS = {"employees": 3000, "purchases": 3000, "user_events": 3000, "customers": 500, "accounts": 500}
TRANSACTIONS = "cdc_transactions"
FAULTS = FaultRates.demo()


def _ends(settings, topic):
    """The topic's end offsets; {} only if it does not exist yet (no earlier module produced to
    it). Anything else (the broker unreachable) fails here, not as a wrong offset range later."""
    try:
        return end_offsets(settings, topic)
    except LakehouseError as error:
        if "does not exist" not in str(error):
            raise
        return {}


@pytest.fixture(scope="module")
def produced(kafka, settings):
    """Per stream: the delivery report and the offset range this module produced."""
    # the customers connector's transaction topic is written by the customers producer
    assert set(COUNTS) | {TRANSACTIONS} == set(stream_names())
    result = {}
    transactions_topic = get_stream(TRANSACTIONS).topic
    for name, count in COUNTS.items():
        topic = get_stream(name).topic
        before, transactions_before = _ends(settings, topic), _ends(settings, transactions_topic)
        report = produce(settings, name, count, faults=FAULTS, seed=7, progress=False)
        assert report.failed == 0
        result[name] = (report, before, end_offsets(settings, topic))
        if report.other_topics:
            assert set(report.other_topics) == {transactions_topic}
            result[TRANSACTIONS] = (report, transactions_before, end_offsets(settings, transactions_topic))
    return result


@pytest.fixture(scope="module")
def ingested(spark, settings, produced):
    job.run(spark, settings, ["all"], available_now=True)
    return produced


def _coordinates(spark, name):
    spec = get_stream(name)
    bronze = spark.table(spec.bronze_table).where("_error_code is null") \
        .select("_kafka_partition", "_kafka_offset").collect()
    dead = spark.table("bronze.dead_letters").where(f"stream = '{name}'") \
        .select("partition", "offset", "error_code").collect()  # the view over the stream's dead rows
    return [(r._kafka_partition, r._kafka_offset) for r in bronze], {(r.partition, r.offset): r.error_code
                                                                     for r in dead}, len(dead)


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_every_offset_is_in_bronze_or_dead_letters_exactly_once(spark, settings, ingested, name):
    report, before, after = ingested[name]
    bronze, dead, dead_rows = _coordinates(spark, name)
    assert len(bronze) == len(set(bronze)) and dead_rows == len(dead)  # nothing twice
    assert not set(bronze) & set(dead)  # never both
    everything = {(p, o) for p, end in after.items() for o in range(end)}
    assert set(bronze) | set(dead) == everything  # never neither, the whole topic
    mine = {(p, o) for p, end in after.items() for o in range(before.get(p, 0), end)}
    assert len(mine) == report.delivered
    expected = {(d["partition"], d["offset"]): d["error_code"] for d in report.manifest()["dead_letters"]}
    assert {c: code for c, code in dead.items() if c in mine} == expected  # the right records, right reasons
    assert expected, "the demo fault mix made no unreadable record"


@pytest.mark.parametrize("name", ["employees", "purchases", "user_events"])
def test_duplicates_are_kept_in_bronze(spark, ingested, name):
    spec = get_stream(name)
    duplicated = spark.table(spec.bronze_table).where("_error_code is null").groupBy(*spec.identity_columns).count() \
        .where("count > 1").count()
    assert duplicated >= ingested[name][0].manifest()["faults"]["duplicate"] > 0


def test_avro_v1_and_v2_share_bronze_with_the_new_column(spark, ingested):
    rows = spark.table("bronze.purchases").where("_error_code is null") \
        .groupBy("_schema_id").agg({"payment_method": "count"}).collect()
    counts = {r["_schema_id"]: r["count(payment_method)"] for r in rows}
    assert len(counts) == 2  # both writer schemas landed
    assert min(counts.values()) == 0 and max(counts.values()) > 0  # v1 rows have no payment_method


@pytest.mark.parametrize("name, codec", [("customers", debezium), ("accounts", dms)])
def test_changelog_rows_carry_the_sequence_of_their_message(spark, kafka, ingested, name, codec):
    expected, tombstones = {}, set()
    for message in read_topic(kafka, get_stream(name).topic):
        try:
            change = codec.decode(message.key(), message.value())
        except ValueError:
            continue  # poison: dead-lettered, checked above
        if change is None:
            tombstones.add((message.partition(), message.offset()))
        else:
            # DMS: bronze's log_position (the position padded to sort as text) is checked against
            # the reference's own log order by tests/integration/test_decode_formats.py; here the rest
            seq = change.seq if codec is debezium else change.seq[1:]
            expected[(message.partition(), message.offset())] = (change.op, seq, change.key)
    rows = spark.table(f"bronze.{name}").where("_error_code is null").collect()  # the dead rows: checked above
    key_column = get_stream(name).identity_columns[0]
    actual = {(r._kafka_partition, r._kafka_offset):
              (r.op, tuple(v for f, v in r._seq.asDict().items() if f != "log_position"), r[key_column])
              for r in rows if not r._is_tombstone}
    assert actual == expected
    assert {(r._kafka_partition, r._kafka_offset) for r in rows if r._is_tombstone} == tombstones
    assert Counter(op for op, _, _ in actual.values()).keys() >= {"I", "U", "R"}
    if name == "customers":  # Debezium follows every delete with a tombstone of its key
        deleted = {key for op, _, key in actual.values() if op == "D"}
        assert tombstones and {r[key_column] for r in rows if r._is_tombstone} == deleted


def test_status_shows_each_stream_caught_up_with_its_dead_letters(spark, settings, ingested):
    from lakehouse.operations.status import format_streams, stream_status

    statuses = {s.stream: s for s in stream_status(settings)}
    assert set(statuses) == set(COUNTS) | {TRANSACTIONS}
    for name, status in statuses.items():
        assert status.lag == 0 and status.last_batch is not None, status
        assert status.committed_offsets == status.end_offsets == ingested[name][2]
        assert status.bronze_rows == spark.table(get_stream(name).bronze_table).count()
        by_reason = {r.error_code: r["count"] for r in spark.table("bronze.dead_letters")
                     .where(f"stream = '{name}'").groupBy("error_code").count().collect()}
        assert status.dead_letters == by_reason
    text = format_streams(list(statuses.values()))
    assert all(name in text for name in COUNTS) and "CORRUPT_PAYLOAD" in text


def test_a_missing_topic_is_named(settings, kafka):
    with pytest.raises(LakehouseError, match="topic 'no_such_topic' does not exist"):
        job.check_topic(settings, "no_such_topic")


def test_the_launch_script_runs_the_same_job_through_spark_submit(spark, settings, ingested):
    """bin/lakehouse-ingest: spark-submit with the project's jars, here against local[1]."""
    import os
    import subprocess

    from tests.conftest import REPO_ROOT

    before = spark.table("bronze.user_events").count()  # good rows and dead
    report = produce(settings, "user_events", 500, seed=99, progress=False)
    env = {**os.environ, "LAKEHOUSE_HOME": str(settings.home), "LAKEHOUSE_KAFKA_PORT": str(settings.kafka_port),
           "LAKEHOUSE_SPARK_MASTER": "local[1]", "LAKEHOUSE_SHUFFLE_PARTITIONS": "2"}
    result = subprocess.run([str(REPO_ROOT / "bin" / "lakehouse-ingest"), "user_events", "--available-now"],
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "user_events batch" in result.stdout + result.stderr  # spark-submit merges the two
    after = spark.table("bronze.user_events").count()
    assert after - before == report.delivered


def test_the_transaction_topic_lands_whole_and_each_end_counts_what_bronze_holds_of_its_transaction(
        spark, settings, ingested):
    """Issue 58, item 3: the customers connector's BEGIN and END events (its transaction topic, one
    partition) land in bronze, every offset once and none dead, and each END this module produced
    counts exactly the distinct changes of its transaction that bronze.customers holds (re-sent
    copies once; the faults' poison messages are no changes): what the models' transaction
    watermark compares (macros/cdc_transactions.sql)."""
    report, before, after = ingested[TRANSACTIONS]
    spec = get_stream(TRANSACTIONS)
    rows = spark.table(spec.bronze_table).collect()
    assert {(r._kafka_partition, r._kafka_offset) for r in rows} == {(0, o) for o in range(after[0])}
    assert len(rows) == after[0] and all(r._error_code is None for r in rows)
    mine = [r for r in rows if r._kafka_offset >= before.get(0, 0)]
    assert len(mine) == report.other_topics[spec.topic] > 200
    # a PostgreSQL connector's ids are `<xid>:<the event's LSN>`: a transaction's events share the xid
    ends = {r.id.split(":")[0]: r for r in mine if r.status == "END"}
    assert {r.id.split(":")[0] for r in mine if r.status == "BEGIN"} == set(ends)
    held = {r.id: r.n for r in spark.sql(
        "select substring_index(_transaction.id, ':', 1) as id, count(distinct _transaction.total_order) as n "
        "from bronze.customers where _transaction is not null and _error_code is null and not _is_tombstone "
        "group by 1").collect()}
    assert {i: e.event_count for i, e in ends.items()} == {i: held.get(i) for i in ends}
    assert all(e.data_collections[0].data_collection == "public.customers" for e in ends.values())
