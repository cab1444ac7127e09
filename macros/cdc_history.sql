{#-
    SCD type 2 history from a CDC changelog: one row per distinct change (version) of a key,
    `valid_from` its commit time at the source, `valid_to` the next version's, `is_current` on
    the last version of a key that still exists. A delete is a version too (op 'D', never
    current), so the history says when a row disappeared and when it came back. Ordered by the
    sequence, never by arrival.

    First run (`existing` none): every change of `changes`.

    Incremental run: `changes` is the increment only. The rows it writes (merged on key and
    sequence, merge-on-read) are the new versions, and the stored versions whose valid_to or
    is_current they change: usually each touched key's open version, which the first new one
    closes. A late change slots in between stored versions: its predecessor gets a new valid_to
    and it takes its successor's valid_from as its own valid_to. The stored versions read are
    those of the touched keys still valid at the key's earliest new change (valid_to null or
    not before it): that is the predecessor of every new version and everything after it,
    because a version's commit time follows its sequence (the source commits in sequence order;
    producers/cdc/oracle.py). Versions before stay as they are, so the history is read for the
    touched keys' recent versions only, and the changelog for the increment only.

    The history has the changelog's columns, in its order, then valid_from, valid_to and
    is_current (its first run creates it so): the two sides of the final union line up by
    position. A column added to the changelog needs a `--full-refresh` of the history.
-#}
{% macro cdc_history_versions(changes, key, sequence_by='_seq', committed_at='_source_ts', existing=none) -%}
, distinct_changes as (

    select
        changes.*,
        -- a change re-sent or re-read by the overlap: one version, the first copy to arrive
        row_number() over (
            partition by changes.{{ key }}, changes.{{ sequence_by }}
            order by changes._ingested_at
        ) as _copy
    from {{ changes }} as changes

),

{% if existing is none %}
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
{% else %}
touched_keys as (

    select {{ key }}, min({{ committed_at }}) as earliest_change
    from distinct_changes
    group by {{ key }}

),

stored_versions as (

    -- the increment is small: Spark broadcasts it and streams the history once
    select stored.*
    from {{ existing }} as stored
    inner join touched_keys
        on touched_keys.{{ key }} = stored.{{ key }}
    where stored.valid_to is null or stored.valid_to >= touched_keys.earliest_change

),

new_versions as (

    select distinct_changes.* except (_copy)
    from distinct_changes
    left anti join stored_versions
        on stored_versions.{{ key }} = distinct_changes.{{ key }}
        and stored_versions.{{ sequence_by }} = distinct_changes.{{ sequence_by }}
    where distinct_changes._copy = 1

),

chain as (

    select
        {{ key }},
        {{ sequence_by }},
        lead({{ committed_at }}) over (partition by {{ key }} order by {{ sequence_by }}) as valid_to,
        lead({{ sequence_by }}) over (partition by {{ key }} order by {{ sequence_by }}) is null
            and op != 'D' as is_current
    from (
        select {{ key }}, {{ sequence_by }}, {{ committed_at }}, op from new_versions
        union all
        select {{ key }}, {{ sequence_by }}, valid_from, op from stored_versions
    ) as links

),

versions as (

    select
        new_versions.*,
        new_versions.{{ committed_at }} as valid_from,
        chain.valid_to,
        chain.is_current
    from new_versions
    inner join chain
        on chain.{{ key }} = new_versions.{{ key }}
        and chain.{{ sequence_by }} = new_versions.{{ sequence_by }}

    union all

    select
        stored_versions.* except (valid_from, valid_to, is_current),
        stored_versions.valid_from,
        chain.valid_to,
        chain.is_current
    from stored_versions
    inner join chain
        on chain.{{ key }} = stored_versions.{{ key }}
        and chain.{{ sequence_by }} = stored_versions.{{ sequence_by }}
    -- only the stored versions the new ones change
    where not (chain.valid_to <=> stored_versions.valid_to and chain.is_current = stored_versions.is_current)

),
{% endif %}

final as (

    select * from versions

)

select * from final
{%- endmacro %}
