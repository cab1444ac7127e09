{#- cdc_history_stored_versions (macros/cdc_history.sql): the stored versions an increment's
    changes may change (var `open_versions_only`: the open ones alone) -#}
with changes as (select * from {{ ref('changes') }})
{{ cdc_history_stored_versions('changes', ref('stored'), ['customer_id'], '_seq',
                               open_versions_only=var('open_versions_only', false)) }}
select * from stored_versions
