"""The demo's end-to-end check compares coordinates, not counts (ingestion/invariant.py).

Bronze tables, good and dead rows, written by hand in a catalog of the module's own (no broker needed:
the demo's check takes the offset ranges it produced), so every failure is placed exactly.
Then a real transactional producer on the session's broker: offsets that hold no record
(transaction markers, an aborted transaction's records) are neither ingested nor missing.
"""

from __future__ import annotations

import datetime as dt
import random
import time

import pytest
from confluent_kafka import Producer

from ingestion import job
from ingestion.invariant import check_every_offset_once, offset_ranges
from lakehouse.commands import demo
from lakehouse.contracts.streams import get_stream
from lakehouse.core.kafka_admin import end_offsets
from lakehouse.core.settings import Settings
from lakehouse.core.spark import ensure_namespaces, session_on
from producers import user_events
from producers.delivery import ensure_topic, producer_config

pytestmark = pytest.mark.integration

SPEC = get_stream("purchases")
RANGES = {0: (0, 5), 1: (0, 5)}  # ten offsets produced
AT = dt.datetime(2024, 5, 1, 12, 0, 0)
MANIFEST = {"produced": 10, "dead_letters": [{"partition": 1, "offset": 4, "error_code": "CORRUPT_PAYLOAD"}]}


@pytest.fixture(scope="module")
def lake(spark, settings, tmp_path_factory):
    """A Spark session on a catalog of this module's own."""
    home = tmp_path_factory.mktemp("offsets-home")
    (home / "jars").symlink_to(settings.jars_dir.resolve())
    session = session_on(spark, Settings.from_env({"LAKEHOUSE_HOME": str(home), "LAKEHOUSE_SHUFFLE_PARTITIONS": "2"}))
    ensure_namespaces(session)
    return session


def write(session, bronze: list[tuple[int, int]], dead: list[tuple[int, int, bool]]) -> None:
    """Good rows at (partition, offset); dead rows at (partition, offset, replayed): a replayed
    one is a good row now, which keeps when it was replayed."""
    rows = ([(SPEC.topic, p, o, None, None) for p, o in bronze]
            + [(SPEC.topic, p, o, None if replayed else "CORRUPT_PAYLOAD", AT if replayed else None)
               for p, o, replayed in dead])
    session.createDataFrame(rows, "_kafka_topic string, _kafka_partition int, _kafka_offset long, "
                                  "_error_code string, _replayed_at timestamp") \
        .writeTo(SPEC.bronze_table).using("iceberg").createOrReplace()


def test_a_loss_and_a_duplicate_that_cancel_out_in_the_counts_fail_the_demo_check(lake, capsys):
    # 0:3 lost, 1:2 landed twice, 1:4 dead-lettered as the manifest says
    write(lake, [(0, 0), (0, 1), (0, 2), (0, 4), (1, 0), (1, 1), (1, 2), (1, 2), (1, 3)], [(1, 4, False)])
    # what the old check summed: rows = produced, so it passed
    assert lake.table(SPEC.bronze_table).count() == MANIFEST["produced"]

    check = check_every_offset_once(lake, SPEC, RANGES)
    assert (check.expected, check.bronze, check.dead_letters) == (10, 9, 1)
    assert (check.missing, check.missing_examples) == (1, ((0, 3),))
    assert (check.duplicated, check.duplicated_examples) == (1, ((1, 2, 2, 0),))
    assert not check.holds

    mismatched = demo._print_stream_counts(lake, {SPEC.name: SPEC}, {SPEC.name: MANIFEST}, {SPEC.name: RANGES})
    assert mismatched == [SPEC.name]
    line = next(line for line in capsys.readouterr().out.splitlines() if line.strip().startswith(SPEC.name))
    assert "MISMATCH: 1 missing (e.g. 0:3); 1 duplicated (e.g. 1:2 2x bronze 0x dead)" in line


def test_an_offset_with_a_good_row_and_a_dead_row_is_a_duplicate(lake):
    write(lake, [(0, o) for o in range(5)] + [(1, o) for o in range(5)], [(1, 4, False)])
    check = check_every_offset_once(lake, SPEC, RANGES)
    assert (check.missing, check.duplicated, check.duplicated_examples) == (0, 1, ((1, 4, 1, 1),))


def test_every_offset_once_passes_with_replays_and_earlier_offsets_outside_the_range(lake, capsys):
    # 0:1 was dead, then replayed: a good row now; 0:0 and 1:0 are an earlier run's (0:0 twice)
    bronze = [(0, 0), (1, 0)] + [(p, o) for p in (0, 1) for o in range(1, 6) if (p, o) not in ((1, 5), (0, 1))]
    write(lake, bronze, [(0, 1, True), (1, 5, False), (0, 0, False)])
    ranges = offset_ranges({0: 1, 1: 1}, {0: 6, 1: 6})
    assert ranges == {0: (1, 6), 1: (1, 6)}
    manifest = {"produced": 10, "dead_letters": [{"partition": 1, "offset": 5, "error_code": "CORRUPT_PAYLOAD"}]}

    check = check_every_offset_once(lake, SPEC, ranges)
    assert check.holds and (check.expected, check.bronze, check.dead_letters) == (10, 9, 1), check
    assert demo._print_stream_counts(lake, {SPEC.name: SPEC}, {SPEC.name: manifest}, {SPEC.name: ranges}) == []
    assert "every offset once in bronze (good or dead), reasons match" in capsys.readouterr().out


def test_an_aborted_transaction_never_lands_and_its_offsets_are_not_missing(spark, settings, kafka):
    """A transactional producer commits one transaction and aborts another on user_events: the
    job (read_committed) lands the committed records only, and the check counts the aborted
    records' and the transaction markers' offsets as holding no record, not as missing."""
    spec = get_stream("user_events")
    ensure_topic(settings, spec.topic, user_events.PARTITIONS)
    rng, now = random.Random(42), dt.datetime.now(dt.UTC)
    committed, aborted = ([user_events.make_event(rng, now) for _ in range(n)] for n in (6, 4))
    producer = Producer(producer_config(settings, **{"transactional.id": "test-offset-invariant"}))
    producer.init_transactions(30)
    delivered: list[tuple[int, int]] = []  # (partition, offset): where this test's range starts
    for events, commit in ((committed, True), (aborted, False)):
        producer.begin_transaction()
        for event in events:
            producer.produce(spec.topic, user_events.encode(event), event["event_id"].encode(),
                             on_delivery=lambda _, message: delivered.append((message.partition(), message.offset())))
        assert producer.flush(30) == 0  # the aborted records too are in the log, not purged unsent
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    first = {p: min(o for q, o in delivered if q == p) for p, _ in delivered}
    # The coordinator writes the transactions' markers after commit and abort return: until
    # they are in the log, its end (and what a read_committed consumer may read) falls short.
    deadline = time.monotonic() + 60
    while True:
        ranges = {p: (first[p], end) for p, end in end_offsets(settings, spec.topic).items() if p in first}
        offsets = sum(end - first for first, end in ranges.values())
        if offsets >= len(committed) + len(aborted) + 2 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert offsets >= len(committed) + len(aborted) + 2  # records and at least one marker per transaction

    job.run(spark, settings, [spec.name], available_now=True)

    landed = {r.event_id for r in spark.table(spec.bronze_table).where(
        " or ".join(f"(_kafka_partition = {p} and _kafka_offset >= {first} and _kafka_offset < {end})"
                    for p, (first, end) in ranges.items())).select("event_id").collect()}
    assert landed == {e["event_id"] for e in committed}
    check = check_every_offset_once(spark, spec, ranges, settings=settings)
    assert check.holds, check.describe()
    assert (check.expected, check.bronze, check.dead_letters) == (len(committed), len(committed), 0)
    assert check.no_record == offsets - len(committed)
    # without a broker to ask, the check cannot tell a marker from a loss: all of them missing
    assert check_every_offset_once(spark, spec, ranges).missing == check.no_record
