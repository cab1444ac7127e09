{{
    config(
        materialized='incremental',
        incremental_strategy='append',
        partition_by=['days(event_at)'],
    )
}}

{#-
    One row per event_id: the first occurrence (by Kafka timestamp, then position) wins;
    re-sends are dropped. Late events are kept. Each run reads only the bronze rows landed
    since the last run (with an overlap window); the anti-join against this table makes
    the overlap and any rerun harmless, so a plain append is enough.
-#}

with

bronze_user_events as (

    select * from {{ source('bronze', 'user_events') }}

    {% if is_incremental() %}
    where _ingested_at > (
        select coalesce(max(_ingested_at), timestamp'1970-01-01')
            - interval {{ var('overlap_minutes') }} minutes
        from {{ this }}
    )
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
        _ingested_at,

        row_number() over (
            partition by event_id
            order by _kafka_timestamp, _kafka_partition, _kafka_offset
        ) as occurrence

    from bronze_user_events

),

first_occurrences as (

    select * from renamed
    where occurrence = 1

),

new_events as (

    select first_occurrences.*
    from first_occurrences

    {% if is_incremental() %}
    left anti join {{ this }} as existing
        on existing.event_id = first_occurrences.event_id
    {% endif %}

),

final as (

    select
        event_id,
        customer_id,
        session_id,
        event_type,
        event_at,
        page,
        device,
        duration_ms,
        _rescued,
        _kafka_topic,
        _kafka_partition,
        _kafka_offset,
        _kafka_timestamp,
        _ingested_at
    from new_events

)

select * from final
