"""`lakehouse dlq`: dead letters replayed into bronze once their cause is fixed, and on to silver.

The real purchases stream (Avro, Confluent wire format) in a lakehouse of its own (state
folder, catalog, registry, broker): good v1 and v2 purchases, purchases of a "v3" (v2 plus an
optional field) framed with a schema id the `purchases-value` subject does not list yet
(UNKNOWN_SCHEMA_ID), one payload that is not Avro at all (CORRUPT_PAYLOAD), one v2 purchase of
1990 (EVENT_TIME_OUT_OF_RANGE). Each dead row records the schema id its header names, known
or not. A replay before the fix changes only the attempt counters (and fills a schema id a dead
row lacks); after v3 is registered under the subject, the replay (the real command line)
evolves bronze, replaces the v3 purchases' dead rows by their decoded rows at the same Kafka
coordinates, in one commit, and the next incremental dbt run carries them into silver. A
second replay changes nothing. Then a replay killed half way, between its two stream tables'
commits, leaves every offset once, and the next one finishes it. And a replay run by a host whose
clock is behind (the real command line under Debian's `faketime`) reaches silver all the same:
silver selects bronze's commits by lineage, not by their commit times.
"""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyiceberg.expressions import IsNull, NotNull, Or

from ingestion import job
from lakehouse.commands.cli import build_parser
from lakehouse.contracts.registry import registry_for
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings
from lakehouse.operations import dlq
from lakehouse.operations.dbt import run_dbt
from lakehouse.operations.dead_letters import queries
from lakehouse.operations.dead_letters.filters import parse_filters
from lakehouse.operations.dead_letters.replay import REPLAY_ID_PROPERTY, replay
from lakehouse.operations.dead_letters.text import format_replay
from lakehouse.operations.status import pyiceberg_catalog
from producers import avro, purchases
from producers.delivery import ensure_topic, producer_config
from tests.conftest import REPO_ROOT
from tests.integration import dbt_in_process
from tests.integration.own_lakehouse import cli_env, lakehouse_fixture
from tests.integration.processes import faketime

pytestmark = pytest.mark.integration

LAKEHOUSE = str(Path(os.sys.executable).parent / "lakehouse")
GOOD, PENDING = 20, 6
COUPON = "SPRING-24"
CORRUPT_KEY = b"bad\x1bkey"
CORRUPT_VALUE = b"\x1b[2J\x07not avro \xff\xfe\x00"  # no wire-format header: CORRUPT_PAYLOAD
STALE_KEY = b"purchase-of-1990"  # a known schema id, an event time out of range
STALE_TIME_MS = 631_152_000_000  # 1990-01-01, before the earliest event time accepted
FAILING = {"CORRUPT_PAYLOAD": 1, "EVENT_TIME_OUT_OF_RANGE": 1}  # still failing after the fix
# No overlap window: the incremental run after the replay must find the replayed rows by
# their _ingested_at alone (the default 10 minutes would re-read everything in this test).
NO_OVERLAP = ["--vars", '{"overlap_minutes": 0}']


lake = lakehouse_fixture("dlq-replay")


def start_cli(own: Settings, *args: str) -> subprocess.Popen:
    return subprocess.Popen([LAKEHOUSE, *args], cwd=REPO_ROOT, env=cli_env(own), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def lakehouse(own: Settings, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([LAKEHOUSE, *args], cwd=REPO_ROOT, env=cli_env(own), capture_output=True, text=True,
                          timeout=300)


def v3_schema() -> str:
    """v2 plus an optional field: a schema the stream has not seen."""
    schema = json.loads(purchases.SCHEMAS[2].text)
    schema["fields"].append({"name": "coupon_code", "type": ["null", "string"], "default": None})
    return json.dumps(schema)


@pytest.fixture(scope="module")
def ingested(lake):
    """Purchases produced and ingested once: (ids of the good ones, ids of the v3 ones, v3's schema id,
    v2's schema id)."""
    own, session, _ = lake
    registry = registry_for(own)
    ids = purchases.register_schemas(registry)  # v1 and v2 under purchases-value, as the producer does
    # The registry's ids are global: v3 registered under another subject gets an id that
    # `purchases-value` does not list, until v3 is registered there too (same schema, same id).
    v3_id = registry.register("purchases-staging-value", v3_schema())
    assert v3_id not in ids.values() and v3_id not in registry.subject_schemas(purchases.SUBJECT)
    rng, now = random.Random(11), datetime.now(UTC)
    parsed = {version: avro.parsed(schema.text) for version, schema in purchases.SCHEMAS.items()}
    good = [purchases.make_purchase(rng, now, 1 + n % 2) for n in range(GOOD)]
    pending = [{**purchases.make_purchase(rng, now, 2), "coupon_code": COUPON} for _ in range(PENDING)]
    messages = ([(purchases.key(p), purchases.encode(p, ids[v], parsed[v]))
                 for p in good for v in [2 if "payment_method" in p else 1]]
                + [(purchases.key(p), purchases.encode(p, v3_id, avro.parsed(v3_schema()))) for p in pending]
                + [(CORRUPT_KEY, CORRUPT_VALUE),
                   (STALE_KEY, purchases.encode({**purchases.make_purchase(rng, now, 2),
                                                 "transaction_time": STALE_TIME_MS}, ids[2], parsed[2]))])
    ingest_purchases(own, session, messages)
    return {p["transaction_id"] for p in good}, {p["transaction_id"] for p in pending}, v3_id, ids[2]


def dead_letters(session) -> dict[bytes, dict]:
    """The purchases stream's dead letters, pending and replayed, through the view."""
    rows = session.table("bronze.dead_letters").where("stream = 'purchases'").collect()
    return {bytes(row.key): row.asDict() for row in rows}


def good_rows(session, table: str = "bronze.purchases"):
    return session.table(table).where("_error_code is null")


def snapshots(session, table: str) -> list[int]:
    return [r.snapshot_id for r in session.sql(f"select snapshot_id from {table}.snapshots order by committed_at")
            .collect()]


def test_replay_after_the_schema_is_registered_lands_the_records_in_bronze_and_silver(lake, ingested):
    own, session, target = lake
    good_ids, pending_ids, v3_id, v2_id = ingested
    keys = {tid.encode() for tid in pending_ids}

    # --- ingested: the good ones in bronze, the v3 ones dead rows with UNKNOWN_SCHEMA_ID
    assert good_rows(session).count() == GOOD
    assert session.table("bronze.purchases").count() == GOOD + PENDING + 2
    dead = dead_letters(session)
    assert set(dead) == keys | {CORRUPT_KEY, STALE_KEY}
    assert {dead[k]["error_code"] for k in keys} == {"UNKNOWN_SCHEMA_ID"}
    assert dead[CORRUPT_KEY]["error_code"] == "CORRUPT_PAYLOAD"
    assert dead[STALE_KEY]["error_code"] == "EVENT_TIME_OUT_OF_RANGE"
    assert all(d["replayed_at"] is None and d["replay_attempts"] is None for d in dead.values())
    # the schema id each header names, whether the subject lists it or not; none without a header
    assert {k: dead[k]["schema_id"] for k in dead} == {**{k: v3_id for k in keys}, CORRUPT_KEY: None,
                                                       STALE_KEY: v2_id}
    first = dead
    # dead rows written before the ingestion recorded schema ids have none: a replay fills them
    session.sql("update bronze.purchases set _schema_id = null where _error_code is not null")
    # silver before the replay (the replayed rows are what the next incremental run must see),
    # built meanwhile: until the fix, the replays below write nothing it reads
    pool = ThreadPoolExecutor(1)
    silver_built = pool.submit(run_dbt, own, ["run", "--select", "purchases", *NO_OVERLAP], target_dir=target,
                               capture=True)

    # --- a replay before the fix: no good row more, the attempt is recorded (one commit)
    bronze_before = snapshots(session, "bronze.purchases")
    report = replay(session, own, parse_filters(["purchases"]))
    assert (report.selected, report.replayed) == (PENDING + 2, 0)
    assert report.streams[0].still_failing == {"UNKNOWN_SCHEMA_ID": PENDING, **FAILING}
    assert snapshots(session, "bronze.purchases")[:-1] == bronze_before
    assert good_rows(session).count() == GOOD
    bronze_before = snapshots(session, "bronze.purchases")
    dead = dead_letters(session)
    for key, row in dead.items():
        assert row["replayed_at"] is None and row["replay_attempts"] == 1 and row["last_replay_at"] is not None
        assert row["error_code"] == first[key]["error_code"] and row["schema_id"] == first[key]["schema_id"]
        assert (row["partition"], row["offset"], bytes(row["value"])) == (
            first[key]["partition"], first[key]["offset"], bytes(first[key]["value"]))  # bytes untouched

    # --- the fix: v3 registered under the stream's subject (the same schema keeps its id)
    assert "coupon_code" not in session.table("bronze.purchases").columns
    assert registry_for(own).register(purchases.SUBJECT, v3_schema()) == v3_id
    dry = replay(session, own, parse_filters(["purchases"]), dry_run=True)
    assert (dry.selected, dry.replayed, dry.streams[0].still_failing) == (PENDING + 2, PENDING, FAILING)
    assert snapshots(session, "bronze.purchases") == bronze_before  # a dry run writes nothing
    silver_built.result()
    pool.shutdown()
    assert session.table("silver.purchases").count() == GOOD

    # --- the replay, by the command line
    result = lakehouse(own, "dlq", "replay", "--stream", "purchases")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert (f"purchases: {PENDING + 2} selected, {PENDING} replayed into bronze.purchases, "
            "2 still failing: CORRUPT_PAYLOAD 1, EVENT_TIME_OUT_OF_RANGE 1") in result.stdout, result.stdout

    # bronze: evolved with v3's column, the v3 purchases at their original coordinates, in place
    # of their dead rows, in one commit
    assert len(snapshots(session, "bronze.purchases")) == len(bronze_before) + 1
    assert session.table("bronze.purchases").count() == GOOD + PENDING + 2
    bronze = good_rows(session)
    assert bronze.count() == GOOD + PENDING
    assert bronze.where(f"coupon_code = '{COUPON}'").count() == PENDING
    replayed = {r.transaction_id: r for r in bronze.where(bronze.transaction_id.isin(*pending_ids)).collect()}
    assert set(replayed) == pending_ids
    for tid, row in replayed.items():
        letter = dead[tid.encode()]
        assert (row._kafka_topic, row._kafka_partition, row._kafka_offset) == (
            letter["topic"], letter["partition"], letter["offset"])
        assert row._schema_id == v3_id and row._kafka_key == tid
        assert row._batch_id == letter["batch_id"]
        assert row._kafka_timestamp == letter["kafka_timestamp"]
        assert row._ingested_at > letter["ingested_at"]  # the replay time: new to incremental models
    every = session.table("bronze.purchases")
    assert every.groupBy("_kafka_topic", "_kafka_partition", "_kafka_offset").count().where("count > 1").count() == 0
    marked = session.sql("select summary from bronze.purchases.snapshots order by committed_at desc limit 1").first()
    assert REPLAY_ID_PROPERTY in marked.summary and "lakehouse.query-id" not in marked.summary

    # dead letters: the replayed ones listed as replayed (bytes kept), the two still failing pending
    dead = dead_letters(session)
    assert set(dead) == keys | {CORRUPT_KEY, STALE_KEY}
    for key in keys:
        row = dead[key]
        assert row["replayed_at"] is not None and row["replay_attempts"] == 2
        assert row["last_replay_at"] == row["replayed_at"] and row["error_code"] == "UNKNOWN_SCHEMA_ID"
    for key, code in ((CORRUPT_KEY, "CORRUPT_PAYLOAD"), (STALE_KEY, "EVENT_TIME_OUT_OF_RANGE")):
        assert dead[key]["replayed_at"] is None and dead[key]["replay_attempts"] == 2
        assert dead[key]["error_code"] == code and dead[key]["schema_id"] == first[key]["schema_id"]

    # the same through pyiceberg, as another engine reads dead letters: a filter on the bronze table
    catalog = pyiceberg_catalog(own)
    letters = catalog.load_table("bronze.purchases").scan(
        row_filter=Or(NotNull("_error_code"), NotNull("_replayed_at")),
        selected_fields=("_raw_key", "_replayed_at", "_replay_attempts")).to_arrow().to_pylist()
    assert {bytes(r["_raw_key"]) for r in letters if r["_replayed_at"] is not None} == keys
    assert {r["_replay_attempts"] for r in letters} == {2}
    rows = catalog.load_table("bronze.purchases").scan(
        row_filter=IsNull("_error_code"),
        selected_fields=("transaction_id", "_kafka_partition", "_kafka_offset", "_schema_id")).to_arrow().to_pylist()
    assert len(rows) == GOOD + PENDING
    assert {(r["transaction_id"], r["_kafka_partition"], r["_kafka_offset"], r["_schema_id"])
            for r in rows if r["transaction_id"] in pending_ids} == {
        (tid, dead[tid.encode()]["partition"], dead[tid.encode()]["offset"], v3_id) for tid in pending_ids}

    # --- silver: the next incremental run picks the replayed purchases up (meanwhile, the
    # command line shows the corrupt dead letter)
    corrupt = dead[CORRUPT_KEY]
    show = start_cli(own, "dlq", "show", f"purchases:{corrupt['partition']}:{corrupt['offset']}")
    run_dbt(own, ["run", "--select", "purchases", *NO_OVERLAP], target_dir=target, capture=True)
    silver = {r.transaction_id for r in session.table("silver.purchases").select("transaction_id").collect()}
    assert silver == good_ids | pending_ids
    out, err = show.communicate(timeout=300)
    assert show.returncode == 0, err[-3000:]
    assert "\x1b" not in out and "\x07" not in out and "\x00" not in out  # nothing raw reaches the terminal
    assert out.startswith(f"dead letter purchases:{corrupt['partition']}:{corrupt['offset']}\n")
    assert "CORRUPT_PAYLOAD" in out and "no Confluent wire-format header" in out
    assert "  00000000  1b 5b 32 4a 07 6e 6f 74  20 61 76 72 6f 20 ff fe  |.[2J.not avro ..|" in out
    assert "  00000010  00" in out and "  00000011\n" in out
    assert '  escaped: "\\x1b[2J\\x07not avro \\xff\\xfe\\x00"' in out
    assert '  escaped: "bad\\x1bkey"' in out

    # --- a second replay: nothing it selects is pending any more, nothing is committed
    before = snapshots(session, "bronze.purchases")
    again = replay(session, own, parse_filters(["purchases"], ["UNKNOWN_SCHEMA_ID"]))
    assert (again.selected, again.replayed, again.streams) == (0, 0, [])
    assert "nothing to replay" in format_replay(again)
    assert snapshots(session, "bronze.purchases") == before
    count = good_rows(session).count()
    stats = queries.stats(session, parse_filters(["purchases"], include_replayed=True))
    reasons = stats["streams"]["purchases"]["reasons"]
    assert {code: (r["pending"], r["replayed"]) for code, r in reasons.items()} == {
        "CORRUPT_PAYLOAD": (1, 0), "EVENT_TIME_OUT_OF_RANGE": (1, 0), "UNKNOWN_SCHEMA_ID": (0, PENDING)}

    # every pending purchase dead letter again (only the two still failing are): tried, nothing lands twice
    everything = replay(session, own, parse_filters(["purchases"]))
    assert (everything.selected, everything.replayed) == (2, 0)
    assert everything.streams[0].still_failing == FAILING
    assert good_rows(session).count() == count and session.table("bronze.purchases").count() == GOOD + PENDING + 2
    assert dead_letters(session)[CORRUPT_KEY]["replay_attempts"] == 3
    assert {k: r["replayed_at"] for k, r in dead_letters(session).items()} == {
        k: r["replayed_at"] for k, r in dead.items()}


def test_list_stats_and_show_on_a_session(lake, ingested, capsys):
    """The Spark-backed commands' output, run in-process on the test's session."""
    own, session, _ = lake
    parser = build_parser()

    def command(*argv: str) -> str:
        assert dlq.run(parser.parse_args(["dlq", *argv]), own, session) == 0
        return capsys.readouterr().out

    listed = command("list", "--stream", "purchases", "--include-replayed", "--limit", "2")
    lines = listed.splitlines()
    assert lines[0].split()[:2] == ["STREAM", "PARTITION:OFFSET"] and len(lines) == 4
    assert lines[1].startswith("purchases ") and lines[3] == (
        f"showing 2 of {PENDING + 2}: {PENDING} more (--limit 0 shows all, or narrow the filters)")
    listed = json.loads(command("list", "--reason", "corrupt_payload", "--include-replayed", "--json"))
    assert listed["total"] == 1 and listed["dead_letters"][0]["error_code"] == "CORRUPT_PAYLOAD"
    stats = json.loads(command("stats", "--json", "--include-replayed"))
    assert stats["total"]["pending"] + stats["total"]["replayed"] == PENDING + 2
    assert "purchases" in command("stats", "--include-replayed")
    shown = command("show", "--reason", "CORRUPT_PAYLOAD", "--include-replayed", "--max-bytes", "4")
    assert "  00000000  1b 5b 32 4a" in shown and "... 13 more bytes" in shown
    with pytest.raises(LakehouseError, match=r"^no dead letter at purchases:0:999999 \(stream purchases"):
        dlq.run(parser.parse_args(["dlq", "show", "purchases", "0", "999999"]), own, session)


def test_a_bad_reason_is_one_line_without_a_traceback(lake):
    own, _, _ = lake
    result = lakehouse(own, "dlq", "list", "--reason", "NOT_A_REASON")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("error: unknown reason 'NOT_A_REASON' for --reason; reasons: CORRUPT_PAYLOAD")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


# --- a replay from a host whose clock is behind ------------------------------------------------

# Seconds the replay's host is behind. The case is 30 s; the replay must commit within
# that many seconds after the snapshot a dbt run recorded for its commit to look older, and a dbt
# run happens in between, which takes longer than 30 s on a loaded machine. 50 s stays inside the
# minute Iceberg accepts a commit stamped before its parent.
CLOCK_BEHIND = 50
MORE = 3  # good purchases ingested while the replay is held: the snapshot the next dbt run records
REPLAY_MERGES = "replacing or marking its dead rows"  # the replay's line just before its MERGE


def v4_schema() -> str:
    """v2 plus another optional field, registered late as v3 is in the test above."""
    schema = json.loads(purchases.SCHEMAS[2].text)
    schema["fields"].append({"name": "gift_note", "type": ["null", "string"], "default": None})
    return json.dumps(schema)


def ingest_purchases(own: Settings, session, messages: list[tuple[bytes, bytes]]) -> None:
    from confluent_kafka import Producer

    ensure_topic(own, purchases.TOPIC)
    producer = Producer(producer_config(own))
    for key, value in messages:
        producer.produce(purchases.TOPIC, value, key)
    assert producer.flush(30) == 0
    job.run(session, own, ["purchases"], available_now=True)


def replay_snapshots(session) -> dict[int, datetime]:
    """{snapshot id: commit time} of the replays' commits to bronze.purchases."""
    return {r.snapshot_id: r.committed_at.replace(tzinfo=UTC) for r in session.sql(
        "select snapshot_id, committed_at, summary from bronze.purchases.snapshots").collect()
        if REPLAY_ID_PROPERTY in r.summary}


def silver_ids(session) -> set[str]:
    return {r.transaction_id for r in session.table("silver.purchases").select("transaction_id").collect()}


def test_a_replay_by_a_host_whose_clock_is_behind_reaches_silver(lake):
    """`lakehouse dlq replay` run under faketime in the past (CLOCK_BEHIND) commits a snapshot
    stamped before its parent, which Iceberg accepts (up to a minute). The replay is held (SIGSTOP) just before
    its MERGE while ingestion commits more purchases and a dbt run records that commit as the
    snapshot it read; then it commits. Chosen by commit time, that commit was the newest and the
    replay's "older": the next run never read the replayed purchases (skipped for good). Chosen by
    main's lineage and sequence numbers, the next run reads them."""
    own, session, target = lake
    registry = registry_for(own)
    ids = purchases.register_schemas(registry)
    v4_id = registry.register("purchases-staging-v4-value", v4_schema())
    rng, now = random.Random(29), datetime.now(UTC)
    parsed = avro.parsed(purchases.SCHEMAS[2].text)
    pending = [{**purchases.make_purchase(rng, now, 2), "gift_note": "for you"} for _ in range(4)]
    more = [purchases.make_purchase(rng, now, 2) for _ in range(MORE)]
    ingest_purchases(own, session, [(purchases.key(p), purchases.encode(p, v4_id, avro.parsed(v4_schema())))
                                    for p in pending])
    # silver built, and dbt's project parsed in this process, before the clock matters
    dbt_in_process.run_dbt(own, ["run", "--select", "purchases"], target_dir=target)
    assert not {p["transaction_id"] for p in pending} & silver_ids(session)
    assert registry.register(purchases.SUBJECT, v4_schema()) == v4_id  # the fix

    replays_before = replay_snapshots(session)
    replay = subprocess.Popen([*faketime(-CLOCK_BEHIND), LAKEHOUSE, "dlq", "replay", "--stream", "purchases"],
                              cwd=REPO_ROOT, env=cli_env(own), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, start_new_session=True)
    errors: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [errors.put(line) for line in replay.stderr], daemon=True)
    reader.start()
    seen: list[str] = []
    try:
        while not any(REPLAY_MERGES in line for line in seen):
            try:
                seen.append(errors.get(timeout=300))
            except queue.Empty:
                pytest.fail("the replay never reached its MERGE: " + "".join(seen)[-3000:])
        os.killpg(replay.pid, signal.SIGSTOP)  # Python and its JVM: held before the MERGE commits
        # meanwhile ingestion commits more purchases, and a dbt run records that commit as read
        ingest_purchases(own, session, [(purchases.key(p), purchases.encode(p, ids[2], parsed)) for p in more])
        recorded = session.sql("select s.committed_at from bronze.purchases.refs r join bronze.purchases.snapshots s "
                               "on r.snapshot_id = s.snapshot_id where r.name = 'main'").first()[0].replace(tzinfo=UTC)
        dbt_in_process.run_dbt(own, ["run", "--select", "purchases"], target_dir=target)
        os.killpg(replay.pid, signal.SIGCONT)
        out = replay.stdout.read()
        returncode = replay.wait(timeout=600)
        exited = datetime.now(UTC)
        reader.join(timeout=60)
        seen.extend(errors.queue)
        assert returncode == 0, out[-2000:] + "".join(seen)[-6000:]
    finally:
        if replay.poll() is None:
            os.killpg(replay.pid, signal.SIGCONT)
            os.killpg(replay.pid, signal.SIGKILL)
            replay.wait()
    assert f"{len(pending)} replayed into bronze.purchases" in out, out

    # the replay's commit carries the clock of its host: 30 s behind this one (its JVM saw it)
    [replayed] = [at for snapshot, at in replay_snapshots(session).items() if snapshot not in replays_before]
    assert replayed <= exited - timedelta(seconds=CLOCK_BEHIND), (replayed, exited)
    # (for the reader: whether it is also stamped before the commit the dbt run recorded, the
    # case that lost it when increments were chosen by commit time, depends on how long that run
    # took here)
    print(f"replay committed at {replayed:%H:%M:%S.%f} by its clock, after the ingestion's commit of "
          f"{recorded:%H:%M:%S.%f}: {'before' if replayed < recorded else 'after'} it by its stamp")

    dbt_in_process.run_dbt(own, ["run", "--select", "purchases"], target_dir=target)
    assert {p["transaction_id"] for p in pending + more} <= silver_ids(session)
