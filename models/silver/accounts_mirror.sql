{%- set cdc = cdc_mirror_config('account_id') -%}
{{ config(materialized='cdc_mirror', buckets=16, dead_letters=['bronze', 'dead_letters'],
          stream='accounts', **cdc) }}

{#- The accounts table mirrored, deletes as tombstones: macros/cdc_mirror.sql. Read `accounts`. Rendered by lakehouse/commands/cdc_models. -#}

{{ cdc_mirror_model(source('bronze', 'accounts'), ref('accounts_changelog'), cdc) }}
