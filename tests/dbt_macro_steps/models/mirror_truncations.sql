{#- cdc_mirror_truncations (macros/cdc_mirror_changes.sql): the latest truncation of the
    increment and the mirror's marker (var `incremental` false: a first run, none stored) -#}
with winning_changes as (select * from {{ ref('changes') }})
{{ cdc_mirror_truncations(ref('stored'), ['customer_id'], '_seq', var('incremental', true)) }}
select * from truncations
