{#-
    The days an increment touches, as a predicate on a model's event-time column that Iceberg
    prunes by: `(event_at >= timestamp'2026-11-22 00:00:00' and event_at < timestamp'2026-11-24
    00:00:00') or ...`, consecutive days joined into one range, plus `event_at is null` when the
    increment has rows without a time, `false` when it has none.

    The days are computed once, when dbt renders the model (run_query), from the increment
    itself, which its own bound keeps small; inlined as literals they prune partitions and
    files. (`to_date(event_at) in (select ...)` is evaluated at run time and prunes nothing.)

    In a dbt unit test, or outside a run, nothing is narrowed: the predicate is `true`.
-#}

{#- the days `query` returns (its first column: a date, or its text) as a predicate on `column` -#}
{% macro touched_days(query, column) -%}
    {%- if not execute or model.resource_type == 'unit_test' -%}
        {{ return('true') }}
    {%- endif -%}
    {%- set days = run_query('select distinct cast(touched_day as string) from (' ~ query ~ ') as days(touched_day)')
                   .columns[0].values() -%}
    {{ return(day_ranges_predicate(days, column)) }}
{%- endmacro %}


{#- the event days of the rows of `source` that match `increment`, as a predicate on `column`
    (the same time under the model's name) -#}
{% macro event_days_filter(source, source_column, increment, column) -%}
    {{ return(touched_days('select to_date(' ~ source_column ~ ') from ' ~ source ~ ' where ' ~ increment, column)) }}
{%- endmacro %}


{% macro day_ranges_predicate(days, column) -%}
    {#- `days`: dates or their texts, none for rows without a time -#}
    {%- set dates = [] -%}
    {%- for day in days if day is not none -%}
        {#- run_query may hand a day back as text, a date or a datetime -#}
        {%- do dates.append(modules.datetime.date.fromisoformat((day | string)[:10])) -%}
    {%- endfor -%}
    {%- set ranges = [] -%}
    {%- for start in dates | unique | sort -%}
        {%- set end = start + modules.datetime.timedelta(days=1) -%}
        {%- if ranges and ranges[-1]['end'] == start -%}
            {%- do ranges[-1].update({'end': end}) -%}
        {%- else -%}
            {%- do ranges.append({'start': start, 'end': end}) -%}
        {%- endif -%}
    {%- endfor -%}
    {%- set terms = [] -%}
    {%- for span in ranges -%}
        {%- do terms.append("(" ~ column ~ " >= timestamp'" ~ span['start'] ~ " 00:00:00' and " ~ column
                            ~ " < timestamp'" ~ span['end'] ~ " 00:00:00')") -%}
    {%- endfor -%}
    {%- if none in days -%}
        {%- do terms.append(column ~ ' is null') -%}
    {%- endif -%}
    {{ return('(' ~ terms | join(' or ') ~ ')' if terms else 'false') }}
{%- endmacro %}


{#- for a model that only exists from this version on in its present shape: an incremental run
    on a table built by an earlier version (without these columns) stops with what to do -#}
{% macro require_columns(relation, columns) -%}
    {%- if execute -%}
        {%- set present = adapter.get_columns_in_relation(relation) | map(attribute='name') | list -%}
        {%- set missing = columns | reject('in', present) | list -%}
        {%- if missing -%}
            {% do exceptions.raise_compiler_error(relation ~ ' was built by an earlier version of this model (no '
                ~ missing | join(', ') ~ '): rebuild it once with `lakehouse dbt run --full-refresh -s '
                ~ relation.identifier ~ '`') %}
        {%- endif -%}
    {%- endif -%}
{%- endmacro %}
