{%- set own = var('bronze_columns') -%}
{{
    config(
        materialized='incremental',
        incremental_strategy='append',
        partition_by=['days(purchased_at)'],
        on_schema_change='append_new_columns',
        tblproperties=clustered_write_properties(),
    )
}}

{#-
    One row per transaction_id (macros/first_occurrences.sql), whatever Avro writer schema
    (v1, v2) sent it; v1 rows have no payment method. Deduplicated against the stored rows of
    the purchase days the increment has only: a re-send keeps its transaction_time, so it meets
    its original on that day (the reasoning of user_events.sql). `_loaded_at`: as user_events.
-#}

{%- set increment = bronze_increment(this, source('bronze', 'purchases')) -%}
{%- set loaded_at = run_stamp(this) -%}

with

bronze_purchases as (

    select * from {{ source('bronze', 'purchases') }}
    -- good rows only: a dead row (null decoded columns, its reason set) is a dead letter
    where {{ own.error_code }} is null
    {% if is_incremental() %}
    and {{ increment }}
    {% endif %}

),

renamed as (

    select
        transaction_id,
        customer_id,
        product_id,
        store_id,
        quantity,
        -- exact amounts from here on: the producer rounds to cents, a double only carries it
        cast(round(unit_price, 2) as decimal(12, 2)) as unit_price,
        cast(round(amount, 2) as decimal(14, 2)) as amount,
        upper(currency) as currency,
        transaction_time as purchased_at,
        lower(payment_method) as payment_method,
        {{ own.schema_id }},
        {{ own.kafka_topic }},
        {{ own.kafka_partition }},
        {{ own.kafka_offset }},
        {{ own.kafka_timestamp }},
        {{ own.ingested_at }},
        {{ loaded_at }} as _loaded_at
    from bronze_purchases

)

{{ first_occurrences('renamed', ['transaction_id'], this, is_incremental(),
                     existing_filter=event_days_filter(source('bronze', 'purchases'), 'transaction_time', increment,
                                                       'purchased_at') if is_incremental()) }}
