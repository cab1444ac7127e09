{#- A change's lineage, as every CDC changelog view selects it (the end of a select list, no
    comma after it): bronze's own columns (the var `bronze_columns`) that order the change
    (`seq`, the source's commit time), say which batch read it and which Kafka record held it. The
    mirror and the history read them by these names. -#}
{% macro cdc_lineage_columns() -%}
    {%- set own = var('bronze_columns') -%}
    {{ own.seq }}, {{ own.source_ts }}, {{ own.ingested_at }}, {{ own.kafka_topic }}, {{ own.kafka_partition }}, {{ own.kafka_offset }}
{%- endmacro %}
