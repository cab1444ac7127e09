"""The CDC materializations (macros/cdc_mirror.sql, macros/cdc_live.sql) and their steps, rendered
in this process by dbt's Jinja on a warehouse of stand-ins (tests/support/dbt_macros.py): the
statements each case runs, in order. A dbt unit test runs a model's select, never its
materialization, so these cases are checked here; what the statements do to real tables, the
integration tests check (test_cdc_mirror.py, test_cdc_mirror_property.py,
test_incremental_models.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.support.dbt_macros import CompilerError, DbtMacros, Warehouse, column, normalized, relation

MIRROR = "silver.customers_mirror"
CHANGES = "silver.customers_mirror__dbt_changes"
LIVE = "silver.customers"
SQL = "select * from changes_query"
COLUMNS = [column(name, data_type) for name, data_type in [
    ("customer_id", "bigint"), ("name", "string"), ("op", "string"), ("_seq", "bigint"), ("_source_ts", "timestamp"),
    ("_ingested_at", "timestamp"), ("_is_deleted", "boolean"), ("_loaded_at", "timestamp")]]
UNAVAILABLE = [*COLUMNS, column("_unavailable", "array<string>")]
MERGE_ON_READ = ("'format-version' = '2', 'write.merge.mode' = 'merge-on-read', 'write.update.mode' = 'merge-on-read', "
                 "'write.delete.mode' = 'merge-on-read', 'commit.retry.num-retries' = '10', "
                 "'write.wap.enabled' = 'true'")
# set_session_settings asks each setting's value before it sets it: none was set
UNSET = (r"^set `", [("name", "<undefined>")])


def statements(warehouse: Warehouse) -> list[tuple[str, str]]:
    """(name, normalized SQL) of the statements run, the session settings' set and restore left out."""
    return [(name, normalized(sql)) for name, sql in warehouse.statements
            if name not in ("set_setting", "restore_setting")]


def sql(text: str) -> str:
    return normalized(text)


# --- cdc_mirror ----------------------------------------------------------------------------------

def mirror(warehouse: Warehouse, full_refresh: bool = False, **config) -> tuple[DbtMacros, list]:
    """The cdc_mirror materialization of silver.customers_mirror, run; the purges it asked for."""
    purges = []
    macros = DbtMacros(warehouse, this=relation(MIRROR), sql=SQL, should_full_refresh=lambda: full_refresh,
                       config={"unique_key": "customer_id", "buckets": 8, **config},
                       purge_expired_tombstones=lambda *args: purges.append([str(a) for a in args]) or "")
    assert macros.materialize("cdc_mirror") == {"relations": [relation(MIRROR)]}
    return macros, purges


def increment(pending: int, columns=COLUMNS, lacking: tuple = (), truncations: int = 0) -> Warehouse:
    """The mirror stored; its run's changes table holds `pending` rows."""
    return Warehouse(tables={MIRROR: columns, CHANGES: columns}, answers=[
        UNSET, (r"count_if\(array_contains", [lacking]), (r"where customer_id is null$", [(truncations,)]),
        (rf"^select count\(\*\) from {CHANGES}$", [(pending,)])])


def test_the_first_run_creates_the_mirror_bucketed_by_the_keys_first_column():
    warehouse = Warehouse()
    _, purges = mirror(warehouse, unique_key=["order_id", "line_no"], stream="orders",
                       dead_letters=["bronze", "dead_letters"])
    assert statements(warehouse) == [("main", sql(
        f"create table {MIRROR} using iceberg partitioned by (bucket(8, order_id)) "
        f"tblproperties ({MERGE_ON_READ}) as {SQL}"))]
    # the tombstones past the default retention go, held back by the stream's dead letters
    assert purges == [[MIRROR, "168", "bronze.dead_letters", "orders"]]


def test_a_full_refresh_drops_the_mirror_and_creates_it_again():
    warehouse = Warehouse(tables={MIRROR: COLUMNS})
    _, purges = mirror(warehouse, full_refresh=True)
    assert warehouse.dropped == [f"table {MIRROR}"]
    assert [name for name, _ in statements(warehouse)] == ["main"]
    assert statements(warehouse)[0][1].startswith(sql(f"create table {MIRROR} using iceberg"))
    assert purges == [[MIRROR, "168", "None", "None"]]


def test_an_increment_with_nothing_newer_runs_no_merge():
    warehouse = increment(pending=0)
    mirror(warehouse)
    assert statements(warehouse) == [
        ("drop_stale_changes", sql(f"drop table if exists {CHANGES} purge")),
        ("changes", sql(f"create table {CHANGES} using iceberg partitioned by (bucket(8, customer_id)) as {SQL}")),
        ("main", "select 0 as changes_applied"),
        ("drop_changes", sql(f"drop table if exists {CHANGES} purge"))]


def test_an_increment_merges_its_changes_by_bucket_with_the_sequence_guard():
    warehouse = increment(pending=3)
    mirror(warehouse, sequence_by="_lsn")
    assert [name for name, _ in statements(warehouse)] == ["drop_stale_changes", "changes", "main", "drop_changes"]
    assert statements(warehouse)[2][1] == sql(
        f"merge into {MIRROR} as mirror using {CHANGES} as change on mirror.customer_id = change.customer_id "
        "when matched and change._lsn > mirror._lsn then update set * when not matched then insert *")
    # a storage-partitioned join for the MERGE alone: set before it, restored after
    names = [name for name, _ in warehouse.statements]
    assert names.index("main") - names.index("changes") == 6 and names.count("restore_setting") == 5
    assert all(" = " not in text for text in warehouse.named("restore_setting"))  # unset before: reset


def test_the_merge_keeps_the_mirrors_value_of_a_column_no_change_carried():
    merge = DbtMacros().call("cdc_mirror_merge_sql", relation(MIRROR), relation(CHANGES), ["customer_id", "region"],
                             "_seq", ["customer_id", "region", "name", "tier", "_seq"], ["name"])
    assert normalized(merge) == sql(
        f"merge into {MIRROR} as mirror using {CHANGES} as change "
        "on mirror.customer_id = change.customer_id and mirror.region = change.region "
        "when matched and change._seq > mirror._seq then update set customer_id = change.customer_id, "
        "region = change.region, name = case when array_contains(change._unavailable, 'name') "
        "and change.name is null then mirror.name else change.name end, tier = change.tier, _seq = change._seq "
        "when not matched then insert *")


def test_an_increment_asks_which_columns_its_changes_lack():
    warehouse = increment(pending=3, columns=UNAVAILABLE, lacking=(False, True, False, False, False))
    mirror(warehouse)
    merge = statements(warehouse)[2][1]
    assert "op = case when array_contains(change._unavailable, 'op')" not in merge  # op is not the row's
    assert "_source_ts = change._source_ts" in merge and "name = change.name" in merge
    lacking = [query for query in warehouse.queries if "count_if" in query]
    assert len(lacking) == 1 and normalized(lacking[0]).endswith(sql(f"from {CHANGES} where size(_unavailable) > 0"))


def test_a_new_truncation_turns_the_older_live_rows_into_tombstones():
    warehouse = increment(pending=1, truncations=1)
    mirror(warehouse, truncate_when="op = 'T'")
    assert [name for name, _ in statements(warehouse)][-2:] == ["apply_truncation", "drop_changes"]
    assert warehouse.named("apply_truncation") == [DbtMacros().call("cdc_mirror_truncation_sql", relation(MIRROR),
                                                                    relation(CHANGES), "customer_id", "_seq")]
    assert statements(warehouse)[-2][1] == sql(
        f"merge into {MIRROR} as mirror using (select * from {CHANGES} where customer_id is null) as truncation "
        "on (mirror.customer_id is null or not mirror._is_deleted) and mirror._seq < truncation._seq "
        "when matched and mirror.customer_id is null then delete "
        "when matched then update set op = truncation.op, _seq = truncation._seq, _is_deleted = true, "
        "_source_ts = truncation._source_ts, _ingested_at = truncation._ingested_at, "
        "_loaded_at = truncation._loaded_at")


@pytest.mark.parametrize("truncate_when, truncations", [("op = 'T'", 0), (None, 1)])
def test_no_truncation_without_a_new_marker(truncate_when, truncations):
    warehouse = increment(pending=2, truncations=truncations)
    mirror(warehouse, truncate_when=truncate_when)
    assert warehouse.named("apply_truncation") == []
    # without truncate_when the marker is not even looked for
    assert any("is null" in query for query in warehouse.queries) == bool(truncate_when)


@pytest.mark.parametrize("config, message", [({"file_format": "delta"}, "needs file_format iceberg"),
                                             ({"unique_key": None}, "set unique_key")])
def test_the_mirror_refuses_a_config_it_cannot_apply(config, message):
    warehouse = Warehouse()
    with pytest.raises(CompilerError, match=message):
        mirror(warehouse, **config)
    assert warehouse.statements == []


# --- cdc_live ------------------------------------------------------------------------------------

def live(warehouse: Warehouse, refs=({"name": "customers_mirror"},), full_refresh: bool = False,
         context: dict | None = None, **config):
    """The cdc_live materialization of silver.customers, run; the column syncs it asked for.
    ``context``: more of what the macros see (macros/audit_publish.sql's `graph`, say)."""
    syncs = []
    macros = DbtMacros(warehouse, this=relation(LIVE), sql=f"select * from {MIRROR}", **(context or {}),
                       should_full_refresh=lambda: full_refresh, model=SimpleNamespace(refs=list(refs), config={}),
                       config={"unique_key": "customer_id", "buckets": 4, **config},
                       spark__sync_column_schemas=lambda *args: syncs.append(args) or "")
    assert macros.materialize("cdc_live") == {"relations": [relation(LIVE)]}
    return syncs


def live_warehouse(live_columns=None, mirror_purged=None, seen_purged=None, applied=None, newest=None,
                   views=()) -> Warehouse:
    """The mirror (and with `live_columns` the live table); their table properties; the newest
    stamp the query finds."""
    mirror_properties = [("lakehouse.tombstones-purged-at", mirror_purged)] if mirror_purged else []
    live_properties = ([("lakehouse.live.loaded-through", applied)] if applied else []) + (
        [("lakehouse.tombstones-purged-at", seen_purged)] if seen_purged else [])
    tables = {MIRROR: COLUMNS, **({LIVE: live_columns} if live_columns is not None else {})}
    return Warehouse(tables=tables, views=set(views), answers=[
        UNSET, (rf"show tblproperties {MIRROR}$", mirror_properties), (rf"show tblproperties {LIVE}$", live_properties),
        (r"show namespaces", [("silver",)]), (r"show views", [("silver", "customers", False)] if views else []),
        (r"select cast\(max\(_loaded_at\) as string\)", [(newest,)])])


LIVE_COLUMNS = [c for c in COLUMNS if c.name != "_is_deleted"]


def test_the_first_run_creates_the_live_table_from_the_mirrors_live_rows():
    warehouse = live_warehouse(mirror_purged="2026-01-02 00:00:00", newest="2026-01-03 00:00:00")
    live(warehouse)
    assert statements(warehouse) == [("main", sql(
        f"create or replace table {LIVE} using iceberg partitioned by (bucket(4, customer_id)) "
        f"tblproperties ({MERGE_ON_READ}, 'lakehouse.live.loaded-through' = '2026-01-03 00:00:00', "
        "'lakehouse.tombstones-purged-at' = '2026-01-02 00:00:00') "
        f"as select * except (_is_deleted) from (select * from {MIRROR}) where not _is_deleted "
        "and (_loaded_at is null or _loaded_at <= timestamp'2026-01-03 00:00:00')"))]


def test_the_first_run_from_a_mirror_without_stamps_records_none_applied():
    warehouse = live_warehouse()
    live(warehouse)
    create = statements(warehouse)[0][1]
    assert "'lakehouse.live.loaded-through' = '1970-01-01 00:00:00')" in create
    assert create.endswith("where not _is_deleted")


def test_a_live_view_of_an_earlier_version_is_replaced_by_the_table():
    warehouse = live_warehouse(live_columns=LIVE_COLUMNS, views={LIVE})
    live(warehouse)
    assert warehouse.dropped == [f"view {LIVE}"]
    assert statements(warehouse)[0][1].startswith(sql(f"create or replace table {LIVE}"))


def test_an_increment_merges_the_mirror_rows_stamped_since_the_last_run():
    warehouse = live_warehouse(live_columns=LIVE_COLUMNS, applied="2026-01-01 00:00:00", newest="2026-01-03 00:00:00")
    assert live(warehouse, unique_key=["customer_id", "region"]) == []
    quoted = ",".join(f"`{c.name}`" for c in LIVE_COLUMNS)
    assert statements(warehouse) == [
        ("main", sql(
            f"merge into {LIVE} as live using (select * from (select * from {MIRROR}) "
            "where _loaded_at > timestamp'2026-01-01 00:00:00' and _loaded_at <= timestamp'2026-01-03 00:00:00') "
            "as change on live.customer_id = change.customer_id and live.region = change.region "
            "when matched and change._is_deleted then delete when matched then update set "
            + ", ".join(f"`{c.name}` = change.`{c.name}`" for c in LIVE_COLUMNS)
            + f" when not matched and not change._is_deleted then insert ({quoted}) values ("
            + ",".join(f"change.`{c.name}`" for c in LIVE_COLUMNS) + ")")),
        ("live_properties", sql(f"alter table {LIVE} set tblproperties "
                                "('lakehouse.live.loaded-through' = '2026-01-03 00:00:00')"))]
    newest = [query for query in warehouse.queries if "max(_loaded_at)" in query]
    assert normalized(newest[0]).endswith("where _loaded_at > timestamp'2026-01-01 00:00:00'")


def test_an_increment_with_nothing_new_commits_nothing():
    warehouse = live_warehouse(live_columns=LIVE_COLUMNS, applied="2026-01-03 00:00:00")
    live(warehouse)
    assert statements(warehouse) == [("main", "select 0 as changes_applied")]


def test_a_purge_the_live_table_has_not_seen_deletes_the_keys_the_mirror_lost():
    warehouse = live_warehouse(live_columns=LIVE_COLUMNS, mirror_purged="2026-01-02 00:00:00",
                               seen_purged="2026-01-01 00:00:00", applied="2026-01-03 00:00:00")
    live(warehouse)
    assert statements(warehouse) == [
        ("main", "select 0 as changes_applied"),
        ("reconcile_purged", sql(
            f"merge into {LIVE} as live using (select customer_id from {MIRROR} where not _is_deleted) as mirror "
            "on mirror.customer_id = live.customer_id when not matched by source then delete")),
        ("live_properties", sql(f"alter table {LIVE} set tblproperties "
                                "('lakehouse.tombstones-purged-at' = '2026-01-02 00:00:00')"))]


def test_an_increment_follows_a_column_the_mirror_grew():
    warehouse = live_warehouse(live_columns=LIVE_COLUMNS[:-1], applied="2026-01-01 00:00:00",
                               newest="2026-01-03 00:00:00")
    syncs = live(warehouse)
    assert [(how, str(target), [c.name for c in change["source_columns"]], [c.name for c in change["target_columns"]])
            for how, target, change in syncs] == [
        ("append_new_columns", LIVE, [c.name for c in LIVE_COLUMNS], [c.name for c in LIVE_COLUMNS[:-1]])]


@pytest.mark.parametrize("refs, config, message", [
    ([{"name": "a"}, {"name": "b"}], {}, "selects from one ref, its mirror; it has 2"),
    ([{"name": "customers_mirror"}], {"unique_key": None}, "set unique_key")])
def test_the_live_table_refuses_a_model_it_cannot_apply(refs, config, message):
    with pytest.raises(CompilerError, match=message):
        live(live_warehouse(), refs=refs, **config)


def test_an_audited_run_stages_the_live_tables_positions_on_its_branch():
    """In a project whose on-run-start calls `audit_start()` (macros/audit_publish.sql), the
    positions a run records are staged under its branch's name, promoted when it is published."""
    warehouse = live_warehouse(live_columns=LIVE_COLUMNS, applied="2026-01-01 00:00:00", newest="2026-01-03 00:00:00")
    hook = SimpleNamespace(resource_type="operation", raw_code="{{ audit_start() }}")
    live(warehouse, unique_key=["customer_id", "region"],
         context={"graph": {"nodes": {"operation.x": hook}}, "invocation_id": "1a-2b"})
    assert statements(warehouse)[-1] == ("live_properties", sql(
        f"alter table {LIVE} set tblproperties "
        "('lakehouse.staged.lakehouse.live.loaded-through' = 'audit_1a_2b|2026-01-03 00:00:00')"))

