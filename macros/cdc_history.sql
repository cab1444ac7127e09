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
    is_current (its first run creates it so): the stored and the new versions line up by
    position. A column added to the changelog needs a `--full-refresh` of the history.

    `key` is the source's primary key: a column or a list of columns (a composite key). The
    model's unique_key is the key's columns and the sequence.
-#}
{% macro cdc_history_versions(changes, key, sequence_by='_seq', committed_at='_source_ts', existing=none) -%}
{%- set keys = [key] if key is string else key -%}
{%- set key_list = keys | join(', ') -%}
{%- set window = 'partition by ' ~ key_list ~ ' order by ' ~ sequence_by -%}
{% if existing is not none %}
, touched_keys as (

    select {{ key_list }}, min({{ committed_at }}) as earliest_change
    from {{ changes }}
    group by {{ key_list }}

),

stored_versions as (

    -- the increment is small: Spark broadcasts it and streams the history once
    select stored.*
    from {{ existing }} as stored
    inner join touched_keys
        on {% for k in keys %}touched_keys.{{ k }} = stored.{{ k }}{{ ' and ' if not loop.last }}{% endfor %}
    where stored.valid_to is null or stored.valid_to >= touched_keys.earliest_change

)
{% endif %}

, links as (

    select
        changes.*,
        {{ committed_at }} as valid_from,
        cast(null as timestamp) as _stored_valid_to,
        cast(null as boolean) as _stored_is_current,
        false as _is_stored
    from {{ changes }} as changes
    {% if existing is not none %}

    union all

    select
        stored_versions.* except (valid_from, valid_to, is_current),
        stored_versions.valid_from,
        stored_versions.valid_to,
        stored_versions.is_current,
        true
    from stored_versions
    {% endif %}

),

distinct_links as (

    -- one row per (key, sequence): the stored version when the history has it, else the
    -- first copy of the change to arrive (a change re-sent, or re-read by the overlap window)
    select
        links.*,
        row_number() over (
            partition by {{ key_list }}, {{ sequence_by }}
            order by _is_stored desc, _ingested_at
        ) as _copy
    from links

),

versions as (

    select
        distinct_links.* except (_copy),
        lead(valid_from) over ({{ window }}) as valid_to,
        lead({{ sequence_by }}) over ({{ window }}) is null and op != 'D' as is_current
    from distinct_links
    where _copy = 1

),

final as (

    select * except (_stored_valid_to, _stored_is_current, _is_stored)
    from versions
    -- the new versions, and the stored ones whose end or currency they change
    where not _is_stored
        or not (valid_to <=> _stored_valid_to and is_current = _stored_is_current)

)

select * from final
{%- endmacro %}
