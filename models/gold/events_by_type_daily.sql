{{
    config(
        materialized='incremental',
        incremental_strategy='merge',
        unique_key=['event_date', 'event_type'],
    )
}}

{#-
    Events per type per day. An increment recomputes whole days: only the days that
    received new silver rows since the last run, so late events correct their own day.
-#}

with

{% if is_incremental() %}
changed_days as (

    select distinct to_date(event_at) as event_date
    from {{ ref('user_events') }}
    where _ingested_at > (
        select coalesce(max(last_ingested_at), timestamp'1970-01-01')
            - interval {{ var('overlap_minutes') }} minutes
        from {{ this }}
    )

),
{% endif %}

silver_user_events as (

    select * from {{ ref('user_events') }}

    {% if is_incremental() %}
    where to_date(event_at) in (select event_date from changed_days)
    {% endif %}

),

daily as (

    select
        to_date(event_at) as event_date,
        event_type,
        count(*) as event_count,
        count(distinct customer_id) as customer_count,
        count(distinct session_id) as session_count,
        max(_ingested_at) as last_ingested_at
    from silver_user_events
    group by 1, 2

),

final as (

    select * from daily

)

select * from final
