{#-
    Data test: no two rows of the model share a value of `columns`, a key of several columns
    (a composite primary key, a history's (key, its order key), a mart's grain). dbt's own `unique`
    takes one column; dbt_utils' unique_combination_of_columns would need `dbt deps`, which
    reaches hub.getdbt.com, out of reach where only package registries are (PyPI has no
    dbt_utils). A null is a value like any other here (`group by` groups nulls): two rows whose
    key is null in the same columns are a duplicate; pair with not_null on each column where a
    null is wrong. Restrict the rows with the test's `where` config (e.g. the mirror's
    truncation marker, op 'T', the one row without a key). Fails with one row per duplicated
    key, its columns and `row_count`. Names are quoted: a source column may need it.

        - unique_key_columns:
            arguments:
              columns: [order_id, line_no]
-#}

{% test unique_key_columns(model, columns) %}

{%- set quoted = [] -%}
{%- for column in columns -%}
    {%- do quoted.append(adapter.quote(column)) -%}
{%- endfor %}

select {{ quoted | join(', ') }}, count(*) as row_count
from {{ model }}
group by {{ quoted | join(', ') }}
having count(*) > 1

{% endtest %}
