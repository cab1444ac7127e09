{%- set own = var('bronze_columns') -%}
{{ config(**silver_events_config('purchased_at')) }}

{#-
    One row per transaction_id (macros/silver_events.sql), whatever Avro writer schema (v1, v2)
    sent it; v1 rows have no payment method.
-#}

{% call silver_events(source('bronze', 'purchases'), ['transaction_id'], 'transaction_time', 'purchased_at') %}
        transaction_id,
        customer_id,
        product_id,
        store_id,
        quantity,
        -- exact amounts from here on: the producer rounds to cents, a double only carries it
        cast(round(unit_price, 2) as decimal(12, 2)) as unit_price,
        cast(round(amount, 2) as decimal(14, 2)) as amount,
        upper(currency) as currency,
        transaction_time as purchased_at,
        lower(payment_method) as payment_method,
        {{ own.schema_id }},
{% endcall %}
