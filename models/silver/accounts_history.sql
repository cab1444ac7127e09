{{
    config(
        materialized='incremental',
        incremental_strategy='merge',
        unique_key=['account_id', '_seq'],
        partition_by=['bucket(16, account_id)'],
        tblproperties=merge_on_read_properties(),
        pre_hook="{{ ensure_merge_on_read(this) }}",
    )
}}

{#-
    Every version of every account (SCD type 2): macros/cdc_history.sql. A run reads the
    changelog for its increment only, and the history for the touched keys' recent versions:
    it writes the new versions and re-writes the stored versions they close (merge-on-read).
    A late or out-of-order change slots in between its neighbours.
-#}

{%- set increment = bronze_increment(this, source('bronze', 'accounts')) -%}

with

changelog as (

    select * from {{ ref('accounts_changelog') }}
    {% if increment %}
    where {{ increment }}
    {% endif %}

)

{{ cdc_history_versions('changelog', 'account_id', existing=this if is_incremental() else none,
                        columns_of=ref('accounts_changelog')) }}
