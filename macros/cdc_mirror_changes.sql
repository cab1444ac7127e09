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
    key (a tombstone: the live view hides it); a key's changes not newer than the latest truncation
    the run knows (the increment's, or the stored marker's) are dropped, so no change from before
    a TRUNCATE brings a row back. The materialization then turns every live row older than a new
    marker into a tombstone at the truncation's sequence (macros/cdc_mirror.sql).
-#}

{% macro cdc_mirror_changes(changelog, existing, incremental, unique_key, delete_when,
                            sequence_by='_seq', except_columns=[], truncate_when=none) -%}
    {%- set keys = [unique_key] if unique_key is string else (unique_key or []) -%}
    {%- if execute and not keys -%}
        {% do exceptions.raise_compiler_error("cdc_mirror: set unique_key (the mirrored table's primary key)") %}
    {%- endif -%}
    {%- if execute and not delete_when -%}
        {% do exceptions.raise_compiler_error("cdc_mirror: set delete_when (e.g. \"op = 'D'\"), the changes that delete their key") %}
    {%- endif -%}
    {%- set dropped = ['_change_rank'] + ([except_columns] if except_columns is string else except_columns) -%}
, latest_changes as (

    select
        changes.*,
        ({{ delete_when }}){% if truncate_when %} or ({{ truncate_when }}){% endif %} as _is_deleted,
        -- duplicates share their sequence, so any one of them may win: they are the same change
        row_number() over (
            partition by {% for key in keys %}changes.{{ key }}{{ ', ' if not loop.last }}{% endfor %}
            order by changes.{{ sequence_by }} desc
        ) as _change_rank
    from {{ changelog }} as changes

),

winning_changes as (

    select * from latest_changes where _change_rank = 1

),

{% if truncate_when %}
truncations as (

    -- the stored marker is the only row of the bucket(null) partition: a read of one small file
    select
        (select max({{ sequence_by }}) from winning_changes where {{ keys[0] }} is null) as new_truncation,
        {% if incremental -%}
        (select max({{ sequence_by }}) from {{ existing }} where {{ keys[0] }} is null)
        {%- else %} null {%- endif %} as stored_truncation

),
{% endif %}

{% if incremental %}
stored_rows as (

    -- the mirror's rows of the keys the increment changes, key and sequence only. Written as
    -- a semi join with the (small) increment so Spark broadcasts the increment and streams the
    -- mirror once, instead of shuffling the whole mirror into an anti join
    select {% for key in keys %}mirror.{{ key }}, {% endfor %}mirror.{{ sequence_by }}
    from {{ existing }} as mirror
    left semi join winning_changes
        on {% for key in keys %}winning_changes.{{ key }} = mirror.{{ key }}{{ ' and ' if not loop.last }}{% endfor %}

),
{% endif %}

mirror_changes as (

    select winning_changes.*
    from winning_changes
    {% if incremental %}
    -- a change not newer than what the mirror holds (a re-read, a duplicate, a late older
    -- change, including one older than a tombstone) is dropped: it cannot resurrect a key
    left anti join stored_rows as mirror
        on {% for key in keys %}mirror.{{ key }} = winning_changes.{{ key }} and {% endfor -%}
           mirror.{{ sequence_by }} >= winning_changes.{{ sequence_by }}
    {% endif %}
    {% if truncate_when %}
    cross join truncations
    where case when winning_changes.{{ keys[0] }} is null
        -- the increment's latest truncation, unless the mirror knows it (or a later one) already
        then truncations.stored_truncation is null
             or winning_changes.{{ sequence_by }} > truncations.stored_truncation
        -- a key's change after every truncation
        else coalesce(winning_changes.{{ sequence_by }}
                      > greatest(truncations.new_truncation, truncations.stored_truncation), true)
        end
    {% endif %}

),

final as (

    -- `_loaded_at`: when the dbt run wrote the row (one value per run, later for every later
    -- run). Gold finds the keys changed since it last looked by it, exactly: `_ingested_at`
    -- is bronze's clock, and a late bronze commit applied now can carry one hours old
    select * except ({{ dropped | join(', ') }}), current_timestamp() as _loaded_at
    from mirror_changes

)

select * from final
{%- endmacro %}
