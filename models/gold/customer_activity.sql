{{
    config(
        materialized='incremental',
        incremental_strategy='merge',
        unique_key='customer_id',
        tblproperties=merge_on_read_properties(),
        pre_hook="{{ ensure_merge_on_read(this) }}",
    )
}}

{#-
    One row per customer seen in user events or purchases: what they did and spent, with
    their current profile from the customers mirror when it holds them.

    Incremental by customer: a run updates only the customers with new events or purchases, or
    whose mirror row a dbt run wrote since the last run (the mirror's `_loaded_at`, exact like
    silver's: a late CDC commit counts too). Counts, sums, first and last times are added
    to what the row holds (they combine); the silver rows counted are exactly those appended
    since the last run (`_loaded_at`, macros/ingested_since_last_run.sql), so nothing is
    counted twice and silver is read for the new rows only. Distinct sessions do not add up:
    the row keeps a HyperLogLog sketch of its session ids (`_session_sketch`, lgK 12), merged
    with the new ones' sketch; `session_count` is its estimate, exact for the few dozen
    sessions a customer has (and within about 1.6% beyond). A full refresh computes every row
    with the same functions over all of silver, so it gives the same result
    (tests/integration/test_incremental_models.py). `_events_loaded_at`, `_purchases_loaded_at`
    and `_customers_as_of` (the mirror's newest `_loaded_at` when the row was computed) are the
    marks of what the row has counted.
-#}

{%- set customers_as_of = high_water_mark(ref('customers_mirror'), '_loaded_at') -%}
{%- if is_incremental() -%}
    {{ require_columns(this, ['_session_sketch', '_events_loaded_at', '_purchases_loaded_at', '_customers_as_of']) }}
{%- endif -%}

with

new_events as (

    select * from {{ ref('user_events') }}
    where customer_id is not null
    {% if is_incremental() %}
        and {{ loaded_since_last_run(this, '_events_loaded_at') }}
    {% endif %}

),

new_purchases as (

    select * from {{ ref('purchases') }}
    {% if is_incremental() %}
    where {{ loaded_since_last_run(this, '_purchases_loaded_at') }}
    {% endif %}

),

event_activity as (

    select
        customer_id,
        count(*) as event_count,
        hll_sketch_agg(session_id, 12) as session_sketch,
        count_if(event_type = 'checkout') as checkout_count,
        min(event_at) as first_event_at,
        max(event_at) as last_event_at,
        max(_loaded_at) as loaded_at
    from new_events
    group by 1

),

purchase_activity as (

    select
        customer_id,
        count(*) as purchase_count,
        sum(amount) as total_spent,
        min(purchased_at) as first_purchase_at,
        max(purchased_at) as last_purchase_at,
        max(_loaded_at) as loaded_at
    from new_purchases
    group by 1

),

touched_customers as (

    select customer_id from event_activity
    union
    select customer_id from purchase_activity
    {% if is_incremental() %}
    union
    -- a changed profile (or a deleted customer) updates the row of a customer seen before
    select customer_id from {{ ref('customers_mirror') }}
    where {{ loaded_since_last_run(this, '_customers_as_of') }}
    {% endif %}

),

{% if is_incremental() %}
stored as (

    select stored.*
    from {{ this }} as stored
    left semi join touched_customers
        on touched_customers.customer_id = stored.customer_id

),
{% endif %}

customers as (

    -- the profiles of the touched customers only (a semi join with them, broadcast)
    select live.*
    from {{ ref('customers') }} as live
    left semi join touched_customers
        on touched_customers.customer_id = live.customer_id

),

combined as (

    select
        touched_customers.customer_id,
        {% if is_incremental() %}
        coalesce(stored.event_count, 0) + coalesce(event_activity.event_count, 0) as event_count,
        case
            when stored._session_sketch is null then event_activity.session_sketch
            when event_activity.session_sketch is null then stored._session_sketch
            else hll_union(stored._session_sketch, event_activity.session_sketch)
        end as session_sketch,
        coalesce(stored.checkout_count, 0) + coalesce(event_activity.checkout_count, 0) as checkout_count,
        least(stored.first_event_at, event_activity.first_event_at) as first_event_at,
        greatest(stored.last_event_at, event_activity.last_event_at) as last_event_at,
        coalesce(stored.purchase_count, 0) + coalesce(purchase_activity.purchase_count, 0) as purchase_count,
        coalesce(stored.total_spent, 0) + coalesce(purchase_activity.total_spent, 0) as total_spent,
        least(stored.first_purchase_at, purchase_activity.first_purchase_at) as first_purchase_at,
        greatest(stored.last_purchase_at, purchase_activity.last_purchase_at) as last_purchase_at,
        greatest(stored._events_loaded_at, event_activity.loaded_at) as events_loaded_at,
        greatest(stored._purchases_loaded_at, purchase_activity.loaded_at) as purchases_loaded_at,
        stored.customer_id is not null or event_activity.customer_id is not null
            or purchase_activity.customer_id is not null as has_activity
        {% else %}
        coalesce(event_activity.event_count, 0) as event_count,
        event_activity.session_sketch,
        coalesce(event_activity.checkout_count, 0) as checkout_count,
        event_activity.first_event_at,
        event_activity.last_event_at,
        coalesce(purchase_activity.purchase_count, 0) as purchase_count,
        coalesce(purchase_activity.total_spent, 0) as total_spent,
        purchase_activity.first_purchase_at,
        purchase_activity.last_purchase_at,
        event_activity.loaded_at as events_loaded_at,
        purchase_activity.loaded_at as purchases_loaded_at,
        true as has_activity
        {% endif %}
    from touched_customers
    {% if is_incremental() %}
    left join stored
        on stored.customer_id = touched_customers.customer_id
    {% endif %}
    left join event_activity
        on event_activity.customer_id = touched_customers.customer_id
    left join purchase_activity
        on purchase_activity.customer_id = touched_customers.customer_id

),

final as (

    select
        combined.customer_id,
        customers.customer_name,
        customers.country_code,
        customers.tier,
        customers.customer_id is not null as is_known_customer,
        combined.event_count,
        coalesce(hll_sketch_estimate(combined.session_sketch), 0) as session_count,
        combined.checkout_count,
        combined.first_event_at,
        combined.last_event_at,
        combined.purchase_count,
        cast(combined.total_spent as decimal(38, 2)) as total_spent,
        combined.first_purchase_at,
        combined.last_purchase_at,
        combined.session_sketch as _session_sketch,
        combined.events_loaded_at as _events_loaded_at,
        combined.purchases_loaded_at as _purchases_loaded_at,
        {{ customers_as_of }} as _customers_as_of
    from combined
    left join customers
        on customers.customer_id = combined.customer_id
    -- a profile change of a customer never seen in events or purchases is not a row here
    where combined.has_activity

)

select * from final
