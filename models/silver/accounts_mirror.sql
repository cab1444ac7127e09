{%- set own = var('bronze_columns') -%}
{%- set cdc = {
    'unique_key': 'account_id',
    'sequence_by': own.seq,
    'delete_when': "op = 'D'",
    'except_columns': [own.kafka_topic],
} -%}

{{ config(materialized='cdc_mirror', buckets=16, dead_letters=['bronze', 'dead_letters'],
          stream='accounts', **cdc) }}

{#-
    The accounts table of the source database, mirrored from its AWS DMS changelog with the
    same macro as customers: DMS's sequence is (commit time, log position, transaction,
    record) where Debezium's is the LSN, and nothing else differs. Users and gold read the live table
    `accounts`. Semantics and configuration: macros/cdc_mirror.sql.
-#}

{%- set increment = bronze_increment(this, source('bronze', 'accounts')) -%}

with

changelog as (

    select * from {{ ref('accounts_changelog') }}
    {% if increment %}
    where {{ increment }}
    {% endif %}

)

{{ cdc_mirror_changes('changelog', this, is_incremental(), columns=cdc_changelog_columns(ref('accounts_changelog')),
                      **cdc) }}
