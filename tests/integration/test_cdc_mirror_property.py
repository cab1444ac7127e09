"""Property: however a change set is delivered, dbt's CDC mirror converges to the source table.

Each example draws a source table's history and a delivery of it, then runs the real thing:
dbt (dbtRunner, in this process, on the tests' Spark session) runs the project's own mirror
model files (models/silver/customers_mirror.sql for Debezium's {phase, commit_pos, change_pos}
sequence, accounts_mirror.sql for DMS's {log_position, commit_us, stream_position, transaction_id,
record_id}) with the project's macros/: the `cdc_mirror` materialization (create, changes table,
column evolution, MERGE, tombstone purge), `cdc_mirror_changes` and `ingested_since_last_run`.
They run in a small
private dbt project whose `<table>_changelog` is an Iceberg table the test appends each
increment to, as ingestion appends to bronze (it is the project's `bronze` source too, whose
snapshots bound each run's increment); dbt runs once per increment. Before a run the mirror
may lose its record of the snapshot its last run read (as when maintenance expires it), so
that run falls back to the data sequence number it recorded, or to the overlap window.

Drawn: a few keys, each through inserts, updates, deletes and re-inserts, interleaved in one
commit order; for Debezium, some keys' first change a snapshot read (phase 0, at a snapshot
position above every streamed change's, as PostgreSQL's in-flight transactions give), streamed
changes whose own positions fall from one transaction to the next (only the commit position
orders them), and TRUNCATEs (no key) anywhere in the stream; a column the source adds
part-way (changes committed after carry it, so the changelog grows it when the first such
change arrives, between increments or not); two numeric columns the source widens part-way,
each at its own point after the old part, or never (`points` int -> bigint, `score` float ->
double: the changes committed after carry the wider type, and the changelog widens the column
in place when the first such change arrives, with bronze's own evolve_table), their values
drawn per change, after the widening beyond the int's range or doubles no float holds (0.1), or
not; every change delivered one to three times, in any order, cut into increments. The first
increment may be old:
the changes of a commit-order prefix, ingested more than the tombstone retention ago, so its
deletes are purged (nothing of their keys arrives later, the purge's assumption). Later
increments are recent, and each row is stamped either after everything delivered before, up
to the overlap window before it (a micro-batch that committed after the previous dbt run had
read past its `_ingested_at`, the case the overlap exists for), or hours before it (a crashed
batch completed later with its original instant). Before a run the changelog may be compacted
(a `replace` snapshot rewriting every file, read and unread rows together), and the mirror may
lose its record of the snapshot its last run read: the snapshot alone, as when maintenance
expires it (the run then reads by data sequence number), or the whole record, as for a table
built before runs recorded it (the run falls back to the overlap window; never drawn with an
increment stamped hours back, which only the record can find). Some changes are dead-lettered
at first: none of their copies lands where it would have, a pending dead letter of the stream
does, and a later increment brings one copy back as `lakehouse dlq replay` does (its original
`_seq`, the replay time as `_ingested_at`) and marks the dead letter replayed; a change of the
old part so replayed comes back long after its key's later delete reached the retention.

The oracle is independent of the SQL: the source table computed in plain Python by applying the
changes in commit order (a TRUNCATE empties it). The live mirror must equal it column for
column, and have widened the columns the changelog widened (no full refresh); tombstones must
be exactly the recent deletes that are the last change of their key, and the keys whose last
change a later TRUNCATE ended; the latest TRUNCATE is the mirror's marker; a rerun with nothing
new commits nothing.

Examples are few (a dbt run per increment); the profile sets how many and fixes the seed in the
default run (tests/conftest.py, docs/testing.md): HYPOTHESIS_PROFILE=deep draws more.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import DataType, DoubleType, FloatType, IntegerType, LongType, StructField, StructType

from ingestion.bronze import evolve_table

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SCHEMA = "cdc_property"
OVERLAP = timedelta(minutes=yaml.safe_load((REPO / "dbt_project.yml").read_text())["vars"]["overlap_minutes"])
RETENTION_HOURS = 24
# the mirror model per sequence shape: (model file, key column, sequence fields)
MODELS = {"debezium": ("customers_mirror", "customer_id", ("phase", "commit_pos", "change_pos")),
          "dms": ("accounts_mirror", "account_id",
                  ("log_position", "commit_us", "stream_position", "transaction_id", "record_id"))}
ADDED_COLUMN = "tier"  # the column the source adds part-way
# the numeric columns whose type the source widens part-way, before and after: Iceberg's
# promotions, which bronze makes in place and the mirror must follow without a full refresh
WIDENED_COLUMNS: dict[str, tuple[DataType, DataType]] = {"points": (IntegerType(), LongType()),
                                                         "score": (FloatType(), DoubleType())}


@dataclass(frozen=True)
class Change:
    position: int  # in the source's commit order
    key: int | None  # None: a TRUNCATE
    op: str  # I, U, D, R (a snapshot read) or T (a TRUNCATE)
    label: str | None
    tier: str | None  # None before the source had the column
    seq: tuple[int, ...]
    points: int | None = None  # None: a TRUNCATE (no row)
    score: float | None = None
    widened: frozenset[str] = frozenset()  # the WIDENED_COLUMNS the source had widened at its commit


SNAPSHOT_POSITION = 10 ** 6  # above every streamed change's own position


def seq_of(position: int, shape: str, snapshot_read: bool = False) -> tuple[int, ...]:
    """The source sequence of the n-th committed change; strictly increasing in n."""
    if shape == "debezium":
        if snapshot_read:
            return (0, SNAPSHOT_POSITION, SNAPSHOT_POSITION)
        # two changes per transaction: the commit position rises, the changes' own positions
        # fall from one transaction to the next (written before the one committed earlier)
        return (1, 1000 + 10 * (position // 2), 5000 - 10 * (position // 2) + position % 2)
    # DMS: the log position orders; the commit time after it steps back every fourth instant
    # (a source clock set back: three changes per instant, 0, 0, 0, 1, 1, 1, ... 3, 0, ...), so
    # ordering by it would fail; transaction ids given at transaction start, not in commit order
    # (1, 0, 3, 2, ...), so ordering by them would fail. The log position is a number here (a
    # string in bronze, padded to sort as text: tests/integration/test_decode_formats.py): the mirror
    # compares `_seq` field by field whatever the fields' types. The raw position after it falls
    # as the log position rises, so a mirror ordering by it would fail too.
    return (position, (position // 3) % 4, -position, (position // 2) ^ 1, position % 2)


# --- drawing a source history and its delivery --------------------------------------------------

@dataclass(frozen=True)
class History:
    shape: str  # of the sequence: lsn or dms
    changes: list[Change]  # in commit order
    old: int  # changes[:old] were committed (and ingested) long before the tombstone retention


INTS = st.integers(-2 ** 31, 2 ** 31 - 1)
FLOATS = st.floats(width=32, allow_nan=False, allow_infinity=False)  # exact in a float column
# the values of the WIDENED_COLUMNS before their widening, and after it: then still a narrow
# one, or one only the wider type holds: beyond the int's range; any double, or one no float
# holds (n + 0.1: more significant bits than a float's 24; hypothesis's doubles are often exact
# floats, 0.0 or 1.5)
NUMBERS = {"points": (INTS, st.one_of(INTS, st.integers(2 ** 31, 2 ** 63 - 1), st.integers(-2 ** 63, -2 ** 31 - 1))),
           "score": (FLOATS, st.one_of(FLOATS, st.floats(allow_nan=False, allow_infinity=False),
                                       st.integers(-2 ** 20, 2 ** 20).map(lambda n: n + 0.1)))}


@st.composite
def histories(draw) -> History:
    shape = draw(st.sampled_from(sorted(MODELS)))
    lives = {key: ["I"] for key in range(1, draw(st.integers(1, 4)) + 1)}
    for ops in lives.values():
        for _ in range(draw(st.integers(0, 4))):
            ops.append("I" if ops[-1] == "D" else draw(st.sampled_from(["U", "U", "D"])))
        if ops[-1] != "D" and draw(st.booleans()):  # deleted for good: a tombstone, or purged
            ops.append("D")
    total = sum(len(ops) for ops in lives.values())
    # a long old part more often than not, so that whole lives, deletes included, are old
    old = draw(st.one_of(st.just(0), st.integers(total // 2, total - 1)))
    # the source adds the column after the old part (total: never), so the mirror grows it
    added_at = draw(st.integers(old, total))
    pending = {key: list(ops) for key, ops in lives.items()}
    debezium = shape == "debezium"
    # Debezium: a snapshot read some keys' first change, before everything streamed
    snapped = draw(st.integers(0, len(lives))) if debezium else 0
    order = [key for key in range(1, snapped + 1)]
    while any(pending[key][len([k for k in order if k == key]):] for key in pending):  # interleave the lives
        key = draw(st.sampled_from(sorted(k for k in pending if len(pending[k]) > order.count(k))))
        order.append(key)
    truncations = sorted(draw(st.lists(st.integers(snapped, len(order)), max_size=2))) if debezium else []
    for at in reversed(truncations):  # TRUNCATEs anywhere in the stream
        order.insert(at, None)
    # the source widens each numeric column after the old part, each at its own point (the end:
    # never); the changes committed after carry the wider type, and some values only it holds
    widened_at = {column: draw(st.integers(old, len(order))) for column in WIDENED_COLUMNS}
    changes: list[Change] = []
    for n, key in enumerate(order):
        tier = f"t{n}" if n >= added_at else None
        widened = frozenset(column for column, at in widened_at.items() if n >= at)
        if key is None:
            changes.append(Change(n, None, "T", None, tier, seq_of(n, shape), widened=widened))
            continue
        op = pending[key].pop(0)
        read = n < snapped
        points, score = (draw(NUMBERS[column][column in widened]) for column in ("points", "score"))
        changes.append(Change(n, key, "R" if read else op, f"k{key} v{n}", tier, seq_of(n, shape, read),
                              points, score, widened))
    return History(shape, changes, old)


@dataclass(frozen=True)
class DeadLetter:
    change: Change
    ingested_at: datetime  # when its batch ran: the stamp its copies would have had
    withheld_from: int  # the increment it would have landed in
    replayed_in: int  # the later increment that replays it


@dataclass(frozen=True)
class Delivery:
    increments: list[list[tuple[Change, datetime]]]  # in landing order: (change, _ingested_at)
    dead_letters: list[DeadLetter]


@st.composite
def dead_lettered(draw, increments: list[list[tuple[Change, datetime]]]) -> Delivery:
    """Some changes of every increment but the last dead-lettered: every copy taken out of its
    increment, one copy replayed by a later one, stamped after everything in it."""
    increments = [list(increment) for increment in increments]
    candidates = sorted({(number, c.position) for number, increment in enumerate(increments[:-1])
                         for c, _ in increment if c.key is not None})
    chosen = draw(st.lists(st.sampled_from(candidates), unique=True, max_size=2)) if candidates else []
    letters = []
    for number, position in chosen:
        if all(c.position == position for c, _ in increments[number]):
            continue  # an increment keeps a change of its own: the first creates the changelog
        copies = [(c, at) for c, at in increments[number] if c.position == position]
        increments[number] = [(c, at) for c, at in increments[number] if c.position != position]
        replayed_in = draw(st.integers(number + 1, len(increments) - 1))
        replay = max(at for _, at in increments[replayed_in]) + timedelta(seconds=1) \
            if increments[replayed_in] else copies[0][1] + timedelta(hours=1)
        increments[replayed_in].append((copies[0][0], replay))
        letters.append(DeadLetter(copies[0][0], min(at for _, at in copies), number, replayed_in))
    return Delivery(increments, letters)


@st.composite
def deliveries(draw, history: History, now: datetime) -> list[list[tuple[Change, datetime]]]:
    """The increments, in landing order, of (change, _ingested_at): recent ones are stamped
    after the newest so far, up to the overlap before it, or hours before it."""
    changes, old = history.changes, history.old
    copies = {c.position: draw(st.integers(1, 3)) for c in changes}

    def sent(part: list[Change]) -> list[Change]:
        return draw(st.permutations([c for c in part for _ in range(copies[c.position])]))

    increments: list[list[tuple[Change, datetime]]] = []
    if old:
        # all in the first increment, ingested well before the retention: the run that reads
        # them purges their tombstones (and nothing of theirs comes later)
        start = now - timedelta(hours=RETENTION_HOURS + 6)
        increments.append([(c, start + timedelta(seconds=draw(st.integers(0, 600)))) for c in sent(changes[:old])])
    recent = sent(changes[old:])
    cuts = sorted(draw(st.sets(st.integers(1, len(recent) - 1), max_size=2))) if len(recent) > 1 else []
    bounds = [0, *cuts, len(recent)]
    seen = now - timedelta(hours=6)  # the newest _ingested_at delivered so far (recent part)
    late = st.integers(-(int(OVERLAP.total_seconds()) - 1), 0)  # committed after a run read past it
    on_time = st.integers(1, 1800)
    completed = st.integers(-4 * 3600, -int(OVERLAP.total_seconds()) - 60)  # a crashed batch's instant
    for number, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False)):
        offsets = st.integers(0, 600) if number == 0 else st.one_of(late, on_time, completed)
        increment = [(c, seen + timedelta(seconds=draw(offsets))) for c in recent[a:b]]
        seen = max(seen, *(at for _, at in increment))
        increments.append(increment)
    return increments


def source_table(changes: list[Change]) -> dict[int, tuple[str, str | None, int, float]]:
    """The oracle: the source table after its changes, applied in commit order."""
    table: dict[int, tuple[str, str | None, int, float]] = {}
    for change in sorted(changes, key=lambda c: c.position):
        if change.op == "T":
            table.clear()
        elif change.op == "D":
            table.pop(change.key, None)
        else:
            table[change.key] = (change.label, change.tier, change.points, change.score)
    return table


# --- a private dbt project around the project's mirror models and macros -------------------------

class MirrorProject:
    """The project's macros/ and mirror model files, with changelogs the test writes as tables."""

    def __init__(self, spark, folder: Path):
        from dbt.cli.main import dbtRunner

        self.spark = spark
        self.folder = folder
        spark.sql(f"create namespace if not exists {SCHEMA}")  # the test creates the changelogs first
        (folder / "macros").symlink_to(REPO / "macros")
        (folder / "models").mkdir()
        for model, _, _ in MODELS.values():
            (folder / "models" / f"{model}.sql").symlink_to(REPO / "models" / "silver" / f"{model}.sql")
            # never run: the test creates and fills this relation itself, as an Iceberg table
            (folder / "models" / f"{self.changelog(model)}.sql").write_text("select 1 as never_run\n")
        # the customers mirror's `ref('cdc_transactions')` (macros/cdc_transactions.sql): never run,
        # so the mirror reads no transactions model, as before its first build
        (folder / "models" / "cdc_transactions.sql").write_text("select 1 as never_run\n")
        # the models' `source('bronze', ...)`: the same changelog tables
        (folder / "models" / "bronze.yml").write_text(yaml.safe_dump({"version": 2, "sources": [{
            "name": "bronze", "schema": SCHEMA,
            "tables": [{"name": model.removesuffix("_mirror"), "identifier": self.changelog(model)}
                       for model, _, _ in MODELS.values()] + [{"name": "dead_letters"}]}]}))
        project = yaml.safe_load((REPO / "dbt_project.yml").read_text())
        silver = project["models"]["lakehouse"]["silver"]
        (folder / "dbt_project.yml").write_text(yaml.safe_dump({
            "name": "cdc_mirror_property", "version": "1.0", "config-version": 2, "profile": "cdc_mirror_property",
            "model-paths": ["models"], "macro-paths": ["macros"], "flags": {"send_anonymous_usage_stats": False},
            # the project's vars (bronze's column names, which the macros read, among them)
            "vars": {**project["vars"], "overlap_minutes": int(OVERLAP.total_seconds() // 60),
                     "cdc_tombstone_retention_hours": RETENTION_HOURS},
            # the project's silver post-hook: it records the bronze snapshot a run read
            "models": {"cdc_mirror_property": {"+file_format": "iceberg", "+post-hook": silver["+post-hook"]}},
        }))
        # method session: dbt-spark takes the running Spark session (builder.getOrCreate)
        (folder / "profiles.yml").write_text(yaml.safe_dump({"cdc_mirror_property": {
            "target": "session",
            "outputs": {"session": {"type": "spark", "method": "session", "host": "localhost",
                                    "schema": SCHEMA, "threads": 1}}}}))
        self.flags = ["--project-dir", str(folder), "--profiles-dir", str(folder),
                      "--target-path", str(folder / "target"), "--log-path", str(folder / "logs")]
        parsed = dbtRunner().invoke(["parse", *self.flags])
        assert parsed.success, parsed.exception
        self.runner = dbtRunner(manifest=parsed.result)  # parsed once, like `lakehouse dbt loop`

    @staticmethod
    def changelog(model: str) -> str:
        return model.replace("_mirror", "_changelog")

    def reset(self, model: str) -> None:
        for table in (model, f"{model}__dbt_changes", self.changelog(model), "dead_letters"):
            self.spark.sql(f"drop table if exists {SCHEMA}.{table} purge")
        # the columns of bronze.dead_letters the mirror reads
        self.spark.sql(f"create table {SCHEMA}.dead_letters (stream string, ingested_at timestamp, "
                       "replayed_at timestamp) using iceberg")

    def dead_letter(self, model: str, letter: DeadLetter) -> None:
        """The change's record is a pending dead letter of the mirror's stream."""
        self.spark.sql(f"insert into {SCHEMA}.dead_letters values ('{model.removesuffix('_mirror')}', "
                       f"timestamp'{letter.ingested_at:%Y-%m-%d %H:%M:%S}', null)")

    def replayed(self, model: str, letter: DeadLetter, at: datetime) -> None:
        self.spark.sql(f"update {SCHEMA}.dead_letters set replayed_at = timestamp'{at:%Y-%m-%d %H:%M:%S}' "
                       f"where stream = '{model.removesuffix('_mirror')}' "
                       f"and ingested_at = timestamp'{letter.ingested_at:%Y-%m-%d %H:%M:%S}' and replayed_at is null")

    def land(self, model: str, key: str, fields: tuple[str, ...], rows: list[tuple[Change, datetime]],
             with_column: bool) -> None:
        """Append one increment to the changelog (created by the first; the column added, a
        column widened when a change first carries it, as bronze's schema evolution does)."""
        table = f"{SCHEMA}.{self.changelog(model)}"
        seq_type = "struct<" + ", ".join(f"{f}: bigint" for f in fields) + ">"
        numbers = "".join(f"{column} {narrow.simpleString()}, " for column, (narrow, _) in WIDENED_COLUMNS.items())
        self.spark.sql(f"create table if not exists {table} ({key} bigint, label string, {numbers}op string, "
                       f"_seq {seq_type}, _source_ts timestamp, _ingested_at timestamp, _kafka_topic string) "
                       "using iceberg")
        widened = sorted({column for c, _ in rows for column in c.widened})
        if widened:  # bronze's own evolution: alter column ... type (a no-op once widened)
            evolve_table(self.spark, table, StructType([StructField(column, WIDENED_COLUMNS[column][1])
                                                        for column in widened]))
        types = {f.name: f.dataType.simpleString() for f in self.spark.table(table).schema.fields}
        columns = [key, "label", *WIDENED_COLUMNS, "op", "_seq", "_source_ts", "_ingested_at", "_kafka_topic"]
        if with_column:
            if ADDED_COLUMN not in self.spark.table(table).columns:
                self.spark.sql(f"alter table {table} add column {ADDED_COLUMN} string")
            columns.append(ADDED_COLUMN)

        def literal(change: Change, at: datetime) -> str:
            seq = "named_struct(" + ", ".join(f"'{f}', {v}L" for f, v in zip(fields, change.seq, strict=True)) + ")"
            values = ["null" if change.key is None else str(change.key),
                      "null" if change.label is None else f"'{change.label}'",
                      "null" if change.points is None else f"cast({change.points} as {types['points']})",
                      # repr: the shortest text that reads back as the same double
                      "null" if change.score is None else f"cast({change.score!r}D as {types['score']})",
                      f"'{change.op}'", seq,
                      f"timestamp'2026-01-01' + make_interval(0, 0, 0, 0, 0, 0, {change.position})",  # committed
                      f"timestamp'{at:%Y-%m-%d %H:%M:%S}'", "'topic'"]
            if with_column:
                values.append("null" if change.tier is None else f"'{change.tier}'")
            return "(" + ", ".join(values) + ")"

        self.spark.sql(f"insert into {table} ({', '.join(columns)}) values "
                       + ", ".join(literal(c, at) for c, at in rows))

    def forget_snapshot_read(self, model: str, sequence_too: bool) -> bool:
        """Drop the mirror's record of the source snapshot its last run read (as maintenance's
        expiry would make it useless), and with `sequence_too` the data sequence number recorded
        beside it; whether it had them."""
        table = f"{SCHEMA}.{model}"
        prefixes = ("lakehouse.input-snapshot.", "lakehouse.input-sequence.")[:2 if sequence_too else 1]
        recorded = [r.key for r in self.spark.sql(f"show tblproperties {table}").collect()
                    if r.key.startswith(prefixes)]
        for key in recorded:
            self.spark.sql(f"alter table {table} unset tblproperties ('{key}')")
        return len(recorded) == len(prefixes)

    def compact(self, model: str) -> None:
        """Rewrite every data file of the changelog, as `lakehouse maintain` does: a `replace`
        snapshot whose files mix rows the mirror read with rows it has not."""
        self.spark.sql(f"call lake.system.rewrite_data_files(table => '{SCHEMA}.{self.changelog(model)}', "
                       "options => map('rewrite-all', 'true'))").collect()

    def run(self, model: str) -> None:
        result = self.runner.invoke(["run", "--select", model, *self.flags])
        errors = [r.message for r in getattr(result.result, "results", None) or [] if str(r.status) != "success"]
        assert result.success, f"dbt run of {model} failed: {result.exception or errors}"

    def snapshot(self, model: str) -> int:
        return self.spark.sql(f"select snapshot_id from {SCHEMA}.{model}.history where is_current_ancestor "
                              "order by made_current_at desc limit 1").first()[0]


@pytest.fixture(scope="module")
def project(spark, tmp_path_factory):
    """The private project, on the tests' Spark session tuned for a few dozen rows per query (one
    shuffle partition, no adaptive re-planning, no code generation: compiling code for every new
    query costs more than running it); the session's settings are restored afterwards."""
    tuned = {"spark.sql.shuffle.partitions": "1", "spark.sql.adaptive.enabled": "false",
             "spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}
    previous = {name: spark.conf.get(name) for name in tuned}  # the value in force, default or set
    for name, value in tuned.items():
        spark.conf.set(name, value)
    try:
        yield MirrorProject(spark, tmp_path_factory.mktemp("cdc-mirror-property"))
    finally:
        for name, value in previous.items():
            spark.conf.set(name, value)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_any_delivery_converges_to_the_source_table(project, data):
    now = datetime.now(UTC).replace(tzinfo=None, microsecond=0)  # Spark's session time zone is UTC
    history = data.draw(histories(), label="history")
    delivery = data.draw(dead_lettered(data.draw(deliveries(history, now), label="delivery")), label="dead letters")
    increments = delivery.increments
    changes = history.changes
    model, key, fields = MODELS[history.shape]
    project.reset(model)

    carried = False  # whether the changelog has the added column yet
    newest = None  # the newest _ingested_at landed so far
    for number, increment in enumerate(increments):
        carried = carried or any(c.tier is not None for c, _ in increment)
        project.land(model, key, fields, increment, with_column=carried)
        for letter in delivery.dead_letters:
            if letter.withheld_from == number:
                project.dead_letter(model, letter)
            if letter.replayed_in == number:
                project.replayed(model, letter, max(at for _, at in increment))
        stamps = [at for _, at in increment]
        stamped_back = newest is not None and min(stamps) < newest - OVERLAP  # only a record finds it
        newest = max(stamps) if newest is None else max(newest, *stamps)
        if number and data.draw(st.booleans(), label="changelog compacted"):
            project.compact(model)
        if number:
            # every run records it, the first (a full build) too
            lost = data.draw(st.sampled_from(["nothing", "snapshot"] + ([] if stamped_back else ["everything"])),
                             label="record of the snapshot read lost")
            if lost != "nothing":
                assert project.forget_snapshot_read(model, sequence_too=lost == "everything")
        project.run(model)

    mirror = project.spark.table(f"{SCHEMA}.{model}")
    assert sorted(mirror.columns) == sorted([key, "label", *WIDENED_COLUMNS, "op", "_seq", "_source_ts", "_ingested_at",
                                             "_is_deleted", "_loaded_at"] + ([ADDED_COLUMN] if carried else []))
    # every change lands in the end (dead letters too): a column the source widened is wider in
    # the changelog, and the mirror must have widened it too
    widened = {column for c in changes for column in c.widened}
    assert {column: mirror.schema[column].dataType.simpleString() for column in WIDENED_COLUMNS} == {
        column: (wide if column in widened else narrow).simpleString()
        for column, (narrow, wide) in WIDENED_COLUMNS.items()}
    rows = {r[key]: r for r in mirror.collect()}
    assert len(rows) == mirror.count()  # one row per key (and one truncation marker, key null)
    live = {k: (r["label"], r[ADDED_COLUMN] if carried else None, r["points"], r["score"])
            for k, r in rows.items() if not r["_is_deleted"]}
    assert live == source_table(changes)

    truncation = max((c for c in changes if c.op == "T"), key=lambda c: c.position, default=None)
    marker = rows.pop(None, None)
    if truncation is not None and truncation.position >= history.old:  # (an old one may be purged)
        assert marker is not None and (marker["op"], tuple(marker["_seq"]), marker["_is_deleted"]) == (
            "T", truncation.seq, True)
    last = {c.key: c for c in changes if c.key is not None}  # commit order: the last change of each key wins
    ended = {k for k, c in last.items() if truncation is not None and c.position < truncation.position}
    # a key the latest TRUNCATE ended is a tombstone, or gone (never mirrored, or purged)
    assert all(rows[k]["_is_deleted"] for k in ended if k in rows)
    # a dead letter of the old part, pending at the first run's purge, holds back every old
    # tombstone: all were ingested within the overlap window of it
    held_back = any(letter.withheld_from == 0 and history.old for letter in delivery.dead_letters)
    assert {k: (r["op"], tuple(r["_seq"])) for k, r in rows.items() if k not in ended} == {
        k: (c.op, c.seq) for k, c in last.items() if k not in ended
        # a key deleted by its last change keeps a tombstone, unless the delete was old: purged
        if c.op != "D" or c.position >= history.old or held_back}

    before = project.snapshot(model)
    project.run(model)  # nothing new: no MERGE, no purge, no snapshot
    assert project.snapshot(model) == before


@pytest.mark.parametrize("ended_by", ["D", "T"])
def test_a_replay_older_than_the_tombstone_retention_resurrects_nothing(project, ended_by):
    """A change dead-lettered, then replayed long after a later delete (or TRUNCATE) of its key
    reached the tombstone retention: the pending dead letter held the tombstone (or marker) back,
    so the replayed change, older, does not bring the row back."""
    now = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    model, key, fields = MODELS["debezium"]
    project.reset(model)
    old = now - timedelta(hours=RETENTION_HOURS + 6)
    insert, update = (Change(n, 1, op, f"k1 v{n}", None, seq_of(n, "debezium")) for n, op in ((0, "I"), (1, "U")))
    end = Change(2, None if ended_by == "T" else 1, ended_by, None, None, seq_of(2, "debezium"))
    letter = DeadLetter(update, old, withheld_from=0, replayed_in=1)
    project.land(model, key, fields, [(insert, old), (end, old)], with_column=False)
    project.dead_letter(model, letter)
    project.run(model)
    project.land(model, key, fields, [(update, now)], with_column=False)  # `lakehouse dlq replay`
    project.replayed(model, letter, now)
    project.run(model)
    live = project.spark.sql(f"select {key} from {SCHEMA}.{model} where not _is_deleted").collect()
    assert live == []
