{{
    config(
        materialized='incremental',
        incremental_strategy='insert_overwrite',
        partition_by=['sales_date'],
    )
}}

{#-
    Revenue per day, region and currency. A purchase's region is that of the country its
    customer had when they bought: the version of customers_history valid at `purchased_at`
    (`valid_from <= purchased_at < valid_to`, an open version valid for ever) × the
    country_regions seed, the type-2 dimension join. So a customer who moves keeps their earlier
    sales in the region they were in, and a move changes the sales after it only, where a join
    with the current profile re-attributed every sale they ever made (and, incremental, had to
    recompute every day they ever bought on). A purchase with no version valid at its time (the
    customer not created yet, or deleted or truncated then: a D or T version) counts under
    'unknown customer', so the totals still reconcile with silver purchases; a version whose
    country the seed lacks leaves the region null, which the gold suite reports.

    Incremental by day (partitioned by sales_date; a run overwrites the days it recomputes,
    so a region row a day no longer has disappears). The days recomputed are:
    - the days of the purchases silver runs appended since the last run (`_loaded_at`: exact,
      a late bronze commit stamped before the last run included);
    - the days of the purchases whose version a history run changed since the last run (the
      history's `_loaded_at`, exact: a late CDC commit counts too). A history run writes the
      new versions and re-writes the stored ones whose bounds they move (macros/cdc_history.sql):
      a version first written since (`_first_loaded_at`) may hold purchases another one held,
      so its customer's purchases inside its interval are restated; a re-written one only
      shortened (its end) or lost its start (valid_from, the running maximum of commit times,
      rose), and what it lost lies from its own commit time to its new valid_from. So a move
      restates the purchases after it, not the customer's past; a late change the purchases of
      the interval it takes. Why that is all: a purchase whose version changed is held now by a
      version new since (restated), or by an older one whose interval grew to take it, which it
      can only do at its end, from a successor whose valid_from rose past it (restated from that
      successor's commit time), or by none, when the version that held it rose past it (the same).
      A re-written version whose country it carried from its predecessor (Debezium's
      unavailable value) may have been re-filled: all of its interval is restated.
    Finding those days scans purchases' customer_id and purchase time (two columns) for the
    written versions' customers, as the join with the current profile did for the changed ones.
    `_last_loaded_at` (newest silver run counted) and `_history_as_of` (the history's newest
    `_loaded_at` when the day was computed) are the marks.
    After editing the country_regions seed: `--full-refresh -s sales_by_region_daily`.
-#}

{%- set history_as_of = high_water_mark(ref('customers_history'), '_loaded_at') -%}
{%- if is_incremental() -%}
    {{ require_columns(this, ['_last_loaded_at', '_history_as_of']) }}
    {%- set seen = increment_start(this, '_history_as_of', overlap_minutes=0) -%}
    {%- set purchase_days -%}
        with written as (

            -- the versions history runs wrote since the last run; new: first written since
            select customer_id, valid_from, valid_to, _source_ts,
                   coalesce({{ ingested_after(seen, '_first_loaded_at') }}, false) as is_new,
                   array_contains(coalesce(_unavailable, array()), 'country_code') as carries_country
            from {{ ref('customers_history') }}
            where {{ ingested_after(seen, '_loaded_at') }}

        ),

        restated as (

            -- a new version: its whole interval
            select customer_id, valid_from as restated_from, valid_to as restated_to
            from written where is_new
            union all
            -- a re-written one: what it left when its valid_from rose (from its own commit time:
            -- its valid_from was never below it), and all of it when its country may have been
            -- re-filled (a version that did not carry it takes its predecessor's)
            select customer_id, _source_ts, valid_from
            from written where not is_new and _source_ts < valid_from
            union all
            select customer_id, valid_from, valid_to
            from written where not is_new and carries_country

        )

        select to_date(purchased_at) from {{ ref('purchases') }}
        where {{ loaded_since_last_run(this, '_last_loaded_at') }}
        union all
        select to_date(purchases.purchased_at)
        from {{ ref('purchases') }} as purchases
        inner join restated
            on restated.customer_id = purchases.customer_id
            and purchases.purchased_at >= restated.restated_from
            and (restated.restated_to is null or purchases.purchased_at < restated.restated_to)
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

versions as (

    -- the versions of these purchases' customers only: a semi join with them (broadcast), so
    -- the history is streamed once rather than shuffled. A delete or a truncation (op D, T)
    -- is a version in which the row does not exist: no customer then.
    select history.customer_id, history.country_code, history.valid_from, history.valid_to
    from {{ ref('customers_history') }} as history
    left semi join purchases
        on purchases.customer_id = history.customer_id
    where history.op not in ('D', 'T')

),

country_regions as (

    select * from {{ ref('country_regions') }}

),

purchases_with_region as (

    -- versions of a customer never overlap (each ends where the next begins), so a purchase
    -- meets one version at most
    select
        purchases.*,
        case
            when versions.customer_id is null then 'unknown customer'
            else country_regions.region
        end as region
    from purchases
    left join versions
        on versions.customer_id = purchases.customer_id
        and purchases.purchased_at >= versions.valid_from
        and (versions.valid_to is null or purchases.purchased_at < versions.valid_to)
    left join country_regions
        on country_regions.country_code = versions.country_code

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
        {{ history_as_of }} as _history_as_of
    from purchases_with_region
    group by 1, 2, 3

),

final as (

    select * from daily

)

select * from final
