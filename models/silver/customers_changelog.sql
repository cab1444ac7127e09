{%- set own = var('bronze_columns') -%}
{{ config(materialized='view') }}

{#-
    The customers changelog (Debezium, normalized by ingestion): one row per change,
    duplicates and all. The mirror and the history read it, a column renamed or cast here too.
    Rendered by lakehouse/commands/cdc_models.
-#}

{#- the bronze columns this view selects by name; the others the source added pass through -#}
{%- set named = ['customer_id', 'name', 'email', 'country', 'city', 'tier', 'created_at', 'updated_at'] -%}

with

bronze_changes as (

    select * from {{ source('bronze', 'customers') }}
    -- a Kafka tombstone only tells log compaction to forget the key; the delete before it
    -- is the change. Good rows only: a dead row (its reason set) is a dead letter
    where not {{ own.is_tombstone }} and {{ own.error_code }} is null
      -- whole source transactions only: a change of a transaction not published yet (its END
      -- or another of its changes still missing, or an earlier one's) waits (macros/cdc_transactions.sql)
      and {{ transaction_published(ref('cdc_transactions')) }}

),

final as (

    select
        customer_id,
        name as customer_name,
        email,
        country as country_code,
        city,
        tier,
        cast(created_at as timestamp) as created_at,
        cast(updated_at as timestamp) as updated_at,
        op,
        {{ cdc_lineage_columns() }},
        -- the columns the change did not carry (Debezium's placeholder; null in them, ARCHITECTURE §9),
        -- by silver's names: the mirror and the history carry them by these names
        transform({{ own.unavailable }}, field -> case field
                                                    when 'name' then 'customer_name'
                                                    when 'country' then 'country_code'
                                                    else field end) as {{ own.unavailable }}
        -- columns the source added since (macros/column_evolution.sql); a column you leave
        -- out above on purpose goes in `except`
        {{ cdc_added_columns(source('bronze', 'customers'), named, except=[]) }}
    from bronze_changes

)

select * from final
