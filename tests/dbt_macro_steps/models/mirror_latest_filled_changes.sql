{#- cdc_mirror_latest_changes (macros/cdc_mirror_changes.sql) with a column a change may not
    carry (`name`, named in `_unavailable`): the value and sequence of the key's latest change
    that had it -#}
with changes as (select * from {{ ref('changes') }})
{{ cdc_mirror_latest_changes('changes', ['customer_id'], '_seq', "op = 'D'", none,
                             ['customer_id', 'name', 'op', '_seq', '_unavailable'], ['name']) }}
select customer_id, _seq, _filled_name.value as filled_name, _filled_name.seq as filled_seq, _is_deleted
from winning_changes
