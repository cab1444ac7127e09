{#- cdc_mirror_written_changes (macros/cdc_mirror_changes.sql): the rows as the mirror stores
    them, without the dropped columns, stamped -#}
with mirror_changes as (select * from {{ ref('changes') }})
{{ cdc_mirror_written_changes('mirror_changes', ['_change_rank', '_stored_seq', '_kafka_topic'],
                              "timestamp'2026-11-02 00:00:00'") }}
select * from final
