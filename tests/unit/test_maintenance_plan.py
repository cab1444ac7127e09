"""The pure parts of `lakehouse maintain`: policies, partition choice, predicates, reporting."""

from datetime import UTC, date, datetime, timedelta
from types import SimpleNamespace

import pytest
import yaml

from lakehouse.core.errors import LakehouseError
from lakehouse.operations import maintenance as m


def write(tmp_path, document) -> m.Policies:
    path = tmp_path / "maintenance.yml"
    path.write_text(yaml.safe_dump(document) if not isinstance(document, str) else document)
    return m.load_policies(path)


def test_the_shipped_policy_file_loads_and_overrides_by_name_and_namespace():
    policies = m.load_policies(m.DEFAULT_POLICY_FILE)
    assert policies.for_table("silver.customers_mirror").target_file_size_mb == 64
    assert policies.for_table("bronze.purchases") == policies.defaults
    assert policies.defaults.orphan_min_age_hours >= m.MIN_ORPHAN_AGE_HOURS


def test_table_entries_inherit_the_file_defaults(tmp_path):
    policies = write(tmp_path, {"defaults": {"min_input_files": 3}, "tables": {"gold.*": {"snapshots_to_keep": 2}}})
    gold = policies.for_table("gold.customer_activity")
    assert (gold.min_input_files, gold.snapshots_to_keep) == (3, 2)
    assert gold.target_file_size_bytes == 128 * 1024 * 1024


@pytest.mark.parametrize("document, message", [
    ({"defaults": {"target_size": 1}}, "unknown key(s) target_size"),
    ({"defaults": {"min_input_files": "many"}}, "min_input_files must be a number"),
    ({"defaults": {"snapshots_to_keep": 0}}, "snapshots_to_keep must be at least 1"),
    ({"defaults": {"orphan_min_age_hours": 2}}, "orphan_min_age_hours 2 is under 24"),
    ({"tables": {"purchases": {}}}, "is not `<namespace>.<table>`"),
    ({"policies": {}}, "expected the keys `defaults` and `tables`"),
    ("defaults: [", "not valid YAML"),
])
def test_a_bad_policy_is_one_line_naming_it(tmp_path, document, message):
    with pytest.raises(LakehouseError, match=None) as error:
        write(tmp_path, document)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_missing_policy_file_is_named(tmp_path):
    with pytest.raises(LakehouseError, match="cannot read the maintenance policy file"):
        m.load_policies(tmp_path / "nope.yml")


def test_only_partitions_quiet_since_the_cutoff_and_with_enough_files_are_compacted():
    now = datetime(2026, 11, 23, 12, tzinfo=UTC)
    old = m.PartitionFiles((date(2026, 11, 20),), 9, now - timedelta(days=3))
    hot = m.PartitionFiles((date(2026, 11, 23),), 40, now - timedelta(minutes=1))
    few = m.PartitionFiles((date(2026, 11, 19),), 1, now - timedelta(days=4))
    expired = m.PartitionFiles((date(2026, 11, 1),), 6, None)  # its writer's snapshot is long gone
    chosen, still = m.closed_partitions([old, hot, few, expired], now - timedelta(hours=1), 2)
    assert chosen == [old, expired] and still == [hot]
    chosen, still = m.closed_partitions([old, hot, few], None, 2)  # --all-partitions
    assert chosen == [old, hot] and still == []


def test_partition_predicates_select_one_day_and_stream():
    predicate = m.partition_predicate(["days(ingested_at)", "stream"], (date(2026, 11, 20), "purch'ases"))
    assert predicate == ("(`ingested_at` >= timestamp'2026-11-20 00:00:00+00:00' and "
                         "`ingested_at` < timestamp'2026-11-21 00:00:00+00:00' and `stream` = 'purch\\'ases')")
    # some readers give a day partition as days since the epoch
    assert "2026-11-20" in m.partition_predicate(["days(t)"], ((date(2026, 11, 20) - date(1970, 1, 1)).days,))
    assert m.partition_predicate(["days(t)", "stream"], (None, None)) == "(`t` is null and `stream` is null)"
    assert m.partition_predicate(["bucket(16, id)"], (3,)) is None  # no per-partition condition


def test_a_branch_past_its_retention_is_expired_and_one_without_retention_kept():
    now = datetime(2026, 11, 23, tzinfo=UTC)
    week = 168 * 3600 * 1000
    rows = [("audit_old", week, (now - timedelta(hours=169)).replace(tzinfo=None)),
            ("audit_new", week, now - timedelta(hours=1)), ("kept", None, now - timedelta(days=400))]
    assert m.aged_branches(rows, now) == ["audit_old"]


def test_expiry_estimate_keeps_the_newest_snapshots():
    now = datetime(2026, 11, 23, tzinfo=UTC)
    committed = [now - timedelta(hours=h) for h in (1, 30, 40, 50, 60)]
    assert m.snapshots_to_expire(committed, now - timedelta(hours=24), keep=2) == 3
    assert m.snapshots_to_expire(committed, now - timedelta(hours=24), keep=5) == 0
    assert m.snapshots_to_expire(committed, now, keep=1) == 4


def test_the_report_shows_before_after_expired_and_reclaimed():
    result = m.TableResult("bronze.purchases", "streaming", False,
                           m.TableStats(data_files=40, small_files=38, manifests=12, snapshots=50,
                                        stored_bytes=10 << 20),
                           m.TableStats(data_files=2, small_files=1, manifests=1, snapshots=10, stored_bytes=4 << 20),
                           snapshots_expired=40, orphan_files_removed=3, orphan_bytes=1 << 20)
    text = m.format_result(result)
    assert "data files 40 -> 2 (small 38 -> 1)" in text and "snapshots 50 -> 10 (40 expired)" in text
    assert "orphan files removed 3" in text and "reclaimed 7.0 MB" in text
    assert result.log_entry()["bytes_reclaimed"] == 7 << 20
    summary = m.format_summary([result])
    assert "total: 1 table(s), data files 40 -> 2, 40 snapshots expired" in summary
    assert m.human_bytes(512) == "512 B" and m.human_bytes(3 * 1024**3) == "3.0 GB"


def test_markers_are_dropped_only_for_queries_whose_checkpoint_is_known_to_be_gone(tmp_path):
    from lakehouse.core.settings import Settings

    root = tmp_path / "checkpoints"
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_CHECKPOINT_ROOT": str(root)})
    assert m.live_query_ids(settings) is None  # the jobs may keep their checkpoints elsewhere: drop none
    (root / "bronze_a").mkdir(parents=True)
    (root / "bronze_a" / "metadata").write_text('{"id":"q-a"}')
    (root / "bronze_b").mkdir()  # created, never started
    assert m.live_query_ids(settings) == {"q-a"}
    (root / "bronze_c").mkdir()
    (root / "bronze_c" / "metadata").write_text("{not json")
    assert m.live_query_ids(settings) is None


def test_a_failed_step_is_reported_by_the_java_error_not_by_py4js_preamble():
    from lakehouse.operations.maintenance import _first_line

    py4j = RuntimeError("An error occurred while calling o75.sql.\n"
                        ": org.apache.hadoop.fs.UnsupportedFileSystemException: No FileSystem for scheme \"s3\"\n"
                        "\tat org.apache.hadoop.fs.FileSystem.getFileSystemClass(FileSystem.java:3581)")
    assert _first_line(py4j) == 'org.apache.hadoop.fs.UnsupportedFileSystemException: No FileSystem for scheme "s3"'
    assert _first_line(RuntimeError("plain message\nmore")) == "plain message"
    assert _first_line(RuntimeError("")) == "RuntimeError"


class _Manifests:
    """A Spark stand-in for rewrite_manifests: 3 manifests; the procedure's answers in order."""

    def __init__(self, answers):
        self.answers, self.calls = list(answers), 0

    def sql(self, text):
        outer = self

        class Rows:
            def collect(self):
                if text.startswith("select count(*)"):
                    return [SimpleNamespace(n=3)]
                outer.calls += 1
                answer = outer.answers.pop(0)
                if isinstance(answer, Exception):
                    raise answer
                return [answer]
        return Rows()


def _rewriter(answers):
    from lakehouse.operations.maintenance import TableMaintenance, TableResult

    step = TableMaintenance.__new__(TableMaintenance)
    step.spark, step.table, step.dry_run = _Manifests(answers), "bronze.dead_letters", False
    step.result = TableResult("bronze.dead_letters", "streaming", False, before=None)
    return step


RACE = RuntimeError("org.apache.iceberg.exceptions.ValidationException: Deleted manifest m0.avro could not be "
                    "found in the latest snapshot 39635")
DONE = SimpleNamespace(rewritten_manifests_count=3, added_manifests_count=1)


def test_a_manifest_rewrite_that_lost_a_race_with_an_append_is_tried_again():
    step = _rewriter([RACE, DONE])
    step.rewrite_manifests()
    assert step.spark.calls == 2 and step.result.manifests_rewritten == 3


def test_a_manifest_rewrite_gives_up_after_its_attempts_and_other_errors_are_not_retried():
    from lakehouse.operations.maintenance import MANIFEST_REWRITE_ATTEMPTS

    step = _rewriter([RACE] * MANIFEST_REWRITE_ATTEMPTS)
    with pytest.raises(RuntimeError, match="latest snapshot"):
        step.rewrite_manifests()
    assert step.spark.calls == MANIFEST_REWRITE_ATTEMPTS
    step = _rewriter([RuntimeError("something else"), DONE])
    with pytest.raises(RuntimeError, match="something else"):
        step.rewrite_manifests()
    assert step.spark.calls == 1
