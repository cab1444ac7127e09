{#-
    Silver follows bronze's schema evolution (ARCHITECTURE §6, §9 "Column evolution") without a
    full refresh: an incremental model's run (`on_schema_change='append_new_columns'`: every
    silver model; the cdc_mirror materialization asks for the same) adds the columns its select
    gained and widens, in place, the columns whose type bronze widened: int -> bigint,
    float -> double, a decimal's precision at the same scale (Iceberg's lossless promotions;
    old files stay readable). A column whose type changed otherwise cannot be carried over: the
    run stops with one line naming the command that rebuilds the model. A column the select no
    longer has stays, null in new rows.

    dbt's own `append_new_columns` adds columns only, so a widened column kept its narrower
    type: a value beyond it failed the run's MERGE or insert with Spark's cast error
    (CAST_OVERFLOW_IN_TABLE_INSERT), and a double written to a float column was rounded with no
    error (the CDC mirror property test, tests/integration/test_cdc_mirror_property.py, saw
    both); this overrides it for the spark adapter (dbt looks in the root project first for
    `spark__` implementations of its macros).
-#}
{% macro spark__sync_column_schemas(on_schema_change, target_relation, schema_changes_dict) %}
    {%- if on_schema_change != 'append_new_columns' -%}
        {{ return(default__sync_column_schemas(on_schema_change, target_relation, schema_changes_dict)) }}
    {%- endif -%}
    {%- set stored = {} -%}
    {%- for column in schema_changes_dict['target_columns'] -%}
        {%- do stored.update({column.name | lower: column}) -%}
    {%- endfor -%}
    {%- set added = [] -%}
    {%- set widened = [] -%}
    {%- for column in schema_changes_dict['source_columns'] -%}
        {%- set old = stored.get(column.name | lower) -%}
        {%- if old is none -%}
            {%- do added.append(column) -%}
        {%- elif column_type_change(old.data_type, column.data_type) == 'widening' -%}
            {%- do widened.append(column) -%}
        {%- elif column_type_change(old.data_type, column.data_type) == 'other' -%}
            {%- do exceptions.raise_compiler_error(
                target_relation ~ ': column ' ~ column.name ~ ' changed type from ' ~ old.data_type ~ ' to '
                ~ column.data_type ~ ', which is not a lossless widening (int -> bigint, float -> double, a '
                ~ "decimal's precision): rebuild the model with `lakehouse dbt run --full-refresh --select "
                ~ target_relation.identifier ~ '`') -%}
        {%- endif -%}
    {%- endfor -%}
    {%- if added -%}
        {%- do alter_relation_add_remove_columns(target_relation, added, none) -%}
    {%- endif -%}
    {%- for column in widened -%}
        {%- call statement('widen_column') -%}
            alter table {{ target_relation }} alter column {{ adapter.quote(column.name) }} type {{ column.data_type }}
        {%- endcall -%}
    {%- endfor -%}
    {%- do log(target_relation ~ ': columns added: ' ~ (added | map(attribute='name') | join(', ') or 'none')
               ~ '; widened: ' ~ (widened | map(attribute='name') | join(', ') or 'none'), info=true) -%}
{% endmacro %}


{#- How a column's type changed from `old` to `new`: 'same', 'widening' (Iceberg's promotions),
    'narrower' (the reverse of one: the stored type holds every new value, nothing to do), or
    'other'. -#}
{% macro column_type_change(old, new) %}
    {%- set old = old | lower | replace(' ', '') -%}
    {%- set new = new | lower | replace(' ', '') -%}
    {%- if old == new -%}{{ return('same') }}{%- endif -%}
    {%- set promotions = [('int', 'bigint'), ('float', 'double')] -%}
    {%- if (old, new) in promotions -%}{{ return('widening') }}{%- endif -%}
    {%- if (new, old) in promotions -%}{{ return('narrower') }}{%- endif -%}
    {%- set decimal = '^decimal\\((\\d+),(\\d+)\\)$' -%}
    {%- set a, b = modules.re.match(decimal, old), modules.re.match(decimal, new) -%}
    {%- if a and b and a.group(2) == b.group(2) -%}
        {{ return('widening' if b.group(1) | int > a.group(1) | int else 'narrower') }}
    {%- endif -%}
    {{ return('other') }}
{% endmacro %}


{#- The columns of `relation` (a CDC stream's bronze table) that its changelog view does not
    select by name, as the end of a select list (`, a, b`): the columns the source added after
    the view was written (ARCHITECTURE §6, "Fields the contract lacks"), so they reach the
    mirror and the history with no edit. `named`: the bronze columns the view selects itself
    (renamed or cast); `except`: those it leaves out on purpose. Bronze's own columns (the
    var `bronze_columns`: the Kafka coordinates, the batch, the changelog's and a dead row's
    columns) never pass. `null_when`: a condition under which each is null (a
    row that has no value for them, such as the old key's delete of accounts_changelog). Read
    when the view is built: a `dbt run` after the column appeared rebuilds it. -#}
{% macro cdc_added_columns(relation, named, except=[], null_when=none) -%}
    {%- if execute -%}
        {#- bronze's own columns, not the source's (the var, lakehouse/contracts/bronze_columns.py):
            ingestion's metadata, every Kafka one by its prefix, and a dead row's raw record, reason
            and replay bookkeeping; the Avro schema id is no column of a CDC stream -#}
        {%- set own = var('bronze_columns') -%}
        {%- set kafka_prefix = own.kafka_topic.replace('topic', '') -%}
        {%- set skip = [] -%}
        {%- for key, name in own.items() if key != 'schema_id' and not name.startswith(kafka_prefix) -%}
            {%- do skip.append(name) -%}
        {%- endfor -%}
        {%- for name in named + except -%}{%- do skip.append(name | lower) -%}{%- endfor -%}
        {%- for column in adapter.get_columns_in_relation(relation) -%}
            {%- if column.name | lower not in skip and not (column.name | lower).startswith(kafka_prefix) -%}
        , {% if null_when %}case when not ({{ null_when }}) then {{ adapter.quote(column.name) }} end as {% endif %}{{ adapter.quote(column.name) }}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
{%- endmacro %}
