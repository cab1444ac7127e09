{#- cdc_mirror_carried_changes (macros/cdc_mirror_changes.sql): a filled column's value, or null
    where it is not newer than the mirror's row (var `incremental` false: a first run) -#}
with mirror_changes as (

    select customer_id, op, _seq, named_struct('value', filled_name, 'seq', filled_seq) as _filled_name,
           _is_deleted, _change_rank, _stored_seq
    from {{ ref('changes') }}

)
{{ cdc_mirror_carried_changes(['customer_id', 'name', 'op', '_seq'], ['name'], var('incremental', true)) }}
select * from carried_changes
