{{ config(materialized='view') }}

{#-
    The accounts changelog (AWS DMS, normalized by ingestion) with silver's types and names:
    one row per change of one row, duplicates and all. The mirror and the history read it.

    An update of the primary key (its before-image names another key, bronze's `_before_key`)
    is two changes here, as Debezium sends one: the old key ends, a delete at the update's
    `_seq` (its columns null: DMS's before-image carries the key only), and the new key's row
    begins, an insert. So the mirror and the history end with the old key gone. Bronze keeps
    one row per Kafka record (docs/ARCHITECTURE.md §6, §9).
-#}

{#- the bronze columns this view selects by name; the others the source added pass through -#}
{%- set named = ['account_id', 'customer_id', 'account_type', 'balance', 'currency', 'status', 'updated_at'] -%}

with

bronze_accounts as (

    select
        *,
        coalesce(op = 'U' and _before_key.account_id <> account_id, false) as _changes_key
    from {{ source('bronze', 'accounts') }}
    -- a Kafka tombstone only tells log compaction to forget the key; the delete before it
    -- is the change. Good rows only: a dead row (its reason set) is a dead letter
    where not _is_tombstone and _error_code is null

),

row_changes as (

    select
        account_id,
        customer_id,
        account_type,
        balance,
        currency,
        status,
        updated_at,
        case when _changes_key then 'I' else op end as op,
        _seq,
        _source_ts,
        _ingested_at,
        _kafka_topic,
        _kafka_partition,
        _kafka_offset
        {{ cdc_added_columns(source('bronze', 'accounts'), named) }}
    from bronze_accounts

    union all

    -- the key an update of the primary key ended
    select
        _before_key.account_id as account_id,
        null as customer_id,
        null as account_type,
        null as balance,
        null as currency,
        null as status,
        null as updated_at,
        'D' as op,
        _seq,
        _source_ts,
        _ingested_at,
        _kafka_topic,
        _kafka_partition,
        _kafka_offset
        {{ cdc_added_columns(source('bronze', 'accounts'), named, as_null=true) }}
    from bronze_accounts
    where _changes_key

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
        _seq,
        _source_ts,
        _ingested_at,
        _kafka_topic,
        _kafka_partition,
        _kafka_offset
        -- columns the source added since (macros/column_evolution.sql)
        {{ cdc_added_columns(source('bronze', 'accounts'), named) }}
    from row_changes

)

select * from final
