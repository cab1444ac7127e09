"""`lakehouse maintain`: compaction, manifest rewrite, snapshot expiry and orphan removal.

Streaming appends make many small files and one snapshot per micro-batch; dbt's MERGEs
leave position-delete files behind on the merge-on-read mirrors. Each pass, per table:

1. compaction (`rewrite_data_files`): for streaming tables (bronze, quality) only the
   partitions nothing was written to for the policy's quiet period, so a pass never
   rewrites what the next micro-batch changes again; for dbt tables (silver, gold) the whole
   table, then `rewrite_position_delete_files` where delete files exist;
2. `rewrite_manifests`, when there is more than one manifest;
3. `expire_snapshots`, after copying each ingestion query's last committed batch into a
   table property, so the exactly-once check (ARCHITECTURE §8) outlives the snapshots it read;
   it also drops branches past their retention (a failed dbt run's audit branch);
4. `remove_orphan_files`, older than the policy's minimum age (never under 24 hours).

Policies come from lakehouse/operations/maintenance.yml (or LAKEHOUSE_MAINTENANCE_FILE). Iceberg's
optimistic commits keep ingestion safe during a pass (appends never conflict with a
rewrite); dbt tables are rewritten only while holding the dbt-tables lock
(lakehouse/core/locks.py). What each pass did is printed and appended to
<home>/maintenance/log.jsonl, where `lakehouse status` and the metrics endpoint find each
table's last pass and last successful one (lakehouse/core/maintenance_log.py).

A step that fails does not stop the other steps or tables; it is a failure of the pass: one
`error:` line per failed step and exit status 1, recorded in the log (``failures``), so
`lakehouse status --check` and the alert rules see it until a later pass succeeds.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, date, datetime, timedelta
from fnmatch import fnmatchcase
from pathlib import Path

import yaml
from tenacity import Retrying, retry_if_exception, stop_after_attempt

from ingestion import bronze
from lakehouse.core import maintenance_log
from lakehouse.core.console import progress
from lakehouse.core.errors import LakehouseError
from lakehouse.core.files import append_atomically
from lakehouse.core.locks import dbt_tables_lock
from lakehouse.core.settings import CATALOG_NAME, NAMESPACES, QUALITY_NAMESPACE, Settings
from lakehouse.core.spark import get_spark
from lakehouse.core.sql import NAME_PART, TABLE_NAME_RULE, quote, quote_table, sql_string
from lakehouse.operations.published import PUBLICATIONS_TABLE
from lakehouse.operations.status import human_bytes

log = logging.getLogger("lakehouse.maintain")

DEFAULT_POLICY_FILE = Path(__file__).resolve().parent / "maintenance.yml"
POLICY_FILE_VARIABLE = "LAKEHOUSE_MAINTENANCE_FILE"
DBT_NAMESPACES = ("silver", "gold")
# Iceberg's remove_orphan_files refuses younger files: a write in progress has files no
# snapshot references yet, and deleting them would corrupt the table when it commits.
MIN_ORPHAN_AGE_HOURS = 24
# A manifest rewrite that loses a race with a concurrent append is planned and tried again.
MANIFEST_REWRITE_ATTEMPTS = 3
# Iceberg compacts files under 75% of the target size (min-file-size-bytes' default).
SMALL_FILE_RATIO = 0.75
# The tag that keeps the snapshot the published cut names of a table when main has moved past it
# (an unaudited write, a compaction): expire_snapshots never removes a tagged snapshot.
PUBLISHED_TAG = "published_cut"


@dataclass(frozen=True)
class Policy:
    target_file_size_mb: float = 128
    min_input_files: int = 5
    quiet_minutes: float = 60
    snapshot_retention_hours: float = 24
    snapshots_to_keep: int = 10
    orphan_min_age_hours: float = 72

    @property
    def target_file_size_bytes(self) -> int:
        return int(self.target_file_size_mb * 1024 * 1024)


POLICY_KEYS = {f.name: f.type for f in fields(Policy)}


def _checked_policy(base: Policy, values: dict, where: str) -> Policy:
    if not isinstance(values, dict):
        raise LakehouseError(f"{where}: expected a mapping of policy keys, got {values!r}")
    unknown = sorted(set(values) - set(POLICY_KEYS))
    if unknown:
        raise LakehouseError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(POLICY_KEYS)}")
    converted = {}
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise LakehouseError(f"{where}: {key} must be a number, got {value!r}")
        converted[key] = int(value) if POLICY_KEYS[key] == "int" else float(value)
    policy = replace(base, **converted)
    if policy.target_file_size_mb <= 0:
        raise LakehouseError(f"{where}: target_file_size_mb must be above 0")
    if policy.min_input_files < 1:
        raise LakehouseError(f"{where}: min_input_files must be at least 1")
    if policy.quiet_minutes < 0 or policy.snapshot_retention_hours < 0:
        raise LakehouseError(f"{where}: quiet_minutes and snapshot_retention_hours must be >= 0")
    if policy.snapshots_to_keep < 1:
        raise LakehouseError(f"{where}: snapshots_to_keep must be at least 1 (the current snapshot always stays)")
    if policy.orphan_min_age_hours < MIN_ORPHAN_AGE_HOURS:
        raise LakehouseError(
            f"{where}: orphan_min_age_hours {policy.orphan_min_age_hours:g} is under {MIN_ORPHAN_AGE_HOURS}: "
            "files of a write still in progress look orphaned, and deleting them corrupts the table "
            "when that write commits")
    return policy


@dataclass(frozen=True)
class Policies:
    defaults: Policy
    tables: dict[str, Policy]  # full names and namespace patterns (`silver.*`)
    source: str = ""

    def for_table(self, table: str) -> Policy:
        if table in self.tables:
            return self.tables[table]
        for pattern, policy in self.tables.items():
            if "*" in pattern and fnmatchcase(table, pattern):
                return policy
        return self.defaults


def policy_file() -> Path:
    return Path(os.environ.get(POLICY_FILE_VARIABLE) or DEFAULT_POLICY_FILE)


def load_policies(path: Path | None = None) -> Policies:
    """The policies of the file, checked: a bad entry is one error line naming it."""
    path = path or policy_file()
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise LakehouseError(f"cannot read the maintenance policy file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise LakehouseError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(document, dict) or set(document) - {"defaults", "tables"}:
        raise LakehouseError(f"{path}: expected the keys `defaults` and `tables`")
    defaults = _checked_policy(Policy(), document.get("defaults") or {}, f"{path}: defaults")
    tables = {}
    for name, values in (document.get("tables") or {}).items():
        if not isinstance(name, str) or not re.fullmatch(r"[a-z_][\w]*\.(\*|[a-z_][\w]*)", name):
            raise LakehouseError(f"{path}: table {name!r} is not `<namespace>.<table>` or `<namespace>.*`")
        tables[name] = _checked_policy(defaults, values or {}, f"{path}: tables.{name}")
    return Policies(defaults, tables, str(path))


# ---- pure planning -------------------------------------------------------------------------

@dataclass(frozen=True)
class PartitionFiles:
    values: tuple  # the partition tuple, in spec order
    file_count: int
    last_updated_at: datetime | None  # None: the snapshot that wrote it has expired (so: long ago)


def closed_partitions(partitions: list[PartitionFiles], quiet_since: datetime | None,
                      min_input_files: int) -> tuple[list[PartitionFiles], list[PartitionFiles]]:
    """(to compact, still being written): partitions with enough files, split by whether
    anything was written to them after ``quiet_since`` (None: every partition is closed)."""
    candidates = [p for p in partitions if p.file_count >= min_input_files]
    still_written = [p for p in candidates if quiet_since is not None and p.last_updated_at is not None
                     and p.last_updated_at >= quiet_since]
    return [p for p in candidates if p not in still_written], still_written


_DAYS = re.compile(r"^days\((\w+)\)$")
_IDENTITY = re.compile(r"^(\w+)$")


def partition_predicate(transforms: list[str], values: tuple) -> str | None:
    """A Spark SQL condition selecting exactly one partition, or None if a transform has no
    such condition here (then the table's partitions cannot be compacted one by one)."""
    terms = []
    for transform, value in zip(transforms, values, strict=True):
        day = _DAYS.match(transform)
        if day:
            column = quote(day.group(1))
            if value is None:
                terms.append(f"{column} is null")
                continue
            if isinstance(value, int):  # days since the epoch, as some readers give it
                value = date(1970, 1, 1) + timedelta(days=value)
            start = datetime(value.year, value.month, value.day, tzinfo=UTC)
            end = start + timedelta(days=1)
            terms.append(f"{column} >= timestamp'{start:%Y-%m-%d %H:%M:%S}+00:00' and "
                         f"{column} < timestamp'{end:%Y-%m-%d %H:%M:%S}+00:00'")
        elif _IDENTITY.match(transform):
            column = quote(transform)
            terms.append(f"{column} is null" if value is None else f"{column} = {sql_string(str(value))}")
        else:
            return None
    return "(" + " and ".join(terms or ["true"]) + ")"


def aged_branches(rows, now: datetime) -> list[str]:
    """The branches among ``rows`` (name, max_reference_age_in_ms, committed_at of the branch's
    snapshot) older than their retention at ``now``, as Iceberg's expiry judges them; a branch
    without a retention is kept."""
    return sorted(name for name, age_ms, committed_at in rows
                  if age_ms is not None and committed_at.replace(tzinfo=UTC) < now - timedelta(milliseconds=age_ms))


def snapshots_to_expire(committed_at: list[datetime], older_than: datetime, keep: int) -> int:
    """How many snapshots an expiry removes: older than the cutoff and not among the newest
    ``keep`` (an estimate for --dry-run: it ignores the snapshots branches and tags keep)."""
    newest_first = sorted(committed_at, reverse=True)
    return sum(1 for at in newest_first[keep:] if at < older_than)


# ---- results -------------------------------------------------------------------------------

@dataclass
class TableStats:
    data_files: int = 0
    small_files: int = 0
    delete_files: int = 0
    manifests: int = 0
    snapshots: int = 0
    rows: int = 0
    stored_bytes: int = 0  # data, delete and manifest files any snapshot still references


@dataclass
class TableResult:
    table: str
    kind: str  # streaming | dbt
    dry_run: bool
    before: TableStats
    after: TableStats | None = None
    partitions_compacted: int = 0
    partitions_still_written: int = 0
    files_rewritten: int = 0
    files_added: int = 0
    delete_files_rewritten: int = 0
    manifests_rewritten: int = 0
    snapshots_expired: int = 0
    orphan_files_removed: int = 0
    orphan_bytes: int = 0
    committed_markers: int = 0
    seconds: float = 0.0
    actions: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # notes: nothing failed (a race lost, left for later)
    failures: list[str] = field(default_factory=list)  # steps that failed: "<step> failed: <reason>"
    skipped: str | None = None  # why the table was left alone (the dbt-tables lock was not free)
    finished_at: str = ""

    @property
    def bytes_reclaimed(self) -> int | None:
        if self.after is None:
            return None
        return self.before.stored_bytes - self.after.stored_bytes + self.orphan_bytes

    def log_entry(self) -> dict:
        after = self.after or self.before
        return {
            "table": self.table, "finished_at": self.finished_at, "dry_run": self.dry_run,
            "data_files_before": self.before.data_files, "data_files_after": after.data_files,
            "small_files_before": self.before.small_files, "small_files_after": after.small_files,
            "delete_files_before": self.before.delete_files, "delete_files_after": after.delete_files,
            "snapshots_before": self.before.snapshots, "snapshots_after": after.snapshots,
            "snapshots_expired": self.snapshots_expired, "orphan_files_removed": self.orphan_files_removed,
            "bytes_reclaimed": self.bytes_reclaimed, "seconds": round(self.seconds, 1),
            "actions": self.actions, "problems": self.problems, "failures": self.failures, "skipped": self.skipped,
        }

    def to_dict(self) -> dict:
        return {**asdict(self), "bytes_reclaimed": self.bytes_reclaimed}


def reclaimed_text(reclaimed: int) -> str:
    # Compaction adds files before expiry deletes the ones it replaced: until those snapshots
    # expire, a pass stores more than before, not less.
    if reclaimed >= 0:
        return f"reclaimed {human_bytes(reclaimed)}"
    return f"stored {human_bytes(-reclaimed)} more until the replaced files' snapshots expire"


def format_result(result: TableResult) -> str:
    before, after = result.before, result.after
    if result.dry_run or after is None:
        lines = [f"{result.table}: {before.data_files:,} data files ({before.small_files:,} small), "
                 f"{before.delete_files:,} delete files, {before.manifests:,} manifests, "
                 f"{before.snapshots:,} snapshots, {human_bytes(before.stored_bytes)} stored"]
    else:
        reclaimed = result.bytes_reclaimed or 0
        lines = [
            f"{result.table}: data files {before.data_files:,} -> {after.data_files:,} "
            f"(small {before.small_files:,} -> {after.small_files:,}), delete files {before.delete_files:,} -> "
            f"{after.delete_files:,}, manifests {before.manifests:,} -> {after.manifests:,}, "
            f"snapshots {before.snapshots:,} -> {after.snapshots:,} ({result.snapshots_expired:,} expired), "
            f"orphan files removed {result.orphan_files_removed:,}, "
            + reclaimed_text(reclaimed)
            + f" ({result.seconds:.1f}s)"]
    lines += [f"    {action}" for action in result.actions]
    lines += [f"    note: {problem}" for problem in result.problems]
    lines += [f"    skipped: {result.skipped}"] if result.skipped else []
    lines += [f"    FAILED: {failure}" for failure in result.failures]
    return "\n".join(lines)


# ---- I/O: reading tables -------------------------------------------------------------------

def table_names(spark, namespaces: tuple[str, ...]) -> list[str]:
    """The Iceberg tables (not views) of the namespaces, sorted. A table whose name is not plain
    (lakehouse/core/sql.py; made by hand, not by this project) is left alone, with a warning."""
    names = []
    existing = {row[0] for row in spark.sql(f"show namespaces in {quote(CATALOG_NAME)}").collect()}
    for namespace in namespaces:
        if namespace not in existing:
            continue
        where = f"{quote(CATALOG_NAME)}.{quote(namespace)}"
        tables = {row.tableName for row in spark.sql(f"show tables in {where}").collect() if not row.isTemporary}
        views = {row.viewName for row in spark.sql(f"show views in {where}").collect()}
        for table in sorted(tables - views):
            if NAME_PART.fullmatch(table):
                names.append(f"{namespace}.{table}")
            else:
                log.warning("%s: table %r not maintained: its name is not plain (%s)", namespace, table,
                            TABLE_NAME_RULE)
    return names


def table_kind(table: str) -> str:
    return "dbt" if table.split(".")[0] in DBT_NAMESPACES else "streaming"


def _single_row(spark, sql: str):
    """The one row of an aggregate query."""
    return spark.sql(sql).collect()[0]


def table_stats(spark, table: str, policy: Policy) -> TableStats:
    small = int(policy.target_file_size_bytes * SMALL_FILE_RATIO)
    files = _single_row(spark, f"select count(*) as n, coalesce(sum(if(file_size_in_bytes < {small}, 1, 0)), 0) "
                               f"as small, coalesce(sum(record_count), 0) as rows from {quote_table(table)}.data_files")
    stored = _single_row(spark, "select coalesce(sum(size), 0) as bytes from ("
                                "select distinct file_path, file_size_in_bytes as size from "
                                f"{quote_table(table)}.all_files "
                                f"union all select distinct path, length from {quote_table(table)}.all_manifests)")
    return TableStats(
        data_files=files.n, small_files=files.small,
        delete_files=_single_row(spark, f"select count(*) as n from {quote_table(table)}.delete_files").n,
        manifests=_single_row(spark, f"select count(*) as n from {quote_table(table)}.manifests").n,
        snapshots=_single_row(spark, f"select count(*) as n from {quote_table(table)}.snapshots").n,
        rows=files.rows, stored_bytes=int(stored.bytes),
    )


def partition_transforms(spark, table: str) -> list[str]:
    rows = spark.sql(f"describe table {quote_table(table)}").collect()
    transforms, in_partitioning = [], False
    for row in rows:
        if row.col_name.startswith("# Partitioning"):
            in_partitioning = True
        elif in_partitioning and row.col_name.startswith("Part "):
            transforms.append(row.data_type)
        elif in_partitioning and (not row.col_name or row.col_name.startswith("#")):
            break
    return transforms


def partition_files(spark, table: str) -> list[PartitionFiles]:
    # An unpartitioned table's `partitions` has one row and no `partition` column.
    key = "partition" if "partition" in spark.table(f"{quote_table(table)}.partitions").columns else "null as partition"
    rows = spark.sql(f"select {key}, file_count, last_updated_at from {quote_table(table)}.partitions").collect()
    return [PartitionFiles(tuple(row.partition) if row.partition is not None else (), row.file_count,
                           row.last_updated_at.replace(tzinfo=UTC) if row.last_updated_at else None)
            for row in rows]


def live_query_ids(settings: Settings) -> set[str] | None:
    """Ids of the streaming queries whose checkpoints exist: only they can replay a batch.

    None when the checkpoints cannot all be read, e.g. the root is missing here because the
    jobs keep it elsewhere: then no exactly-once marker is dropped. Dropping one only tidies
    the table's properties, while dropping a live query's marker would let its replay land twice.
    """
    try:
        folders = [p for p in Path(settings.checkpoint_root).iterdir() if p.is_dir()]
    except OSError:
        return None
    ids = set()
    for folder in folders:
        try:
            ids.add(json.loads((folder / "metadata").read_text())["id"])
        except FileNotFoundError:
            continue  # no query ever started from this folder
        except (OSError, ValueError, KeyError):
            return None
    return ids


def _timestamp_literal(at: datetime) -> str:
    return f"timestamp'{at.astimezone(UTC):%Y-%m-%d %H:%M:%S.%f}+00:00'"


def _options(options: dict[str, object]) -> str:
    return "map(" + ", ".join(f"'{k}', '{v}'" for k, v in options.items()) + ")"


def _first_line(exc: Exception) -> str:
    text = str(getattr(exc, "desc", None) or exc).strip()
    lines = [line.strip().removeprefix(": ") for line in text.splitlines() if line.strip()]
    # py4j's "An error occurred while calling o75.sql." says nothing; the Java error follows it.
    if len(lines) > 1 and lines[0].startswith("An error occurred while calling"):
        lines = lines[1:]
    return lines[0][:300] if lines else type(exc).__name__


def _local_size(location: str) -> int:
    path = location.removeprefix("file:")
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


# ---- I/O: the steps ------------------------------------------------------------------------

class TableMaintenance:
    """One pass over one table; each step records what it did or why it did nothing."""

    def __init__(self, spark, settings: Settings, table: str, policy: Policy, *, dry_run: bool,
                 all_partitions: bool, now: datetime):
        self.spark, self.settings, self.table, self.policy = spark, settings, table, policy
        self.dry_run, self.all_partitions, self.now = dry_run, all_partitions, now
        self.result = TableResult(table, table_kind(table), dry_run, table_stats(spark, table, policy))

    def _call(self, procedure: str, *arguments: str) -> list:
        """Rows of an Iceberg procedure on this table. The table is named with its catalog:
        a bare `bronze.x` makes Iceberg try `bronze` as a catalog first and log a stack trace."""
        arguments = (f"table => {sql_string(f'{CATALOG_NAME}.{self.table}')}", *arguments)
        return self.spark.sql(f"call {CATALOG_NAME}.system.{procedure}({', '.join(arguments)})").collect()

    def compact(self) -> None:
        options = {"target-file-size-bytes": self.policy.target_file_size_bytes,
                   "min-input-files": self.policy.min_input_files,
                   # A file group that loses a race with a concurrent commit is left for the next
                   # pass; the other groups still commit.
                   "partial-progress.enabled": "true"}
        where = None
        if self.result.kind == "streaming":
            transforms = partition_transforms(self.spark, self.table)
            quiet_since = None if self.all_partitions else self.now - timedelta(minutes=self.policy.quiet_minutes)
            chosen, still_written = closed_partitions(partition_files(self.spark, self.table), quiet_since,
                                                      self.policy.min_input_files)
            self.result.partitions_still_written = len(still_written)
            if still_written:
                self.result.actions.append(
                    f"{len(still_written)} partition(s) written in the last {self.policy.quiet_minutes:g} min "
                    "left for a later pass")
            if not chosen:
                self.result.actions.append(
                    f"compaction: no closed partition with {self.policy.min_input_files}+ files")
                return
            predicates = [partition_predicate(transforms, p.values) for p in chosen] if transforms else []
            if any(p is None for p in predicates):
                self.result.problems.append(f"compaction skipped: partition transform(s) {transforms} cannot be "
                                            "selected one by one")
                return
            where = " or ".join(predicates) if predicates else None
            self.result.partitions_compacted = len(chosen)
            files = sum(p.file_count for p in chosen)
            if self.dry_run:
                self.result.actions.append(f"would compact {len(chosen)} partition(s), {files:,} files")
                return
        else:
            # dbt tables: the whole table in one call (nothing else writes it meanwhile: the
            # lock), Iceberg's planner choosing the file groups. Worth a call only when some
            # partition has enough files, or merge-on-read deletes wait to be applied.
            crowded = [p for p in partition_files(self.spark, self.table)
                       if p.file_count >= self.policy.min_input_files]
            deletes = self.result.before.delete_files
            if not crowded and not deletes:
                self.result.actions.append(
                    f"compaction: no partition has {self.policy.min_input_files}+ files to combine")
                return
            if self.dry_run:
                self.result.actions.append(
                    f"would compact {len(crowded)} partition(s), {sum(p.file_count for p in crowded):,} files"
                    + (f", and apply {deletes:,} delete files" if deletes else ""))
                return
        where_arg = f", where => {sql_string(where)}" if where else ""
        [row] = self._call("rewrite_data_files", f"options => {_options(options)}{where_arg}")
        self.result.files_rewritten += row.rewritten_data_files_count
        self.result.files_added += row.added_data_files_count
        failed = getattr(row, "failed_data_files_count", 0) or 0
        if row.rewritten_data_files_count:
            self.result.actions.append(
                f"compaction: {row.rewritten_data_files_count:,} files -> {row.added_data_files_count:,}"
                + (f" in {self.result.partitions_compacted} partition(s)" if where else ""))
        elif not failed:
            self.result.actions.append(f"compaction: no partition has {self.policy.min_input_files}+ files to combine")
        if failed:
            # Partial progress: the groups that could not be rewritten are left as they were and the
            # others commit. Whether a group lost a race with a concurrent commit (the next pass
            # succeeds) or cannot read a file (every pass fails), only Iceberg's log line says: a
            # failure either way, until a pass rewrites them.
            raise LakehouseError(f"{failed:,} data files could not be rewritten (Iceberg's warning \"Failure "
                                 "during rewrite group\" in the Spark log says why); the next pass tries them again")

    def rewrite_position_deletes(self) -> None:
        deletes = _single_row(self.spark, f"select count(*) as n from {quote_table(self.table)}.delete_files").n
        if not deletes:
            return
        if self.dry_run:
            self.result.actions.append(f"would rewrite {deletes:,} position-delete files")
            return
        [row] = self._call("rewrite_position_delete_files", "options => map('rewrite-all', 'true')")
        self.result.delete_files_rewritten = row.rewritten_delete_files_count
        self.result.actions.append(f"position deletes: {row.rewritten_delete_files_count:,} files -> "
                                   f"{row.added_delete_files_count:,}")

    def rewrite_manifests(self) -> None:
        manifests = _single_row(self.spark, f"select count(*) as n from {quote_table(self.table)}.manifests").n
        if manifests < 2:
            return
        if self.dry_run:
            self.result.actions.append(f"would rewrite {manifests:,} manifests")
            return
        # A streaming append that commits meanwhile may merge the very manifests this rewrite
        # replaces (Iceberg merges small manifests on append); Iceberg then refuses the commit
        # instead of retrying it. The rewrite is planned afresh from the latest snapshot on each
        # call, so trying again is safe.
        rewrite = Retrying(
            stop=stop_after_attempt(MANIFEST_REWRITE_ATTEMPTS), reraise=True,
            retry=retry_if_exception(lambda exc: "could not be found in the latest snapshot" in str(exc)),
            before_sleep=lambda state: log.info("%s: manifests changed by a concurrent commit, rewriting again (%d)",
                                                self.table, state.attempt_number),
        )
        [row] = rewrite(self._call, "rewrite_manifests")
        self.result.manifests_rewritten = row.rewritten_manifests_count
        self.result.actions.append(f"manifests: {row.rewritten_manifests_count:,} -> {row.added_manifests_count:,}")

    def expire_snapshots(self) -> None:
        # Snapshots committed from here on are newer than the cutoff, so the markers written
        # now cover every batch an expiry can take away.
        marked_at = datetime.now(UTC)
        older_than = min(self.now - timedelta(hours=self.policy.snapshot_retention_hours), marked_at)
        committed = [row.committed_at.replace(tzinfo=UTC) for row in
                     self.spark.sql(f"select committed_at from {quote_table(self.table)}.snapshots").collect()]
        expected = snapshots_to_expire(committed, older_than, self.policy.snapshots_to_keep)
        table = quote_table(self.table)
        # branches past their retention (a failed dbt run's audit branch: macros/audit_publish.sql),
        # which Iceberg's expiry drops with the snapshots only they kept
        aged = aged_branches(self.spark.sql(
            f"select refs.name, refs.max_reference_age_in_ms, snapshots.committed_at from {table}.refs as refs "
            f"join {table}.snapshots as snapshots on refs.snapshot_id = snapshots.snapshot_id "
            f"where refs.type = 'BRANCH' and refs.name <> 'main'").collect(), self.now)
        if self.dry_run:
            self.result.actions.append(f"would expire about {expected:,} snapshot(s) older than "
                                       f"{older_than:%Y-%m-%d %H:%M} UTC (keeping the newest "
                                       f"{self.policy.snapshots_to_keep})"
                                       + (f" and branch(es) past their retention: {', '.join(aged)}" if aged else ""))
            return
        if self.result.kind == "dbt":
            self.keep_published_snapshot()
        if self.result.kind == "streaming":
            markers = bronze.record_committed_batches(self.spark, self.table, live_query_ids(self.settings))
            self.result.committed_markers = len(markers)
        if not expected and not aged:
            return
        before = len(committed)
        [row] = self._call("expire_snapshots", f"older_than => {_timestamp_literal(older_than)}",
                           f"retain_last => {self.policy.snapshots_to_keep}")
        after = _single_row(self.spark, f"select count(*) as n from {quote_table(self.table)}.snapshots").n
        self.result.snapshots_expired = max(0, before - after)
        self.result.actions.append(
            f"snapshots: {self.result.snapshots_expired:,} expired (older than {older_than:%Y-%m-%d %H:%M:%S} UTC), "
            f"{row.deleted_data_files_count + row.deleted_position_delete_files_count:,} data/delete files and "
            f"{row.deleted_manifest_files_count:,} manifests deleted"
            + (f"; exactly-once markers kept for {self.result.committed_markers} query(ies)"
               if self.result.committed_markers else "")
            + (f"; branch(es) past their retention dropped: {', '.join(aged)}" if aged else ""))

    def keep_published_snapshot(self) -> None:
        """Tag the snapshot the published cut (gold.publications, docs/models.md) names of this
        table when it is no longer main's head, so the expiry keeps it and the cut stays
        readable; drop the tag once the cut names main's head again. A table a run has not
        published since keeps its snapshot in the cut while main moves on: an unaudited write,
        a compaction by an earlier pass."""
        # with its catalog: Iceberg's tag DDL tries a bare name's first part as a catalog (a WARN
        # and a stack trace)
        table = f"{CATALOG_NAME}.{quote_table(self.table)}"
        if self.table == PUBLICATIONS_TABLE or not self.spark.catalog.tableExists(PUBLICATIONS_TABLE):
            return
        named = [row.snapshot_id for row in self.spark.sql(
            f"select snapshot_id from {quote_table(PUBLICATIONS_TABLE)} where table_name = {sql_string(self.table)}"
        ).collect()]
        refs = {row.name: row.snapshot_id
                for row in self.spark.sql(f"select name, snapshot_id from {table}.refs").collect()}
        kept = named[0] if named and named[0] != refs.get("main") else None
        if kept is None and PUBLISHED_TAG in refs:
            self.spark.sql(f"alter table {table} drop tag if exists {PUBLISHED_TAG}")
        elif kept is not None and refs.get(PUBLISHED_TAG) != kept:
            exists = self.spark.sql(
                f"select count(*) as n from {table}.snapshots where snapshot_id = {int(kept)}").first().n
            if not exists:
                raise LakehouseError(f"the published cut names snapshot {kept} of {self.table}, which has expired: "
                                     f"the cut cannot be read at it until a dbt run publishes {self.table} again")
            self.spark.sql(f"alter table {table} create or replace tag {PUBLISHED_TAG} as of version {int(kept)}")
            self.result.actions.append(f"the published cut's snapshot {kept} kept (tag {PUBLISHED_TAG}): main has "
                                       f"moved past it")

    def remove_orphans(self) -> None:
        older_than = self.now - timedelta(hours=self.policy.orphan_min_age_hours)
        arguments = [f"older_than => {_timestamp_literal(older_than)}"]
        if not self.settings.warehouse.startswith(("file:", "/", "hdfs:")):
            # An object store (s3://): list through the table's FileIO (S3FileIO), not Hadoop's
            # FileSystem, which has no s3:// implementation on the classpath.
            arguments.append("prefix_listing => true")
        found = [row.orphan_file_location for row in self._call("remove_orphan_files", *arguments, "dry_run => true")]
        if not found:
            return
        local = all(location.startswith(("file:", "/")) for location in found)
        size = sum(_local_size(location) for location in found) if local else 0
        # Object stores: the listing gives no sizes here, so none is claimed.
        shown = human_bytes(size) if local else "size not measured on object storage"
        if self.dry_run:
            self.result.actions.append(f"would remove {len(found):,} orphan file(s), {shown}")
            return
        removed = self._call("remove_orphan_files", *arguments)
        self.result.orphan_files_removed = len(removed)
        self.result.orphan_bytes = size
        self.result.actions.append(f"orphan files: {len(removed):,} removed ({shown}, older than "
                                   f"{self.policy.orphan_min_age_hours:g} h)")

    def run(self) -> TableResult:
        started = time.monotonic()
        steps = [self.compact]
        if self.result.kind == "dbt":
            steps.append(self.rewrite_position_deletes)
        steps += [self.rewrite_manifests, self.expire_snapshots, self.remove_orphans]
        for step in steps:
            try:
                step()
            except Exception as exc:  # one failed step must not stop the others or other tables
                self.result.failures.append(f"{_step_name(step.__name__)} failed: {_first_line(exc)}")
        if not self.dry_run:
            try:
                self.result.after = table_stats(self.spark, self.table, self.policy)
            except Exception as exc:  # noqa: BLE001 - the steps' results are still reported and logged
                self.result.failures.append(f"read the table after the pass failed: {_first_line(exc)}")
        self.result.seconds = time.monotonic() - started
        self.result.finished_at = datetime.now(UTC).isoformat(timespec="seconds")
        return self.result


def _step_name(method: str) -> str:
    return method.replace("_", " ")


def log_path(settings: Settings) -> Path:
    return maintenance_log.log_path(settings.home)


def append_log(settings: Settings, results: list[TableResult]) -> None:
    """One line per table appended to the log, all or none: the whole new log replaces the old
    (lakehouse/core/files.py), so a failure (a full disk, a kill, an entry that does not
    serialize) leaves the previous log, never a torn last line `lakehouse status` would skip."""
    path = log_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    append_atomically(path, "".join(json.dumps(result.log_entry()) + "\n" for result in results))


def maintain(spark, settings: Settings, tables: list[str] | None = None, *, dry_run: bool = False,
             all_partitions: bool = False, policies: Policies | None = None, lock_wait_seconds: float = 600,
             now: datetime | None = None) -> list[TableResult]:
    """One maintenance pass over the chosen tables (default: every table of the lakehouse)."""

    policies = policies or load_policies()
    existing = table_names(spark, (*NAMESPACES, QUALITY_NAMESPACE))
    if tables:
        missing = [t for t in tables if t not in existing]
        if missing:
            raise LakehouseError(f"no such table: {', '.join(missing)} (tables: {', '.join(existing) or 'none yet'})")
    chosen = tables or existing
    now = now or datetime.now(UTC)
    # Streaming tables first, without the lock; then every dbt table under one hold of the
    # lock, so a pass waits for a running dbt at most once instead of once per table.
    streaming = [t for t in chosen if table_kind(t) == "streaming"]
    dbt_tables = [t for t in chosen if table_kind(t) == "dbt"]
    results: list[TableResult] = []

    def run(table: str) -> None:
        log.info("maintaining %s (%d of %d)%s", table, len(results) + 1, len(chosen), " [dry run]" if dry_run else "")
        advance(0, description=f"maintain {table}")
        try:
            maintained = TableMaintenance(spark, settings, table, policies.for_table(table), dry_run=dry_run,
                                          all_partitions=all_partitions, now=now)
        except Exception as exc:  # noqa: BLE001 - a table that cannot be read must not stop the others
            unread = TableResult(table, table_kind(table), dry_run, TableStats(),
                                 finished_at=datetime.now(UTC).isoformat(timespec="seconds"))
            unread.failures.append(f"read the table failed: {_first_line(exc)}")
            results.append(unread)
        else:
            results.append(maintained.run())
        advance()

    with progress("maintain", len(chosen)) as advance:
        for table in streaming:
            run(table)
        if dbt_tables and dry_run:
            for table in dbt_tables:
                run(table)
        elif dbt_tables:
            log.info("waiting for the dbt-tables lock (a running `lakehouse dbt` holds it)")
            advance(0, description="maintain: waiting for the dbt-tables lock")
            with dbt_tables_lock(settings, lock_wait_seconds) as locked:
                for table in dbt_tables:
                    if locked:
                        run(table)
                        continue
                    skipped = TableResult(table, "dbt", dry_run, table_stats(spark, table, policies.for_table(table)))
                    skipped.skipped = f"a dbt run held the dbt-tables lock for {lock_wait_seconds:g}s"
                    skipped.finished_at = datetime.now(UTC).isoformat(timespec="seconds")
                    results.append(skipped)
                    advance()
    if not dry_run:
        append_log(settings, results)
    return results


def format_summary(results: list[TableResult]) -> str:
    lines = [format_result(r) for r in results]
    if not results:
        return "no tables to maintain yet"
    done = [r for r in results if r.after is not None]
    if done:
        before = sum(r.before.data_files for r in done)
        after = sum(r.after.data_files for r in done)
        reclaimed = sum(r.bytes_reclaimed or 0 for r in done)
        lines.append(f"total: {len(done)} table(s), data files {before:,} -> {after:,}, "
                     f"{sum(r.snapshots_expired for r in done):,} snapshots expired, "
                     f"{sum(r.orphan_files_removed for r in done):,} orphan files removed, "
                     + reclaimed_text(reclaimed))
    problems = sum(len(r.problems) for r in results)
    if problems:
        lines.append(f"{problems} note(s) above: nothing was lost; those steps are retried by the next pass")
    skipped = [r.table for r in results if r.skipped]
    if skipped:
        lines.append(f"{len(skipped)} table(s) skipped: {', '.join(skipped)}")
    failed = sum(len(r.failures) for r in results)
    if failed:
        lines.append(f"{failed} step(s) FAILED in {sum(1 for r in results if r.failures)} table(s): "
                     "`lakehouse status --check` reports them until a later pass succeeds")
    return "\n".join(lines)


def failure_lines(results: list[TableResult]) -> list[str]:
    """One line per failed step, naming its table: what `lakehouse maintain` prints as errors."""
    return [f"{result.table}: {failure}" for result in results for failure in result.failures]


def failed_or_skipped(results: list[TableResult]) -> list[str]:
    """One line per failed step and per table left alone, naming its table."""
    return failure_lines(results) + [f"{result.table}: skipped: {result.skipped}" for result in results
                                      if result.skipped]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--table", action="append", metavar="NAME", dest="tables",
                        help="only this table (repeatable), e.g. bronze.purchases; default: every table")
    parser.add_argument("--dry-run", action="store_true",
                        help="show what would be done, commit nothing")
    parser.add_argument("--all-partitions", action="store_true",
                        help="also compact partitions of streaming tables written within the quiet period "
                             "(when ingestion is stopped)")
    parser.add_argument("--lock-wait", type=float, default=600, metavar="SECONDS",
                        help="how long to wait for a running dbt before skipping a silver/gold table (default 600)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


def main(args: argparse.Namespace, settings: Settings) -> int:

    policies = load_policies()  # a bad policy file fails before Spark starts
    spark = get_spark(settings, app_name="lakehouse-maintain")
    results = maintain(spark, settings, args.tables, dry_run=args.dry_run, all_partitions=args.all_partitions,
                       policies=policies, lock_wait_seconds=args.lock_wait)
    if args.json:
        print(json.dumps([r.to_dict() for r in results], indent=2, default=str))
    else:
        print(format_summary(results))
    failed = failure_lines(results)
    for line in failed:
        print(f"error: {line}", file=sys.stderr)
    return 1 if failed else 0
