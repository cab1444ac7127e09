{{ config(materialized='cdc_live', unique_key='account_id', buckets=16) }}

{#- The live accounts rows, the mirror's but tombstones: macros/cdc_live.sql. Rendered by lakehouse/commands/cdc_models. -#}

select * from {{ ref('accounts_mirror') }}
