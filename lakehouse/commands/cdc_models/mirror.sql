{%- set own = var('bronze_columns') -%}
{%- set cdc = {
    'unique_key': [[ key_config ]],
    'sequence_by': own.seq,
    'delete_when': "op = 'D'",
    'except_columns': [own.kafka_topic],
    'truncate_when': "op = 'T'",
} -%}

{{ config(materialized='cdc_mirror', buckets=[[ buckets ]], dead_letters=['bronze', 'dead_letters'],
          stream='[[ stream ]]', **cdc) }}

{#-
    The [[ table ]] table of the source database, mirrored from its changelog: one row per key,
    deleted rows kept as tombstones (_is_deleted). Read the live table `[[ stream ]]`.
    Semantics and configuration: macros/cdc_mirror.sql. Written by `lakehouse cdc add`.
-#}

with

changelog as (

    select * from {{ ref('[[ stream ]]_changelog') }}
    {% if is_incremental() %}
    where {{ ingested_since_last_run(this) }}
    {% endif %}

)

{{ cdc_mirror_changes('changelog', this, is_incremental(), columns=cdc_changelog_columns(ref('[[ stream ]]_changelog')),
                      **cdc) }}
