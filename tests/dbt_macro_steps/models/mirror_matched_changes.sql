{#- cdc_mirror_matched_changes (macros/cdc_mirror_changes.sql): each change beside its key's
    stored sequence, a composite key -#}
with winning_changes as (select * from {{ ref('changes') }})
{{ cdc_mirror_matched_changes(ref('stored'), ['customer_id', 'region'], '_seq') }}
select * from matched_changes
