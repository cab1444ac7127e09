{#- cdc_history_truncations (macros/cdc_history.sql): the changes with a key, and the versions
    the truncations among them end, of the changes and of the history stored (var `truncations`
    false: the run knows of no truncation, so no changelog columns are given) -#}
with changes as (select * from {{ ref('changes') }})
{{ cdc_history_truncations('changes', ['customer_id'], '_seq', '_source_ts', "op = 'D' or (op = 'T')",
                           ['customer_id', 'name', 'op', '_seq', '_source_ts', '_ingested_at', '_kafka_topic']
                           if var('truncations', true) else none,
                           existing=ref('stored')) }}
select * from history_changes
