{{
    config(
        materialized='incremental',
        incremental_strategy='merge',
        unique_key=['account_id', '_seq'],
        partition_by=['bucket(16, account_id)'],
    )
}}

{#-
    Every version of every account (SCD type 2): macros/cdc_history.sql. An increment rebuilds
    only the keys with changes ingested since the last run, from all their changes, so a late or
    out-of-order change corrects its neighbours' valid_to.
-#}

with

changelog as (

    select * from {{ ref('accounts_changelog') }}

),

{% if is_incremental() %}
touched_keys as (

    select distinct account_id
    from changelog
    where {{ ingested_since_last_run(this) }}

),
{% endif %}

changes as (

    select changelog.*
    from changelog
    {% if is_incremental() %}
    left semi join touched_keys
        on touched_keys.account_id = changelog.account_id
    {% endif %}

)

{{ cdc_history_versions('changes', 'account_id') }}
