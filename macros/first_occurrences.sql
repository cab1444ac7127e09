{#-
    Deduplication of an event stream by its identity: the first occurrence wins, "first" by
    Kafka timestamp, then partition and offset (offsets only order one partition), so a re-send
    never replaces the original. On an incremental run, identities the model already holds are
    dropped as well, which makes the overlap window and reruns harmless with a plain append.
-#}
{% macro first_occurrences(rows, identity, existing, incremental) -%}
, ranked_occurrences as (

    select
        rows.*,
        row_number() over (
            partition by {% for column in identity %}rows.{{ column }}{{ ', ' if not loop.last }}{% endfor %}
            order by rows._kafka_timestamp, rows._kafka_partition, rows._kafka_offset
        ) as _occurrence
    from {{ rows }} as rows

),

first_occurrences as (

    select ranked_occurrences.* except (_occurrence)
    from ranked_occurrences
    {% if incremental %}
    left anti join {{ existing }} as existing
        on {% for column in identity %}existing.{{ column }} = ranked_occurrences.{{ column }}{{ ' and ' if not loop.last }}{% endfor %}
    {% endif %}
    where ranked_occurrences._occurrence = 1

),

final as (

    select * from first_occurrences

)

select * from final
{%- endmacro %}
