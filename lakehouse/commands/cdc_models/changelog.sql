{%- set own = var('bronze_columns') -%}
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
    -- is the change. Good rows only: a dead row (its reason set) is a dead letter
    where not {{ own.is_tombstone }} and {{ own.error_code }} is null

),

final as (

    select
[%- for column in columns %]
        [[ column ]],
[%- endfor %]
        op,
        {{ own.seq }},
        {{ own.source_ts }},
        {{ own.ingested_at }},
        {{ own.kafka_topic }},
        {{ own.kafka_partition }},
        {{ own.kafka_offset }},
        -- the columns the change did not carry (Debezium's placeholder; null in them, ARCHITECTURE §9):
        -- a column renamed above is renamed here too (transform, as customers_changelog does)
        {{ own.unavailable }}
        -- columns the source added since (macros/column_evolution.sql); a column you leave
        -- out above on purpose goes in `except`
        {{ cdc_added_columns(source('bronze', '[[ stream ]]'), [
[%- for column in columns %][[ (column[1:-1] | replace('``', '`')) | tojson ]][[ ', ' if not loop.last ]][% endfor -%]
        ], except=[]) }}
    from bronze_changes

)

select * from final
