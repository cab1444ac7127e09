{{ config(materialized='table') }}

{#-
    One row per customer seen in user events or purchases: what they did and spent, with
    their current profile from the customers mirror when it holds them.
-#}

with

user_events as (

    select * from {{ ref('user_events') }}

),

purchases as (

    select * from {{ ref('purchases') }}

),

customers as (

    select * from {{ ref('customers') }}

),

event_activity as (

    select
        customer_id,
        count(*) as event_count,
        count(distinct session_id) as session_count,
        count_if(event_type = 'checkout') as checkout_count,
        min(event_at) as first_event_at,
        max(event_at) as last_event_at
    from user_events
    where customer_id is not null
    group by 1

),

purchase_activity as (

    select
        customer_id,
        count(*) as purchase_count,
        sum(amount) as total_spent,
        min(purchased_at) as first_purchase_at,
        max(purchased_at) as last_purchase_at
    from purchases
    group by 1

),

active_customers as (

    select customer_id from event_activity
    union
    select customer_id from purchase_activity

),

final as (

    select
        active_customers.customer_id,
        customers.customer_name,
        customers.country_code,
        customers.tier,
        customers.customer_id is not null as is_known_customer,
        coalesce(event_activity.event_count, 0) as event_count,
        coalesce(event_activity.session_count, 0) as session_count,
        coalesce(event_activity.checkout_count, 0) as checkout_count,
        event_activity.first_event_at,
        event_activity.last_event_at,
        coalesce(purchase_activity.purchase_count, 0) as purchase_count,
        coalesce(purchase_activity.total_spent, 0) as total_spent,
        purchase_activity.first_purchase_at,
        purchase_activity.last_purchase_at
    from active_customers
    left join event_activity
        on event_activity.customer_id = active_customers.customer_id
    left join purchase_activity
        on purchase_activity.customer_id = active_customers.customer_id
    left join customers
        on customers.customer_id = active_customers.customer_id

)

select * from final
