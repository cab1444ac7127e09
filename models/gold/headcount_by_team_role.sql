{{ config(materialized='incremental', incremental_strategy='insert_overwrite') }}

{#-
    Employees per team and role. An employee counts once per team and role even when the
    stream holds several start dates for them (re-hires).

    Incremental: a run reads only the silver rows appended since the last run (`_loaded_at`,
    macros/ingested_since_last_run.sql) and adds them to what each row holds. Silver employees
    is append-only, so every measure combines: sums and counts add up (the average is kept as
    `_age_sum` / `_age_count`), first and last start dates take the least and greatest. The
    distinct employees do not add up (a re-hire in the same team and role is counted once):
    each row keeps the exact set of its employee ids as Spark's bitmaps (`_member_bitmaps`:
    one 4 KB bitmap per range of 32,768 ids, bitmap_construct_agg), OR-ed with the new rows'
    bitmaps; `headcount` is the count of set bits, exact, with no read of older silver rows.
    Before this, the model was a `table` that read every employee on every run, the whole
    history (benchmarks/RESULTS.md, dbt_scaling).

    The table is small (a row per team and role), so a run rewrites it whole (insert overwrite
    of an unpartitioned table), which also keeps a null location from splitting a merge key.
    A full refresh computes every row with the same functions over all of silver, so it gives
    the same result (tests/integration/test_incremental_models.py). `_loaded_at` is the newest
    silver stamp counted.
-#}

{%- if is_incremental() -%}
    {{ require_columns(this, ['_member_bitmaps', '_age_sum', '_age_count', '_loaded_at']) }}
{%- endif -%}

with

new_employees as (

    select * from {{ ref('employees') }}
    {% if is_incremental() %}
    where {{ loaded_since_last_run(this, '_loaded_at') }}
    {% endif %}

),

new_members as (

    select
        team_name,
        team_location,
        role,
        bitmap_bucket_number(employee_id) as bucket,
        bitmap_construct_agg(bitmap_bit_position(employee_id)) as bitmap
    from new_employees
    where employee_id is not null
    group by 1, 2, 3, 4

),

new_stats as (

    select
        team_name,
        team_location,
        role,
        sum(age) as age_sum,
        count(age) as age_count,
        min(started_at) as first_started_at,
        max(started_at) as last_started_at,
        max(_loaded_at) as loaded_at
    from new_employees
    group by 1, 2, 3

),

{% if is_incremental() %}
stored_members as (

    select stored.team_name, stored.team_location, stored.role, member.bucket, member.bitmap
    from {{ this }} as stored
    lateral view inline(stored._member_bitmaps) member as bucket, bitmap

),

stats as (

    select
        team_name,
        team_location,
        role,
        sum(age_sum) as age_sum,
        sum(age_count) as age_count,
        min(first_started_at) as first_started_at,
        max(last_started_at) as last_started_at,
        max(loaded_at) as loaded_at
    from (
        select
            team_name, team_location, role, _age_sum as age_sum, _age_count as age_count,
            first_started_at, last_started_at, _loaded_at as loaded_at
        from {{ this }}
        union all
        select * from new_stats
    )
    group by 1, 2, 3

),
{% else %}
stats as (

    select * from new_stats

),
{% endif %}

members as (

    select
        team_name,
        team_location,
        role,
        sum(bitmap_count(bitmap)) as headcount,
        -- sorted by bucket, so a rewrite of an unchanged row writes the same value
        sort_array(collect_list(struct(bucket, bitmap))) as member_bitmaps
    from (
        select team_name, team_location, role, bucket, bitmap_or_agg(bitmap) as bitmap
        from (
            select * from new_members
            {% if is_incremental() %}
            union all
            select * from stored_members
            {% endif %}
        )
        group by 1, 2, 3, 4
    )
    group by 1, 2, 3

),

final as (

    select
        stats.team_name,
        stats.team_location,
        stats.role,
        coalesce(members.headcount, 0) as headcount,
        -- as avg(age): the mean of the known ages, null when none is known
        cast(stats.age_sum as double) / nullif(stats.age_count, 0) as average_age,
        stats.first_started_at,
        stats.last_started_at,
        members.member_bitmaps as _member_bitmaps,
        stats.age_sum as _age_sum,
        stats.age_count as _age_count,
        stats.loaded_at as _loaded_at
    from stats
    left join members
        on members.team_name <=> stats.team_name
        and members.team_location <=> stats.team_location
        and members.role <=> stats.role

)

select * from final
