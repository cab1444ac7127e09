{#- cdc_history_links (macros/cdc_history.sql): the new changes and the stored versions, each
    copy of a (key, sequence) ranked -#}
with changes as (select * from {{ ref('changes') }}),

stored_versions as (select * from {{ ref('stored') }})
{{ cdc_history_links('changes', ['customer_id'], '_seq', '_source_ts',
                     ['customer_id', 'name', 'op', '_seq', '_source_ts', '_ingested_at', '_kafka_topic'],
                     existing=ref('stored')) }}
select * from distinct_links
