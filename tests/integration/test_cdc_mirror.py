"""The CDC mirrors against the source database, increment after increment.

The simulator commits changes to its SQLite database (the truth), the producers send them to a
real broker with duplicates and cross-partition reordering, plus late re-deliveries of earlier
changes, many of them older than a later delete of their key. Ingestion lands them in bronze in
several micro-batches, `dbt run` applies them, and after every run the live mirror equals the
database row for row, read back through pyiceberg and through Spark's view.

dbt runs in this process (tests/integration/dbt_in_process.py: the same project and SQL on the
test's warm Spark session, the project parsed once), except in the chaos test below, where dbt
is a process of its own beside the job and maintenance, as a user's would be.

Everything runs in a lakehouse of its own (state folder, catalog, broker): the session's CDC
topics also carry changes of other source databases (tests of the producers).
"""

from __future__ import annotations

import json
import random
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from pyiceberg.catalog.sql import SqlCatalog

from expectations.mirror import check_mirror
from ingestion import job
from lakehouse.core.settings import Settings
from lakehouse.operations import dbt, maintenance
from lakehouse.operations.status import stream_status
from producers.cdc import debezium, dms
from producers.cdc.source import as_source_rows, read_tables
from producers.cdc.stream import FORMATS, PARTITIONS, messages, simulator_source, source_path
from producers.delivery import produce_to_topic
from producers.faults import FaultRates
from producers.message import Outgoing
from tests.integration.dbt_in_process import run_dbt
from tests.integration.own_lakehouse import cli_env, lakehouse_fixture
from tests.integration.processes import process_group, stop_cleanly, wait_until

pytestmark = pytest.mark.integration

FAULTS = FaultRates(duplicate=0.1, out_of_order=0.2, corrupt=0.01, invalid=0.01)
DECODERS = {"customers": debezium.decode, "accounts": dms.decode}
# (seed, changes per stream); seeds whose runs end with deleted keys in both tables (a full key
# space re-inserts most deleted keys), so the last assertions of the first test have tombstones to see
INCREMENTS = ((12, 500), (13, 300), (14, 300))
LATE_SHARE = 0.08  # of all earlier change messages, re-delivered with the next increment
KEY_SPACE = 150  # small: updates and deletes hit the same keys often
# No overlap window in these runs: the whole test lasts minutes, so the default 10-minute
# overlap would re-read every earlier change each run, and a late, older change would always
# meet its newer versions in the same read, never testing the mirror's sequence guard.
NO_OVERLAP = ["--vars", json.dumps({"overlap_minutes": 0})]
CDC_MODELS = ("customers_changelog customers_mirror customers customers_history "
              "accounts_changelog accounts_mirror accounts accounts_history account_balance_summary")


lake = lakehouse_fixture("cdc-mirror")


def send_increment(own: Settings, stream: str, seed: int, count: int, sent_before: list[Outgoing],
                   first: bool) -> tuple[list[Outgoing], int]:
    """New changes with faults, plus late re-deliveries of a share of earlier change messages.

    Returns the change messages sent (for later increments to re-deliver) and how many of the
    re-delivered changes are older than a delete of their key that was sent before them.
    """
    new = list(messages(own, stream, count, FAULTS, seed, None, first, KEY_SPACE))
    rng = random.Random(seed)
    late = [m._replace(partition=rng.randrange(PARTITIONS), fault="late")
            for m in sent_before if rng.random() < LATE_SHARE]
    rng.shuffle(late)
    mixed = new + late
    report = produce_to_topic(own, FORMATS[stream].topic, mixed, FAULTS, PARTITIONS, progress=False)
    assert report.failed == 0 and report.delivered == len(mixed)

    decode = DECODERS[stream]
    deleted_at: dict[int, tuple] = {}
    for message in sent_before:
        change = decode(message.key, message.value) if message.value is not None else None
        if change is not None and change.op == "D":
            deleted_at[change.key] = max(deleted_at.get(change.key, ()), change.seq)
    resurrection_attempts = sum(
        1 for m in late if m.value is not None
        and (c := decode(m.key, m.value)).op != "D" and c.key in deleted_at and c.seq < deleted_at[c.key])
    readable = [m for m in new if m.fault in (None, "duplicate", "out_of_order")]
    return sent_before + readable, resurrection_attempts


def pyiceberg_table(own: Settings, table: str) -> list[dict]:
    db = own.catalog_uri.removeprefix("jdbc:sqlite:")
    catalog = SqlCatalog("lake", uri=f"sqlite:///{db}", warehouse=own.warehouse)
    return catalog.load_table(f"silver.{table}").scan().to_arrow().to_pylist()


def pyiceberg_mirror(own: Settings, stream: str) -> list[dict]:
    return pyiceberg_table(own, f"{stream}_mirror")


def by_key(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda row: json.dumps(row, sort_keys=True, default=str))


def land_increments(own: Settings, session, target: Path):
    """Each of the INCREMENTS sent (with faults and late re-deliveries), ingested and applied by
    `dbt run`; yields, after each, its number and the resurrection attempts per stream."""
    sent = {stream: [] for stream in FORMATS}
    for number, (seed, count) in enumerate(INCREMENTS):
        attempts = {}
        for stream in FORMATS:
            sent[stream], attempts[stream] = send_increment(own, stream, seed, count, sent[stream],
                                                            first=number == 0)
        # small micro-batches: one increment lands in several bronze batches, so arrival order
        # (and _ingested_at) disagrees with the sources' commit order
        job.run(session, own, list(FORMATS), available_now=True, max_offsets_per_trigger=400)
        run_dbt(own, ["run", "--select", CDC_MODELS, *NO_OVERLAP], target_dir=target, capture=True)
        yield number, attempts


def test_mirrors_equal_the_source_database_after_every_increment(lake):
    own, session, target = lake
    resurrection_attempts = {stream: 0 for stream in FORMATS}
    for number, attempts in land_increments(own, session, target):
        for stream in FORMATS:
            resurrection_attempts[stream] += attempts[stream]
        for stream in FORMATS:
            source = read_tables(source_path(own, stream))[stream]
            mirror = pyiceberg_mirror(own, stream)
            live = [row for row in mirror if not row["_is_deleted"]]
            assert source, stream
            assert as_source_rows(stream, live) == source, f"{stream} after increment {number + 1}"
            tombstones = {row[f"{stream[:-1]}_id"] for row in mirror if row["_is_deleted"]}
            assert tombstones.isdisjoint(source), stream
            # the live table, kept run by run, is the mirror's live rows: pyiceberg reads it too
            assert by_key(pyiceberg_table(own, stream)) == by_key(
                [{k: v for k, v in row.items() if k != "_is_deleted"} for row in live]), stream
            # Spark reads the same through the live table users query
            assert check_mirror(session, simulator_source(own, stream)).equal, stream

    # the scenario the tombstones exist for really happened, more than a handful of times
    for stream, attempts in resurrection_attempts.items():
        assert attempts >= 5, (stream, attempts)
    deleted_keys = session.sql("select count(*) from silver.customers_mirror where _is_deleted").first()[0]
    assert deleted_keys > 0

    # after the deletes, re-inserts and late changes of the increments, the live tables kept
    # run by run equal the ones a full refresh builds
    incremental = {stream: sorted(map(tuple, session.table(f"silver.{stream}").collect())) for stream in FORMATS}
    run_dbt(own, ["run", "--select", " ".join(FORMATS), "--full-refresh", *NO_OVERLAP], target_dir=target,
            capture=True)
    for stream in FORMATS:
        assert sorted(map(tuple, session.table(f"silver.{stream}").collect())) == incremental[stream], stream


def test_history_current_versions_equal_the_live_mirror(lake):
    own, session, _ = lake
    for stream, key in (("customers", "customer_id"), ("accounts", "account_id")):
        changes = session.sql(f"select count(distinct {key}, _seq) from silver.{stream}_changelog").first()[0]
        versions = session.table(f"silver.{stream}_history")
        assert versions.count() == changes  # every distinct change is one version, once
        live = session.table(f"silver.{stream}")
        # the Kafka coordinates and arrival time may be those of another copy of the same change;
        # the run stamp (_loaded_at) is the mirror's own bookkeeping, which the history lacks
        same = [c for c in live.columns if not c.startswith(("_kafka_", "_ingested_at", "_loaded_at"))]
        current = versions.where("is_current").select(*same)
        assert sorted(map(tuple, current.collect())) == sorted(map(tuple, live.select(*same).collect()))
        # each version ends where the next (by _seq) begins
        gaps = session.sql(f"""
            select count(*) from (
                select valid_to, lead(valid_from) over (partition by {key} order by _seq) as next_from
                from silver.{stream}_history
            ) where not (valid_to <=> next_from)
        """).first()[0]
        assert gaps == 0


def test_rerun_without_new_changes_changes_nothing(lake):
    own, session, target = lake
    before = {s: session.sql(f"select count(*) from silver.{s}_mirror.snapshots").first()[0] for s in FORMATS}
    content = {s: sorted(map(tuple, session.table(f"silver.{s}_mirror").collect())) for s in FORMATS}
    run_dbt(own, ["run", "--select", "customers_mirror accounts_mirror", *NO_OVERLAP], target_dir=target, capture=True)
    for stream in FORMATS:
        assert session.sql(f"select count(*) from silver.{stream}_mirror.snapshots").first()[0] == before[stream]
        assert sorted(map(tuple, session.table(f"silver.{stream}_mirror").collect())) == content[stream]


def test_tombstones_past_retention_are_purged_unless_a_dead_letter_holds_them(lake):
    """Past the retention tombstones go, except those ingested after the stream's earliest
    pending dead letter: a replay could bring back its change, older than them (the injected
    corrupt and invalid records stay pending). Live rows stay either way."""
    own, session, target = lake
    live_before = sorted(map(tuple, session.table("silver.customers").collect()))
    floor = session.sql("select min(ingested_at) from bronze.dead_letters "
                        "where stream = 'customers' and replayed_at is null").first()[0]
    assert floor is not None  # FAULTS corrupt and invalidate records: some are pending

    def tombstones(where: str) -> int:
        return session.sql(f"select count(*) from silver.customers_mirror where _is_deleted and {where}").first()[0]

    held = f"_ingested_at >= timestamp'{floor:%Y-%m-%d %H:%M:%S.%f}'"
    kept = tombstones(held)
    assert kept > 0
    purge_now = json.dumps({"cdc_tombstone_retention_hours": 0, "overlap_minutes": 0})
    run_dbt(own, ["run", "--select", "customers_mirror", "--vars", purge_now], target_dir=target, capture=True)
    assert tombstones(f"not ({held})") == 0
    assert tombstones(held) == kept
    assert sorted(map(tuple, session.table("silver.customers").collect())) == live_before
    results = json.loads((Path(target) / "run_results.json").read_text())
    assert [r["status"] for r in results["results"] if r["unique_id"].startswith("model.")] == ["success"]


def content(session, table: str, snapshot_id: int) -> tuple[int, int]:
    """(rows, an order-independent checksum of every column) of a table at a snapshot."""
    row = session.sql(f"select count(*) as n, sum(cast(xxhash64(to_json(struct(*))) as decimal(38, 0))) as h "
                      f"from {table} version as of {snapshot_id}").first()
    return row.n, int(row.h or 0)


def maintenance_commits(session, table: str, since) -> list:
    """The snapshots maintenance committed (compaction, delete and manifest rewrites: 'replace')."""
    return session.sql(f"select snapshot_id, parent_id, summary from {table}.snapshots "
                       f"where operation = 'replace' and committed_at >= timestamp'{since:%Y-%m-%d %H:%M:%S}'"
                       ).collect()


@pytest.mark.chaos  # 3 minutes; the default run has the chaos suite's short form (tests/chaos/)
def test_maintenance_while_ingestion_streams_and_dbt_merges(lake, tmp_path):
    """Producers and the streaming job keep committing to bronze and dbt keeps merging the
    mirrors while `lakehouse maintain` passes run over every table: no batch and no dbt run
    fails, no maintenance step fails, every snapshot maintenance committed holds exactly the
    rows of its parent (count and checksum), it leaves fewer data files, and once the streams
    drain, one more dbt run makes the mirrors equal the source databases."""
    own, session, target = lake
    if not session.catalog.tableExists("silver.customers_mirror"):
        # Run alone (`make test-chaos` deselects the tests above, which build the mirrors): the
        # same increments, so the mirrors have history and several files to compact.
        for _ in land_increments(own, session, target):
            pass
    # Compact everything with 2+ files, also the partitions ingestion is writing this very
    # moment (quiet_minutes 0): the hardest case for concurrent commits. Snapshots are kept
    # (24 h) so each rewrite can be compared with its parent below; expiry under an exactly-
    # once replay has its own test (test_maintenance.py).
    policy_file = tmp_path / "maintenance.yml"
    policy_file.write_text(yaml.safe_dump({"defaults": {
        "quiet_minutes": 0, "min_input_files": 2, "snapshot_retention_hours": 24, "snapshots_to_keep": 10}}))
    policies = maintenance.load_policies(policy_file)
    began = datetime.now(UTC).replace(microsecond=0)
    env = cli_env(own)
    command = [str(Path(sys.executable).with_name("lakehouse")), "ingest", *FORMATS, "--trigger", "2s"]
    log = tmp_path / "ingest.log"
    reports, passes, errors = {}, [], []

    def produce_slowly(stream: str, seed: int) -> None:
        changes = messages(own, stream, 600, FAULTS, seed, None, False, KEY_SPACE)
        reports[stream] = produce_to_topic(own, FORMATS[stream].topic, changes, FAULTS, PARTITIONS,
                                           progress=False, rate=15)

    def maintain_repeatedly(producers: list[threading.Thread]) -> None:
        try:
            while any(thread.is_alive() for thread in producers) or not passes:
                passes.append(maintenance.maintain(session, own, policies=policies))
        except Exception as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)

    with process_group(command, env, log) as ingestion:
        producers = [threading.Thread(target=produce_slowly, args=(stream, 21 + n))
                     for n, stream in enumerate(FORMATS)]
        for thread in producers:
            thread.start()
        maintainer = threading.Thread(target=maintain_repeatedly, args=(producers,))
        maintainer.start()
        runs = 0
        while maintainer.is_alive() or runs < 2:
            assert ingestion.poll() is None, log.read_text()[-3000:]
            # `dbt run` in a process of its own: it and maintenance share only the run lock
            dbt.run_dbt(own, ["run", "--select", CDC_MODELS, *NO_OVERLAP], target_dir=target, capture=True)
            runs += 1
        for thread in (*producers, maintainer):
            thread.join()
        assert not errors, errors
        assert all(report.failed == 0 for report in reports.values())
        wait_until(lambda: not any(status.lag for status in stream_status(own, list(FORMATS))), "no lag", log, 300,
                   ingestion)
        stop_cleanly(ingestion, log)
    assert runs >= 2 and passes  # dbt and maintenance ran while the job was committing batches
    batches = log.read_text().count(" batch ")
    assert batches > runs, log.read_text()[-3000:]

    results = [result for one_pass in passes for result in one_pass]
    assert {"bronze.customers", "bronze.accounts", "silver.customers_mirror", "silver.accounts_mirror"} <= \
        {r.table for r in results}
    failed = maintenance.failed_or_skipped(results)
    assert not failed, failed

    # Every rewrite kept its parent's rows exactly, and left fewer data files.
    fewer_files = {}
    for table in sorted({r.table for r in results}):
        for commit in maintenance_commits(session, table, began):
            assert content(session, table, commit.snapshot_id) == content(session, table, commit.parent_id), \
                (table, commit.snapshot_id)
            parent = session.sql(f"select summary from {table}.snapshots where snapshot_id = {commit.parent_id}"
                                 ).first().summary
            dropped = int(parent["total-data-files"]) - int(commit.summary["total-data-files"])
            assert dropped >= 0, (table, commit.summary)
            fewer_files[table] = fewer_files.get(table, 0) + dropped
    for table in ("bronze.customers", "bronze.accounts", "silver.customers_mirror", "silver.accounts_mirror"):
        assert fewer_files.get(table, 0) > 0, fewer_files  # compacted while being written
    assert sum(r.files_rewritten for r in results) > sum(r.files_added for r in results)

    # Nothing lost: after one more run the mirrors equal the source databases.
    run_dbt(own, ["run", "--select", CDC_MODELS, *NO_OVERLAP], target_dir=target, capture=True)
    for stream in FORMATS:
        assert check_mirror(session, simulator_source(own, stream)).equal, stream


def land_changes(session, key: int, *changes: dict) -> None:
    """Append to bronze.customers one change per dict of column values, each a copy of the key's
    latest change with those values, written as ingestion would land them, in sequence order
    after every change bronze holds."""
    from pyspark.sql import functions as F

    newest = session.sql("select max(_seq) from bronze.customers").first()[0]
    latest = session.table("bronze.customers").where(F.col("customer_id") == key).orderBy(F.col("_seq").desc()).limit(1)
    types = {field.name: field.dataType for field in latest.schema["_seq"].dataType.fields}
    for number, values in enumerate(changes, start=1):
        seq = {"phase": newest.phase, "commit_pos": newest.commit_pos + number, "change_pos": 0}
        change = latest.withColumn("_seq", F.struct(*(F.lit(value).cast(types[name]).alias(name)
                                                      for name, value in seq.items()))) \
            .withColumn("_kafka_offset", F.lit(900_000_000 + number).cast("bigint")) \
            .withColumn("_ingested_at", F.current_timestamp())
        for column, value in values.items():
            change = change.withColumn(column, value)
        change.writeTo("bronze.customers").append()


def null(column: str):
    """A null of the column's type (a typed null: bronze's append takes no untyped one)."""
    from pyspark.sql import functions as F

    return F.when(F.lit(False), F.col(column))


def test_a_run_without_the_changelog_fills_what_a_change_did_not_carry(lake):
    """`dbt run --select customers_mirror customers_history`: the changelog view is not built in
    the run, so dbt-spark's relation cache does not know it (macros/relation_exists.sql). Of two
    changes to a key in one increment, the later one without its email (`_unavailable`, an
    unchanged TOASTed value) takes the email of the earlier one. Before relation_exists this run
    saw no changelog and filled nothing: the mirror and the history kept the email from before
    both changes, in silence."""
    from pyspark.sql import functions as F

    own, session, target = lake
    key = session.sql("select customer_id from silver.customers_mirror where not _is_deleted "
                      "and customer_id is not null order by customer_id limit 1").first()[0]
    land_changes(session, key,
                 {"op": F.lit("U"), "email": F.lit("carried@example.com"), "_unavailable": null("_unavailable")},
                 {"op": F.lit("U"), "tier": F.lit("platinum"), "email": null("email"),
                  "_unavailable": F.array(F.lit("email"))})
    run_dbt(own, ["run", "--select", "customers_mirror customers_history", *NO_OVERLAP],
            target_dir=target, capture=True)
    mirror = session.sql(f"select email, tier from silver.customers_mirror where customer_id = {key}").first()
    assert (mirror.email, mirror.tier) == ("carried@example.com", "platinum")
    current = session.sql(f"select email, tier from silver.customers_history where customer_id = {key} "
                          "and is_current").collect()
    assert [(row.email, row.tier) for row in current] == [("carried@example.com", "platinum")]


def test_a_change_mirrored_after_a_host_ahead_ran_reaches_the_live_table(lake):
    """The run stamp `_loaded_at` is an order, not a clock reading (macros/run_stamp.sql). The
    mirror's newest rows are given the stamps a dbt host whose clock ran 10 minutes ahead would
    have written (the stamp is data: no clock race in this test), and the live table applies
    them: its mark is then 10 minutes ahead. A change mirrored next by this host must be stamped
    after that mark, or the live table skips it for good. Stamped with this host's clock (the
    code before the run stamp), the new tier stayed out of silver.customers while the mirror
    had it. `test_incremental_models.py` runs the same story with a real process under faketime."""
    from pyspark.sql import functions as F

    own, session, target = lake
    key = session.sql("select customer_id from silver.customers_mirror where not _is_deleted "
                      "and customer_id is not null order by customer_id limit 1").first()[0]
    newest = session.sql("select cast(max(_loaded_at) as string) from silver.customers_mirror").first()[0]
    session.sql("update silver.customers_mirror set _loaded_at = _loaded_at + interval 10 minutes "
                f"where _loaded_at = timestamp'{newest}'")
    run_dbt(own, ["run", "--select", "customers", *NO_OVERLAP], target_dir=target, capture=True)
    ahead = session.sql("select max(_loaded_at) from silver.customers_mirror").first()[0]

    land_changes(session, key, {"op": F.lit("U"), "tier": F.lit("after-the-host-ahead"),
                                "_unavailable": null("_unavailable")})
    run_dbt(own, ["run", "--select", "customers_mirror customers", *NO_OVERLAP], target_dir=target, capture=True)
    stamped = session.sql(f"select tier, _loaded_at from silver.customers_mirror where customer_id = {key}").first()
    live = session.sql(f"select tier from silver.customers where customer_id = {key}").collect()
    assert stamped.tier == "after-the-host-ahead"
    assert [row.tier for row in live] == ["after-the-host-ahead"], (stamped, ahead)
    assert stamped._loaded_at > ahead, (stamped, ahead)


def test_a_run_without_the_changelog_ends_every_version_at_a_truncate(lake):
    """A TRUNCATE applied by `dbt run --select customers_history` alone (the changelog view not
    in dbt-spark's relation cache) ends the open version of every key, as a full build does.
    Before relation_exists the run saw no truncation and left every version current.

    The TRUNCATE lands twice (a replayed duplicate: same sequence and arrival, another offset),
    and bronze holds duplicates of the changes before it (the producers' faults): the versions
    it writes take the coordinates and arrival of one copy, the same one on an incremental run
    and on a full refresh (cdc_copy_order). Before, they were ranked by the sequence alone, and
    this test had to leave the Kafka coordinates and `_ingested_at` out of the comparison. Last
    of the module: it empties the table."""
    from pyspark.sql import functions as F

    own, session, target = lake
    key = session.sql("select customer_id from silver.customers_mirror where not _is_deleted "
                      "and customer_id is not null order by customer_id limit 1").first()[0]
    assert session.sql("select count(*) from silver.customers_history where is_current").first()[0] > 1
    truncate = {"op": F.lit("T"), "customer_id": null("customer_id"), "_unavailable": null("_unavailable")}
    land_changes(session, key, truncate)
    landed = session.table("bronze.customers").where("op = 'T'")
    landed.withColumn("_kafka_offset", F.col("_kafka_offset") - 100_000_000).writeTo("bronze.customers").append()

    def history(*flags: str) -> list[str]:
        run_dbt(own, ["run", *flags, "--select", "customers_history", *NO_OVERLAP], target_dir=target, capture=True)
        versions = session.table("silver.customers_history")
        versions = versions.drop("_loaded_at", "_first_loaded_at")  # the run stamps differ by design
        return sorted(map(repr, versions.collect()))  # repr: the truncated versions' nulls do not sort

    incremental = history()
    assert session.sql("select count(*) from silver.customers_history where is_current").first()[0] == 0
    full = history("--full-refresh")
    assert sorted(set(full) ^ set(incremental)) == [] and full == incremental
