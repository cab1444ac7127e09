{%- set own = var('bronze_columns') -%}
{%- set cdc = {
    'unique_key': 'customer_id',
    'sequence_by': own.seq,
    'delete_when': "op = 'D'",
    'except_columns': [own.kafka_topic],
    'truncate_when': "op = 'T'",
} -%}

{{ config(materialized='cdc_mirror', buckets=16, dead_letters=['bronze', 'dead_letters'],
          stream='customers', **cdc) }}

{#-
    The customers table of the source database, mirrored from its Debezium changelog: one row
    per customer_id, deleted customers kept as tombstones (_is_deleted). Users and gold read the
    live table `customers`. Semantics and configuration: macros/cdc_mirror.sql.
-#}

{%- set increment = bronze_increment(this, source('bronze', 'customers')) -%}

with

changelog as (

    select * from {{ ref('customers_changelog') }}
    {% if increment %}
    where {{ increment }}
    {% endif %}

)

{{ cdc_mirror_changes('changelog', this, is_incremental(), columns=cdc_changelog_columns(ref('customers_changelog')),
                      **cdc) }}
