{#- cdc_mirror_newer_changes (macros/cdc_mirror_changes.sql): the changes newer than the mirror's
    row and than every truncation (var `incremental` false: a first run, nothing stored) -#}
with matched_changes as (select * from {{ ref('changes') }}),

truncations as (select * from {{ ref('truncations') }})
{{ cdc_mirror_newer_changes('matched_changes', ['customer_id'], '_seq', var('incremental', true), "op = 'T'") }}
select * from mirror_changes
