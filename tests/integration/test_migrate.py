"""`lakehouse migrate` (lakehouse/operations/migrate.py): a lakehouse of the version whose dead
letters were the table `bronze.dead_letters`, made by hand in that shape in a lakehouse of the
module's own, is refused by the job with one line naming the command, then migrated: every
offset once in the stream's bronze table, the old table gone, the view in its place.
"""

from __future__ import annotations

from datetime import datetime

import pytest
from pyspark.sql.types import StructType

from ingestion import bronze, job
from ingestion.decoders import decoder_for
from ingestion.formats.bronze_shape import DEAD_COLUMNS, REPLAY_COLUMNS
from ingestion.invariant import check_every_offset_once
from lakehouse.contracts.streams import get_stream
from lakehouse.core.errors import LakehouseError
from lakehouse.operations import migrate
from lakehouse.operations.dead_letters import queries
from lakehouse.operations.dead_letters.filters import Filters
from producers.delivery import ensure_topic
from tests.integration.own_lakehouse import lakehouse_fixture

pytestmark = pytest.mark.integration

SPEC = get_stream("user_events")
AT = datetime(2026, 11, 30, 12, 0)
REPLAYED_AT = datetime(2026, 11, 30, 13, 0)
# The old table's schema, as ingestion/dead_letters.py declared it before issue 43.
OLD_SCHEMA = ("stream string, topic string, `partition` int, `offset` bigint, kafka_timestamp timestamp, "
              "key binary, value binary, error_code string, error_detail string, schema_id int, "
              "ingested_at timestamp, batch_id bigint, replayed_at timestamp, replay_attempts int, "
              "last_replay_at timestamp")


lake = lakehouse_fixture("migrate")


def old_lakehouse(own, session) -> None:
    """bronze.user_events without the dead-row columns: good rows at offsets 0-4 of partition 0;
    bronze.dead_letters: 5 and 6 pending, 2 replayed (its record in bronze), 3 pending though
    its record is in bronze (an old replay cut off before it marked it), 6 twice (a reset
    checkpoint read it again)."""
    decoder = decoder_for(session, own, SPEC)
    decoder.refresh()
    new = {*DEAD_COLUMNS, *(name for name, _ in REPLAY_COLUMNS)}
    old_schema = StructType([f for f in decoder.bronze_schema().fields if f.name not in new])
    assert bronze.ensure_table(session, SPEC.bronze_table, old_schema, SPEC.partitioning[:1]) == [
        f"created {SPEC.bronze_table}"]
    good = session.createDataFrame(
        [(f"e-{o}", SPEC.topic, 0, o, AT, f"k{o}", AT, 0) for o in range(5)],
        "event_id string, _kafka_topic string, _kafka_partition int, _kafka_offset long, _kafka_timestamp timestamp, "
        "_kafka_key string, _ingested_at timestamp, _batch_id long")
    bronze.append(session, SPEC.bronze_table, good, "old-query", 0)
    tried = {2: REPLAYED_AT, 3: REPLAYED_AT}
    letters = [(SPEC.name, SPEC.topic, 0, o, AT, f"k{o}".encode(), b"{broken", "CORRUPT_PAYLOAD", "not JSON", None,
                AT, 0, REPLAYED_AT if o == 2 else None, 1 if o in tried else None, tried.get(o))
               for o in (2, 3, 5, 6, 6)]
    session.createDataFrame(letters, OLD_SCHEMA).writeTo("bronze.dead_letters").using("iceberg").create()


def test_an_old_lakehouse_is_refused_then_migrated_every_offset_once(lake):
    own, session, _ = lake
    old_lakehouse(own, session)
    ensure_topic(own, SPEC.topic)

    with pytest.raises(LakehouseError, match=r"^bronze.dead_letters is a table of an older version .*"
                                             r"run `lakehouse migrate`") as refused:
        job.run(session, own, [SPEC.name], available_now=True)
    assert "\n" not in str(refused.value)
    assert session.table(SPEC.bronze_table).count() == 5  # refused before writing anything
    with pytest.raises(LakehouseError, match=r"run `lakehouse migrate`"):  # and so is `lakehouse dlq`
        queries.list_dead_letters(session, Filters(), 0)

    moved = migrate.migrate(session, own)
    assert [(m.stream, m.dead_letters) for m in moved] == [(SPEC.name, 4)]  # 6 once
    assert not session.catalog.tableExists("bronze.dead_letters")  # a view now, not a table

    check = check_every_offset_once(session, SPEC, {0: (0, 7)})
    assert check.holds and (check.bronze, check.dead_letters) == (5, 2), check
    rows = {r._kafka_offset: r for r in session.table(SPEC.bronze_table).collect()}
    assert rows[5]._error_code == "CORRUPT_PAYLOAD" and bytes(rows[5]._raw_value) == b"{broken"
    assert rows[2]._error_code is None and rows[2]._replayed_at == REPLAYED_AT
    assert rows[3]._error_code is None and rows[3]._replayed_at is not None  # read: in bronze already
    assert rows[2]._replayed_error_code == "CORRUPT_PAYLOAD" and rows[2].event_id == "e-2"
    assert rows[0]._replayed_at is None and rows[0]._dead_at is None

    pending, total = queries.list_dead_letters(session, Filters(), 0)
    assert total == 2 and [(d.stream, d.offset, d.error_code) for d in pending] == [
        (SPEC.name, 5, "CORRUPT_PAYLOAD"), (SPEC.name, 6, "CORRUPT_PAYLOAD")]
    everything, _ = queries.list_dead_letters(session, Filters(include_replayed=True), 0)
    assert sorted(d.offset for d in everything) == [2, 3, 5, 6]

    # again: nothing to move, nothing written twice
    assert migrate.migrate(session, own) == []
    assert check_every_offset_once(session, SPEC, {0: (0, 7)}).holds
