{%- set cdc = cdc_mirror_config('customer_id', truncate_when="op = 'T'") -%}
{{ config(materialized='cdc_mirror', buckets=16, dead_letters=['bronze', 'dead_letters'],
          stream='customers', **cdc) }}

{#- The customers table mirrored, deletes as tombstones: macros/cdc_mirror.sql. Read `customers`. Rendered by lakehouse/commands/cdc_models. -#}

{{ cdc_mirror_model(source('bronze', 'customers'), ref('customers_changelog'), cdc, transactions=ref('cdc_transactions')) }}
