{{ config(materialized='view') }}

{#- The live [[ table ]] rows: the mirror without its tombstones. Written by `lakehouse cdc add`. -#}

with

mirror as (

    select * from {{ ref('[[ stream ]]_mirror') }}

),

final as (

    select * except (_is_deleted)
    from mirror
    where not _is_deleted

)

select * from final
