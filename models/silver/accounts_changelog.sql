{{ config(materialized='view') }}

{#-
    The accounts changelog (AWS DMS, normalized by ingestion) with silver's types and names:
    one row per change, duplicates and all. The mirror and the history read it.
-#}

with

bronze_accounts as (

    select * from {{ source('bronze', 'accounts') }}
    -- a Kafka tombstone only tells log compaction to forget the key; the delete before it
    -- is the change
    where not _is_tombstone

),

final as (

    select
        account_id,
        customer_id,
        account_type,
        -- exact: the source keeps money as two-place decimal text
        cast(balance as decimal(18, 2)) as balance,
        currency,
        status,
        cast(updated_at as timestamp) as updated_at,
        op,
        _seq,
        _source_ts,
        _ingested_at,
        _kafka_topic,
        _kafka_partition,
        _kafka_offset
    from bronze_accounts

)

select * from final
