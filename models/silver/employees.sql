{{ config(**silver_events_config('started_at')) }}

{#-
    One row per (employee_id, started_at), the stream's identity: a re-hire is a new row
    (macros/silver_events.sql). Nested team flattened, enum role lower-cased.
-#}

{% call silver_events(source('bronze', 'employees'), ['employee_id', 'started_at'], 'start_date', 'started_at') %}
        id as employee_id,
        name as employee_name,
        address,
        -- the wrapper keeps "unknown" (null) apart from 0
        employee_age as age,
        start_date as started_at,
        team.name as team_name,
        team.location as team_location,
        lower(role) as role,
{% endcall %}
