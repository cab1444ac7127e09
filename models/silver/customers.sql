{{ config(materialized='cdc_live', unique_key='customer_id', buckets=16) }}

{#- The live customers: an Iceberg table of customers_mirror's rows that are not tombstones,
    kept by a MERGE of the mirror's changed keys each run (macros/cdc_live.sql). -#}

select * from {{ ref('customers_mirror') }}
