{#-
    The CDC mirror (ARCHITECTURE §9): one row per key, the state after the change with the highest
    sequence, deletes kept as tombstones. dbt-spark's built-in `merge` strategy has no delete
    branch and no ordering, so the project owns the apply:

      {%- set cdc = {
          'unique_key': 'customer_id',          -- the source's primary key: a column or a list
          'sequence_by': '...',                 -- totally orders the changes of one key (optional:
                                                -- bronze's `seq` of the var `bronze_columns`)
          'delete_when': "op = 'D'",            -- which changes are deletes
          'except_columns': [var('bronze_columns').kafka_topic],  -- changelog columns not to keep (optional)
          'truncate_when': "op = 'T'",          -- changes that empty the table (optional)
      } -%}
      {{ config(materialized='cdc_mirror',
                buckets=16,                     -- bucket(n, key) partitioning (optional)
                tombstone_retention_hours=168,  -- purge tombstones older than this (optional)
                -- the stream's name and the dbt source of the dead letters, which hold
                -- tombstones back (below; optional)
                stream='...', dead_letters=['bronze', 'dead_letters'],
                **cdc) }}

      {%- set increment = bronze_increment(this, source('bronze', '...')) -%}
      with changelog as (select * from {{ ref('..._changelog') }}
                         {% if increment %} where {{ increment }} {% endif %})
      {{ cdc_mirror_changes('changelog', this, is_incremental(), **cdc) }}

    The model's select (cdc_mirror_changes) yields the rows to write: per key the latest change
    of the increment, and on an incremental run only those newer than the stored row. It holds
    all the ordering logic, so dbt unit tests (given changes and `this` -> expected rows) test
    it. The materialization then creates the table from them (first run) or MERGEs them, with
    the sequence guard repeated in the MERGE itself, so the table never moves backwards even if
    the select and the MERGE were to see different versions of the mirror.

    An incremental run evaluates the select once: its rows go to a small Iceberg table of their
    own (`<mirror>__dbt_changes`), partitioned by the same bucket(n, key) as the mirror, which
    the count and the MERGE then read. Being bucketed like the mirror, the MERGE joins it with
    the mirror bucket by bucket (a storage-partitioned join): the mirror is read once, column-
    pruned, and never shuffled.
-#}

{% macro cdc_mirror_table_properties() -%}
    {#- merge-on-read (macros/merge_on_read.sql); dbt and maintenance may commit to the same
        table, so a lost race is retried -#}
    tblproperties (
        {%- for name, value in merge_on_read_properties().items() %}
        '{{ name }}' = '{{ value }}'{{ ',' if not loop.last }}
        {%- endfor %}
    )
{%- endmacro %}


{#- Spark settings of a storage-partitioned join (Iceberg docs, "Storage Partitioned Joins"):
    both sides report their bucket(n, key) grouping and Spark joins bucket with bucket. -#}
{% macro storage_partitioned_join_settings() -%}
    {{ return({
        'spark.sql.sources.v2.bucketing.enabled': 'true',
        'spark.sql.sources.v2.bucketing.pushPartValues.enabled': 'true',
        'spark.sql.requireAllClusterKeysForCoPartition': 'false',
        'spark.sql.iceberg.planning.preserve-data-grouping': 'true',
        'spark.sql.sources.v2.bucketing.partiallyClusteredDistribution.enabled': 'true',
    }) }}
{%- endmacro %}


{% macro set_session_settings(settings) -%}
    {#- sets `settings` on the Spark session; returns what they were, for restore_session_settings -#}
    {%- set previous = {} -%}
    {%- for name, value in settings.items() -%}
        {%- do previous.update({name: run_query('set `' ~ name ~ '`').rows[0][1] | string}) -%}
        {%- call statement('set_setting') -%} set `{{ name }}` = {{ value }} {%- endcall -%}
    {%- endfor -%}
    {{ return(previous) }}
{%- endmacro %}


{% macro restore_session_settings(previous) -%}
    {%- for name, value in previous.items() -%}
        {%- call statement('restore_setting') -%}
            {#- Spark shows a setting nobody set as <undefined>: back to its default -#}
            {% if value == '<undefined>' %} reset `{{ name }}` {% else %} set `{{ name }}` = {{ value }} {% endif %}
        {%- endcall -%}
    {%- endfor -%}
{%- endmacro %}


{% materialization cdc_mirror, adapter='spark' -%}
    {%- set unique_key = config.get('unique_key') -%}
    {%- set keys = [unique_key] if unique_key is string else (unique_key or []) -%}
    {%- set sequence_by = config.get('sequence_by', var('bronze_columns').seq) -%}
    {%- set buckets = config.get('buckets', 16) | int -%}
    {%- set retention_hours = var('cdc_tombstone_retention_hours',
                                  config.get('tombstone_retention_hours', 168)) | int -%}
    {%- set existing_relation = load_relation(this) -%}
    {%- set target_relation = this.incorporate(type='table') -%}
    {%- if config.get('file_format', 'iceberg') != 'iceberg' -%}
        {% do exceptions.raise_compiler_error('cdc_mirror needs file_format iceberg (MERGE, row-level deletes)') %}
    {%- endif -%}
    {%- if not keys -%}
        {% do exceptions.raise_compiler_error("cdc_mirror: set unique_key (the mirrored table's primary key)") %}
    {%- endif -%}

    {{ run_hooks(pre_hooks) }}

    {%- if existing_relation is none or should_full_refresh() -%}
        {%- if existing_relation is not none -%}
            {% do adapter.drop_relation(existing_relation) %}
        {%- endif -%}
        {%- call statement('main') -%}
            {{ cdc_mirror_create_sql(target_relation, buckets, keys[0], sql, cdc_mirror_table_properties()) }}
        {%- endcall -%}
    {%- else -%}
        {%- do cdc_mirror_apply_changes(target_relation, existing_relation, sql, keys, sequence_by, buckets,
                                        config.get('truncate_when')) -%}
    {%- endif -%}

    {%- set dead_letters = config.get('dead_letters') -%}
    {{ purge_expired_tombstones(target_relation, retention_hours,
                                source(dead_letters[0], dead_letters[1]) if dead_letters else none, config.get('stream')) }}

    {% do persist_docs(target_relation, model) %}

    {{ run_hooks(post_hooks) }}

    {{ return({'relations': [target_relation]}) }}
{%- endmaterialization %}


{#- `create table` of `relation` as `sql`, partitioned by bucket(`buckets`, `key`), the key's
    first column: bucket() takes one column. Every change of a key has the same first column, so
    it lands in its key's bucket, and the bucket-by-bucket join still holds
    (spark.sql.requireAllClusterKeysForCoPartition is off: the join may use more columns than the
    partitioning). `properties`: its tblproperties clause (cdc_mirror_table_properties), if any. -#}
{% macro cdc_mirror_create_sql(relation, buckets, key, sql, properties='') -%}
    create table {{ relation }}
    using iceberg
    partitioned by (bucket({{ buckets }}, {{ key }}))
    {{ properties }}
    as {{ sql }}
{%- endmacro %}


{#- An incremental run of the mirror `target` (`existing`): the rows of its model's `sql` go to a
    changes table, bucketed like the mirror, which a MERGE applies (cdc_mirror_merge_sql), then a
    new truncation (cdc_mirror_truncation_sql); no MERGE when there is nothing to apply. -#}
{% macro cdc_mirror_apply_changes(target, existing, sql, keys, sequence_by, buckets, truncate_when=none) -%}
    {%- set changes_relation = target.incorporate(path={'identifier': target.identifier ~ '__dbt_changes'},
                                                  type='table') -%}
    {#- left over by a run that failed half-way: its rows are recomputed below -#}
    {%- call statement('drop_stale_changes') -%}
        drop table if exists {{ changes_relation }} purge
    {%- endcall -%}
    {%- call statement('changes') -%}
        {{ cdc_mirror_create_sql(changes_relation, buckets, keys[0], sql) }}
    {%- endcall -%}
    {#- the changelog grew a column (bronze schema evolution): the mirror grows it too -#}
    {%- do process_schema_changes('append_new_columns', changes_relation, existing) -%}
    {#- answered from the table's metadata (Iceberg pushes count(*) down to its manifests) -#}
    {%- set pending = run_query('select count(*) from ' ~ changes_relation).columns[0].values()[0] -%}
    {%- if pending > 0 -%}
        {%- set change_columns = adapter.get_columns_in_relation(changes_relation) | map(attribute='name') | list -%}
        {%- set carried = cdc_carried_columns(change_columns, keys + [sequence_by]) -%}
        {#- The MERGE reads of the mirror its key, its sequence and, only for the columns a
            pending change did not carry (bronze's `unavailable`, and still null), their values. A
            column it names reads that column of every mirror file the join reads (one read
            schema for the whole scan), so the MERGE names only the columns some change lacks,
            asked of the (small) changes table first: a run without such changes reads key
            and sequence only. -#}
        {%- set lacking = cdc_mirror_lacking_columns(changes_relation, carried) -%}
        {%- set previous = set_session_settings(storage_partitioned_join_settings()) -%}
        {%- call statement('main') -%}
            {{ cdc_mirror_merge_sql(target, changes_relation, keys, sequence_by, change_columns if carried else [],
                                    lacking) }}
        {%- endcall -%}
        {%- do restore_session_settings(previous) -%}
        {%- if truncate_when and run_query('select count(*) from ' ~ changes_relation ~ ' where '
                                           ~ keys[0] ~ ' is null').columns[0].values()[0] > 0 -%}
            {%- call statement('apply_truncation') -%}
                {{ cdc_mirror_truncation_sql(target, changes_relation, keys[0], sequence_by) }}
            {%- endcall -%}
        {%- endif -%}
    {%- else -%}
        {#- nothing newer than the mirror -#}
        {%- do cdc_nothing_to_apply() -%}
    {%- endif -%}
    {%- call statement('drop_changes') -%}
        drop table if exists {{ changes_relation }} purge
    {%- endcall -%}
{%- endmacro %}


{#- dbt's `main` statement of a run with nothing to apply (the mirror's, a live table's): no
    MERGE, so no empty snapshot per run -#}
{% macro cdc_nothing_to_apply() -%}
    {%- call statement('main') -%}
        select 0 as changes_applied
    {%- endcall -%}
{%- endmacro %}


{#- The MERGE of the changes table `changes` into the mirror `target`: on the key's columns
    (`keys`), a change newer by `sequence_by` than the stored row replaces it, a new key is
    inserted. `columns`: the changes' columns when a change may not carry some (bronze's
    `unavailable`), else none (`*`); of them, `lacking` keep the mirror's value where the change
    did not carry them. -#}
{% macro cdc_mirror_merge_sql(target, changes, keys, sequence_by, columns=[], lacking=[]) -%}
    {%- set own = var('bronze_columns') -%}
    merge into {{ target }} as mirror
    using {{ changes }} as change
    on {% for key in keys %}mirror.{{ key }} = change.{{ key }}{{ ' and ' if not loop.last }}{% endfor %}
    when matched and change.{{ sequence_by }} > mirror.{{ sequence_by }} then update set
    {%- if columns %}
        {#- a column the change did not carry (`unavailable`) and no earlier change of
            the increment had (cdc_mirror_changes: it is null) keeps the mirror's value -#}
        {%- for column in columns %}
        {{ column }} = {% if column in lacking -%}
            case when array_contains(change.{{ own.unavailable }}, '{{ column }}') and change.{{ column }} is null
                 then mirror.{{ column }} else change.{{ column }} end
        {%- else %}change.{{ column }}{% endif %}{{ ',' if not loop.last }}
        {%- endfor %}
    {%- else %} *
    {%- endif %}
    when not matched then insert *
{%- endmacro %}


{#- A new truncation marker (the changes' one row with a null `key`; the select keeps it only if
    newer than the stored one): every live row of the mirror `target` older than it becomes a
    tombstone at its sequence, so it leaves the live table and no older change can bring it
    back. One source row, so each row matches at most once. The main MERGE inserted the new
    marker beside the stored one (a null key matches nothing): the stored one, older, goes, so
    the mirror keeps one. -#}
{% macro cdc_mirror_truncation_sql(target, changes, key, sequence_by) -%}
    {%- set own = var('bronze_columns') -%}
    merge into {{ target }} as mirror
    using (select * from {{ changes }} where {{ key }} is null) as truncation
    on (mirror.{{ key }} is null or not mirror._is_deleted)
        and mirror.{{ sequence_by }} < truncation.{{ sequence_by }}
    when matched and mirror.{{ key }} is null then delete
    when matched then update set
        op = truncation.op, {{ sequence_by }} = truncation.{{ sequence_by }}, _is_deleted = true,
        {{ own.source_ts }} = truncation.{{ own.source_ts }}, {{ own.ingested_at }} = truncation.{{ own.ingested_at }},
        _loaded_at = truncation._loaded_at
{%- endmacro %}


{#- The `carried` columns that some change of `changes` (a relation) did not carry: named in
    its `unavailable` (bronze's) and still null (cdc_mirror_changes found no earlier change of the
    increment with a value), so the MERGE must keep the mirror's value. -#}
{% macro cdc_mirror_lacking_columns(changes, carried) -%}
    {%- set own = var('bronze_columns') -%}
    {%- if not carried -%}{{ return([]) }}{%- endif -%}
    {%- set query -%}
        select
        {%- for column in carried %}
            count_if(array_contains({{ own.unavailable }}, '{{ column }}') and {{ column }} is null) > 0{{ ',' if not loop.last }}
        {%- endfor %}
        from {{ changes }}
        where size({{ own.unavailable }}) > 0
    {%- endset -%}
    {%- set found = run_query(query).rows[0] -%}
    {%- set lacking = [] -%}
    {%- for column in carried -%}{%- if found[loop.index0] -%}{%- do lacking.append(column) -%}{%- endif -%}{%- endfor -%}
    {{ return(lacking) }}
{%- endmacro %}


{#-
    Tombstones exist only to stop late, older changes; past the retention nothing that late is
    expected, and keeping every deleted key forever would grow the mirror unbounded.

    Except from the stream's dead letters: `lakehouse dlq replay` appends a change that failed
    once, with its original `seq` and a new `ingested_at` (bronze's), however long after. Were its key's
    tombstone (or the truncation marker) purged by then, nothing would stop the old change and
    the deleted row would come back. So a tombstone stays while the stream has a dead letter that
    is pending, or was replayed within the retention (its rows may not have been read yet),
    ingested before the tombstone (less the overlap window: a change may reach bronze a little
    after a later one in another partition): a dead letter's change precedes in its partition
    every later change of its key, so only tombstones ingested since it can be the ones it
    would cross. A pending dead letter thus holds the tombstones after it back until it is
    replayed (`lakehouse dlq stats` lists the pending ones).

    Whether one can be old enough is read from metadata, not from the rows: a data file holds
    an expired tombstone only if its `_is_deleted` upper bound is true and its `ingested_at`
    range reaches below the cutoff. The table property `lakehouse.tombstones-purged-before`
    remembers the cutoff of the last purge, so files whose tombstones were all purged already
    (they stay in their data file, deleted by position, until compaction) are not looked at
    again. Only when a file qualifies does a probe read it (pruned by both bounds as literals),
    and only when the probe finds a row does the DELETE commit. A run with nothing to purge
    commits nothing.
-#}
{% macro purge_expired_tombstones(relation, retention_hours, dead_letters=none, stream=none) -%}
    {%- set own = var('bronze_columns') -%}
    {%- set horizon_property = 'lakehouse.tombstones-purged-before' -%}
    {%- set retention_cutoff = 'current_timestamp() - interval ' ~ retention_hours ~ ' hours' -%}
    {%- set cutoff = run_query('select cast(' ~ retention_cutoff ~ ' as string)').rows[0][0] | string -%}
    {%- if dead_letters is not none and stream and relation_exists(dead_letters) -%}
        {%- set held_back -%}
            select cast(least(min(ingested_at) - interval {{ var('overlap_minutes') }} minutes, {{ retention_cutoff }})
                        as string)
            from {{ dead_letters }}
            where stream = '{{ stream }}' and (replayed_at is null or replayed_at >= {{ retention_cutoff }})
        {%- endset -%}
        {%- set floor = run_query(held_back).rows[0][0] -%}
        {%- if floor is not none -%}{%- set cutoff = floor | string -%}{%- endif -%}
    {%- endif -%}
    {%- set purged_before = '1970-01-01 00:00:00' -%}
    {%- for row in run_query('show tblproperties ' ~ relation).rows -%}
        {%- if row[0] == horizon_property -%}{%- set purged_before = row[1] | string -%}{%- endif -%}
    {%- endfor -%}
    {%- if run_query('select ' ~ timestamp_literal(cutoff) ~ ' <= ' ~ timestamp_literal(purged_before)).rows[0][0] -%}
        {#- nothing below the cutoff that an earlier purge has not purged -#}
        {{ return('') }}
    {%- endif -%}
    {%- set candidate_files -%}
        select count(*) from {{ relation }}.data_files
        where coalesce(readable_metrics._is_deleted.upper_bound, true)
          and coalesce(readable_metrics.{{ own.ingested_at }}.lower_bound < {{ timestamp_literal(cutoff) }}, true)
          and coalesce(readable_metrics.{{ own.ingested_at }}.upper_bound >= {{ timestamp_literal(purged_before) }}, true)
    {%- endset -%}
    {%- if run_query(candidate_files).rows[0][0] > 0 -%}
        {%- set expired -%}
            _is_deleted
            and {{ own.ingested_at }} >= {{ timestamp_literal(purged_before) }}
            and {{ own.ingested_at }} < {{ timestamp_literal(cutoff) }}
        {%- endset -%}
        {%- set purging = run_query('select 1 from ' ~ relation ~ ' where ' ~ expired ~ ' limit 1') | length > 0 -%}
        {%- if purging -%}
            {#- the purge deletes rows without writing later-stamped ones: the newest run stamp is
                kept first, so that the next run's stamp stays after it (macros/run_stamp.sql) -#}
            {%- set newest_stamp = newest_run_stamp(relation) -%}
            {%- if newest_stamp is not none -%}
                {%- call statement('run_stamp_floor') -%}
                    alter table {{ relation }} set tblproperties ('{{ run_stamp_floor_property() }}' = '{{ newest_stamp }}')
                {%- endcall -%}
            {%- endif -%}
            {%- call statement('purge_tombstones') -%}
                delete from {{ relation }} where {{ expired }}
            {%- endcall -%}
        {%- endif -%}
        {#- `tombstones-purged-at` moves only when tombstones went: the live table (macros/cdc_live.sql)
            then deletes the keys whose tombstone it may not have seen -#}
        {#- `tombstones-purged-at` is written as it is (the live table reconciling once more than
            needed is harmless, once less is not); the horizon is staged: it becomes the table's
            when the run's branch is published (macros/audit_publish.sql), so a purge never
            published is made again -#}
        {%- if purging -%}
            {%- call statement('purged_at') -%}
                alter table {{ relation }} set tblproperties ('lakehouse.tombstones-purged-at' = '{{ cutoff }}')
            {%- endcall -%}
        {%- endif -%}
        {%- call statement('purge_horizon') -%}
            {{ staged_properties_sql(relation, {horizon_property: cutoff}) }}
        {%- endcall -%}
    {%- endif -%}
{%- endmacro %}
