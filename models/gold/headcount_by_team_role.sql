{{ config(materialized='table') }}

{#-
    Employees per team and role. An employee counts once per team and role even when the
    stream holds several start dates for them (re-hires).
-#}

with

employees as (

    select * from {{ ref('employees') }}

),

final as (

    select
        team_name,
        team_location,
        role,
        count(distinct employee_id) as headcount,
        avg(age) as average_age,
        min(started_at) as first_started_at,
        max(started_at) as last_started_at
    from employees
    group by 1, 2, 3

)

select * from final
