{#-
    The CDC mirror (ARCHITECTURE §9): one row per key, the state after the change with the highest
    sequence, deletes kept as tombstones. dbt-spark's built-in `merge` strategy has no delete
    branch and no ordering, so the project owns the apply:

      {%- set cdc = {
          'unique_key': 'customer_id',          -- the source's primary key (one column)
          'sequence_by': '_seq',                -- totally orders the changes of one key
          'delete_when': "op = 'D'",            -- which changes are deletes
          'except_columns': ['_kafka_topic'],   -- changelog columns not to keep (optional)
      } -%}
      {{ config(materialized='cdc_mirror',
                buckets=16,                     -- bucket(n, key) partitioning (optional)
                tombstone_retention_hours=168,  -- purge tombstones older than this (optional)
                **cdc) }}

      with changelog as (select * from {{ ref('..._changelog') }}
                         {% if is_incremental() %} where {{ ingested_since_last_run(this) }} {% endif %})
      {{ cdc_mirror_changes('changelog', this, is_incremental(), **cdc) }}

    The model's select (cdc_mirror_changes) yields the rows to write: per key the latest change
    of the increment, and on an incremental run only those newer than the stored row. It holds
    all the ordering logic, so dbt unit tests (given changes and `this` -> expected rows) test
    it. The materialization then creates the table from them (first run) or MERGEs them, with
    the sequence guard repeated in the MERGE itself, so the table never moves backwards even if
    the select and the MERGE were to see different versions of the mirror.
-#}

{% macro cdc_mirror_table_properties() -%}
    tblproperties (
        'format-version' = '2',
        -- merge-on-read: a MERGE writes delete files for the changed rows instead of rewriting
        -- every data file that holds one; compaction (lakehouse maintain) folds them in later
        'write.merge.mode' = 'merge-on-read',
        'write.update.mode' = 'merge-on-read',
        'write.delete.mode' = 'merge-on-read',
        -- dbt and maintenance may commit to the same table; a lost race is retried
        'commit.retry.num-retries' = '10'
    )
{%- endmacro %}


{% materialization cdc_mirror, adapter='spark' -%}
    {%- set unique_key = config.get('unique_key') -%}
    {%- set keys = [unique_key] if unique_key is string else (unique_key or []) -%}
    {%- set sequence_by = config.get('sequence_by', '_seq') -%}
    {%- set buckets = config.get('buckets', 16) | int -%}
    {%- set retention_hours = var('cdc_tombstone_retention_hours',
                                  config.get('tombstone_retention_hours', 168)) | int -%}
    {%- set existing_relation = load_relation(this) -%}
    {%- set target_relation = this.incorporate(type='table') -%}
    {%- if config.get('file_format', 'iceberg') != 'iceberg' -%}
        {% do exceptions.raise_compiler_error('cdc_mirror needs file_format iceberg (MERGE, row-level deletes)') %}
    {%- endif -%}
    {%- if keys | length != 1 -%}
        {#- bucket() partitions on one column; a composite key would need a derived column -#}
        {% do exceptions.raise_compiler_error('cdc_mirror: unique_key must be one column, got ' ~ keys) %}
    {%- endif -%}

    {{ run_hooks(pre_hooks) }}

    {%- if existing_relation is none or should_full_refresh() -%}
        {%- if existing_relation is not none -%}
            {% do adapter.drop_relation(existing_relation) %}
        {%- endif -%}
        {%- call statement('main') -%}
            create table {{ target_relation }}
            using iceberg
            partitioned by (bucket({{ buckets }}, {{ keys[0] }}))
            {{ cdc_mirror_table_properties() }}
            as {{ sql }}
        {%- endcall -%}
    {%- else -%}
        {%- set changes_relation = api.Relation.create(identifier=this.identifier ~ '__dbt_changes', type='view') -%}
        {#- Cached: the MERGE must apply exactly the rows counted here, and the increment's
            select (incremental scan + anti-join with the mirror) should run once, not twice. -#}
        {%- call statement('changes') -%}
            cache table {{ changes_relation }} as {{ sql }}
        {%- endcall -%}
        {#- the changelog grew a column (bronze schema evolution): the mirror grows it too -#}
        {%- do process_schema_changes('append_new_columns', changes_relation, existing_relation) -%}
        {%- set pending = run_query('select count(*) from ' ~ changes_relation).columns[0].values()[0] -%}
        {%- if pending > 0 -%}
            {%- call statement('main') -%}
                merge into {{ target_relation }} as mirror
                using {{ changes_relation }} as change
                on mirror.{{ keys[0] }} = change.{{ keys[0] }}
                when matched and change.{{ sequence_by }} > mirror.{{ sequence_by }} then update set *
                when not matched then insert *
            {%- endcall -%}
        {%- else -%}
            {#- nothing newer than the mirror: no MERGE, so no empty snapshot per run -#}
            {%- call statement('main') -%}
                select 0 as changes_applied
            {%- endcall -%}
        {%- endif -%}
        {%- call statement('drop_changes') -%}
            uncache table if exists {{ changes_relation }}
        {%- endcall -%}
        {%- call statement('drop_changes_view') -%}
            drop view if exists {{ changes_relation }}
        {%- endcall -%}
    {%- endif -%}

    {#- Tombstones exist only to stop late, older changes; past the retention nothing that late
        is expected, and keeping every deleted key forever would grow the mirror unbounded.
        Checked first so that a run with nothing to purge commits no empty snapshot. -#}
    {%- set purge_condition -%}
        _is_deleted and _ingested_at < current_timestamp() - interval {{ retention_hours }} hours
    {%- endset -%}
    {%- set expired = run_query('select 1 from ' ~ target_relation ~ ' where ' ~ purge_condition ~ ' limit 1') -%}
    {%- if expired | length > 0 -%}
        {%- call statement('purge_tombstones') -%}
            delete from {{ target_relation }} where {{ purge_condition }}
        {%- endcall -%}
    {%- endif -%}

    {% do persist_docs(target_relation, model) %}

    {{ run_hooks(post_hooks) }}

    {{ return({'relations': [target_relation]}) }}
{%- endmaterialization %}
