{{ config(materialized='cdc_live', unique_key=[[ key_config ]], buckets=[[ buckets ]]) }}

{#- The live [[ table ]] rows: an Iceberg table of the mirror's rows that are not tombstones,
    kept by a MERGE of the mirror's changed keys each run (macros/cdc_live.sql). Written by
    `lakehouse cdc add`. -#}

select * from {{ ref('[[ stream ]]_mirror') }}
