{{
    config(
        materialized='incremental',
        incremental_strategy='merge',
        unique_key=[[ history_key ]],
        partition_by=['bucket([[ buckets ]], [[ first_key ]])', 'years(valid_to)'],
        tblproperties=merge_on_read_properties(),
        pre_hook=["{{ ensure_merge_on_read(this) }}", "{{ ensure_partition_fields(this) }}"],
    )
}}

{#-
    Every version of every [[ table ]] row (SCD type 2): macros/cdc_history.sql. A run reads the
    changelog for its increment only, and the history for the touched keys' open versions
    unless a late change or a truncation needs the closed ones (cdc_history_reads_all).
    Written by `lakehouse cdc add`.
-#}

{#- the bronze files added since the last run (not an overlap window, which re-reads the last
    increment: a key it changed twice would make every run read the closed versions) -#}
{%- set increment = bronze_increment(this, source('bronze', '[[ stream ]]')) -%}
{%- set truncations = changelog_has_truncations(ref('[[ stream ]]_changelog'), "op = 'T'", increment, key='[[ first_key ]]') -%}
{%- set reads_all = cdc_history_reads_all(this, ref('[[ stream ]]_changelog'), [[ key_config ]], increment, truncations) -%}

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
                        truncations=truncations, open_versions_only=not reads_all) }}
