{#-
    The run stamp `_loaded_at` (ARCHITECTURE §9, "Run stamp"): the value every row a dbt run
    writes to a silver table carries (one per run and table), by which gold and the live tables
    find the rows written since they last looked ("stamped after the newest stamp counted").

    That is an order, so the stamp is made later than every stamp the table already holds,
    whatever the clock of the host that runs dbt: the run's time, or just after the table's newest
    stamp when that is not earlier (a host whose clock is behind the one that ran before). With the
    host's clock alone, a run on a host 30 s behind stamped its rows before rows gold had already
    counted, and gold and the live tables skipped them for good.

    "The newest stamp the table holds" comes from its data files' upper bounds (metadata; a scan
    of the column when a file lacks its metrics), which keep the stamps of rows deleted since until
    compaction rewrites their files. The only statement that deletes a silver row without writing
    a later-stamped one in its place is the tombstone purge (macros/cdc_mirror.sql): it first
    records the newest stamp in the table property `lakehouse.run-stamp-floor`, which counts too.

    Why stamps and not lineage here: gold's marts add up what they have not counted yet (counts,
    sums), so they must select each silver row exactly once; Iceberg's lineage tells which data
    files a commit added, and compaction merges those files with older ones, so a bound taken from
    the files added since would select rows already counted as well. A stamp that only grows per
    table selects them exactly, with the pruning the marts have (file metrics on `_loaded_at`).
    It needs one run at a time to commit per state of a table: the dbt-tables lock on a host, the
    fence in the catalog's commit across hosts (macros/dbt_fence.sql).

    `existing`: the model's table (`this`). Where it is not a table yet (first build), or in a dbt
    unit test (a fixture), the stamp is the run's time.
-#}

{% macro run_stamp(existing) -%}
    {%- if not execute or existing is none or existing is string or (existing | string).startswith('__dbt__cte__')
           or load_relation(existing) is none -%}
        {{ return('current_timestamp()') }}
    {%- endif -%}
    {%- set newest = newest_run_stamp(existing) -%}
    {%- if newest is none -%}
        {#- a table built before the stamp: none yet -#}
        {{ return('current_timestamp()') }}
    {%- endif -%}
    {%- set stamp = run_query('select cast(greatest(current_timestamp(), ' ~ timestamp_literal(newest)
                              ~ ' + interval 1 microsecond) as string)').rows[0][0] -%}
    {{ return(timestamp_literal(stamp)) }}
{%- endmacro %}


{#- The newest run stamp `relation` holds or held, as text ('1970-01-01 00:00:00' when none): its
    rows' (their data files' upper bounds), or the floor the tombstone purge recorded before
    deleting, whichever is later. None for a table without the column. -#}
{% macro newest_run_stamp(relation) -%}
    {%- if '_loaded_at' not in adapter.get_columns_in_relation(relation) | map(attribute='name') | map('lower') | list -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set bound = run_query(as_text_sql(high_water_mark_metadata_sql(relation, '_loaded_at', 0))).rows[0] -%}
    {%- if bound[1] > 0 -%}
        {%- set bound = run_query(as_text_sql(high_water_mark_sql(relation, '_loaded_at', 0))).rows[0] -%}
    {%- endif -%}
    {%- set floor = table_property(relation, run_stamp_floor_property()) -%}
    {%- if floor is none -%}
        {{ return(bound[0] | string) }}
    {%- endif -%}
    {{ return(run_query('select cast(greatest(' ~ timestamp_literal(bound[0]) ~ ', ' ~ timestamp_literal(floor)
                        ~ ') as string)').rows[0][0]) }}
{%- endmacro %}


{% macro run_stamp_floor_property() -%}
    {{ return('lakehouse.run-stamp-floor') }}
{%- endmacro %}
