{{ config(materialized='table') }}

{#-
    Live accounts (the accounts mirror without tombstones) per type, currency and status.
    Balances are summed per currency only: amounts in different currencies never add up.
-#}

with

accounts as (

    select * from {{ ref('accounts') }}

),

final as (

    select
        account_type,
        currency,
        status,
        count(*) as account_count,
        count(distinct customer_id) as customer_count,
        sum(balance) as total_balance,
        cast(avg(balance) as decimal(18, 2)) as average_balance,
        min(balance) as min_balance,
        max(balance) as max_balance
    from accounts
    group by 1, 2, 3

)

select * from final
