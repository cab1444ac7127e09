{{
    config(
        materialized='incremental',
        incremental_strategy='append',
        partition_by=['days(event_at)'],
    )
}}

{#-
    One row per event_id (macros/first_occurrences.sql); late events are kept. Each run reads
    only the bronze rows landed since the last run, with an overlap window.
-#}

with

bronze_user_events as (

    select * from {{ source('bronze', 'user_events') }}
    {% if is_incremental() %}
    where {{ ingested_since_last_run(this) }}
    {% endif %}

),

renamed as (

    select
        event_id,
        customer_id,
        session_id,
        lower(event_type) as event_type,
        event_timestamp as event_at,
        page,
        device,
        cast(duration_ms as int) as duration_ms,
        _rescued,
        _kafka_topic,
        _kafka_partition,
        _kafka_offset,
        _kafka_timestamp,
        _ingested_at
    from bronze_user_events

)

{{ first_occurrences('renamed', ['event_id'], this, is_incremental()) }}
