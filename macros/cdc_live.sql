{#-
    The live table of a CDC stream (ARCHITECTURE §9, "Live tables"): the mirror's rows that are
    not tombstones, an Iceberg table every engine reads (Spark, pyiceberg, DuckDB; a Spark SQL
    view is readable by Spark alone). Same columns as the mirror but `_is_deleted`.

      {{ config(materialized='cdc_live', unique_key='customer_id', buckets=16) }}
      select * from {{ ref('customers_mirror') }}

    The model selects the mirror, tombstones included (one ref: the mirror). The mirror keeps
    the tombstones (against resurrection by late changes); the live table holds none.

    Incremental by the mirror's run stamp `_loaded_at` (one value per mirror run, later than every
    stamp the mirror holds whatever the host's clock: macros/run_stamp.sql; a truncation's new
    tombstones carry it too). The live table records in a table
    property the newest stamp it has applied, W. A run reads the newest stamp of the mirror, W',
    then MERGEs the mirror rows stamped after W up to W': a tombstone deletes its key, a live row
    upserts it. The filter on `_loaded_at` prunes the mirror's files by their metrics, so the run
    reads the files the mirror's last runs wrote, not the whole mirror. The upper bound W' makes
    the run exact even if the mirror moved meanwhile: a row re-stamped after W' is the next run's.
    The MERGE and the new W' are two commits: a run that dies between them leaves W, and the next
    run applies the same rows again, which changes nothing (deleting an absent key, upserting the
    same row).
    The first run (and a full refresh) creates the table from the mirror's live rows stamped up
    to W' (or not stamped: mirrors older than `_loaded_at` have nulls), so both build the same table.

    A purge of expired tombstones (macros/cdc_mirror.sql) deletes mirror rows: a tombstone written
    and purged before this model ran (a purge in the run that wrote it, or runs that selected the
    mirror alone) would leave its key live here. The purge stamps the mirror's property
    `lakehouse.tombstones-purged-at` when it deletes; when that differs from the one this table
    last saw, the run also deletes every live key the mirror holds no live row for (a MERGE
    `when not matched by source`, keys only).

    Partitioned by bucket(n, first key column) like the mirror, merge-on-read like it: the MERGE
    of a small increment joins bucket by bucket and writes delete files, not rewritten data files.
-#}

{% materialization cdc_live, adapter='spark' -%}
    {%- set unique_key = config.get('unique_key') -%}
    {%- set keys = [unique_key] if unique_key is string else (unique_key or []) -%}
    {%- set buckets = config.get('buckets', 16) | int -%}
    {%- if not keys -%}
        {% do exceptions.raise_compiler_error("cdc_live: set unique_key (the mirror's key)") %}
    {%- endif -%}
    {%- if model.refs | length != 1 -%}
        {% do exceptions.raise_compiler_error("cdc_live: the model selects from one ref, its mirror; it has "
                                              ~ (model.refs | length)) %}
    {%- endif -%}
    {%- set mirror = ref(model.refs[0]['name'] if model.refs[0] is mapping else model.refs[0][0]) -%}
    {%- set existing_relation = load_relation(this) -%}
    {%- set target_relation = this.incorporate(type='table') -%}

    {{ run_hooks(pre_hooks) }}

    {#- read first: a purge after this read is the next run's to reconcile -#}
    {%- set mirror_purged = cdc_live_property(mirror, cdc_live_properties().purged) -%}

    {%- if existing_relation is none or existing_relation.type != 'table' or should_full_refresh() -%}
        {%- do cdc_live_build(target_relation, existing_relation, sql, keys[0], buckets, mirror_purged) -%}
    {%- else -%}
        {%- do cdc_live_apply_changes(target_relation, mirror, sql, keys, mirror_purged) -%}
    {%- endif -%}

    {% do persist_docs(target_relation, model) %}

    {{ run_hooks(post_hooks) }}

    {{ return({'relations': [target_relation]}) }}
{%- endmaterialization %}


{#- The table properties a live table keeps: `loaded`, the newest mirror stamp it has applied;
    `purged`, the mirror's `tombstones-purged-at` it last reconciled (macros/cdc_mirror.sql). -#}
{% macro cdc_live_properties() -%}
    {{ return({'loaded': 'lakehouse.live.loaded-through', 'purged': 'lakehouse.tombstones-purged-at'}) }}
{%- endmacro %}


{#- The first run, or a full refresh, of the live table `target` (`existing`: none, a view, or
    the table): the table created from the live rows of `sql` (the mirror), those stamped up to
    its newest stamp, which it records, with the mirror's purge stamp `mirror_purged`. -#}
{% macro cdc_live_build(target, existing, sql, key, buckets, mirror_purged=none) -%}
    {#- a view: the live view of an earlier version of the project, which dbt-spark's relation
        cache does not list (macros/relation_exists.sql) -#}
    {%- if existing is none and relation_exists(target) -%}
        {%- set existing = target.incorporate(type='view') -%}
    {%- endif -%}
    {%- if existing is not none and existing.type != 'table' -%}
        {% do adapter.drop_relation(existing) %}
    {%- endif -%}
    {%- set loaded_through = run_query('select cast(max(_loaded_at) as string) from (' ~ sql ~ ')').rows[0][0] -%}
    {%- set properties = merge_on_read_properties() -%}
    {%- do properties.update({cdc_live_properties().loaded: (loaded_through or '1970-01-01 00:00:00') | string}) -%}
    {%- if mirror_purged -%}{%- do properties.update({cdc_live_properties().purged: mirror_purged}) -%}{%- endif -%}
    {%- call statement('main') -%}
        {{ cdc_live_create_sql(target, buckets, key, properties, sql, loaded_through) }}
    {%- endcall -%}
{%- endmacro %}


{#- `create or replace table` of the live table `relation` from `sql` (the mirror): its rows that
    are not tombstones, stamped up to `loaded_through` (or not stamped: mirrors older than
    `_loaded_at` have nulls); partitioned by bucket(`buckets`, `key`) like the mirror, with the
    table properties `properties`. -#}
{% macro cdc_live_create_sql(relation, buckets, key, properties, sql, loaded_through=none) -%}
    create or replace table {{ relation }}
    using iceberg
    partitioned by (bucket({{ buckets }}, {{ key }}))
    tblproperties (
        {%- for name, value in properties.items() %}
        '{{ name }}' = '{{ value }}'{{ ',' if not loop.last }}
        {%- endfor %}
    )
    as select * except (_is_deleted)
    from ({{ sql }})
    where not _is_deleted
    {%- if loaded_through %}
      and (_loaded_at is null or _loaded_at <= {{ timestamp_literal(loaded_through) }})
    {%- endif %}
{%- endmacro %}


{#- An incremental run of the live table `target`: MERGEs the rows of `sql` (the mirror `mirror`)
    stamped since its last run, up to the newest stamp, which it then records; deletes the keys
    the mirror holds no live row for when the mirror purged tombstones since (`mirror_purged`). -#}
{% macro cdc_live_apply_changes(target, mirror, sql, keys, mirror_purged=none) -%}
    {%- set names = cdc_live_properties() -%}
    {%- set applied = cdc_live_property(target, names.loaded) or '1970-01-01 00:00:00' -%}
    {%- set loaded_through = run_query('select cast(max(_loaded_at) as string) from (' ~ sql ~ ') where '
                                       ~ '_loaded_at > ' ~ timestamp_literal(applied)).rows[0][0] -%}
    {%- set statements = {} -%}
    {%- if loaded_through -%}
        {%- do cdc_live_follow_mirror_columns(target, mirror) -%}
        {%- set columns = adapter.get_columns_in_relation(target) | map(attribute='name') | list -%}
        {%- set previous = set_session_settings(storage_partitioned_join_settings()) -%}
        {%- call statement('main') -%}
            {{ cdc_live_merge_sql(target, sql, keys, columns, applied, loaded_through) }}
        {%- endcall -%}
        {%- do restore_session_settings(previous) -%}
        {%- do statements.update({names.loaded: loaded_through}) -%}
    {%- else -%}
        {#- nothing new in the mirror -#}
        {%- do cdc_nothing_to_apply() -%}
    {%- endif -%}
    {%- if mirror_purged and mirror_purged != cdc_live_property(target, names.purged) -%}
        {%- call statement('reconcile_purged') -%}
            {{ cdc_live_reconcile_sql(target, mirror, keys) }}
        {%- endcall -%}
        {%- do statements.update({names.purged: mirror_purged}) -%}
    {%- endif -%}
    {%- if statements -%}
        {#- staged: they become the table's when the run's branch is published (macros/audit_publish.sql) -#}
        {%- call statement('live_properties') -%}
            {{ staged_properties_sql(target, statements) }}
        {%- endcall -%}
    {%- endif -%}
{%- endmacro %}


{#- The mirror grew or widened a column (the changelog's schema evolved): the live table `target`
    follows, as the mirror follows its changelog (macros/column_evolution.sql). -#}
{% macro cdc_live_follow_mirror_columns(target, mirror) -%}
    {%- set mirror_columns = adapter.get_columns_in_relation(mirror) | rejectattr('name', 'equalto', '_is_deleted')
                             | list -%}
    {%- set live_columns = adapter.get_columns_in_relation(target) -%}
    {%- if cdc_live_schema_changed(mirror_columns, live_columns) -%}
        {%- do spark__sync_column_schemas('append_new_columns', target,
                                          {'source_columns': mirror_columns, 'target_columns': live_columns}) -%}
    {%- endif -%}
{%- endmacro %}


{#- The MERGE into the live table `relation` of the rows of `sql` (the mirror) stamped after
    `applied` up to `loaded_through`: on the key's columns (`keys`), a tombstone deletes its key,
    a live row upserts it in the live table's `columns`. -#}
{% macro cdc_live_merge_sql(relation, sql, keys, columns, applied, loaded_through) -%}
    merge into {{ relation }} as live
    using (
        select * from ({{ sql }})
        where _loaded_at > {{ timestamp_literal(applied) }} and _loaded_at <= {{ timestamp_literal(loaded_through) }}
    ) as change
    on {% for key in keys %}live.{{ key }} = change.{{ key }}{{ ' and ' if not loop.last }}{% endfor %}
    when matched and change._is_deleted then delete
    when matched then update set
    {%- for column in columns %}
        {{ adapter.quote(column) }} = change.{{ adapter.quote(column) }}{{ ',' if not loop.last }}
    {%- endfor %}
    {#- the truncation marker (no key) matches nothing and is a tombstone: never inserted (the
        newline kept: the update's last column is not glued to `when`) #}
    when not matched and not change._is_deleted then insert
        ({% for column in columns %}{{ adapter.quote(column) }}{{ ', ' if not loop.last }}{% endfor %})
        values ({% for column in columns %}change.{{ adapter.quote(column) }}{{ ', ' if not loop.last }}{% endfor %})
{%- endmacro %}


{#- Deletes every key of the live table `relation` the mirror `mirror` holds no live row for (a
    MERGE `when not matched by source`, keys only): the keys of tombstones the mirror purged
    before this table saw them. -#}
{% macro cdc_live_reconcile_sql(relation, mirror, keys) -%}
    merge into {{ relation }} as live
    using (select {{ keys | join(', ') }} from {{ mirror }} where not _is_deleted) as mirror
    on {% for key in keys %}mirror.{{ key }} = live.{{ key }}{{ ' and ' if not loop.last }}{% endfor %}
    when not matched by source then delete
{%- endmacro %}


{#- The value of table property `name` of `relation` as text, or none. -#}
{% macro cdc_live_property(relation, name) -%}
    {%- for row in run_query('show tblproperties ' ~ relation).rows -%}
        {%- if row[0] == name -%}{{ return(row[1] | string) }}{%- endif -%}
    {%- endfor -%}
    {{ return(none) }}
{%- endmacro %}


{#- Whether a mirror column is missing from the live table or has another type there. -#}
{% macro cdc_live_schema_changed(mirror_columns, live_columns) -%}
    {%- set stored = {} -%}
    {%- for column in live_columns -%}{%- do stored.update({column.name | lower: column.data_type}) -%}{%- endfor -%}
    {%- for column in mirror_columns -%}
        {%- if stored.get(column.name | lower) != column.data_type -%}{{ return(true) }}{%- endif -%}
    {%- endfor -%}
    {{ return(false) }}
{%- endmacro %}
