{%- set own = var('bronze_columns') -%}
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
    recompute every day they ever bought on). One exception: a customer's first version, when it
    is a snapshot read (op R), holds the purchases before it as well. A snapshot read is not a
    change made at its `source_ts`: it is the row as the connector found it when it started,
    and it existed before, as it was or with values no changelog holds; without this every sale
    before the connector's snapshot (in the demo, every sale: the event producers run before
    the CDC simulator starts its clock) would count as 'unknown customer'. A purchase with no
    version valid at its time (before the first version of a customer created since the
    connector started, or while deleted or truncated: a D or T version) counts under
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
      so its customer's purchases inside its interval are restated, and all those before it
      when it is the customer's first version (it may have taken them from a snapshot read, or
      be one); a re-written one only shortened (its end) or lost its start (valid_from, the
      running maximum of commit times, rose), and what it lost lies from its own commit time
      to its new valid_from. So a move restates the purchases after it, not the customer's
      past; a late change the purchases of the interval it takes. Why that is all: a purchase
      whose version changed is held now by a version new since (restated), or by an older one
      whose interval grew to take it, which it can only do at its end, from a successor whose
      valid_from rose past it (restated from that successor's commit time), or by an older
      snapshot read reaching back, which was first before too and held it then, or by none:
      then the version that held it rose past it (the same), or it lay before a snapshot read
      that a new first version displaced (restated with that one).
      A re-written version whose country it carried from its predecessor (Debezium's
      unavailable value) may have been re-filled: all of its interval is restated.
    Finding those days scans purchases' customer_id and purchase time (two columns) for the
    written versions' customers, as the join with the current profile did for the changed ones,
    and the history's customer_id and `seq` for the new versions' customers (is one of them
    the first?).
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
            select customer_id, {{ own.seq }}, valid_from, valid_to, {{ own.source_ts }},
                   coalesce({{ ingested_after(seen, '_first_loaded_at') }}, false) as is_new,
                   array_contains(coalesce({{ own.unavailable }}, array()), 'country_code') as carries_country
            from {{ ref('customers_history') }}
            where {{ ingested_after(seen, '_loaded_at') }}

        ),

        first_new as (

            -- a new version that is its customer's first (no version before it by `seq`): the
            -- purchases before it may have changed hands, to it (a snapshot read reaches back)
            -- or from the snapshot read that was first until now
            select new.customer_id, new.valid_to
            from (select * from written where is_new) as new
            left anti join {{ ref('customers_history') }} as earlier
                on earlier.customer_id = new.customer_id and earlier.{{ own.seq }} < new.{{ own.seq }}

        ),

        restated as (

            -- a new version: its whole interval, and all before it when it is the first
            select customer_id, valid_from as restated_from, valid_to as restated_to
            from written where is_new
            union all
            select customer_id, cast(null as timestamp), valid_to
            from first_new
            union all
            -- a re-written one: what it left when its valid_from rose (from its own commit time:
            -- its valid_from was never below it), and all of it when its country may have been
            -- re-filled (a version that did not carry it takes its predecessor's)
            select customer_id, {{ own.source_ts }}, valid_from
            from written where not is_new and {{ own.source_ts }} < valid_from
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
            and (restated.restated_from is null or purchases.purchased_at >= restated.restated_from)
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

customer_versions as (

    -- the versions of these purchases' customers only: a semi join with them (broadcast), so
    -- the history is streamed once rather than shuffled. A customer's first version, when it
    -- is a snapshot read (op R), also holds the purchases before it.
    select
        history.customer_id, history.country_code, history.op, history.valid_from, history.valid_to,
        history.op = 'R' and history.{{ own.seq }} = min(history.{{ own.seq }}) over (partition by history.customer_id)
            as reaches_back
    from {{ ref('customers_history') }} as history
    left semi join purchases
        on purchases.customer_id = history.customer_id

),

versions as (

    -- a delete or a truncation (op D, T) is a version in which the row does not exist: no
    -- customer then
    select * from customer_versions
    where op not in ('D', 'T')

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
        and (versions.reaches_back or purchases.purchased_at >= versions.valid_from)
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
