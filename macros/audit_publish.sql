{#-
    Write-audit-publish (ARCHITECTURE §4, "Publication"). Readers read a silver or gold table's
    `main`. A dbt run that writes tables writes them to an Iceberg branch of its own,
    `audit_<invocation id>`, and moves `main` only once every model and every test of the run
    passed; a failed run publishes nothing and keeps its branch for inspection.

    - `audit_start` (on-run-start) names the branch in the session (`spark.wap.branch`). Iceberg
      then writes every INSERT, MERGE, DELETE and overwrite of a table whose `write.wap.enabled`
      is true to that branch (forked from main at the table's first write in the run) and reads a
      table from the branch once it has one: a model reads what the run's upstream models wrote,
      and dbt's tests read what the run built. The session setting, not explicit branch writes
      (`<table>.branch_<name>`): every materialization (dbt-spark's, cdc_mirror, cdc_live) and
      every test follows it without a statement rewritten. Metadata tables (`refs`, `data_files`)
      still read main: a run's increments are computed from what was published.
    - `audit_model` (every model's pre- and post-hook) sets `write.wap.enabled` on its table and
      the branch in the model's session (a Thrift server has one session per dbt thread).
    - A table property is table-wide in Iceberg, not per branch. The properties that say how far
      a table has read its input (the bronze snapshot, a live table's mirror stamps, a mirror's
      purge horizon) would, written as they are, move past rows a failed run never published:
      `staged_properties_sql` writes them as `lakehouse.staged.<name>` = `<branch>|<value>`, and
      publishing the branch makes them `<name>`. (Properties for which "ahead" is harmless, the
      run-stamp floor and a mirror's `tombstones-purged-at`, are written as they are.)
    - `audit_publish` (on-run-end): when a model or test failed, one line naming them and the
      branch, kept for `audit_branch_retention_hours` (var; `lakehouse maintain` then expires it),
      and nothing else. Otherwise the run is held for the quality gate: `lakehouse dbt` runs dbt
      with LAKEHOUSE_PUBLICATION_GATE=on (the setting; off publishes here, as before), then the
      critical Great Expectations checks of the tables the run wrote, read on the branch
      (lakehouse/operations/quality_gate.py), and then publishes it (`audit_publish_held`, a
      run-operation in the same process and Spark session) or keeps it (`audit_keep_held`). A
      dbt started otherwise (the hook's lock variable set by hand) publishes nothing: no path to
      main skips the checks. Publishing: in the order dbt ran the
      models (upstream first, so a table is never published ahead of one it reads), for every
      table the run wrote: check that main is still the snapshot the run read (macros/dbt_fence.sql;
      the run's reads are copied into a view of the held branch, as the run's own view ends with
      the run), fast-forward main to the branch (`system.fast_forward`, which itself refuses
      unless main is an ancestor of the branch), promote the staged properties, drop the branch.
      A crash between the fast-forward and the promotion leaves the staged positions behind the
      rows: the next run reads again, which every model makes harmless.

    A table's first build is audited too: every model table is created with `write.wap.enabled`
    (audit_table_properties()), so Iceberg writes a CREATE ... AS SELECT to the
    branch, main stays empty until it is published, and the new table reads its upstream tables
    as this run wrote them. A first build that wrote main read them as published, and a gold table
    built so lagged its silver (the chaos suite's reconciliation check failed on it). A
    `--full-refresh` replaces the table, which Iceberg does on main: it writes main directly and
    says so in a line (docs/models.md).
-#}

{% macro audit_branch() -%}
    {{ return('audit_' ~ (invocation_id | replace('-', '_'))) }}
{%- endmacro %}


{#- Every model table's, from its creation: dbt_project.yml (`+tblproperties`) for the models
    without tblproperties of their own; the others add these to theirs (a model's own replace
    the project's): merge_on_read_properties(), silver_events_config() -#}
{% macro audit_table_properties() -%}
    {{ return({'write.wap.enabled': 'true'}) }}
{%- endmacro %}


{% macro staged_property_prefix() -%}
    {{ return('lakehouse.staged.') }}
{%- endmacro %}


{#- Is this run audited? It writes tables, and its project runs `audit_start` on-run-start (a
    project of the tests' own that borrows these macros without the hooks writes main, and records
    its positions as they are) -#}
{% macro audit_active() -%}
    {%- if not (execute and writes_tables()) -%}{{ return(false) }}{%- endif -%}
    {#- `graph` is a dict; a dbt unit test's is empty -#}
    {%- for node in (graph.get('nodes') or {}).values() if node.resource_type == 'operation' and 'audit_start(' in node.raw_code -%}
        {{ return(true) }}
    {%- endfor -%}
    {{ return(false) }}
{%- endmacro %}


{% macro audit_start() %}
    {%- if execute and writes_tables() -%}
        {%- do run_query('set spark.wap.branch = ' ~ audit_branch()) -%}
    {%- endif -%}
{% endmacro %}


{#- dbt's `ref`, which first names the run's branch in the session of a Thrift server: there dbt
    opens a session per model and per test, and a model's SQL reads its upstream tables while dbt
    renders it, before its pre-hook (an increment's bounds, the days it touches), as a test reads
    its model. Without it, gold rendered through the server read silver's main and missed the rows
    the run had just written to silver's branch. (dbt's target does not say which method it uses,
    so the local session, one for the whole run, is told again too: a SET, a few milliseconds.) -#}
{% macro ref() -%}
    {%- if audit_active() -%}
        {%- do run_query('set spark.wap.branch = ' ~ audit_branch()) -%}
    {%- endif -%}
    {%- set version = kwargs.get('version') or kwargs.get('v') -%}
    {%- if varargs | length == 1 -%}
        {{ return(builtins.ref(varargs[0], version=version)) }}
    {%- endif -%}
    {{ return(builtins.ref(varargs[0], varargs[1], version=version)) }}
{%- endmacro %}


{#- Every model's pre-hook, and with `written` its post-hook. A full refresh writes main directly:
    replacing a table whose `write.wap.enabled` is true would clear main and leave the rows on the
    branch, an empty table for readers until it is published; its post-hook names the branch again
    for the models and tests after it. A table created by this version has `write.wap.enabled`
    from its creation (audit_table_properties()); one created before gets it
    here, once. -#}
{% macro audit_model(relation, written=false) %}
    {%- if execute and writes_tables() and model.config.materialized not in ('view', 'ephemeral') -%}
        {%- if written -%}
            {%- do run_query('set spark.wap.branch = ' ~ audit_branch()) if flags.FULL_REFRESH -%}
        {%- else -%}
            {%- set existing = load_relation(relation) -%}
            {%- if existing is not none and flags.FULL_REFRESH -%}
                {%- do run_query('reset spark.wap.branch') -%}
                {%- do log(relation.schema ~ '.' ~ relation.identifier ~ ': full refresh: written to main directly, '
                           ~ 'before its tests (Iceberg replaces a table on main)', info=true) -%}
            {%- else -%}
                {%- do run_query('set spark.wap.branch = ' ~ audit_branch()) -%}
                {%- if existing is not none and existing.type == 'table'
                      and table_property(existing, 'write.wap.enabled') != 'true' -%}
                    alter table {{ existing }} set tblproperties ('write.wap.enabled' = 'true')
                {%- endif -%}
            {%- endif -%}
        {%- endif -%}
    {%- endif -%}
{% endmacro %}


{#- the run's branch if `relation` has it (this run wrote the table), else none -#}
{% macro audit_branch_of(relation) -%}
    {%- if not audit_active() -%}{{ return(none) }}{%- endif -%}
    {%- set found = run_query("select count(*) from " ~ relation ~ ".refs where name = '" ~ audit_branch() ~ "'").rows[0][0] -%}
    {{ return(audit_branch() if found > 0 else none) }}
{%- endmacro %}


{#- `alter table` setting `properties` ({name: value}) of `relation`, staged on the run's branch
    (as they are when the run is not audited) -#}
{% macro staged_properties_sql(relation, properties) -%}
    {%- set staged = audit_active() -%}
    alter table {{ relation }} set tblproperties (
    {%- for name, value in properties.items() %}
        '{{ (staged_property_prefix() ~ name) if staged else name }}' = '{{ (audit_branch() ~ '|' ~ value) if staged else value }}'{{ ',' if not loop.last }}
    {%- endfor %})
{%- endmacro %}


{#- Is this dbt run one `lakehouse dbt` gates (lakehouse/operations/quality_gate.py)? -#}
{% macro audit_gate_holds() -%}
    {{ return(env_var('LAKEHOUSE_PUBLICATION_GATE', '') == 'on' and env_var('LAKEHOUSE_GATE_RUNNER', '') == '1') }}
{%- endmacro %}


{#- The setting publication_gate off: published once its models and dbt tests passed -#}
{% macro audit_gate_off() -%}
    {{ return(env_var('LAKEHOUSE_PUBLICATION_GATE', '') == 'off') }}
{%- endmacro %}


{#- The run's reads (macros/dbt_fence.sql), kept for the held branch's publication -#}
{% macro audit_held_view(branch, qualified=true) -%}
    {{ return(('global_temp.' if qualified else '') ~ 'lakehouse_held_' ~ branch) }}
{%- endmacro %}


{#- [schema.alias] of the models and seeds a run ran with success, in the order dbt ran them -#}
{% macro audit_ran(results) -%}
    {%- set ran = [] -%}
    {%- for result in results if result.node.resource_type in ('model', 'seed') and result.status == 'success' -%}
        {%- do ran.append(result.node.schema ~ '.' ~ result.node.alias) -%}
    {%- endfor -%}
    {{ return(ran) }}
{%- endmacro %}


{#- The relations among `names` (schema.alias, in that order) of a model table that has `branch` -#}
{% macro audit_written(names, branch) -%}
    {%- set nodes = {} -%}
    {%- for node in graph.nodes.values() if node.resource_type == 'model'
                                           and node.config.materialized not in ('view', 'ephemeral') -%}
        {%- do nodes.update({node.schema ~ '.' ~ node.alias: node}) -%}
    {%- endfor -%}
    {%- set written = [] -%}
    {%- for name in names if name in nodes -%}
        {%- set node = nodes[name] -%}
        {%- set relation = adapter.get_relation(database=node.database, schema=node.schema, identifier=node.alias) -%}
        {%- if relation is not none and run_query("select count(*) from " ~ relation ~ ".refs where name = '"
                                                  ~ branch ~ "'").rows[0][0] > 0 -%}
            {%- do written.append(relation) -%}
        {%- endif -%}
    {%- endfor -%}
    {{ return(written) }}
{%- endmacro %}


{% macro audit_publish(results) %}
    {%- if execute and writes_tables() -%}
        {%- do run_query('reset spark.wap.branch') -%}
        {%- set branch = audit_branch() -%}
        {%- set failed = [] -%}
        {%- for result in results if result.status in ('error', 'fail', 'runtime error') -%}
            {%- do failed.append(result.node.name) -%}
        {%- endfor -%}
        {%- set written = [] -%}
        {%- for result in results if result.node.resource_type == 'model' -%}
            {%- do written.append(result.node.schema ~ '.' ~ result.node.alias) -%}
        {%- endfor -%}
        {%- set written = audit_written(written, branch) -%}
        {%- set changed = [] -%}
        {%- for relation in written if not failed -%}
            {%- set head = run_query("select cast(snapshot_id as string) from " ~ relation ~ ".refs where name = 'main'").rows -%}
            {%- do changed.append(relation) if audit_branch_changes_data(relation, branch, head[0][0] if head else none) -%}
        {%- endfor -%}
        {%- if failed -%}
            {%- do audit_keep(written, branch, failed | length ~ ' failed (' ~ failed | join(', ') ~ ')') -%}
        {%- elif not changed or audit_gate_off() -%}
            {#- nothing for the checks to look at (main stays, the staged positions are promoted), or
                the gate turned off (LAKEHOUSE_PUBLICATION_GATE=off) -#}
            {%- do audit_publish_written(written, audit_ran(results), branch, dbt_fence_view(), changed) -%}
        {%- elif not audit_gate_holds() -%}
            {%- do audit_keep(written, branch, 'dbt was not started by `lakehouse dbt`, which runs the critical '
                                               ~ 'quality checks before it publishes') -%}
            {{ exceptions.raise_compiler_error('nothing published: run it as `lakehouse dbt ...` (the line above)') }}
        {%- else -%}
            {#- literal values: the run's own view is dropped when the run ends -#}
            {%- set rows = [] -%}
            {%- for row in ([] if flags.FULL_REFRESH else run_query('select t, s from ' ~ dbt_fence_view()).rows) -%}
                {%- do rows.append("('" ~ row[0] ~ "', '" ~ row[1] ~ "')") -%}
            {%- endfor -%}
            {%- do run_query('create or replace global temporary view ' ~ audit_held_view(branch, qualified=false) ~ ' as '
                             ~ (('select * from values ' ~ rows | join(', ') ~ ' as v(t, s)') if rows
                                else 'select cast(null as string) as t, cast(null as string) as s where false')) -%}
            {#- with its retention from now: a gate whose process dies leaves a branch that
                `lakehouse maintain` expires, not one kept for ever -#}
            {%- do audit_retain(written, branch) -%}
            {%- do log('held for the quality checks: branch ' ~ branch ~ ' of ' ~ written | join(', '), info=true) -%}
        {%- endif -%}
    {%- endif -%}
{% endmacro %}


{#- `written` (relations) keep `branch` for inspection, for `audit_branch_retention_hours`
    (`lakehouse maintain`, Iceberg's expire_snapshots, drops a branch older than its retention);
    one line says why (`reason`) and how to look -#}
{% macro audit_keep(written, branch, reason) %}
    {%- do audit_retain(written, branch) -%}
    {%- do log('not published: ' ~ reason ~ '; main of every table '
               ~ 'is unchanged; what the run wrote stays on branch ' ~ branch ~ ' of ' ~ (written | join(', ') or 'no table')
               ~ " (`select ... from <table> version as of '" ~ branch ~ "'`, `lakehouse status`)", info=true) -%}
{% endmacro %}


{#- `relation` (or `schema.table`) named with the session's catalog, for Iceberg's procedures and
    its branch and tag DDL: given `silver.x`, Iceberg tries `silver` as a catalog first and logs a
    WARN with a stack trace per statement (Spark3Util, "Failed to load catalog: silver") -#}
{% macro audit_catalog_name(relation) -%}
    {{ return(run_query('select current_catalog()').rows[0][0] ~ '.' ~ relation) }}
{%- endmacro %}


{#- `branch` of each of `written` kept `audit_branch_retention_hours` past its head's commit -#}
{% macro audit_retain(written, branch) %}
    {%- for relation in written -%}
        {%- set head = run_query("select snapshot_id from " ~ relation ~ ".refs where name = '" ~ branch ~ "'").rows[0][0] -%}
        {%- do run_query('alter table ' ~ audit_catalog_name(relation) ~ ' replace branch ' ~ branch ~ ' as of version ' ~ head
                         ~ ' retain ' ~ var('audit_branch_retention_hours') ~ ' hours') -%}
    {%- endfor -%}
{% endmacro %}


{#- `lakehouse dbt run-operation audit_publish_held --args '{branch: ..., ran: [...]}'`, which
    lakehouse/operations/quality_gate.py runs once the held run's checks passed: `ran` is
    audit_ran() of the held run -#}
{% macro audit_publish_held(branch, ran) %}
    {%- do run_query('reset spark.wap.branch') -%}
    {%- set reads = audit_held_view(branch) -%}
    {%- if not run_query("show views in global_temp like '" ~ audit_held_view(branch, qualified=false) ~ "'").rows -%}
        {{ exceptions.raise_compiler_error('branch ' ~ branch ~ ' is not held in this Spark application (the run that '
            ~ 'wrote it ended): not published; run dbt again') }}
    {%- endif -%}
    {%- do audit_publish_written(audit_written(ran, branch), ran, branch, reads) -%}
    {%- do run_query('drop view if exists ' ~ reads) -%}
{% endmacro %}


{#- `written` (relations, in the order dbt ran them) published, then the cut recorded; `changed`:
    those among them whose branch changed rows, when the caller has found them already -#}
{% macro audit_publish_written(written, ran, branch, reads, changed=none) %}
    {%- set published, unchanged = [], [] -%}
    {%- for relation in written -%}
        {%- set moved = audit_publish_table(relation, branch, reads,
                                            none if changed is none else relation in changed) -%}
        {%- do (published if moved else unchanged).append(relation) -%}
    {%- endfor -%}
    {%- if published -%}
        {%- do log('published ' ~ published | length ~ ' table(s) of branch ' ~ branch ~ ': ' ~ published | join(', '), info=true) -%}
    {%- endif -%}
    {%- if unchanged -%}
        {%- do log('nothing new, main left as it was: ' ~ unchanged | join(', '), info=true) -%}
    {%- endif -%}
    {%- do audit_record_publication(ran, branch) -%}
{% endmacro %}


{#- `lakehouse dbt run-operation audit_keep_held --args '{branch: ..., ran: [...], reason: ...}'`:
    the held run's checks failed -#}
{% macro audit_keep_held(branch, ran, reason) %}
    {%- do run_query('reset spark.wap.branch') -%}
    {%- do audit_keep(audit_written(ran, branch), branch, reason) -%}
    {%- do run_query('drop view if exists ' ~ audit_held_view(branch)) -%}
{% endmacro %}


{#- main of `relation` moved to `branch`, its staged properties promoted, the branch dropped;
    `reads`: the view of what main was when the run read each table; `changed`: whether the
    branch changed rows (none: found here) -#}
{% macro audit_publish_table(relation, branch, reads, changed=none) %}
    {%- set name = relation.schema ~ '.' ~ relation.identifier -%}
    {%- set read = run_query('select s from ' ~ reads ~ " where t = '" ~ name ~ "'").rows -%}
    {%- set head = run_query("select cast(snapshot_id as string) from " ~ relation ~ ".refs where name = 'main'").rows -%}
    {#- a table this run created or replaced (first build, full refresh: no reads kept) has no read
        snapshot to compare: fast_forward's own check (main an ancestor of the branch) then stands alone -#}
    {%- if read and not flags.FULL_REFRESH and read[0][0] != (head[0][0] if head else none) -%}
        {{ exceptions.raise_compiler_error(name ~ ': not published: its main moved (snapshot ' ~ read[0][0]
            ~ ' when this run started, ' ~ (head[0][0] if head else 'none') ~ ' now: another run or host published it); '
            ~ 'nothing of this table is published, its branch ' ~ branch ~ ' is kept; run dbt again') }}
    {%- endif -%}
    {%- set changed = audit_branch_changes_data(relation, branch, head[0][0] if head else none)
                      if changed is none else changed -%}
    {%- set qualified = audit_catalog_name(name) -%}
    {%- if changed -%}
        {%- do run_query("call system.fast_forward('" ~ qualified ~ "', 'main', '" ~ branch ~ "')") -%}
    {%- endif -%}
    {%- set promoted = [] -%}
    {%- for row in run_query('show tblproperties ' ~ relation).rows
          if row[0].startswith(staged_property_prefix()) and (row[1] | string).startswith(branch ~ '|') -%}
        {%- do promoted.append("'" ~ row[0][staged_property_prefix() | length:] ~ "' = '" ~ (row[1] | string)[branch | length + 1:] ~ "'") -%}
    {%- endfor -%}
    {%- if promoted -%}
        {%- do run_query('alter table ' ~ relation ~ ' set tblproperties (' ~ promoted | join(', ') ~ ')') -%}
    {%- endif -%}
    {%- do run_query('alter table ' ~ qualified ~ ' drop branch ' ~ branch) -%}
    {{ return(changed) }}
{% endmacro %}


{#- Did the run's commits on `branch` change the rows of `relation`, whose main is `main_head`?
    A model with nothing new still commits: Iceberg's Spark writer commits an append of no files,
    and a MERGE of no rows. Moving main to such a snapshot would change nothing a reader
    sees, yet make every idle run of `lakehouse dbt loop` a publication and a snapshot per table
    (and the cut would never equal the previous one). So: walk the branch's lineage back to
    main by parent id; a snapshot that added or removed no data or delete file changes nothing
    (Iceberg's summary omits a count that is zero, and always has the totals).
    A lineage that does not reach main (never: fast_forward would refuse it) counts as a change. -#}
{% macro audit_branch_changes_data(relation, branch, main_head) %}
    {%- if main_head is none -%}{{ return(true) }}{%- endif -%}
    {%- set branch_head = run_query("select cast(snapshot_id as string) from " ~ relation ~ ".refs where name = '"
                                    ~ branch ~ "'").rows[0][0] -%}
    {%- set parents, changes = {}, {} -%}
    {%- set files = [] -%}
    {%- for key in ('added-data-files', 'deleted-data-files', 'added-delete-files', 'removed-delete-files') -%}
        {%- do files.append("coalesce(cast(summary['" ~ key ~ "'] as bigint), 0)") -%}
    {%- endfor -%}
    {#- a snapshot without Iceberg's summary totals (another writer's) cannot be shown empty: a change -#}
    {%- for row in run_query('select cast(snapshot_id as string), cast(parent_id as string), '
                             ~ files | join(' + ') ~ " > 0 or summary['total-data-files'] is null from "
                             ~ relation ~ '.snapshots').rows -%}
        {%- do parents.update({row[0]: row[1]}) -%}
        {%- do changes.update({row[0]: row[2]}) -%}
    {%- endfor -%}
    {%- set walk = {'at': branch_head, 'changed': none} -%}
    {%- for _ in range(parents | length + 1) -%}
        {%- if walk.changed is none -%}
            {%- if walk.at == main_head -%}
                {%- do walk.update({'changed': false}) -%}
            {%- elif walk.at not in parents or changes[walk.at] -%}
                {%- do walk.update({'changed': true}) -%}
            {%- else -%}
                {%- do walk.update({'at': parents[walk.at]}) -%}
            {%- endif -%}
        {%- endif -%}
    {%- endfor -%}
    {{ return(walk.changed is not false) }}
{% endmacro %}


{#- After a run's tables are published (`ran`: audit_ran() of the run): the cut, in one commit of
    var('publications_table').
    Each table takes the snapshot of main this run published, or ran on (a full refresh, a seed, a model
    with nothing new), or else the one the previous cut named: not main's head, which another
    host's run may be publishing table by table now. The commit is fenced as a model's is
    (macros/dbt_fence.sql), on the cut this one was made from: two runs that made a cut from the
    same one cannot both commit it, and the one refused says so (its tables are published; the
    next cut names them). A cut that names what the previous one did is not written. -#}
{% macro audit_record_publication(ran, branch) %}
    {%- set publications = var('publications_table') -%}
    {%- do run_query('create table if not exists ' ~ publications ~ ' (publication string not null, '
                     ~ 'table_name string not null, snapshot_id bigint not null, published_at timestamp not null) '
                     ~ "using iceberg comment 'the published cut: every silver and gold table at the snapshot of one "
                     ~ "publication (docs/models.md, Reading published data)'") -%}
    {%- set head = run_query("select cast(snapshot_id as string) from " ~ publications ~ ".refs where name = 'main'").rows -%}
    {%- set read = head[0][0] if head else none -%}
    {%- set previous = {} -%}
    {%- if read is not none -%}
        {%- for row in run_query('select table_name, snapshot_id from ' ~ publications ~ ' version as of ' ~ read).rows -%}
            {%- do previous.update({row[0]: row[1]}) -%}
        {%- endfor -%}
    {%- endif -%}
    {%- set heads = [] -%}
    {#- seeds too (a gold model joins one): `dbt seed` writes main, unaudited (docs/models.md) -#}
    {%- for node in graph.nodes.values() if node.resource_type in ('model', 'seed')
                                           and node.config.materialized not in ('view', 'ephemeral') -%}
        {%- set name = node.schema ~ '.' ~ node.alias -%}
        {%- set relation = adapter.get_relation(database=node.database, schema=node.schema, identifier=node.alias) -%}
        {%- if relation is not none and (name in ran or name not in previous) -%}
            {%- do heads.append("select '" ~ name ~ "' as t, snapshot_id as s from " ~ relation ~ ".refs where name = 'main'") -%}
        {%- elif relation is not none -%}
            {%- do heads.append("select '" ~ name ~ "' as t, cast(" ~ previous[name] ~ " as bigint) as s") -%}
        {%- endif -%}
    {%- endfor -%}
    {%- set cut = {} -%}
    {%- for row in (run_query(heads | join(' union all ')).rows if heads else []) -%}
        {%- do cut.update({row[0]: row[1]}) -%}
    {%- endfor -%}
    {%- if cut and cut != previous -%}
        {%- set rows = [] -%}
        {%- for name, snapshot in cut | dictsort -%}
            {%- do rows.append("('" ~ name ~ "', cast(" ~ snapshot ~ " as bigint))") -%}
        {%- endfor -%}
        {%- do dbt_fence_model(none, read=publications ~ '@' ~ (read if read is not none else 'none')) -%}
        {%- do run_query('set `spark.sql.iceberg.snapshot-property.lakehouse.publication` = `' ~ branch ~ '`') -%}
        {%- do run_query('insert overwrite ' ~ publications ~ " select '" ~ branch ~ "', t, s, current_timestamp() from values "
                         ~ rows | join(', ') ~ ' as v(t, s)') -%}
        {%- do run_query('reset `spark.sql.iceberg.snapshot-property.lakehouse.publication`') -%}
        {%- do dbt_fence_end() -%}
        {%- do log('publication ' ~ branch ~ ': ' ~ cut | length ~ ' table(s) in ' ~ publications
                   ~ ' (`lakehouse published` prints how to read them)', info=true) -%}
    {%- endif -%}
{% endmacro %}
