{#-
    A pre-hook for an existing table built with fewer partition fields than its model's
    `partition_by` now names (a CDC history built before years(valid_to)): adds the missing
    ones (Iceberg partition evolution), so no full refresh is needed. The files written before
    keep their old layout and are read as before (Iceberg filters them by their own spec and the
    rows' values: the answer is the same, only their pruning is not); later writes, and
    compaction (`lakehouse maintain` rewrites into the current spec), use the new one. Reads the
    table's partitioning first, so a table that has it commits nothing. Runs its statements
    itself (one per field; a hook is one statement) and leaves the hook empty. A field is
    compared without spaces and backticks: `lakehouse cdc add` quotes its key column
    (bucket(16, `entry_id`)), which Iceberg's description spells bare, and a quoted field read
    as missing was added again at every run after the first (Iceberg refuses a duplicate field).
-#}
{% macro ensure_partition_fields(relation) -%}
    {%- if execute and load_relation(relation) is not none -%}
        {%- set current = [] -%}
        {%- set in_partitioning = namespace(value=false) -%}
        {%- for row in run_query('describe table ' ~ relation).rows -%}
            {%- if row[0] == '# Partitioning' -%}
                {%- set in_partitioning.value = true -%}
            {%- elif in_partitioning.value and (row[0] or '').startswith('Part ') -%}
                {%- do current.append(row[1] | replace(' ', '') | replace('`', '') | lower) -%}
            {%- elif in_partitioning.value and row[0] -%}
                {%- set in_partitioning.value = false -%}
            {%- endif -%}
        {%- endfor -%}
        {%- for field in config.get('partition_by') or [] -%}
            {%- if field | replace(' ', '') | replace('`', '') | lower not in current -%}
                {%- do run_query('alter table ' ~ relation ~ ' add partition field ' ~ field) -%}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
{%- endmacro %}
