{%- set own = var('bronze_columns') -%}
{{
    config(
        materialized='incremental',
        incremental_strategy='append',
        partition_by=['days(event_at)'],
        on_schema_change='append_new_columns',
        tblproperties=clustered_write_properties(),
    )
}}

{#-
    One row per event_id (macros/first_occurrences.sql); late events are kept. Each run reads
    only the bronze files committed since the snapshot the last run read
    (macros/ingested_since_last_run.sql, "Exact increments").

    The increment is deduplicated against the stored rows of the event days it has events on
    only (macros/touched_days.sql), not against the whole table: a re-sent duplicate carries
    its original's event_timestamp, so it can only meet that original on the same day, and the
    table is partitioned by that day. Exact, not a window: a late event of last year is
    compared with last year's day, and the read stays the size of the days touched.

    `_loaded_at`: when the dbt run appended the row (one value per run), for gold models that
    count each silver row exactly once (`loaded_since_last_run`, macros/ingested_since_last_run.sql).
-#}

{%- set increment = bronze_increment(this, source('bronze', 'user_events')) -%}
{%- set loaded_at = run_stamp(this) -%}

with

bronze_user_events as (

    select * from {{ source('bronze', 'user_events') }}
    -- good rows only: a dead row (null decoded columns, its reason set) is a dead letter
    where {{ own.error_code }} is null
    {% if is_incremental() %}
    and {{ increment }}
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
        {{ own.rescued }},
        {{ own.kafka_topic }},
        {{ own.kafka_partition }},
        {{ own.kafka_offset }},
        {{ own.kafka_timestamp }},
        {{ own.ingested_at }},
        {{ loaded_at }} as _loaded_at
    from bronze_user_events

)

{{ first_occurrences('renamed', ['event_id'], this, is_incremental(),
                     existing_filter=event_days_filter(source('bronze', 'user_events'), 'event_timestamp', increment,
                                                       'event_at') if is_incremental()) }}
