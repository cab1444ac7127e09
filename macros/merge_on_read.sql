{#-
    Table properties of the tables dbt MERGEs into every run (the CDC mirrors and histories).

    Merge-on-read: a MERGE writes delete files for the rows it changes instead of rewriting
    every data file that holds one (copy-on-write), so a run's write is the size of its change;
    compaction (`lakehouse maintain`) folds the delete files in later. Format version 2: every
    table stays readable by pyiceberg and other Iceberg v2 readers.
-#}
{% macro merge_on_read_properties() -%}
    {%- set properties = {
        'format-version': '2',
        'write.merge.mode': 'merge-on-read',
        'write.update.mode': 'merge-on-read',
        'write.delete.mode': 'merge-on-read',
        'commit.retry.num-retries': '10',
    } -%}
    {%- do properties.update(audit_table_properties()) -%}
    {{ return(properties) }}
{%- endmacro %}


{#-
    A pre-hook for an existing table created before these properties (a copy-on-write history
    of an earlier version of the project): sets them once, so no full refresh is needed.
    Reads the properties first, so a table that has them commits nothing.
-#}
{% macro ensure_merge_on_read(relation) -%}
    {%- if execute and load_relation(relation) is not none -%}
        {%- set wanted = merge_on_read_properties() -%}
        {%- set current = {} -%}
        {%- for row in run_query('show tblproperties ' ~ relation).rows -%}
            {%- do current.update({row[0]: row[1] | string}) -%}
        {%- endfor -%}
        {%- set missing = [] -%}
        {%- for name, value in wanted.items() if name != 'format-version' and current.get(name) != value -%}
            {%- do missing.append("'" ~ name ~ "' = '" ~ value ~ "'") -%}
        {%- endfor -%}
        {%- if missing -%}
            alter table {{ relation }} set tblproperties ({{ missing | join(', ') }})
        {%- endif -%}
    {%- endif -%}
{%- endmacro %}
