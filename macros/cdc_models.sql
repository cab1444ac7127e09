{#-
    The bodies of a CDC stream's mirror and history models (lakehouse/commands/cdc_models writes
    the models: `lakehouse cdc add`'s, the demo's): each reads the changelog view's rows that
    the bronze files added since its last run hold (`bronze_increment`, not an overlap window,
    which re-reads the last increment: a key it changed twice would make every history run read
    the closed versions) and applies them. Kept here, not in each model, so a fix reaches every
    stream, those `cdc add` wrote before it included.

    `bronze`: the stream's bronze table (source()), `changelog`: its changelog view (ref());
    passed by the model, whose dependencies they are.
-#}

{#- the CTE `changelog`: the rows of `changelog` in the increment (all of them without one) -#}
{% macro cdc_changes_since(changelog, increment) -%}
with

changelog as (

    select * from {{ changelog }}
    {% if increment %}
    where {{ increment }}
    {% endif %}

)
{%- endmacro %}


{#- The mirror's rows (macros/cdc_mirror.sql), `cdc` its configuration (unique_key, sequence_by,
    delete_when, except_columns, truncate_when). `transactions`: the transactions model whose
    published transactions alone the changelog holds (macros/cdc_transactions.sql), or none. -#}
{% macro cdc_mirror_model(bronze, changelog, cdc, transactions=none) -%}
{{ cdc_changes_since(changelog, cdc_increment(this, bronze, transactions)) }}

{{ cdc_mirror_changes('changelog', this, is_incremental(), columns=cdc_changelog_columns(changelog), **cdc) }}
{%- endmacro %}


{#- The increment of a CDC model `existing` (none on a full build): the changes in the bronze
    files added since its last run (`bronze_increment`), and with `transactions` (the transactions
    model) also the changes of the transactions published since, which an earlier run read and
    held back (macros/cdc_transactions.sql). -#}
{% macro cdc_increment(existing, bronze, transactions=none) -%}
    {%- set increment = bronze_increment(existing, bronze) -%}
    {%- set read_again = transactions_read_again(existing, transactions) -%}
    {{ return('(' ~ increment ~ ' or ' ~ read_again ~ ')' if increment and read_again else increment) }}
{%- endmacro %}


{#- The history's versions (SCD type 2, macros/cdc_history.sql) of the rows keyed by `key` (a
    column or a list). A run reads the history's open versions of the keys its increment
    touches, its closed ones too when a late change or a truncation (`truncate_when`: the
    changes that empty the table; none where the source sends none) needs them
    (`cdc_history_reads_all`). -#}
{% macro cdc_history_model(bronze, changelog, key, truncate_when=none, transactions=none) -%}
{%- set increment = cdc_increment(this, bronze, transactions) -%}
{%- set first_key = adapter.quote(key if key is string else key[0]) -%}
{%- set truncations = changelog_has_truncations(changelog, truncate_when, increment, key=first_key)
                      if truncate_when else false -%}
{%- set reads_all = cdc_history_reads_all(this, changelog, key, increment, truncations) -%}
{{ cdc_changes_since(changelog, increment) }}

{{ cdc_history_versions('changelog', key, existing=this if is_incremental() else none,
                        truncate_when=truncate_when, truncations=truncations, columns_of=changelog,
                        columns=cdc_changelog_columns(changelog), open_versions_only=not reads_all) }}
{%- endmacro %}


{#- The history's configuration: merged by its key and the change's sequence; its files bucketed
    by the key's first column and split by the year a version closed (the open versions, valid_to
    null, apart: an ordinary run reads only them); merge-on-read (a run re-writes the versions it
    closes as deletes, not whole files). -#}
{% macro cdc_history_config(key, buckets) -%}
    {%- set keys = [key] if key is string else key -%}
    {{ return({
        'materialized': 'incremental',
        'incremental_strategy': 'merge',
        'unique_key': keys + [var('bronze_columns').seq],
        'partition_by': ['bucket(' ~ buckets ~ ', ' ~ adapter.quote(keys[0]) ~ ')', 'years(valid_to)'],
        'tblproperties': merge_on_read_properties(),
        'pre_hook': ["{{ ensure_merge_on_read(this) }}", "{{ ensure_partition_fields(this) }}"],
    }) }}
{%- endmacro %}


{#- The mirror's configuration (macros/cdc_mirror.sql) for a changelog as ingestion normalizes
    every CDC format's: ordered by bronze's `seq`, a delete is op 'D'; the Kafka topic, the same
    on every row, is not kept. `truncate_when`: the changes that empty the table (none where the
    source sends none). -#}
{% macro cdc_mirror_config(key, truncate_when=none) -%}
    {%- set own = var('bronze_columns') -%}
    {%- set cdc = {'unique_key': key, 'sequence_by': own.seq, 'delete_when': "op = 'D'",
                   'except_columns': [own.kafka_topic]} -%}
    {%- if truncate_when -%}{%- do cdc.update({'truncate_when': truncate_when}) -%}{%- endif -%}
    {{ return(cdc) }}
{%- endmacro %}
