{{
    config(
        materialized='incremental',
        incremental_strategy='insert_overwrite',
        partition_by=['sales_date'],
    )
}}

{#-
    Revenue per day, region and currency. A purchase's region is its customer's current
    country's region (the live customers mirror × the country_regions seed). A purchase whose
    customer the mirror does not hold (never inserted or deleted) counts under 'unknown
    customer', so the totals still reconcile with silver purchases; a known customer whose
    country the seed lacks leaves the region null, which the gold suite reports.

    Incremental by day (partitioned by sales_date; a run overwrites the days it recomputes,
    so a region row a day no longer has disappears). The days recomputed are:
    - the days of the purchases silver runs appended since the last run (`_loaded_at`: exact,
      a late bronze commit stamped before the last run included);
    - the days on which a customer whose mirror row a dbt run wrote since the last run (the
      mirror's `_loaded_at`, exact: a late CDC commit counts too) bought: a
      customer who moves, is deleted or is (re)created changes past days' attribution. Those
      days come from a scan of purchases' customer_id and purchase time (two columns), the
      one read here that follows the history rather than the change: only an index from
      customer to purchase days could avoid it.
    `_last_loaded_at` (newest silver run counted) and `_customers_as_of` (the
    customers mirror's newest `_loaded_at` when the day was computed) are the marks.
    After editing the country_regions seed: `--full-refresh -s sales_by_region_daily`.
-#}

{%- set customers_as_of = high_water_mark(ref('customers_mirror'), '_loaded_at') -%}
{%- if is_incremental() -%}
    {{ require_columns(this, ['_last_loaded_at', '_customers_as_of']) }}
    {%- set purchase_days -%}
        select to_date(purchased_at) from {{ ref('purchases') }}
        where {{ loaded_since_last_run(this, '_last_loaded_at') }}
        union all
        select to_date(purchases.purchased_at)
        from {{ ref('purchases') }} as purchases
        left semi join (
            select customer_id from {{ ref('customers_mirror') }}
            where {{ loaded_since_last_run(this, '_customers_as_of') }}
        ) as changed_customers
            on changed_customers.customer_id = purchases.customer_id
    {%- endset -%}
    {%- set touched = touched_days(purchase_days, 'purchased_at') -%}
{%- endif -%}

with

purchases as (

    select * from {{ ref('purchases') }}
    {% if is_incremental() %}
    where {{ touched }}
    {% endif %}

),

customers as (

    -- only the customers of these purchases: a semi join with them (broadcast), so the
    -- mirror is streamed once rather than shuffled
    select live.customer_id, live.country_code
    from {{ ref('customers') }} as live
    left semi join purchases
        on purchases.customer_id = live.customer_id

),

country_regions as (

    select * from {{ ref('country_regions') }}

),

purchases_with_region as (

    select
        purchases.*,
        case
            when customers.customer_id is null then 'unknown customer'
            else country_regions.region
        end as region
    from purchases
    left join customers
        on customers.customer_id = purchases.customer_id
    left join country_regions
        on country_regions.country_code = customers.country_code

),

daily as (

    select
        to_date(purchased_at) as sales_date,
        region,
        currency,
        count(*) as purchase_count,
        count(distinct customer_id) as customer_count,
        sum(quantity) as units_sold,
        sum(amount) as revenue,
        max(_loaded_at) as _last_loaded_at,
        {{ customers_as_of }} as _customers_as_of
    from purchases_with_region
    group by 1, 2, 3

),

final as (

    select * from daily

)

select * from final
