{#-
    SCD type 2 history from a CDC changelog: one row per distinct change (version) of a key,
    `valid_from` its commit time at the source (below: never before its predecessor's),
    `valid_to` the next version's, `is_current` on
    the last version of a key that still exists. A delete is a version too (op 'D', never
    current), so the history says when a row disappeared and when it came back. Ordered by the
    sequence, never by arrival.

    First run (`existing` none): every change of `changes`.

    `valid_from` never goes back: it is the version's commit time, or its predecessor's
    `valid_from` when that is later. The sequence orders the versions, and commit times need not
    follow it: a source clock stepped back, a PostgreSQL snapshot read stamped after changes
    streamed before it. Taking each commit time as it is would give a version that ends before it
    starts; a version whose commit time is behind its predecessor's is valid from its
    predecessor's (an empty interval when the next one starts there too).

    Incremental run: `changes` is the increment only. The rows it writes (merged on key and
    sequence, merge-on-read) are the new versions, and the stored versions whose valid_from,
    valid_to or is_current they change: usually each touched key's open version, which the first
    new one closes. A late change slots in between stored versions: its predecessor gets a new
    valid_to and it takes its successor's valid_from as its own valid_to. The stored versions
    read are, per touched key, those at or after its earliest new sequence and the one just
    before it: the predecessor of every new version and everything after it, chosen by
    sequence, not by time, so that a run gives what a full build gives whatever the clocks did.
    Versions before stay as they are (the predecessor's valid_from already holds the running
    maximum), so the history's rows are read for the touched keys only, and the changelog for
    the increment only.

    `open_versions_only` (the model passes `not cdc_history_reads_all(...)`): the increment's
    changes all come after their key's last stored version (its open one, valid_to null) and
    hold no truncation, so that version is the predecessor of every new one and nothing after it
    is stored: the run reads it alone (the filter `valid_to is null` prunes to the null
    partition of years(valid_to), the models' partitioning) and its MERGE matches only open
    versions (`cdc_history_merge_predicates`). The rows written are the same as by the full read.

    The history has the changelog's columns, then valid_from, valid_to, is_current,
    `_loaded_at` and `_first_loaded_at` (its first run creates it so). `_loaded_at` is the run
    stamp of the dbt run that last wrote the row, new version or re-written stored one (one value
    per run, later than every stamp the history holds whatever the host's clock:
    macros/run_stamp.sql), as the mirror's; `_first_loaded_at` that of the run that
    wrote the version first, kept when a later run re-writes it. A reader that joins facts to
    the version of their time (gold's sales_by_region_daily) finds by them exactly the versions
    written since it last looked, a late CDC commit's included, and tells a version new since
    then (all its interval may hold other facts than before) from one re-written (only what a
    change of its bounds moved). A history built before the columns gets them on its next run
    (column evolution), null in the rows not written since. The stored versions are read by the changelog's column names
    (`cdc_history_stored_columns`), so a column added to the changelog is null in the stored
    versions and filled in the new ones, and the run adds it to the history (silver's
    `on_schema_change`, macros/column_evolution.sql): no `--full-refresh`.

    `key` is the source's primary key: a column or a list of columns (a composite key). The
    model's unique_key is the key's columns and the sequence.

    A TRUNCATE (`truncate_when`, e.g. "op = 'T'"; a change without a key) is a version of every
    row that existed just before it: for each key whose last version before the truncation is
    not a delete, a version with the truncation's op, sequence and times and the row's last
    values, never current. `truncations` tells whether the increment holds one (the model asks,
    `changelog_has_truncations`): only then are all the stored versions read, to find the rows
    it ends; `columns_of` is a relation with the changelog's columns (the model's changelog).

    `columns` (optional; the model passes cdc_changelog_columns(ref(...))): the changelog's
    columns in order. When one is bronze's `unavailable` (Debezium: the columns a change did not carry,
    an unchanged TOASTed PostgreSQL value; ARCHITECTURE §9, "Unavailable values"), a version
    carries such a column's value from its predecessor by sequence (null if it has none). The
    first version of a key a run reads is final as stored, so a late change between stored
    versions re-fills the later versions that carried its column, and they are re-written.
-#}
{% macro cdc_history_versions(changes, key, sequence_by=none, committed_at=none, existing=none,
                              truncate_when=none, truncations=false, columns_of=none, columns=[],
                              open_versions_only=false) -%}
{#- The steps below, in order; each is a CTE (or a few) read by the next, named for what it
    holds, and each has dbt unit tests of its own (tests/dbt_macro_steps). -#}
{%- set sequence_by = sequence_by or var('bronze_columns').seq -%}
{%- set committed_at = committed_at or var('bronze_columns').source_ts -%}
{%- set keys = [key] if key is string else key -%}
{#- the run stamp: later than every stamp the history holds (macros/run_stamp.sql); `this`, not
    `existing`, which a full refresh leaves out: its stamps must follow the table's too -#}
{%- set loaded_at = run_stamp(this) -%}
{%- set carried = cdc_carried_columns(columns, keys + [sequence_by]) -%}
{%- set ends_a_row = "op = 'D'" ~ (' or (' ~ truncate_when ~ ')' if truncate_when else '') -%}
{%- if truncate_when %}
{#- the truncated rows' versions (only when the increment holds a truncation, `truncations`),
    read by the changelog's columns -#}
{%- set changelog_columns = adapter.get_columns_in_relation(columns_of) | map(attribute='name') | list
                            if truncations and execute else none -%}
{{ cdc_history_truncations(changes, keys, sequence_by, committed_at, ends_a_row, changelog_columns,
                           existing, columns_of) }}
{%- set changes = 'history_changes' %}
{%- endif %}
{%- if existing is not none %}
{{ cdc_history_stored_versions(changes, existing, keys, sequence_by, open_versions_only) }}
{%- endif %}
{{ cdc_history_links(changes, keys, sequence_by, committed_at, columns, existing, columns_of) }}
{%- if carried %}
{{ cdc_history_filled_links(keys, sequence_by, columns, carried) }}
{%- endif %}
{{ cdc_history_intervals(keys, sequence_by, ends_a_row, carried) }}
{{ cdc_history_written_versions(loaded_at, carried) }}

select * from final
{%- endmacro %}


{#- `partition by <key> order by <sequence>`: a key's versions in sequence order -#}
{% macro cdc_history_window(keys, sequence_by) -%}
    {{ return('partition by ' ~ keys | join(', ') ~ ' order by ' ~ sequence_by) }}
{%- endmacro %}


{#- Step 1, with `truncate_when`: `history_changes`, the changes of `changes` with a key
    (`key_changes`) and, when `changelog_columns` (the changelog's columns) is given, a version of
    every row a truncation of `changes` ends (`cdc_history_truncated_versions`). -#}
{% macro cdc_history_truncations(changes, keys, sequence_by, committed_at, ends_a_row, changelog_columns=none,
                                 existing=none, columns_of=none) -%}
, key_changes as (

    select * from {{ changes }} where {{ keys[0] }} is not null

)
{%- if changelog_columns is not none %}
{{ cdc_history_truncation_points(changes, keys, sequence_by, committed_at, changelog_columns) }}
{{ cdc_history_truncated_versions(keys, sequence_by, committed_at, ends_a_row, changelog_columns, existing,
                                  columns_of) }}
{%- endif %}

, history_changes as (

    select * from key_changes
    {% if changelog_columns is not none %} union all select * from truncated_versions {% endif %}

)
{%- endmacro %}


{#- `truncation_points`: one row per truncation of `changes` (a change without a key): its
    sequence, op and times, as `_truncation_seq`, `_truncation_op`, `_truncation_at` and
    `_truncation_ingested_at`. -#}
{% macro cdc_history_truncation_points(changes, keys, sequence_by, committed_at, changelog_columns) -%}
{%- set own = var('bronze_columns') -%}
, truncation_points as (

    -- one row per truncation: its first copy to arrive (a replayed duplicate shares its
    -- sequence), so a full refresh and an incremental run stamp its versions alike
    select _truncation_seq, _truncation_op, _truncation_at, _truncation_ingested_at
    from (
        select {{ sequence_by }} as _truncation_seq, op as _truncation_op,
               {{ committed_at }} as _truncation_at, {{ own.ingested_at }} as _truncation_ingested_at,
               row_number() over (partition by {{ sequence_by }}
                                  order by {{ cdc_copy_order(changelog_columns) }}) as _truncation_copy
        from {{ changes }}
        where {{ keys[0] }} is null
    )
    where _truncation_copy = 1

)
{%- endmacro %}


{#- `truncated_versions`: per key and truncation (`truncation_points`), the key's last version
    before it (of `key_changes` or of the history `existing`), unless that ends the row
    (`ends_a_row`), as a version at the truncation: its op, sequence and times, the row's last
    values. In the changelog's columns, `changelog_columns`. -#}
{% macro cdc_history_truncated_versions(keys, sequence_by, committed_at, ends_a_row, changelog_columns,
                                        existing=none, columns_of=none) -%}
{%- set own = var('bronze_columns') -%}
, before_truncation as (

    -- per key and truncation, the key's last version before it: from the increment or stored.
    -- Of the copies of that change (a replayed duplicate shares its sequence) the one the
    -- history keeps (distinct_links: the stored version, else the first to arrive), so the
    -- truncated version's columns, its Kafka coordinates among them, never depend on the plan
    select
        prior.*, truncation_points.*,
        row_number() over (
            partition by {% for k in keys %}prior.{{ k }}, {% endfor %}truncation_points._truncation_seq
            order by prior.{{ sequence_by }} desc, prior._prior_is_stored desc,
                     {{ cdc_copy_order(changelog_columns, 'prior.') }}
        ) as _rank
    from (
        select *, false as _prior_is_stored from key_changes
        {% if existing is not none %}
        union all
        select {{ cdc_history_stored_columns('stored', existing, columns_of) }}, true from {{ existing }} as stored
        {% endif %}
    ) as prior
    inner join truncation_points on prior.{{ sequence_by }} < truncation_points._truncation_seq

),

truncated_versions as (

    select
        {%- for column in changelog_columns %}
        {% if column == 'op' %}_truncation_op{% elif column == sequence_by %}_truncation_seq
        {%- elif column == committed_at %}_truncation_at{% elif column == own.ingested_at %}_truncation_ingested_at
        {%- else %}{{ column }}{% endif %} as {{ column }}{{ ',' if not loop.last }}
        {%- endfor %}
    from before_truncation
    where _rank = 1 and not ({{ ends_a_row }})

)
{%- endmacro %}


{#- Step 2, on an incremental run: `stored_versions`, the versions of the history `existing`
    that the changes of `changes` may change (`touched_keys`: the keys they touch, each with its
    earliest new sequence). With `open_versions_only`, each touched key's open version alone;
    else its versions from its earliest new change on, and the one before it. -#}
{% macro cdc_history_stored_versions(changes, existing, keys, sequence_by, open_versions_only=false) -%}
, touched_keys as (

    select {{ keys | join(', ') }}, min({{ sequence_by }}) as _earliest_seq
    from {{ changes }}
    group by {{ keys | join(', ') }}

),

{% if open_versions_only %}
stored_versions as (

    -- each touched key's open version (valid_to null: its last), the predecessor of every new
    -- change: the run was planned so (cdc_history_reads_all found no change before it), and the
    -- filter prunes the scan to the partition of open versions. A change before it that landed
    -- in bronze since (after the plan, before this query) would need the closed versions: the
    -- run fails, records no snapshot, and the next one reads them
    select stored.*
    from {{ existing }} as stored
    inner join touched_keys
        on {% for k in keys %}touched_keys.{{ k }} = stored.{{ k }}{{ ' and ' if not loop.last }}{% endfor %}
    where stored.valid_to is null
        and coalesce(case when touched_keys._earliest_seq < stored.{{ sequence_by }}
                          then raise_error('error: {{ existing }}: a change older than the open version of its key '
                                           || 'landed while the run was planned; the next run applies it') end,
                     true)

)
{% else %}
touched_versions as (

    -- the increment is small: Spark broadcasts it and streams the history once
    select
        stored.*,
        touched_keys._earliest_seq,
        max(case when stored.{{ sequence_by }} < touched_keys._earliest_seq then stored.{{ sequence_by }} end)
            over (partition by {% for k in keys %}stored.{{ k }}{{ ', ' if not loop.last }}{% endfor %}) as _predecessor_seq
    from {{ existing }} as stored
    inner join touched_keys
        on {% for k in keys %}touched_keys.{{ k }} = stored.{{ k }}{{ ' and ' if not loop.last }}{% endfor %}

),

stored_versions as (

    -- each touched key's versions from its earliest new change on, and the one before it
    select * except (_earliest_seq, _predecessor_seq)
    from touched_versions
    where {{ sequence_by }} >= _earliest_seq or {{ sequence_by }} = _predecessor_seq

)
{% endif %}
{%- endmacro %}


{#- Step 3: `distinct_links`, the new changes of `changes` and, with a history `existing`, its
    `stored_versions`, one row per key and sequence (`_copy` = 1), each with its commit time
    (`_starts_at`) and a stored version's bounds and currency (`_stored_*`, `_is_stored`). -#}
{% macro cdc_history_links(changes, keys, sequence_by, committed_at, columns=[], existing=none, columns_of=none) -%}
, links as (

    select
        changes.*,
        {{ committed_at }} as _starts_at,
        cast(null as timestamp) as _stored_valid_from,
        cast(null as timestamp) as _stored_valid_to,
        cast(null as boolean) as _stored_is_current,
        cast(null as timestamp) as _stored_first_loaded_at,
        false as _is_stored
    from {{ changes }} as changes
    {% if existing is not none %}

    union all

    select
        {{ cdc_history_stored_columns('stored_versions', existing, columns_of) }},
        -- a stored valid_from is already the running maximum up to its version
        stored_versions.valid_from,
        stored_versions.valid_from,
        stored_versions.valid_to,
        stored_versions.is_current,
        {{ cdc_history_stored_first_loaded_at('stored_versions', existing) }},
        true
    from stored_versions
    {% endif %}

),

distinct_links as (

    -- one row per (key, sequence): the stored version when the history has it, else the
    -- first copy of the change to arrive (a change re-sent, or re-read by the overlap window;
    -- cdc_copy_order)
    select
        links.*,
        row_number() over (
            partition by {{ keys | join(', ') }}, {{ sequence_by }}
            order by _is_stored desc, {{ cdc_copy_order(columns) }}
        ) as _copy
    from links

)
{%- endmacro %}


{#- Step 4, when a change may not carry a column (`carried`, of the changelog's `columns`):
    `kept_links`, the `distinct_links` with each such column filled from the key's previous
    version, and `_refilled`, whether that changed a stored version's value. -#}
{% macro cdc_history_filled_links(keys, sequence_by, columns, carried) -%}
{%- set own = var('bronze_columns') -%}
{%- set window = cdc_history_window(keys, sequence_by) -%}
, ranked_links as (

    select distinct_links.* except (_copy), row_number() over ({{ window }}) as _link_rank
    from distinct_links
    where _copy = 1

),

filled_links as (

    -- a column the version did not carry: its predecessor's value (the key's first version
    -- read here is final as stored: nothing before it changes)
    select
        ranked_links.*,
        {%- for column in carried %}
        last(case when _link_rank = 1 or not array_contains(coalesce({{ own.unavailable }}, array()), '{{ column }}')
                  then named_struct('value', {{ column }}) end, true)
            over ({{ window }} rows between unbounded preceding and current row).value as _filled_{{ column }}
        {{- ',' if not loop.last }}
        {%- endfor %}
    from ranked_links

),

kept_links as (

    select
        {%- for column in columns %}
        {{ '_filled_' ~ column if column in carried else column }} as {{ column }},
        {%- endfor %}
        _starts_at, _stored_valid_from, _stored_valid_to, _stored_is_current, _stored_first_loaded_at, _is_stored,
        -- a stored version whose carried value a late change before it changed
        _is_stored and ({% for column in carried %}not (_filled_{{ column }} <=> {{ column }}){{ ' or ' if not loop.last }}{% endfor %}) as _refilled
    from filled_links

)
{%- endmacro %}


{#- Step 5: `versions`, each link (`kept_links` when a column is `carried`, else the first copies
    of `distinct_links`) with its interval: `valid_from`, the running maximum of the commit
    times in sequence order; `valid_to`, the next version's; `is_current` on a key's last version
    unless it ends the row (`ends_a_row`). -#}
{% macro cdc_history_intervals(keys, sequence_by, ends_a_row, carried=[]) -%}
{%- set window = cdc_history_window(keys, sequence_by) -%}
, starts as (

    -- never before the version it follows: the running maximum in sequence order
    select
        {% if carried -%}
        kept_links.* except (_starts_at),
        {%- else -%}
        distinct_links.* except (_copy, _starts_at),
        {%- endif %}
        max(_starts_at) over ({{ window }} rows between unbounded preceding and current row) as valid_from
    {% if carried -%}
    from kept_links
    {%- else -%}
    from distinct_links
    where _copy = 1
    {%- endif %}

),

versions as (

    select
        starts.*,
        lead(valid_from) over ({{ window }}) as valid_to,
        lead({{ sequence_by }}) over ({{ window }}) is null and not ({{ ends_a_row }}) as is_current
    from starts

)
{%- endmacro %}


{#- Step 6: `final`, the rows a run writes: of `versions`, the new ones and the stored ones whose
    bounds, currency or (`carried`) filled values changed, stamped `loaded_at` (`_loaded_at`;
    `_first_loaded_at` too for a new version, a stored one keeps its own). -#}
{% macro cdc_history_written_versions(loaded_at, carried=[]) -%}
, final as (

    select * except (_stored_valid_from, _stored_valid_to, _stored_is_current, _stored_first_loaded_at, _is_stored
                     {{- ', _refilled' if carried }}),
           {{ loaded_at }} as _loaded_at,
           -- a stored version keeps the stamp of the run that first wrote it (null: before the column)
           case when _is_stored then _stored_first_loaded_at else {{ loaded_at }} end as _first_loaded_at
    from versions
    -- the new versions, and the stored ones whose start, end, currency or carried values they change
    where not _is_stored
        or not (valid_from <=> _stored_valid_from and valid_to <=> _stored_valid_to
                and is_current = _stored_is_current)
        {%- if carried %} or _refilled{% endif %}

)
{%- endmacro %}


{#- Whether `relation` (a changelog) holds a truncation (`truncate_when`) in the rows `where`
    selects (the model's increment filter, or none): a history run reads all its stored versions
    only then. A truncation is a change without a key: with `key` (the key's first column) the
    query asks only the rows whose key is null, and Iceberg skips every data file whose null
    count for it is zero (its metrics), so an increment without a truncation is answered without
    reading a row. -#}
{% macro changelog_has_truncations(relation, truncate_when, where=none, key=none) -%}
    {#- a dbt unit test renders refs as fixtures (CTEs named __dbt__cte__<model>); `dbt compile`
        or `docs generate` may run before the changelog exists: nothing to ask -#}
    {%- if not execute or relation is string or (relation | string).startswith('__dbt__cte__')
           or not relation_exists(relation) -%}
        {{ return(false) }}
    {%- endif -%}
    {%- set conditions = ([where] if where else []) + ([key ~ ' is null'] if key else []) -%}
    {%- set query = 'select count_if(' ~ truncate_when ~ ') from ' ~ relation
                    ~ (' where (' ~ conditions | join(') and (') ~ ')' if conditions else '') -%}
    {{ return(run_query(query).columns[0].values()[0] > 0) }}
{%- endmacro %}


{#- The stored versions' `_first_loaded_at` (`alias`, a relation of the history `existing`), or
    null when the history has no such column yet (built before it; a dbt unit test's fixture). -#}
{% macro cdc_history_stored_first_loaded_at(alias, existing) -%}
    {%- if execute and existing is not string and not (existing | string).startswith('__dbt__cte__')
           and '_first_loaded_at' in adapter.get_columns_in_relation(existing) | map(attribute='name') | map('lower') | list -%}
        {{ alias }}._first_loaded_at
    {%- else -%}
        cast(null as timestamp)
    {%- endif -%}
{%- endmacro %}


{#- The stored versions' changelog columns (`alias`, a relation of the history `existing`), by
    the names of the changelog `columns_of`, in its order: a column the history lacks (the
    changelog gained it since) is null. Without both relations to ask (a dbt unit test's
    fixtures, `dbt compile`), every column but the history's own (valid_from, valid_to,
    is_current, and the run stamps where the history has them: a model without `columns_of`
    whose history was built before them has none). -#}
{% macro cdc_history_stored_columns(alias, existing, columns_of) -%}
    {%- if not execute or existing is string or (existing | string).startswith('__dbt__cte__') -%}
        {{ alias }}.* except (valid_from, valid_to, is_current)
    {%- elif columns_of is none or columns_of is string or (columns_of | string).startswith('__dbt__cte__') -%}
        {%- set stored = adapter.get_columns_in_relation(existing) | map(attribute='name') | map('lower') | list -%}
        {{ alias }}.* except (valid_from, valid_to, is_current
            {%- for stamp in ['_loaded_at', '_first_loaded_at'] if stamp in stored %}, {{ stamp }}{% endfor %})
    {%- else -%}
        {%- set stored = adapter.get_columns_in_relation(existing) | map(attribute='name') | map('lower') | list -%}
        {%- for column in adapter.get_columns_in_relation(columns_of) -%}
            {%- if column.name | lower in stored -%}{{ alias }}.{{ adapter.quote(column.name) }}
            {%- else -%}cast(null as {{ column.data_type }}) as {{ adapter.quote(column.name) }}{%- endif -%}
            {{ ', ' if not loop.last }}
        {%- endfor -%}
    {%- endif -%}
{%- endmacro %}


{#- Whether a history's incremental run reads its closed versions, or only the open version
    (valid_to null, the last) of each key its increment touches: the open versions suffice
    unless the increment holds a change at or before which a closed version lies (by sequence,
    per key: a late or out-of-order change, or a closed version's change read again by the
    increment's overlap) or a truncation (`truncations`, `changelog_has_truncations`). It asks
    the history's open versions only, the partition `valid_to is null` prunes to, and the
    increment of `changelog` (`where`, the model's filter). The answer is kept in the Spark
    session for the run's MERGE (`cdc_history_merge_predicates`), which then reads only the
    target's open versions too. True (read all, as a full build would) where nothing can be
    asked: parsing, a dbt unit test's fixtures, a first build or full refresh (nothing stored). -#}
{% macro cdc_history_reads_all(existing, changelog, key, where=none, truncations=false, sequence_by=none) -%}
    {%- set sequence_by = sequence_by or var('bronze_columns').seq -%}
    {%- if not execute or not is_incremental() or existing is string or (existing | string).startswith('__dbt__cte__')
           or changelog is string or (changelog | string).startswith('__dbt__cte__') -%}
        {{ return(true) }}
    {%- endif -%}
    {%- set keys = [key] if key is string else key -%}
    {%- set key_list = keys | join(', ') -%}
    {%- set reads_all = truncations -%}
    {%- if not reads_all -%}
        {%- set query -%}
            select count(*)
            from (
                select {{ key_list }}, min({{ sequence_by }}) as _earliest_seq
                from {{ changelog }}
                where {{ keys[0] }} is not null {% if where %}and ({{ where }}){% endif %}
                group by {{ key_list }}
            ) as touched
            inner join (select {{ key_list }}, {{ sequence_by }} from {{ existing }} where valid_to is null) as open
                on {% for k in keys %}touched.{{ k }} = open.{{ k }}{{ ' and ' if not loop.last }}{% endfor %}
            where touched._earliest_seq < open.{{ sequence_by }}
        {%- endset -%}
        {%- set reads_all = run_query(query).columns[0].values()[0] > 0 -%}
    {%- endif -%}
    {%- do run_query('set ' ~ cdc_history_merge_key(existing) ~ ' = ' ~ ('all' if reads_all else 'open')) -%}
    {{ return(reads_all) }}
{%- endmacro %}


{#- the Spark session key holding a history run's read (`open` or `all`) until its MERGE -#}
{% macro cdc_history_merge_key(existing) -%}
    lakehouse.history_reads.{{ existing.schema }}.{{ existing.identifier }}
{%- endmacro %}


{#- The MERGE's conditions on its target `target` beyond the key and sequence: when the run
    read only open versions (`cdc_history_reads_all`), its changes match open versions only,
    and `valid_to is null` on the target lets Iceberg skip every file of closed versions (the
    partitions of years(valid_to) but the null one). Nothing for every other table. -#}
{% macro cdc_history_merge_predicates(target) -%}
    {%- set key = cdc_history_merge_key(target) -%}
    {%- set value = run_query('set ' ~ key).rows[0][1] -%}
    {%- if value in ('open', 'all') -%}
        {%- do run_query('reset ' ~ key) -%}
    {%- endif -%}
    {{ return(['DBT_INTERNAL_DEST.valid_to is null'] if value == 'open' else []) }}
{%- endmacro %}



{#- The order in which the copies of one change (a replayed or re-sent duplicate: the same key
    and sequence) are preferred: the first to arrive (bronze's `ingested_at`), and of copies that arrived
    in one batch the first in Kafka's order (topic, partition, offset), those of `columns` (a
    changelog's columns; a unit test's fixture may lack some) that it has. A total order: a full
    refresh and an incremental run keep the same copy, its Kafka coordinates and arrival time. -#}
{% macro cdc_copy_order(columns, prefix='') -%}
    {%- set own = var('bronze_columns') -%}
    {%- set order = [prefix ~ own.ingested_at] -%}
    {%- for column in [own.kafka_topic, own.kafka_partition, own.kafka_offset] -%}
        {%- if column in columns -%}{%- do order.append(prefix ~ column) -%}{%- endif -%}
    {%- endfor -%}
    {{ return(order | join(', ')) }}
{%- endmacro %}
