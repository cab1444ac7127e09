{#-
    Deduplication of an event stream by its identity: the first occurrence wins, "first" by
    Kafka timestamp, then partition and offset (offsets only order one partition), so a re-send
    never replaces the original. On an incremental run, identities the model already holds are
    dropped as well, which makes the overlap window and reruns harmless with a plain append.

    `existing_filter` narrows the stored rows the increment is compared with (see
    `event_days_filter`): a model partitioned by event day reads only the days its increment
    has events on, not the whole table.
-#}
{% macro first_occurrences(rows, identity, existing, incremental, existing_filter=none) -%}
{%- set own = var('bronze_columns') -%}
, ranked_occurrences as (

    select
        rows.*,
        row_number() over (
            partition by {% for column in identity %}rows.{{ column }}{{ ', ' if not loop.last }}{% endfor %}
            order by rows.{{ own.kafka_timestamp }}, rows.{{ own.kafka_partition }}, rows.{{ own.kafka_offset }}
        ) as _occurrence
    from {{ rows }} as rows

),

{% if incremental %}
stored_identities as (

    select {{ identity | join(', ') }}
    from {{ existing }}
    {% if existing_filter %}
    where {{ existing_filter }}
    {% endif %}

),
{% endif %}

first_occurrences as (

    select ranked_occurrences.* except (_occurrence)
    from ranked_occurrences
    {% if incremental %}
    left anti join stored_identities as existing
        on {% for column in identity %}existing.{{ column }} = ranked_occurrences.{{ column }}{{ ' and ' if not loop.last }}{% endfor %}
    {% endif %}
    where ranked_occurrences._occurrence = 1

),

final as (

    select * from first_occurrences

)

select * from final
{%- endmacro %}
