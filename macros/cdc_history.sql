{#-
    SCD type 2 history from a CDC changelog: one row per distinct change (version) of a key,
    `valid_from` its commit time at the source, `valid_to` the next version's, `is_current` on
    the last version of a key that still exists. A delete is a version too (op 'D', never
    current), so the history says when a row disappeared and when it came back.

    Ordered by the sequence, never by arrival. The caller passes every change of the keys it
    rebuilds (an incremental model: of the keys its increment touched), so a late change slots
    in between its neighbours and their valid_to are recomputed; merged on (key, sequence).
-#}
{% macro cdc_history_versions(changes, key, sequence_by='_seq', committed_at='_source_ts') -%}
, distinct_changes as (

    select
        changes.*,
        row_number() over (
            partition by changes.{{ key }}, changes.{{ sequence_by }}
            order by changes._ingested_at
        ) as _copy
    from {{ changes }} as changes

),

versions as (

    select
        distinct_changes.* except (_copy),
        {{ committed_at }} as valid_from,
        lead({{ committed_at }}) over (
            partition by {{ key }} order by {{ sequence_by }}
        ) as valid_to,
        lead({{ sequence_by }}) over (
            partition by {{ key }} order by {{ sequence_by }}
        ) is null and op != 'D' as is_current
    from distinct_changes
    where _copy = 1

),

final as (

    select * from versions

)

select * from final
{%- endmacro %}
