{{ config(materialized='view') }}

{#- The live accounts: the mirror without its tombstones. -#}

with

mirror as (

    select * from {{ ref('accounts_mirror') }}

),

final as (

    select * except (_is_deleted)
    from mirror
    where not _is_deleted

)

select * from final
