{{ config(materialized='view') }}

{#- The live customers: the mirror without its tombstones. -#}

with

mirror as (

    select * from {{ ref('customers_mirror') }}

),

final as (

    select * except (_is_deleted)
    from mirror
    where not _is_deleted

)

select * from final
