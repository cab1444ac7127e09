{#-
    Whole source transactions (ARCHITECTURE §9, "Transactions"). A Debezium connector with
    provide.transaction.metadata=true gives each change its transaction's id and its place among
    the transaction's events (`total_order`, in bronze's transaction column), and writes a BEGIN and an END
    event per transaction to its transaction topic, END counting the events per table (bronze's
    transactions stream, ingestion/formats/debezium_transactions.py). A mirror or history that
    applied the changes of a transaction as they arrive would show half a transfer whenever a run
    ends between its changes (two accounts, two partitions of the topic, two batches).

    So the CDC models of such a stream apply a transaction's changes only once it is *published*:
    the transactions model (`cdc_transactions_model`, one per transaction topic) keeps one row per
    source transaction with what has arrived of it, and publishes a transaction when

      - its END is in bronze and every change END counts in the tables these streams carry is in
        bronze (the distinct `total_order`s seen reach END's count: re-sent copies count once), and
      - every transaction whose END comes before it on the transaction topic (one partition: the
        connector's commit order) is published too: the watermark is the first END still
        incomplete, so readers see a prefix of the source's commits, never a later transaction
        without an earlier one.

    A transaction whose END or changes are missing waits, and the transactions after it with it.
    Changes without a transaction (a snapshot's reads, a connector without the metadata) are
    applied as they arrive. A table END names that no stream here carries (not captured, or
    another connector's stream) is not waited for: only the counts of `tables` are.

    Every run of the model publishes in one step, and every CDC model reading it in the same dbt
    run reads the same state (the run's audit branch: macros/audit_publish.sql), so the tables a
    run publishes together agree on the watermark.
-#}

{#- The transactions model's rows. `transactions`: the transaction topic's bronze table (source());
    `streams`: [(bronze table (source()), source table name)] of the CDC streams of the connector
    whose models wait for whole transactions. -#}
{% macro cdc_transactions_model(transactions, streams) -%}
with
{{ cdc_transactions_arrivals(transactions, streams) }}
{{ cdc_transactions_published(this, is_incremental()) }}
{%- endmacro %}


{#- Step 1: `end_events`, the END events of this run's increment of the transaction topic, and
    `arrived`, which events of each transaction this run's increments of the streams' bronze
    tables hold (macros/ingested_since_last_run.sql `bronze_increment`, one per bronze table). -#}
{% macro cdc_transactions_arrivals(transactions, streams) -%}
{%- set own = var('bronze_columns') -%}
{%- set tables = streams | map(attribute=1) | list -%}
{#- a bronze table not created yet (its stream never ingested: the job leaves a transaction topic
    that does not exist yet out) holds nothing: no END, no change -#}
{%- set ingested = [] -%}
{%- for bronze, table in streams if not execute or load_relation(bronze) is not none -%}
    {%- do ingested.append(bronze) -%}
{%- endfor -%}
{%- set has_ends = not execute or load_relation(transactions) is not none -%}
{%- set end_increment = bronze_increment(this, transactions) if has_ends else none -%}

end_events as (

    -- the END events of this run's increment of the transaction topic (re-sent copies once), with
    -- the count of their events in the tables these streams carry
    {% if has_ends -%}
    select
        {{ transaction_key('id') }} as id,
        min({{ own.kafka_offset }}) as end_offset,
        max(aggregate(filter(data_collections,
                             c -> element_at(split(c.data_collection, '[.]'), -1) in ({{ sql_list(tables) }})),
                      cast(0 as bigint), (total, c) -> total + c.event_count)) as event_count
    from {{ transactions }}
    where status = 'END' and {{ own.error_code }} is null
    {%- if end_increment %} and {{ end_increment }}{% endif %}
    group by 1
    {%- else -%}
    select cast(null as string) as id, cast(null as bigint) as end_offset, cast(null as bigint) as event_count
    where false
    {%- endif %}

),

arrived as (

    -- which events of each transaction this run's increments of the streams' bronze tables hold
    {% if ingested -%}
    select
        {{ transaction_key(own.transaction ~ '.id') }} as id,
        collect_set({{ own.transaction }}.total_order) as seen_orders,
        min({{ own.ingested_at }}) as first_ingested_at
    from (
        {%- for bronze in ingested %}
        {%- set increment = bronze_increment(this, bronze) %}
        select {{ own.transaction }}, {{ own.ingested_at }}
        from {{ bronze }}
        where {{ own.transaction }} is not null and {{ own.error_code }} is null
          and not {{ own.is_tombstone }}{% if increment %} and {{ increment }}{% endif %}
        {{ 'union all' if not loop.last }}
        {%- endfor %}
    )
    group by 1
    {%- else -%}
    select cast(null as string) as id, cast(array() as array<bigint>) as seen_orders,
           cast(null as timestamp) as first_ingested_at
    where false
    {%- endif %}

),
{%- endmacro %}


{#- Step 2: the model's rows: each transaction's state merged with what the model holds of it
    (`existing`, on an `incremental` run), judged complete or not, and published when complete
    and before the first END still incomplete (the watermark). -#}
{% macro cdc_transactions_published(existing, incremental) -%}
{% if incremental %}
known as (

    -- what the model holds of the transactions not published yet, and of those the increments touch
    select * from {{ existing }}
    where not published
       or id in (select id from end_events union all select id from arrived)

),
{% endif %}

state as (

    select
        coalesce(ends.id, arrived.id{% if incremental %}, known.id{% endif %}) as id,
        coalesce(ends.end_offset{% if incremental %}, known.end_offset{% endif %}) as end_offset,
        coalesce(ends.event_count{% if incremental %}, known.event_count{% endif %}) as event_count,
        array_union(coalesce({% if incremental %}known.seen_orders{% else %}null{% endif %}, array()),
                    coalesce(arrived.seen_orders, array())) as seen_orders,
        {% if incremental %}least(arrived.first_ingested_at, known.first_ingested_at){% else %}arrived.first_ingested_at{% endif %} as first_ingested_at,
        {% if incremental %}coalesce(known.published, false){% else %}false{% endif %} as was_published,
        {% if incremental %}known.published_at{% else %}cast(null as timestamp){% endif %} as published_at,
        ends.id is not null or arrived.id is not null as touched
    from end_events as ends
    full outer join arrived on ends.id = arrived.id
    {% if incremental %}full outer join known on coalesce(ends.id, arrived.id) = known.id{% endif %}

),

judged as (

    select *, end_offset is not null and size(seen_orders) >= event_count as is_complete
    from state

),

watermark as (

    -- the first END on the transaction topic whose transaction has not all arrived
    select min(end_offset) as first_incomplete from judged where not was_published and not is_complete

),

decided as (

    select
        *,
        not was_published and is_complete and end_offset < coalesce(first_incomplete, {{ max_bigint() }})
            as publishes
    from judged cross join watermark

),

final as (

    -- only the rows this run changes: a run with nothing new writes nothing
    select
        id,
        end_offset,
        event_count,
        seen_orders,
        first_ingested_at,
        was_published or publishes as published,
        case when publishes then {{ run_stamp(existing) }} else published_at end as published_at
    from decided
    where touched or publishes

)

select * from final
{%- endmacro %}


{#- What names one transaction in its changes and its END alike: the id Debezium gives it, but for
    PostgreSQL's `<xid>:<LSN>` the xid alone: the LSN is each event's own position (a change's, the
    END's commit), so the ids of one transaction's events differ after the ':' (seen with Debezium
    3.5, tests/integration/test_real_cdc.py). Other connectors' ids (MySQL's GTID, SQL Server's
    three positions) are whole. A PostgreSQL xid repeats after 2^32 transactions (wraparound). -#}
{% macro transaction_key(id) -%}
    case when {{ id }} rlike '^[0-9]+:[0-9]+$' then substring_index({{ id }}, ':', 1) else {{ id }} end
{%- endmacro %}


{% macro max_bigint() -%}
    cast(9223372036854775807 as bigint)
{%- endmacro %}


{% macro sql_list(values) -%}
    {%- for value in values %}'{{ value }}'{{ ', ' if not loop.last }}{% endfor -%}
{%- endmacro %}


{#- The transactions model's configuration: merged by transaction id, merge-on-read as the
    mirrors and histories are (a run's MERGE reads the ids of its target, not whole files). -#}
{% macro cdc_transactions_config() -%}
    {{ return({'materialized': 'incremental', 'incremental_strategy': 'merge', 'unique_key': 'id',
               'tblproperties': merge_on_read_properties(), 'pre_hook': ["{{ ensure_merge_on_read(this) }}"]}) }}
{%- endmacro %}


{#- The table property of a CDC model holding the newest `published_at` of `transactions` (the
    transactions model) its runs have applied -#}
{% macro transactions_seen_property(transactions) -%}
    lakehouse.transactions-applied.{{ transactions.schema }}.{{ transactions.identifier }}
{%- endmacro %}


{#- A changelog view's predicate for the changes it holds, given the transactions model
    `transactions`: the change has no transaction (a snapshot's read), or its transaction is
    published. Before the transactions model is first built (a run that selects the view but not
    it), no transaction is published: the changes that name one wait; the view is made again by
    every run that selects it. -#}
{% macro transaction_published(transactions) -%}
    {%- set own = var('bronze_columns') -%}
    {%- if execute and not (transactions | string).startswith('__dbt__cte__') and load_relation(transactions) is none -%}
    {{ own.transaction }} is null
    {%- else -%}
    ({{ own.transaction }} is null
     or {{ transaction_key(own.transaction ~ '.id') }} in (select id from {{ transactions }} where published))
    {%- endif -%}
{%- endmacro %}


{#- The changes a CDC model `existing` must read again, given the transactions model
    `transactions` (none: none): those of the transactions published since its last run, which an
    earlier run read and held back, as a predicate on the ingestion instant (from the earliest of them;
    none when there are none, or on a full build, which reads everything). Also has the model's
    post-hook (record_bronze_snapshot) record the newest publication it applies, so its next run
    reads again only what is published after. -#}
{% macro transactions_read_again(existing, transactions) -%}
    {%- set own = var('bronze_columns') -%}
    {%- if transactions is none or not execute or existing is string or transactions is string
           or (transactions | string).startswith('__dbt__cte__') or load_relation(transactions) is none -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set property = transactions_seen_property(transactions) -%}
    {%- set applied = table_property(existing, property) if is_incremental() else none -%}
    {%- set row = run_query('select cast(min(first_ingested_at) as string), cast(max(published_at) as string) from '
                            ~ transactions ~ ' where published'
                            ~ (' and published_at > ' ~ timestamp_literal(applied) if applied else '')).rows[0] -%}
    {%- if row[1] is not none -%}
        {%- do add_pending_properties(existing, {property: row[1]}) -%}
    {%- endif -%}
    {{ return(own.ingested_at ~ ' >= ' ~ timestamp_literal(row[0]) if row[0] is not none and is_incremental() else none) }}
{%- endmacro %}
