{#-
    The select of a CDC mirror model (materialization: macros/cdc_mirror.sql): the rows an
    increment writes. Per key the latest change of the increment by the sequence; on an
    incremental run only changes newer than the row the mirror holds. `changelog` is a CTE or
    relation of changes, `existing` the mirror (this), `incremental` is_incremental().
    The settings come as arguments, not from config: a dbt unit test renders the model with its
    own config, so the model passes one dict to config() and here.

    The property test (tests/integration/test_cdc_mirror_property.py) runs it, with the
    materialization, through dbt against random histories and delivery orders.

    `truncate_when` (optional, e.g. "op = 'T'") names the changes that empty the whole table: they
    carry no key. The latest one becomes the mirror's truncation marker, its one row with a null
    key (a tombstone: the live table leaves it out); a key's changes not newer than the latest truncation
    the run knows (the increment's, or the stored marker's) are dropped, so no change from before
    a TRUNCATE brings a row back. The materialization then turns every live row older than a new
    marker into a tombstone at the truncation's sequence (macros/cdc_mirror.sql).

    `columns` (optional; the model passes cdc_changelog_columns(ref(...))): the changelog's
    columns in order. When one is bronze's `unavailable` (Debezium: the columns a change did not carry,
    an unchanged TOASTed PostgreSQL value; ARCHITECTURE §9, "Unavailable values"), each such
    column of the winning change takes the value of the latest earlier change of the increment
    that had it, if newer than the row the mirror holds; else it stays null, and the MERGE keeps
    the mirror's value.
-#}

{% macro cdc_mirror_changes(changelog, existing, incremental, unique_key, delete_when,
                            sequence_by=none, except_columns=[], truncate_when=none, columns=[]) -%}
{#- The steps below, in order; each is a CTE (or two) read by the next, named for what it holds,
    and each has dbt unit tests of its own (tests/dbt_macro_steps). -#}
    {%- set sequence_by = sequence_by or var('bronze_columns').seq -%}
    {%- set keys = [unique_key] if unique_key is string else (unique_key or []) -%}
    {%- if execute and not keys -%}
        {% do exceptions.raise_compiler_error("cdc_mirror: set unique_key (the mirrored table's primary key)") %}
    {%- endif -%}
    {%- if execute and not delete_when -%}
        {% do exceptions.raise_compiler_error("cdc_mirror: set delete_when (e.g. \"op = 'D'\"), the changes that delete their key") %}
    {%- endif -%}
    {%- set carried = cdc_carried_columns(columns, keys + [sequence_by]) -%}
    {%- set dropped = ['_change_rank'] + (['_stored_seq'] if incremental and not carried else [])
                      + ([except_columns] if except_columns is string else except_columns) -%}
{{ cdc_mirror_latest_changes(changelog, keys, sequence_by, delete_when, truncate_when, columns, carried) }}
{%- if truncate_when %}
{{ cdc_mirror_truncations(existing, keys, sequence_by, incremental) }}
{%- endif %}
{%- if incremental %}
{{ cdc_mirror_matched_changes(existing, keys, sequence_by) }}
{%- endif %}
{{ cdc_mirror_newer_changes('matched_changes' if incremental else 'winning_changes', keys, sequence_by,
                            incremental, truncate_when) }}
{%- if carried %}
{{ cdc_mirror_carried_changes(columns, carried, incremental) }}
{%- endif %}
{{ cdc_mirror_written_changes('carried_changes' if carried else 'mirror_changes', dropped, run_stamp(existing)) }}

select * from final
{%- endmacro %}


{#- Step 1: `winning_changes`, per key of `changelog` its latest change by the sequence (the first
    copy to arrive of it), with `_is_deleted` (`delete_when`, or `truncate_when`); a column a
    change may not carry (`carried`, of the changelog's `columns`) as `_filled_<column>`, the
    value and sequence of the key's latest change that had it. -#}
{% macro cdc_mirror_latest_changes(changelog, keys, sequence_by, delete_when, truncate_when=none, columns=[],
                                   carried=[]) -%}
{%- set own = var('bronze_columns') -%}
, latest_changes as (

    select
        {% if carried -%}
        {%- for column in columns %}
        {% if column in carried -%}
        -- not carried by the change: the latest earlier change's of the increment that had it
        -- (and that change's sequence, below)
        last(case when not array_contains(coalesce(changes.{{ own.unavailable }}, array()), '{{ column }}')
                  then named_struct('value', changes.{{ column }}, 'seq', changes.{{ sequence_by }}) end, true) over (
            partition by {% for key in keys %}changes.{{ key }}{{ ', ' if not loop.last }}{% endfor %}
            order by changes.{{ sequence_by }} rows between unbounded preceding and current row
        ) as _filled_{{ column }},
        {%- else -%}
        changes.{{ column }},
        {%- endif %}
        {%- endfor %}
        {%- else -%}
        changes.*,
        {%- endif %}
        ({{ delete_when }}){% if truncate_when %} or ({{ truncate_when }}){% endif %} as _is_deleted,
        -- duplicates share their sequence: they are the same change, and the first copy to
        -- arrive wins (cdc_copy_order), as on an incremental run, which drops later copies
        -- against the stored row: a full refresh keeps the same Kafka coordinates and arrival
        row_number() over (
            partition by {% for key in keys %}changes.{{ key }}{{ ', ' if not loop.last }}{% endfor %}
            order by changes.{{ sequence_by }} desc
            {%- if own.ingested_at in columns %}, {{ cdc_copy_order(columns, 'changes.') }}{% endif %}
        ) as _change_rank
    from {{ changelog }} as changes

),

winning_changes as (

    select * from latest_changes where _change_rank = 1

)
{%- endmacro %}


{#- Step 2, with `truncate_when`: `truncations`, one row: the sequence of the latest truncation of
    `winning_changes` (`new_truncation`: its change without a key) and, on an `incremental` run,
    of the mirror `existing`'s marker (`stored_truncation`). -#}
{% macro cdc_mirror_truncations(existing, keys, sequence_by, incremental) -%}
, truncations as (

    -- the stored marker is the only row of the bucket(null) partition: a read of one small file
    select
        (select max({{ sequence_by }}) from winning_changes where {{ keys[0] }} is null) as new_truncation,
        {% if incremental -%}
        (select max({{ sequence_by }}) from {{ existing }} where {{ keys[0] }} is null)
        {%- else %} null {%- endif %} as stored_truncation

)
{%- endmacro %}


{#- Step 3, on an incremental run: `matched_changes`, each of `winning_changes` with the sequence
    of its key's row in the mirror `existing` (`_stored_seq`; null: none yet). -#}
{% macro cdc_mirror_matched_changes(existing, keys, sequence_by) -%}
, matched_changes as (

    -- each change beside the sequence of its key's row in the mirror (null: none yet). One
    -- join, the mirror's key and sequence only: the (small) increment on the outer side of a
    -- right join, so Spark broadcasts it and streams the mirror once, never shuffling it. (A
    -- CTE is read once per use: a semi join to find the stored rows and joins back to them
    -- read the increment and the mirror once each per join)
    select winning_changes.*, mirror.{{ sequence_by }} as _stored_seq
    from (select {% for key in keys %}{{ key }}, {% endfor %}{{ sequence_by }} from {{ existing }}) as mirror
    right join winning_changes
        on {% for key in keys %}mirror.{{ key }} = winning_changes.{{ key }}{{ ' and ' if not loop.last }}{% endfor %}

)
{%- endmacro %}


{#- Step 4: `mirror_changes`, the changes of `changed` (a CTE: `winning_changes`, or on an
    `incremental` run `matched_changes`) to write: newer than the mirror's row of their key, and
    (with `truncate_when`) than every truncation, a truncation itself unless the mirror knows it. -#}
{% macro cdc_mirror_newer_changes(changed, keys, sequence_by, incremental, truncate_when=none) -%}
, mirror_changes as (

    select {{ changed }}.*
    from {{ changed }}
    {% if truncate_when %}
    cross join truncations
    {% endif %}
    where true
    {% if incremental %}
    -- a change not newer than what the mirror holds (a re-read, a duplicate, a late older
    -- change, including one older than a tombstone) is dropped: it cannot resurrect a key
    and coalesce({{ changed }}._stored_seq < {{ changed }}.{{ sequence_by }}, true)
    {% endif %}
    {% if truncate_when %}
    and case when {{ changed }}.{{ keys[0] }} is null
        -- the increment's latest truncation, unless the mirror knows it (or a later one) already
        then truncations.stored_truncation is null
             or {{ changed }}.{{ sequence_by }} > truncations.stored_truncation
        -- a key's change after every truncation
        else coalesce({{ changed }}.{{ sequence_by }}
                      > greatest(truncations.new_truncation, truncations.stored_truncation), true)
        end
    {% endif %}

)
{%- endmacro %}


{#- Step 5, when a change may not carry a column (`carried`, of the changelog's `columns`):
    `carried_changes`, the `mirror_changes` with each such column its filled value, or null (the
    MERGE then keeps the mirror's) when that came from a change not newer than the mirror's row
    (on an `incremental` run). -#}
{% macro cdc_mirror_carried_changes(columns, carried, incremental) -%}
, carried_changes as (

    -- a column filled from a change not newer than the row the mirror holds (re-read, or
    -- replayed from the dead letters) is older than the mirror's value: null, so the MERGE
    -- keeps the mirror's
    select
        {%- for column in columns %}
        {% if column in carried -%}
        {% if incremental -%}
        case when mirror_changes._stored_seq >= mirror_changes._filled_{{ column }}.seq then null
             else mirror_changes._filled_{{ column }}.value end
        {%- else -%}
        mirror_changes._filled_{{ column }}.value
        {%- endif %} as {{ column }},
        {%- else -%}
        mirror_changes.{{ column }},
        {%- endif %}
        {%- endfor %}
        mirror_changes._is_deleted,
        mirror_changes._change_rank
    from mirror_changes

)
{%- endmacro %}


{#- Step 6: `final`, the rows of `changes` (a CTE) as the mirror stores them: without the
    `dropped` columns, stamped `loaded_at` (`_loaded_at`). -#}
{% macro cdc_mirror_written_changes(changes, dropped, loaded_at) -%}
, final as (

    -- `_loaded_at`: the run stamp (macros/run_stamp.sql: one value per run, later than every
    -- stamp the mirror holds, whatever the host's clock). Gold finds the keys changed since it
    -- last looked by it, exactly: bronze's `ingested_at` is bronze's clock, and a late bronze commit
    -- applied now can carry one hours old
    select * except ({{ dropped | join(', ') }}), {{ loaded_at }} as _loaded_at
    from {{ changes }}

)
{%- endmacro %}


{#- The columns of a changelog relation, in order: for cdc_mirror_changes and
    cdc_history_versions, which fill the columns a change did not carry (`unavailable`). None
    when they cannot be known: at parse time, or in a dbt unit test (refs are fixtures there:
    a unit test that needs them overrides this macro with its fixture's columns). -#}
{% macro cdc_changelog_columns(relation) -%}
    {%- if not execute or relation is string or (relation | string).startswith('__dbt__cte__')
           or not relation_exists(relation) -%}
        {{ return([]) }}
    {%- endif -%}
    {{ return(adapter.get_columns_in_relation(relation) | map(attribute='name') | list) }}
{%- endmacro %}


{#- The columns of a changelog whose value a change may not carry: when it has bronze's
    `unavailable`, every column of the row but its key (replica identity: always sent). The
    changelog's own columns (the var `bronze_columns`: op and the `_`-prefixed) are not the row's. -#}
{% macro cdc_carried_columns(columns, keys) -%}
    {%- if var('bronze_columns').unavailable not in columns -%}{{ return([]) }}{%- endif -%}
    {%- set carried = [] -%}
    {%- for column in columns -%}
        {%- if column not in keys and column != 'op' and not column.startswith('_') -%}{%- do carried.append(column) -%}{%- endif -%}
    {%- endfor -%}
    {{ return(carried) }}
{%- endmacro %}
