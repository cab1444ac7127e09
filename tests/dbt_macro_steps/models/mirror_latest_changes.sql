{#- cdc_mirror_latest_changes (macros/cdc_mirror_changes.sql): per key its latest change, the
    first copy to arrive -#}
with changes as (select * from {{ ref('changes') }})
{{ cdc_mirror_latest_changes('changes', ['customer_id'], '_seq', "op = 'D'", "op = 'T'",
                             ['customer_id', 'name', 'op', '_seq', '_ingested_at', '_kafka_topic']) }}
select * from winning_changes
