{#-
    dbt-spark's MERGE of the `merge` incremental strategy, with the conditions on the target a
    model's run decided when it rendered: dbt reads `incremental_predicates` from the model's
    config, fixed when the project is parsed, and a CDC history knows only at run time whether
    its MERGE may skip the closed versions (macros/cdc_history.sql, `cdc_history_reads_all`).
    dbt dispatches get_merge_sql to the root project first, so this one is used.
-#}
{% macro spark__get_merge_sql(target, source, unique_key, dest_columns, incremental_predicates) -%}
    {{ return(dbt.spark__get_merge_sql(target, source, unique_key, dest_columns,
                                       (incremental_predicates or []) + cdc_history_merge_predicates(target))) }}
{%- endmacro %}
