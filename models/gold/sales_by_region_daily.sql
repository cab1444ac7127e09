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

    Incremental by day (partitioned by sales_date; a run overwrites the days it writes).
    `_last_loaded_at` (newest silver run counted), `_customers_as_of` (the customers mirror's
    newest `_loaded_at` when the row was computed) and `_customers_snapshot` (the mirror's
    Iceberg snapshot its regions were read from, committed with the rows that used it) are the
    marks. After editing the country_regions seed: `--full-refresh -s sales_by_region_daily`.

    By moves, when the mirror's snapshot of the last run is still kept: every measure of a
    day, region and currency is a sum over purchases, `customer_count` included (a customer is
    in one region at a time, so a customer counts in a region on a day exactly when one of
    their purchases does). So a run adds to the stored rows of the days it touches:
    - for each customer whose region differs between that snapshot and now (the mirror rows a
      dbt run wrote since, compared): their counted purchases, subtracted from the region they
      were counted under and added to the region they belong to now. Finding those purchases
      takes a scan of purchases' customer ids, the one read here that follows the history
      rather than the change (nothing indexes purchases by customer), but no day is recomputed;
    - the purchases silver appended since the last run (`_loaded_at`: exact, a late bronze
      commit stamped before the last run included), in their customer's region now; a customer
      counts once more on a day and currency only if none of their counted purchases did.
    A row whose purchases all moved away is dropped, as a recomputation would drop it.
    Purchase amounts and quantities are never null (the Avro contract), so sums add exactly.

    Else (the first run after a full refresh of the mirror, or its snapshot expired by
    maintenance) by recomputing every day touched: the days of the purchases appended since
    and the days on which a customer whose mirror row a dbt run wrote since bought.
-#}

{%- set mirror = ref('customers_mirror') -%}
{%- set customers_as_of = high_water_mark(mirror, '_loaded_at') -%}
{%- set customers_snapshot = current_snapshot(mirror) -%}
{%- set counted_snapshot = none -%}
{%- if is_incremental() -%}
    {{ require_columns(this, ['_last_loaded_at', '_customers_as_of', '_customers_snapshot']) }}
    {%- if execute and customers_snapshot is not none -%}
        {#- the snapshot the newest rows' regions came from (it commits with them) -#}
        {%- set counted_snapshot = run_query('select cast(max_by(_customers_snapshot, _customers_as_of) as string) from '
                                             ~ this).rows[0][0] -%}
        {%- if counted_snapshot is not none and not snapshot_is_kept(mirror, counted_snapshot) -%}
            {%- set counted_snapshot = none -%}
        {%- endif -%}
    {%- endif -%}
    {%- if counted_snapshot is none -%}
        {%- set purchase_days -%}
            select to_date(purchased_at) from {{ ref('purchases') }}
            where {{ loaded_since_last_run(this, '_last_loaded_at') }}
            union all
            select to_date(purchases.purchased_at)
            from {{ ref('purchases') }} as purchases
            left semi join (
                select customer_id from {{ mirror }}
                where {{ loaded_since_last_run(this, '_customers_as_of') }}
            ) as changed_customers
                on changed_customers.customer_id = purchases.customer_id
        {%- endset -%}
        {%- set touched = touched_days(purchase_days, 'purchased_at') -%}
    {%- else -%}
        {%- set purchases_counted = increment_start(this, '_last_loaded_at', overlap_minutes=0) -%}
        {%- set arrival_days = event_days_filter(ref('purchases'), 'purchased_at',
                                                 ingested_after(purchases_counted, '_loaded_at'), 'purchased_at') -%}
    {%- endif -%}
{%- endif -%}
{%- set marks -%}
    {{ customers_as_of }} as _customers_as_of,
    cast({{ customers_snapshot if customers_snapshot is not none else 'null' }} as bigint) as _customers_snapshot
{%- endset -%}

with

regions as (

    select * from {{ ref('country_regions') }}

),

{% if counted_snapshot is not none -%}

changed_customers as (

    -- the customers whose mirror row a dbt run wrote since the last run
    select distinct customer_id from {{ mirror }}
    where {{ loaded_since_last_run(this, '_customers_as_of') }}

),

customers_then as (

    -- as the last run counted them: the mirror at its snapshot
    select counted_mirror.customer_id, counted_mirror.country_code
    from {{ mirror }} version as of {{ counted_snapshot }} as counted_mirror
    left semi join changed_customers
        on changed_customers.customer_id = counted_mirror.customer_id
    where not counted_mirror._is_deleted

),

customers_now as (

    select live.customer_id, live.country_code
    from {{ ref('customers') }} as live
    left semi join changed_customers
        on changed_customers.customer_id = live.customer_id

),

movers as (

    select * from (
        select
            changed_customers.customer_id,
            case
                when customers_then.customer_id is null then 'unknown customer'
                else regions_then.region
            end as region_then,
            case
                when customers_now.customer_id is null then 'unknown customer'
                else regions_now.region
            end as region_now
        from changed_customers
        left join customers_then
            on customers_then.customer_id = changed_customers.customer_id
        left join regions as regions_then
            on regions_then.country_code = customers_then.country_code
        left join customers_now
            on customers_now.customer_id = changed_customers.customer_id
        left join regions as regions_now
            on regions_now.country_code = customers_now.country_code
    ) as attributed
    where not (region_then <=> region_now)

),

moved_purchases as (

    -- the movers' counted purchases: a scan of purchases' customer ids (see above)
    select
        purchases.purchased_at, purchases.customer_id, purchases.currency, purchases.quantity,
        purchases.amount, purchases._loaded_at, movers.region_then, movers.region_now
    from {{ ref('purchases') }} as purchases
    inner join movers
        on movers.customer_id = purchases.customer_id
    where purchases._loaded_at <= {{ purchases_counted }}

),

arrivals as (

    select * from {{ ref('purchases') }}
    where {{ ingested_after(purchases_counted, '_loaded_at') }}

),

arrival_customers as (

    select live.customer_id, live.country_code
    from {{ ref('customers') }} as live
    left semi join arrivals
        on arrivals.customer_id = live.customer_id

),

seen_before as (

    -- the arrivals' customers' counted purchases on the arrivals' days, by day and currency
    select distinct
        purchases.customer_id, to_date(purchases.purchased_at) as sales_date, purchases.currency
    from {{ ref('purchases') }} as purchases
    left semi join arrivals
        on arrivals.customer_id = purchases.customer_id
    where {{ arrival_days }} and purchases._loaded_at <= {{ purchases_counted }}

),

arrivals_with_region as (

    select
        arrivals.*,
        to_date(arrivals.purchased_at) as sales_date,
        case
            when arrival_customers.customer_id is null then 'unknown customer'
            else regions.region
        end as region,
        seen_before.customer_id is not null as seen_before
    from arrivals
    left join arrival_customers
        on arrival_customers.customer_id = arrivals.customer_id
    left join regions
        on regions.country_code = arrival_customers.country_code
    left join seen_before
        on seen_before.customer_id = arrivals.customer_id
        and seen_before.sales_date = to_date(arrivals.purchased_at)
        and seen_before.currency = arrivals.currency

),

changes as (

    select
        to_date(purchased_at) as sales_date, region_then as region, currency,
        -count(*) as purchase_count, -count(distinct customer_id) as customer_count,
        -sum(quantity) as units_sold, -sum(amount) as revenue, cast(null as timestamp) as _last_loaded_at
    from moved_purchases
    group by 1, 2, 3

    union all

    select
        to_date(purchased_at), region_now, currency,
        count(*), count(distinct customer_id), sum(quantity), sum(amount), max(_loaded_at)
    from moved_purchases
    group by 1, 2, 3

    union all

    select
        sales_date, region, currency,
        count(*), count(distinct case when not seen_before then customer_id end), sum(quantity), sum(amount),
        max(_loaded_at)
    from arrivals_with_region
    group by 1, 2, 3

),

counted as (

    -- the stored rows of the days the changes touch (the mart is small: read whole)
    select
        stored.sales_date, stored.region, stored.currency, stored.purchase_count, stored.customer_count,
        stored.units_sold, stored.revenue, stored._last_loaded_at
    from {{ this }} as stored
    left semi join (select distinct sales_date from changes) as touched
        on touched.sales_date = stored.sales_date

),

daily as (

    select
        sales_date,
        region,
        currency,
        sum(purchase_count) as purchase_count,
        sum(customer_count) as customer_count,
        sum(units_sold) as units_sold,
        sum(revenue) as revenue,
        max(_last_loaded_at) as _last_loaded_at,
        {{ marks }}
    from (select * from counted union all select * from changes) as moved
    group by 1, 2, 3
    having sum(purchase_count) > 0

),

{%- else %}

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

purchases_with_region as (

    select
        purchases.*,
        case
            when customers.customer_id is null then 'unknown customer'
            else regions.region
        end as region
    from purchases
    left join customers
        on customers.customer_id = purchases.customer_id
    left join regions
        on regions.country_code = customers.country_code

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
        {{ marks }}
    from purchases_with_region
    group by 1, 2, 3

),

{%- endif %}

final as (

    select * from daily

)

select * from final
