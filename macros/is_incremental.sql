{#-
    dbt's own is_incremental() is true only for materialized='incremental'. The CDC mirror
    (materialized='cdc_mirror', macros/cdc_mirror.sql) is incremental too: its model reads
    only the changes since the last run and compares them with the stored rows. Models call
    is_incremental() directly, so dbt unit tests can override it like for any incremental model.
-#}
{% macro is_incremental() %}
    {% if not execute %}
        {{ return(False) }}
    {% else %}
        {% set relation = adapter.get_relation(this.database, this.schema, this.table) %}
        {{ return(relation is not none
                  and relation.type == 'table'
                  and model.config.materialized in ('incremental', 'cdc_mirror')
                  and not should_full_refresh()) }}
    {% endif %}
{% endmacro %}
