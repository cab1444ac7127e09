{#-
    An event stream's silver rows (employees, purchases, user_events): the good rows of its
    bronze table's increment (`bronze_increment`: the files committed since the last run),
    renamed and typed by the caller's select list (the body of a `call` block, each item ending
    in a comma), then the Kafka record's coordinates, the batch and the run stamp `_loaded_at`,
    for gold models that count each silver row exactly once (`loaded_since_last_run`). One row
    per `identity` (macros/first_occurrences.sql), the increment compared with the stored rows of
    the event days it has events on only (macros/touched_days.sql): a re-sent duplicate keeps
    its original's event time, so it can only meet it on that day, the table's partition.
    `event_time`: bronze's event-time column; `event_at`: silver's name of it.
-#}
{% macro silver_events(bronze, identity, event_time, event_at) -%}
{%- set own = var('bronze_columns') -%}
{%- set increment = bronze_increment(this, bronze) -%}
{%- set loaded_at = run_stamp(this) -%}
with

bronze_rows as (

    select * from {{ bronze }}
    -- good rows only: a dead row (null decoded columns, its reason set) is a dead letter
    where {{ own.error_code }} is null
    {% if is_incremental() %}
    and {{ increment }}
    {% endif %}

),

renamed as (

    select
        {{ caller() }}
        {{ own.kafka_topic }},
        {{ own.kafka_partition }},
        {{ own.kafka_offset }},
        {{ own.kafka_timestamp }},
        {{ own.ingested_at }},
        {{ loaded_at }} as _loaded_at
    from bronze_rows

)

{{ first_occurrences('renamed', identity, this, is_incremental(),
                     existing_filter=event_days_filter(bronze, event_time, increment, event_at) if is_incremental()) }}
{%- endmacro %}


{#- Their table: appended to, partitioned by the event day `event_at` and written a day at a
    time per task (macros/clustered_write.sql); a column bronze gains reaches it on the next run. -#}
{% macro silver_events_config(event_at) -%}
    {#- a model's own tblproperties replace the project's, so the audit one is named here too -#}
    {%- set properties = clustered_write_properties() -%}
    {%- do properties.update(audit_table_properties()) -%}
    {{ return({
        'materialized': 'incremental',
        'incremental_strategy': 'append',
        'partition_by': ['days(' ~ event_at ~ ')'],
        'on_schema_change': 'append_new_columns',
        'tblproperties': properties,
    }) }}
{%- endmacro %}
