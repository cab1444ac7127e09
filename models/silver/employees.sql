{%- set own = var('bronze_columns') -%}
{{
    config(
        materialized='incremental',
        incremental_strategy='append',
        partition_by=['days(started_at)'],
        on_schema_change='append_new_columns',
        tblproperties=clustered_write_properties(),
    )
}}

{#-
    One row per (employee_id, started_at), the stream's identity: a re-hire is a new row
    (macros/first_occurrences.sql). Nested team flattened, enum role lower-cased. The identity
    holds the partition day, so the increment is compared with the stored rows of its own
    start days only (the reasoning of user_events.sql). `_loaded_at`: as user_events.
-#}

{%- set increment = bronze_increment(this, source('bronze', 'employees')) -%}
{%- set loaded_at = run_stamp(this) -%}

with

bronze_employees as (

    select * from {{ source('bronze', 'employees') }}
    -- good rows only: a dead row (null decoded columns, its reason set) is a dead letter
    where {{ own.error_code }} is null
    {% if is_incremental() %}
    and {{ increment }}
    {% endif %}

),

renamed as (

    select
        id as employee_id,
        name as employee_name,
        address,
        -- the wrapper keeps "unknown" (null) apart from 0
        employee_age as age,
        start_date as started_at,
        team.name as team_name,
        team.location as team_location,
        lower(role) as role,
        {{ own.kafka_topic }},
        {{ own.kafka_partition }},
        {{ own.kafka_offset }},
        {{ own.kafka_timestamp }},
        {{ own.ingested_at }},
        {{ loaded_at }} as _loaded_at
    from bronze_employees

)

{{ first_occurrences('renamed', ['employee_id', 'started_at'], this, is_incremental(),
                     existing_filter=event_days_filter(source('bronze', 'employees'), 'start_date', increment,
                                                       'started_at') if is_incremental()) }}
