{#-
    The increment of every incremental model: the rows of its input ingested after the newest
    `ingested_at` (bronze's column of the var `bronze_columns`, which every incremental model
    keeps) the model already holds (its high-water mark), minus an overlap window (var
    overlap_minutes). A micro-batch stamps its rows with its start time but may commit minutes
    later, after a dbt run read past that time; the overlap re-reads those rows, and each model
    makes re-reading harmless (anti-join on identity, the mirror's sequence guard, recomputing
    whole days or keys).

    The bound is computed once, when dbt renders the model (run_query), and inlined as a
    timestamp literal: `ingested_at > timestamp'2026-11-23 10:50:00.123'`. Spark pushes a
    literal into the Iceberg scan, which skips every partition and data file whose
    `ingested_at` range lies below it, so a run reads the new files only. A scalar subquery
    (`> (select max(...) from this)`) is evaluated at run time and pushes nothing: that read
    every file of the input on every run (benchmarks/RESULTS.md, "CDC mirror merge scaling").

    The high-water mark itself comes from the model table's metadata, not from its rows: the
    largest upper bound of the column over the table's data files (Iceberg keeps exact bounds
    for timestamps). A file's bound may belong to a row deleted since (a mirror row replaced by
    a newer change, a history version closed): that row was read and applied by the run that
    wrote it, so the bound is as good a mark as the live rows' maximum. Only when a data file
    lacks the column's metrics is the column scanned.

    Pure pieces (`high_water_mark_sql`, `as_text_sql`, `timestamp_literal`, `ingested_after`) hold the SQL;
    `increment_start` is the dbt-only glue (run_query). In a dbt unit test `this` is a fixture (a
    CTE name, not a table) and has no metadata: the bound stays the subquery over the fixture
    there, same semantics. tests/integration/test_cdc_mirror_property.py draws rows committed up
    to the overlap before the mark, through dbt.
-#}

{% macro high_water_mark_sql(existing, column=none, overlap_minutes=none) -%}
    {%- set column = column or var('bronze_columns').ingested_at -%}
    select coalesce(max({{ column }}), timestamp'1970-01-01')
           - interval {{ var('overlap_minutes') if overlap_minutes is none else overlap_minutes }} minutes
           as increment_start
    from {{ existing }}
{%- endmacro %}


{% macro high_water_mark_metadata_sql(existing, column=none, overlap_minutes=none, branch=none) -%}
    {%- set column = column or var('bronze_columns').ingested_at -%}
    {#- a file with only nulls in the column has no upper bound but a value count: it holds no mark -#}
    select coalesce(max(readable_metrics.{{ column }}.upper_bound), timestamp'1970-01-01')
           - interval {{ var('overlap_minutes') if overlap_minutes is none else overlap_minutes }} minutes
           as increment_start,
           count_if(readable_metrics.{{ column }}.value_count is null) as files_without_metrics
    from {{ existing }}.data_files{% if branch %} version as of '{{ branch }}'{% endif %}
{%- endmacro %}


{% macro as_text_sql(query) -%}
    {#- the first column of `query` as text: Spark writes it in the session time zone, which also
        reads the literal back (a Python datetime from collect() would be in the local zone) -#}
    select cast(increment_start as string) as increment_start, * except (increment_start) from ({{ query }})
{%- endmacro %}


{% macro timestamp_literal(text) -%}
    timestamp'{{ text }}'
{%- endmacro %}


{% macro ingested_after(start, column=none) -%}
    {%- set column = column or var('bronze_columns').ingested_at -%}
    {{ column }} > {{ start }}
{%- endmacro %}


{#- `branch`: read the table's files on that branch (a metadata table reads main unless told) -#}
{% macro increment_start(existing, column=none, overlap_minutes=none, branch=none) -%}
    {%- set column = column or var('bronze_columns').ingested_at -%}
    {%- if execute and existing is not none and existing is not string -%}
        {%- set bound = run_query(as_text_sql(high_water_mark_metadata_sql(existing, column, overlap_minutes, branch))).rows[0] -%}
        {%- if bound[1] > 0 -%}
            {%- set bound = run_query(as_text_sql(high_water_mark_sql(existing, column, overlap_minutes))).rows[0] -%}
        {%- endif -%}
        {{ return(timestamp_literal(bound[0] | string)) }}
    {%- else -%}
        {{ return('(' ~ high_water_mark_sql(existing, column, overlap_minutes) ~ ')') }}
    {%- endif -%}
{%- endmacro %}


{#- The newest value of `column` in `relation` (no overlap), as a literal: a model records it
    to know, next run, what it has seen of another model (gold's `_customers_as_of`). That model
    reads `relation` as this run wrote it: on the run's audit branch once it has one
    (macros/audit_publish.sql), whose rows the model's query reads too. -#}
{% macro high_water_mark(relation, column) -%}
    {%- if execute and ((relation | string).startswith('__dbt__cte__') or load_relation(relation) is none) -%}
        {#- a dbt unit test's fixture (a CTE, which need not have the column), or not built yet
            (`dbt compile` of a new project): nothing seen -#}
        {{ return(timestamp_literal('1970-01-01 00:00:00')) }}
    {%- endif -%}
    {{ return(increment_start(relation, column, overlap_minutes=0, branch=audit_branch_of(relation))) }}
{%- endmacro %}


{#-
    The silver rows a gold model has not counted yet, exactly: silver's append-only models stamp
    every row with `_loaded_at`, the run stamp of the dbt run that appended it, and the CDC
    mirrors every row they insert or update (one value per run, later than every stamp the table
    already holds whatever the clock of the host: macros/run_stamp.sql), so "stamped after the
    newest stamp counted" misses nothing and counts nothing twice, with no overlap.
    `ingested_at` could not do this: it is bronze's clock, and a late bronze commit (a
    dead-letter replay, a held-up batch) that silver reads now can carry a stamp hours old.
    This needs one run at a time to commit per state of a table: `lakehouse dbt` and its loop
    take turns on a host (the dbt-tables lock), and the catalog refuses the commit of a run that
    read a state another run has since committed over, on any host (macros/dbt_fence.sql).
-#}
{% macro loaded_since_last_run(existing, existing_column, column='_loaded_at') -%}
    {{ ingested_after(increment_start(existing, existing_column, overlap_minutes=0), column) }}
{%- endmacro %}


{% macro ingested_since_last_run(existing, column=none) -%}
    {%- set column = column or var('bronze_columns').ingested_at -%}
    {{ ingested_after(increment_start(existing, column), column) }}
{%- endmacro %}


{#-
    Exact increments of the silver models that read bronze (`bronze_increment`). The overlap
    window above is a guess at how late a commit can be; a bronze table's Iceberg snapshots say
    exactly what was committed since a run read it. So each such model remembers the bronze
    snapshot its last run read (main's head, from the `refs` metadata table), in a table property
    of its own (`lakehouse.input-snapshot.<bronze table>`), with the largest data sequence number
    of that snapshot's files (`lakehouse.input-sequence.<bronze table>`). The next run reads the
    rows of the data files that main's later commits added: `ingested_at >= ` the smallest
    `ingested_at` lower bound of those files. Bronze files not added since hold rows the last run
    read, and lie below that bound unless a replay or a late batch stamped rows earlier; those few
    are read again, which each model makes harmless as for the overlap. A late commit stamped an
    hour early is read all the same: the bound comes from the files, not from the clock.

    "Later" is decided by lineage and sequence numbers, never by a commit time. A snapshot's time
    is its writer's clock, and Iceberg accepts a commit stamped up to a minute before its parent:
    a replay from a host 30 s behind was, by `made_current_at`, older than the snapshot a run had
    recorded, and was skipped for good. Every commit to main gets a sequence number above every
    earlier one, so the files main's ancestors (Iceberg's parent chain: `is_current_ancestor`)
    added with a data sequence number above the recorded one are exactly those committed since.

    The snapshot is taken when the model renders, before its query runs, so the query reads that
    snapshot or a later one: whatever lands between is read again next run, never skipped. It is
    kept in the Spark session (`SET`) until the model's table is written, and a post-hook
    (`record_bronze_snapshot`, dbt_project.yml) then stages it on the table, and publishing the
    run's branch records it (macros/audit_publish.sql): a run that fails, or whose tests fail,
    records nothing and the next one starts from the last recorded snapshot.

    Compaction (`lakehouse maintain`) commits `replace` snapshots: their files hold rows appended
    before, so they are not counted as added. The files the appends after the recorded snapshot
    added are found in `all_entries` (the entries of every snapshot still kept), where their bounds
    stay when compaction has since rewritten them into larger files: a run after compaction reads
    from the smallest bound of what was appended since, not from the start of every compacted
    partition.

    When maintenance has expired the recorded snapshot (it is no longer one of main's ancestors),
    the live files whose data sequence number is above the recorded one hold every row appended
    since, whatever its `ingested_at`: a crashed batch completed later keeps its original instant,
    which a window back from the newest `ingested_at` could miss. (A file compaction wrote keeps
    the sequence number of the snapshot it started from, so it is read again only if that
    snapshot came after the recorded one: more read, nothing missed.)

    A full build records the snapshot too. The overlap window stays the fallback for a table built
    before models recorded snapshots, or when a data file lacks bounds.
-#}

{% macro current_snapshot_sql(source) -%}
    {#- main's head, as the table's own reference names it: never the snapshot with the latest
        commit time (a host whose clock is behind commits snapshots stamped before their parent) -#}
    select max(cast(snapshot_id as string)) as snapshot_id {# one row: null for a table without one #}
    from {{ source }}.refs
    where name = 'main'
{%- endmacro %}


{% macro sequence_as_of_sql(source, snapshot_id) -%}
    {#- the largest data sequence number of the files of `snapshot_id`: every file committed
        after it has a larger one -#}
    select cast(coalesce(max(sequence_number), 0) as string) from {{ source }}.entries version as of {{ snapshot_id }}
{%- endmacro %}


{% macro lineage_sql(source) -%}
    {#- main's ancestors (Iceberg walks the parent chain from main's head: `is_current_ancestor`,
        which stops where an ancestor was expired) and their operation -#}
    select history.snapshot_id, snapshots.operation
    from {{ source }}.history as history
    inner join {{ source }}.snapshots as snapshots on history.snapshot_id = snapshots.snapshot_id
    where history.is_current_ancestor
{%- endmacro %}


{% macro recorded_is_ancestor_sql(source, snapshot_id) -%}
    {#- is the recorded snapshot still one of main's ancestors? Then every later ancestor is kept
        too: Iceberg's expiry keeps a chain from the head (expire_snapshots retains ancestors from
        main's head back to the first one it expires), and `is_current_ancestor` stops at a gap -#}
    select count(*) from {{ source }}.history
    where snapshot_id = {{ snapshot_id }} and is_current_ancestor
{%- endmacro %}


{% macro files_added_since_sql(source, sequence, column=none) -%}
    {%- set column = column or var('bronze_columns').ingested_at -%}
    {#- the data files that main's appends after the recorded snapshot added (not compaction's
        `replace`: its files hold rows appended before), by lineage and sequence number: the
        entries with which main's ancestors added them (`all_entries`), whose bounds stay when
        compaction has rewritten the files since. Every snapshot committed after the recorded one
        has a larger sequence number than `sequence`, whatever its commit time says -#}
    with lineage as ({{ lineage_sql(source) }})
    select cast(min(readable_metrics.{{ column }}.lower_bound) as string) as increment_start,
           count(*) as files,
           count_if(readable_metrics.{{ column }}.lower_bound is null) as files_without_bounds
    from {{ source }}.all_entries
    where status = 1 and data_file.content = 0 and sequence_number > {{ sequence }}
      and snapshot_id in (select snapshot_id from lineage where operation <> 'replace')
{%- endmacro %}


{% macro files_after_sequence_sql(source, sequence, column=none) -%}
    {%- set column = column or var('bronze_columns').ingested_at -%}
    {#- the live data files committed after the recorded snapshot, by data sequence number: what
        a run reads when that snapshot has been expired -#}
    select cast(min(readable_metrics.{{ column }}.lower_bound) as string) as increment_start,
           count(*) as files,
           count_if(readable_metrics.{{ column }}.lower_bound is null) as files_without_bounds
    from {{ source }}.entries
    where status <> 2 and data_file.content = 0 and sequence_number > {{ sequence }}
{%- endmacro %}


{#- the Spark session key holding the table properties a model's run is to record once its table
    is written (the bronze snapshots it read, one pair of properties per bronze table; the newest
    transactions it applied), `<property>@<value>` comma-separated, until its post-hook
    (`record_bronze_snapshot`) stages them on the model's table -#}
{% macro pending_snapshot_key(existing) -%}
    lakehouse.pending_input_snapshot.{{ existing.schema }}.{{ existing.identifier }}
{%- endmacro %}


{#- the pending properties of `existing`, {property: value} -#}
{% macro pending_properties(existing) -%}
    {%- set value = run_query("set " ~ pending_snapshot_key(existing)).rows[0][1] -%}
    {%- set pending = {} -%}
    {%- if value and value != '<undefined>' -%}
        {%- for entry in value.split(',') -%}
            {%- set name, recorded = entry.split('@') -%}
            {%- do pending.update({name: recorded}) -%}
        {%- endfor -%}
    {%- endif -%}
    {{ return(pending) }}
{%- endmacro %}


{#- `properties` ({property: value}) for `existing`'s post-hook to record, replacing what an
    earlier render gave for the same properties -#}
{% macro add_pending_properties(existing, properties) -%}
    {%- set pending = pending_properties(existing) -%}
    {%- do pending.update(properties) -%}
    {%- set entries = [] -%}
    {%- for name, value in pending.items() -%}{%- do entries.append(name ~ '@' ~ value) -%}{%- endfor -%}
    {%- do run_query("set " ~ pending_snapshot_key(existing) ~ " = " ~ entries | join(',')) -%}
{%- endmacro %}


{% macro bronze_snapshot_property(source_name) -%}
    lakehouse.input-snapshot.{{ source_name }}
{%- endmacro %}


{% macro bronze_sequence_property(source_name) -%}
    lakehouse.input-sequence.{{ source_name }}
{%- endmacro %}


{#- a table property of `relation`, none when it has none -#}
{% macro table_property(relation, name) -%}
    {%- set value = run_query("show tblproperties " ~ relation ~ " ('" ~ name ~ "')").rows[0][1] -%}
    {#- Spark answers a missing property with the text "Table ... does not have property: ..." -#}
    {{ return(none if value is none or value.endswith('does not have property: ' ~ name) else value) }}
{%- endmacro %}


{#- the number a model recorded in its property `name` (default: the bronze snapshot it read), or none -#}
{% macro recorded_bronze_snapshot(existing, source, name=none) -%}
    {%- set value = table_property(existing, name or bronze_snapshot_property(source.schema ~ '.' ~ source.identifier)) -%}
    {{ return(value if value and value.lstrip('-').isdigit() else none) }}
{%- endmacro %}


{#- a bound `column >= <literal>` from (increment_start, files, files_without_bounds); none when a
    file lacks bounds; 'false' when nothing was added -#}
{% macro bound_of_added_files(increment_start, files, files_without_bounds, column) -%}
    {%- if files_without_bounds > 0 -%}{{ return(none) }}{%- endif -%}
    {{ return('false' if files == 0 else column ~ ' >= ' ~ timestamp_literal(increment_start)) }}
{%- endmacro %}


{#- The predicate of `existing`'s increment of `source` (a bronze table) on an incremental run,
    none on a full build; both remember the snapshot of `source` the run reads. -#}
{% macro bronze_increment(existing, source, column=none) -%}
    {%- set column = column or var('bronze_columns').ingested_at -%}
    {%- if not execute or existing is string or source is string or source.is_cte or load_relation(source) is none -%}
        {#- parsing; a dbt unit test, whose inputs are fixtures (CTEs, no metadata); or a bronze
            table not created yet (`dbt docs generate` or `dbt compile` compiles every model,
            before every stream has been ingested): the overlap's subquery -#}
        {{ return(ingested_since_last_run(existing, column) if is_incremental() else none) }}
    {%- endif -%}
    {%- set snapshot = run_query(current_snapshot_sql(source)).rows[0][0] -%}
    {%- if snapshot is not none -%}
        {%- set sequence = run_query(sequence_as_of_sql(source, snapshot)).rows[0][0] -%}
        {%- set source_name = source.schema ~ "." ~ source.identifier -%}
        {%- do add_pending_properties(existing, {bronze_snapshot_property(source_name): snapshot,
                                                 bronze_sequence_property(source_name): sequence}) -%}
    {%- endif -%}
    {%- if not is_incremental() -%}
        {{ return(none) }}
    {%- endif -%}
    {#- after the snapshot above: the files below include every one the run's query may miss -#}
    {%- set source_name = source.schema ~ '.' ~ source.identifier -%}
    {%- set recorded = recorded_bronze_snapshot(existing, source) -%}
    {%- set recorded_sequence = recorded_bronze_snapshot(existing, source, bronze_sequence_property(source_name)) -%}
    {%- set known = recorded is not none and run_query(recorded_is_ancestor_sql(source, recorded)).rows[0][0] > 0 -%}
    {%- if known and recorded_sequence is none -%}
        {#- recorded by a version that kept no sequence number: read it from the snapshot -#}
        {%- set recorded_sequence = run_query(sequence_as_of_sql(source, recorded)).rows[0][0] -%}
    {%- endif -%}
    {%- if recorded_sequence is not none -%}
        {#- by lineage while the recorded snapshot is one of main's ancestors; once maintenance has
            expired it, by data sequence number over the live files -#}
        {%- set added = run_query(files_added_since_sql(source, recorded_sequence, column) if known
                                  else files_after_sequence_sql(source, recorded_sequence, column)).rows[0] -%}
        {%- set bound = bound_of_added_files(added[0], added[1], added[2], column) -%}
        {%- if bound is not none -%}{{ return(bound) }}{%- endif -%}
    {%- endif -%}
    {{ return(ingested_since_last_run(existing, column)) }}
{%- endmacro %}


{#- post-hook of every silver model: stores the bronze snapshots `bronze_increment` took for it
    (and what else its run is to record: add_pending_properties) -#}
{% macro record_bronze_snapshot(existing) -%}
    {%- if execute and existing is not none and existing is not string -%}
        {%- set pending = pending_properties(existing) -%}
        {%- if pending -%}
            {%- do run_query("reset " ~ pending_snapshot_key(existing)) -%}
            {%- set changed = {} -%}
            {%- for name, value in pending.items() -%}
                {#- unchanged (nothing new in bronze): no commit, so a run with nothing to do writes nothing -#}
                {%- if table_property(existing, name) != value -%}
                    {%- do changed.update({name: value}) -%}
                {%- endif -%}
            {%- endfor -%}
            {%- if changed -%}
                {#- staged: it becomes the table's when the run's branch is published (macros/audit_publish.sql) -#}
                {{ staged_properties_sql(existing, changed) }}
            {%- endif -%}
        {%- endif -%}
    {%- endif -%}
{%- endmacro %}
