{{ config(materialized='cdc_live', unique_key='customer_id', buckets=16) }}

{#- The live customers rows, the mirror's but tombstones: macros/cdc_live.sql. Rendered by lakehouse/commands/cdc_models. -#}

select * from {{ ref('customers_mirror') }}
