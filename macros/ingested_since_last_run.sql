{#-
    The increment filter of every incremental model that reads bronze (or silver) by arrival:
    rows ingested after the newest `_ingested_at` the model already holds, minus an overlap
    window (var overlap_minutes). A micro-batch stamps its rows with its start time but may
    commit minutes later, after a dbt run read past that time; the overlap re-reads those rows.
    Each model makes re-reading harmless (anti-join on identity, or the mirror's sequence guard).
-#}
{% macro ingested_since_last_run(existing, column='_ingested_at', existing_column='_ingested_at') -%}
    {{ column }} > (
        select coalesce(max({{ existing_column }}), timestamp'1970-01-01')
            - interval {{ var('overlap_minutes') }} minutes
        from {{ existing }}
    )
{%- endmacro %}
