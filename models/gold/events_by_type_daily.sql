{%- set own = var('bronze_columns') -%}
{{
    config(
        materialized='incremental',
        incremental_strategy='merge',
        unique_key=['event_date', 'event_type'],
        tblproperties=merge_on_read_properties(),
        pre_hook="{{ ensure_merge_on_read(this) }}",
    )
}}

{#-
    Events per type per day. An increment recomputes whole days: only the days that received
    silver rows since the last run, so late events correct their own day. Those rows are the
    ones silver runs appended after the newest run this table counted (`_loaded_at` against
    `_last_loaded_at`, macros/ingested_since_last_run.sql): exact, where silver's
    `ingested_at` would miss a late bronze commit stamped hours before the last run, which
    silver reads all the same. The days are found once, as literals (macros/touched_days.sql),
    and silver, which is partitioned by the event day, is read for those days only. A day's rows
    never disappear (silver only grows), so a MERGE of the recomputed days is exact.
-#}

{%- if is_incremental() -%}
    {{ require_columns(this, ['_last_loaded_at']) }}
    {%- set touched = event_days_filter(ref('user_events'), 'event_at',
                                        loaded_since_last_run(this, '_last_loaded_at'), 'event_at') -%}
{%- endif -%}

with

silver_user_events as (

    select * from {{ ref('user_events') }}
    {% if is_incremental() %}
    where {{ touched }}
    {% endif %}

),

daily as (

    select
        to_date(event_at) as event_date,
        event_type,
        count(*) as event_count,
        count(distinct customer_id) as customer_count,
        count(distinct session_id) as session_count,
        max({{ own.ingested_at }}) as last_ingested_at,
        max(_loaded_at) as _last_loaded_at
    from silver_user_events
    group by 1, 2

),

final as (

    select * from daily

)

select * from final
