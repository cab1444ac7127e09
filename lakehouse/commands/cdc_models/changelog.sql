{{ config(materialized='view') }}

{#-
    The [[ table ]] changelog ([[ kind ]], through Debezium, normalized by ingestion): one row
    per change, duplicates and all. The mirror and the history read it. Written by
    `lakehouse cdc add`; rename or cast columns here, the models above follow.
-#}

with

bronze_changes as (

    select * from {{ source('bronze', '[[ stream ]]') }}
    -- a Kafka tombstone only tells log compaction to forget the key; the delete before it
    -- is the change
    where not _is_tombstone

),

final as (

    select
[%- for column in columns %]
        [[ column ]],
[%- endfor %]
        op,
        _seq,
        _source_ts,
        _ingested_at,
        _kafka_topic,
        _kafka_partition,
        _kafka_offset,
        -- the columns the change did not carry (Debezium's placeholder; null in them, ARCHITECTURE §9):
        -- a column renamed above is renamed here too (transform, as customers_changelog does)
        _unavailable
    from bronze_changes

)

select * from final
