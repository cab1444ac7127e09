{%- set own = var('bronze_columns') -%}
{{ config(materialized='view') }}

{#-
    The accounts changelog (AWS DMS, normalized by ingestion): one row per change,
    duplicates and all. The mirror and the history read it, a column renamed or cast here too.

    An update of the primary key (its before-image names another key, bronze's `before_key`)
    is two changes here, as Debezium sends one: the old key ends, a delete at the update's
    `seq` (its columns null: DMS's before-image carries the key only), and the new key's row
    begins, an insert. So the mirror and the history end with the old key gone. Bronze keeps
    one row per Kafka record (docs/ARCHITECTURE.md §6, §9).
    Rendered by lakehouse/commands/cdc_models.
-#}

{#- the bronze columns this view selects by name; the others the source added pass through -#}
{%- set named = ['account_id', 'customer_id', 'account_type', 'balance', 'currency', 'status', 'updated_at'] -%}

with

bronze_changes as (

    select
        *,
        coalesce(op = 'U' and {{ own.before_key }}.account_id <> account_id, false) as _changes_key
    from {{ source('bronze', 'accounts') }}
    -- a Kafka tombstone only tells log compaction to forget the key; the delete before it
    -- is the change. Good rows only: a dead row (its reason set) is a dead letter
    where not {{ own.is_tombstone }} and {{ own.error_code }} is null

),

row_changes as (

    -- one row per change, and a second for an update of the primary key: the delete of the key
    -- it ended. Both come from one read of bronze (the lateral view); a union of two selects
    -- would read the increment twice, every time a model reads this view
    select
        case when _ends_key then {{ own.before_key }}.account_id else account_id end as account_id,
        case when not _ends_key then customer_id end as customer_id,
        case when not _ends_key then account_type end as account_type,
        case when not _ends_key then balance end as balance,
        case when not _ends_key then currency end as currency,
        case when not _ends_key then status end as status,
        case when not _ends_key then updated_at end as updated_at,
        case when _ends_key then 'D' when _changes_key then 'I' else op end as op,
        {{ cdc_lineage_columns() }}
        {{ cdc_added_columns(source('bronze', 'accounts'), named, null_when='_ends_key') }}
    from bronze_changes
    lateral view explode(if(_changes_key, array(false, true), array(false))) key_end as _ends_key

),

final as (

    select
        account_id,
        customer_id,
        account_type,
        -- exact: the source keeps money as two-place decimal text
        cast(balance as decimal(18, 2)) as balance,
        currency,
        status,
        cast(updated_at as timestamp) as updated_at,
        op,
        {{ cdc_lineage_columns() }}
        -- columns the source added since (macros/column_evolution.sql); a column you leave
        -- out above on purpose goes in `except`
        {{ cdc_added_columns(source('bronze', 'accounts'), named, except=[]) }}
    from row_changes

)

select * from final
