{{ config(**cdc_history_config('customer_id', buckets=16)) }}

{#- Every version of every customers row (SCD type 2): macros/cdc_models.sql. Rendered by lakehouse/commands/cdc_models. -#}

{{ cdc_history_model(source('bronze', 'customers'), ref('customers_changelog'), 'customer_id', truncate_when="op = 'T'", transactions=ref('cdc_transactions')) }}
