{%- set own = var('bronze_columns') -%}
{{
    config(
        materialized='incremental',
        incremental_strategy='merge',
        unique_key=['account_id', own.seq],
        partition_by=['bucket(16, account_id)', 'years(valid_to)'],
        tblproperties=merge_on_read_properties(),
        pre_hook=["{{ ensure_merge_on_read(this) }}", "{{ ensure_partition_fields(this) }}"],
    )
}}

{#-
    Every version of every account (SCD type 2): macros/cdc_history.sql. A run reads the
    changelog for its increment only, and the history for the touched keys' open versions (the
    partition of valid_to null): it writes the new versions and re-writes the stored versions
    they close (merge-on-read). A late or out-of-order change, or a truncation, slots in between
    its neighbours: that run reads the touched keys' closed versions too (cdc_history_reads_all).
-#}

{%- set increment = bronze_increment(this, source('bronze', 'accounts')) -%}
{%- set reads_all = cdc_history_reads_all(this, ref('accounts_changelog'), 'account_id', increment) -%}

with

changelog as (

    select * from {{ ref('accounts_changelog') }}
    {% if increment %}
    where {{ increment }}
    {% endif %}

)

{{ cdc_history_versions('changelog', 'account_id', existing=this if is_incremental() else none,
                        columns_of=ref('accounts_changelog'), open_versions_only=not reads_all) }}
