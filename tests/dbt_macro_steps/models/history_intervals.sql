{#- cdc_history_intervals (macros/cdc_history.sql): each version's valid_from, valid_to and
    is_current -#}
with distinct_links as (select * from {{ ref('links') }})
{{ cdc_history_intervals(['customer_id'], '_seq', "op = 'D' or (op = 'T')") }}
select * from versions
