{%- set own = var('bronze_columns') -%}
{{ config(materialized='view') }}

{#-
    The customers changelog (Debezium, normalized by ingestion) with silver's types and names:
    one row per change, duplicates and all. The mirror and the history read it.
-#}

with

bronze_customers as (

    select * from {{ source('bronze', 'customers') }}
    -- a Kafka tombstone only tells log compaction to forget the key; the delete before it
    -- is the change. Good rows only: a dead row (its reason set) is a dead letter
    where not {{ own.is_tombstone }} and {{ own.error_code }} is null

),

final as (

    select
        customer_id,
        name as customer_name,
        email,
        country as country_code,
        city,
        tier,
        cast(created_at as timestamp) as created_at,
        cast(updated_at as timestamp) as updated_at,
        op,
        {{ own.seq }},
        {{ own.source_ts }},
        {{ own.ingested_at }},
        {{ own.kafka_topic }},
        {{ own.kafka_partition }},
        {{ own.kafka_offset }},
        -- the columns the change did not carry (Debezium's placeholder; null in them, ARCHITECTURE §9),
        -- by silver's names: the mirror and the history carry them by these names
        transform({{ own.unavailable }}, field -> case field when 'name' then 'customer_name'
                                                    when 'country' then 'country_code'
                                                    else field end) as {{ own.unavailable }}
        -- columns the source added since (macros/column_evolution.sql)
        {{ cdc_added_columns(source('bronze', 'customers'), ['customer_id', 'name', 'email', 'country', 'city', 'tier', 'created_at', 'updated_at']) }}
    from bronze_customers

)

select * from final
