{{
    config(
        materialized='incremental',
        incremental_strategy='merge',
        unique_key=[[ history_key ]],
        partition_by=['bucket([[ buckets ]], [[ first_key ]])'],
        tblproperties=merge_on_read_properties(),
        pre_hook="{{ ensure_merge_on_read(this) }}",
    )
}}

{#-
    Every version of every [[ table ]] row (SCD type 2): macros/cdc_history.sql. A run reads the
    changelog for its increment only. Written by `lakehouse cdc add`.
-#}

{%- set increment = ingested_since_last_run(this) if is_incremental() else none -%}

with

changelog as (

    select * from {{ ref('[[ stream ]]_changelog') }}
    {% if increment %}
    where {{ increment }}
    {% endif %}

)

{{ cdc_history_versions('changelog', [[ key_config ]], existing=this if is_incremental() else none,
                        truncate_when="op = 'T'", columns_of=ref('[[ stream ]]_changelog'),
                        columns=cdc_changelog_columns(ref('[[ stream ]]_changelog')),
                        truncations=changelog_has_truncations(ref('[[ stream ]]_changelog'), "op = 'T'", increment)) }}
