{#-
    The increment of every incremental model: the rows of its input ingested after the newest
    `_ingested_at` the model already holds (its high-water mark), minus an overlap window (var
    overlap_minutes). A micro-batch stamps its rows with its start time but may commit minutes
    later, after a dbt run read past that time; the overlap re-reads those rows, and each model
    makes re-reading harmless (anti-join on identity, the mirror's sequence guard, recomputing
    whole days or keys).

    The bound is computed once, when dbt renders the model (run_query), and inlined as a
    timestamp literal: `_ingested_at > timestamp'2026-11-23 10:50:00.123'`. Spark pushes a
    literal into the Iceberg scan, which skips every partition and data file whose
    `_ingested_at` range lies below it, so a run reads the new files only. A scalar subquery
    (`> (select max(...) from this)`) is evaluated at run time and pushes nothing: that read
    every file of the input on every run (benchmarks/RESULTS.md, "CDC mirror merge scaling").

    The high-water mark itself comes from the model table's metadata, not from its rows: the
    largest upper bound of the column over the table's data files (Iceberg keeps exact bounds
    for timestamps). A file's bound may belong to a row deleted since (a mirror row replaced by
    a newer change, a history version closed): that row was read and applied by the run that
    wrote it, so the bound is as good a mark as the live rows' maximum. Only when a data file
    lacks the column's metrics is the column scanned.

    Pure pieces (`high_water_mark_sql`, `as_text_sql`, `timestamp_literal`, `ingested_after`) hold the SQL;
    `increment_start` is the dbt-only glue (run_query). In a dbt unit test `this` is a fixture (a
    CTE name, not a table) and has no metadata: the bound stays the subquery over the fixture
    there, same semantics. tests/integration/test_cdc_mirror_property.py draws rows committed up
    to the overlap before the mark, through dbt.
-#}

{% macro high_water_mark_sql(existing, column='_ingested_at', overlap_minutes=none) -%}
    select coalesce(max({{ column }}), timestamp'1970-01-01')
           - interval {{ var('overlap_minutes') if overlap_minutes is none else overlap_minutes }} minutes
           as increment_start
    from {{ existing }}
{%- endmacro %}


{% macro high_water_mark_metadata_sql(existing, column='_ingested_at', overlap_minutes=none) -%}
    {#- a file with only nulls in the column has no upper bound but a value count: it holds no mark -#}
    select coalesce(max(readable_metrics.{{ column }}.upper_bound), timestamp'1970-01-01')
           - interval {{ var('overlap_minutes') if overlap_minutes is none else overlap_minutes }} minutes
           as increment_start,
           count_if(readable_metrics.{{ column }}.value_count is null) as files_without_metrics
    from {{ existing }}.data_files
{%- endmacro %}


{% macro as_text_sql(query) -%}
    {#- the first column of `query` as text: Spark writes it in the session time zone, which also
        reads the literal back (a Python datetime from collect() would be in the local zone) -#}
    select cast(increment_start as string) as increment_start, * except (increment_start) from ({{ query }})
{%- endmacro %}


{% macro timestamp_literal(text) -%}
    timestamp'{{ text }}'
{%- endmacro %}


{% macro ingested_after(start, column='_ingested_at') -%}
    {{ column }} > {{ start }}
{%- endmacro %}


{% macro increment_start(existing, column='_ingested_at', overlap_minutes=none) -%}
    {%- if execute and existing is not none and existing is not string -%}
        {%- set bound = run_query(as_text_sql(high_water_mark_metadata_sql(existing, column, overlap_minutes))).rows[0] -%}
        {%- if bound[1] > 0 -%}
            {%- set bound = run_query(as_text_sql(high_water_mark_sql(existing, column, overlap_minutes))).rows[0] -%}
        {%- endif -%}
        {{ return(timestamp_literal(bound[0] | string)) }}
    {%- else -%}
        {{ return('(' ~ high_water_mark_sql(existing, column, overlap_minutes) ~ ')') }}
    {%- endif -%}
{%- endmacro %}


{#- The newest value of `column` in `relation` (no overlap), as a literal: a model records it
    to know, next run, what it has seen of another model (gold's `_customers_as_of`). -#}
{% macro high_water_mark(relation, column='_ingested_at') -%}
    {%- if execute and load_relation(relation) is none -%}
        {#- not built yet (`dbt compile` of a new project): nothing seen -#}
        {{ return(timestamp_literal('1970-01-01 00:00:00')) }}
    {%- endif -%}
    {{ return(increment_start(relation, column, overlap_minutes=0)) }}
{%- endmacro %}


{#-
    The silver rows a gold model has not counted yet, exactly: silver's append-only models stamp
    every row with `_loaded_at`, the time of the dbt run that appended it (one value per run, later
    for every later run), so "stamped after the newest stamp counted" misses nothing and counts
    nothing twice, with no overlap. This needs dbt runs one at a time, which `lakehouse dbt` and
    `lakehouse dbt loop` ensure (the dbt-tables lock).
-#}
{% macro loaded_since_last_run(existing, existing_column, column='_loaded_at') -%}
    {{ ingested_after(increment_start(existing, existing_column, overlap_minutes=0), column) }}
{%- endmacro %}


{% macro ingested_since_last_run(existing, column='_ingested_at', existing_column='_ingested_at') -%}
    {{ ingested_after(increment_start(existing, existing_column), column) }}
{%- endmacro %}
