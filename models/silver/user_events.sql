{%- set own = var('bronze_columns') -%}
{{ config(**silver_events_config('event_at')) }}

{#-
    One row per event_id (macros/silver_events.sql); late events are kept. Each run reads only
    the bronze files committed since the snapshot the last run read (macros/ingested_since_last_run.sql,
    "Exact increments"), and compares them with the stored rows of their own event days only
    (macros/touched_days.sql): exact, not a window, so a late event of last year is compared
    with last year's day, and the read stays the size of the days touched.
-#}

{% call silver_events(source('bronze', 'user_events'), ['event_id'], 'event_timestamp', 'event_at') %}
        event_id,
        customer_id,
        session_id,
        lower(event_type) as event_type,
        event_timestamp as event_at,
        page,
        device,
        cast(duration_ms as int) as duration_ms,
        {{ own.rescued }},
{% endcall %}
