{#- cdc_history_filled_links (macros/cdc_history.sql): a column a version did not carry (`name`,
    named in `_unavailable`) filled from its predecessor -#}
with distinct_links as (select * from {{ ref('links') }})
{{ cdc_history_filled_links(['customer_id'], '_seq', ['customer_id', 'name', 'op', '_seq', '_unavailable'],
                            ['name']) }}
select * from kept_links
