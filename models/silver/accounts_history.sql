{{ config(**cdc_history_config('account_id', buckets=16)) }}

{#- Every version of every accounts row (SCD type 2): macros/cdc_models.sql. Rendered by lakehouse/commands/cdc_models. -#}

{{ cdc_history_model(source('bronze', 'accounts'), ref('accounts_changelog'), 'account_id') }}
