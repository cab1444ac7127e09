{{ config(**cdc_transactions_config()) }}

{#- The source transactions of the `lakehouse` Debezium connector, one row each: what has arrived of
    it, and whether it is published (its changes applied by the CDC models that wait for whole
    transactions, `customers`' here): macros/cdc_transactions.sql. -#}

{{ cdc_transactions_model(source('bronze', 'cdc_transactions'), [(source('bronze', 'customers'), 'customers')]) }}
