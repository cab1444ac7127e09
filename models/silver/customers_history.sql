{%- set own = var('bronze_columns') -%}
{{
    config(
        materialized='incremental',
        incremental_strategy='merge',
        unique_key=['customer_id', own.seq],
        partition_by=['bucket(16, customer_id)', 'years(valid_to)'],
        tblproperties=merge_on_read_properties(),
        pre_hook=["{{ ensure_merge_on_read(this) }}", "{{ ensure_partition_fields(this) }}"],
    )
}}

{#-
    Every version of every customer (SCD type 2): macros/cdc_history.sql. A run reads the
    changelog for its increment only, and the history for the touched keys' open versions (the
    partition of valid_to null): it writes the new versions and re-writes the stored versions
    they close (merge-on-read). A late or out-of-order change, or a truncation, slots in between
    its neighbours: that run reads the touched keys' closed versions too (cdc_history_reads_all).
-#}

{%- set increment = bronze_increment(this, source('bronze', 'customers')) -%}
{%- set truncations = changelog_has_truncations(ref('customers_changelog'), "op = 'T'", increment, key='customer_id') -%}
{%- set reads_all = cdc_history_reads_all(this, ref('customers_changelog'), 'customer_id', increment, truncations) -%}

with

changelog as (

    select * from {{ ref('customers_changelog') }}
    {% if increment %}
    where {{ increment }}
    {% endif %}

)

{{ cdc_history_versions('changelog', 'customer_id', existing=this if is_incremental() else none,
                        truncate_when="op = 'T'", columns_of=ref('customers_changelog'),
                        columns=cdc_changelog_columns(ref('customers_changelog')),
                        truncations=truncations, open_versions_only=not reads_all) }}
