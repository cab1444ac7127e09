{{ config(materialized='cdc_live', unique_key='account_id', buckets=16) }}

{#- The live accounts: an Iceberg table of accounts_mirror's rows that are not tombstones,
    kept by a MERGE of the mirror's changed keys each run (macros/cdc_live.sql). -#}

select * from {{ ref('accounts_mirror') }}
