{#-
    The fence of dbt's commits (ARCHITECTURE §4, "dbt runs on several hosts"). The dbt-tables
    lock (lakehouse/core/locks.py) is a file lock: it serialises the dbt runs of one state folder,
    not those of two hosts sharing a catalog, which would both compute an increment from the same
    state of a table and both commit it (every new purchase twice in silver.purchases, a run stamp
    that goes backwards). So the check is made in the commit, by the catalog (jvm/catalog,
    WriterFence): every snapshot a model writes names the run and the snapshot of main the run
    found on that table when it started, and the catalog refuses it if main has since gained a
    snapshot of another dbt run. One run of two that read the same state commits; the other's
    model fails with one line ("commit refused: another dbt run wrote the table after this run
    read it") and its next run starts from what was committed.

    - `dbt_fence_start` (on-run-start): reads main's snapshot of every table the run will write,
      once, before any model renders (a model's increment is computed while it renders, before
      its pre-hooks), and keeps them in a global temporary view of literal values: global, so
      every session of a Thrift server sees it (dbt opens one per thread there).
    - `dbt_fence_model` (every model's pre-hook): puts the run and this table's snapshot in the
      session's snapshot properties (`spark.sql.iceberg.snapshot-property.*`, which Iceberg adds
      to the summary of every snapshot the session commits).
    - `dbt_fence_end` (every model's post-hook, and on-run-end): removes them, so no later
      statement of the session (another kind of write in the same process) carries them; at the
      run's end, the view too.
-#}

{#- named without its database where it is created (Spark refuses one there), with it where read -#}
{% macro dbt_fence_view(qualified=true) -%}
    {{ return(('global_temp.' if qualified else '') ~ 'lakehouse_dbt_reads_' ~ (invocation_id | replace('-', '_'))) }}
{%- endmacro %}


{% macro dbt_fence_property(name) -%}
    {{ return('spark.sql.iceberg.snapshot-property.lakehouse.' ~ name) }}
{%- endmacro %}


{% macro dbt_fence_start() %}
    {%- if execute and writes_tables() -%}
        {%- set reads = [] -%}
        {%- for node in graph.nodes.values()
              if node.resource_type == 'model' and node.unique_id in selected_resources
                 and node.config.materialized not in ('view', 'ephemeral') -%}
            {%- set relation = adapter.get_relation(database=node.database, schema=node.schema, identifier=node.alias) -%}
            {%- if relation is not none -%}
                {%- do reads.append("select '" ~ node.schema ~ "." ~ node.alias ~ "' as t, cast(snapshot_id as string) as s from "
                                    ~ relation ~ ".refs where name = 'main'") -%}
            {%- endif -%}
        {%- endfor -%}
        {%- set found = run_query(reads | join(' union all ')).rows if reads else [] -%}
        {#- literal values: a view of the refs query would read them again, later -#}
        {%- set rows = [] -%}
        {%- for row in found -%}
            {%- do rows.append("('" ~ row[0] ~ "', '" ~ row[1] ~ "')") -%}
        {%- endfor -%}
        {%- set values = ('select * from values ' ~ rows | join(', ') ~ ' as v(t, s)') if rows
                         else 'select cast(null as string) as t, cast(null as string) as s where false' -%}
        {%- do run_query('create or replace global temporary view ' ~ dbt_fence_view(qualified=false) ~ ' as ' ~ values) -%}
    {%- endif -%}
{% endmacro %}


{#- `read`: `<table>@<snapshot id>` read later than the run's start (the publications table) -#}
{% macro dbt_fence_model(relation, read=none) %}
    {%- if execute -%}
        {%- if read is none -%}
            {%- set name = relation.schema ~ '.' ~ relation.identifier -%}
            {%- set found = run_query('select s from ' ~ dbt_fence_view() ~ " where t = '" ~ name ~ "'").rows -%}
            {%- set read = name ~ '@' ~ (found[0][0] if found else 'none') -%}
        {%- endif -%}
        {%- set run = invocation_id ~ ' (' ~ env_var('LAKEHOUSE_DBT_LOCK_HOLDER', 'no lock holder') ~ ')' -%}
        {%- do run_query('set `' ~ dbt_fence_property('dbt-run') ~ '` = `' ~ run ~ '`') -%}
        {%- do run_query('set `' ~ dbt_fence_property('dbt-read') ~ '` = `' ~ read ~ '`') -%}
    {%- endif -%}
{% endmacro %}


{% macro dbt_fence_end(run_ended=false) %}
    {%- if execute and writes_tables() -%}
        {%- do run_query('reset `' ~ dbt_fence_property('dbt-run') ~ '`') -%}
        {%- do run_query('reset `' ~ dbt_fence_property('dbt-read') ~ '`') -%}
        {%- if run_ended -%}
            {%- do run_query('drop view if exists ' ~ dbt_fence_view()) -%}
        {%- endif -%}
    {%- endif -%}
{% endmacro %}
