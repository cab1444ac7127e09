{#-
    Generic data test: no two rows share the same values in `columns` (a composite key).
    dbt-utils has one, but packages come from the dbt hub, which this project cannot rely on.
-#}
{% test unique_combination(model, columns) %}

select
    {{ columns | join(', ') }},
    count(*) as occurrences
from {{ model }}
group by {{ columns | join(', ') }}
having count(*) > 1

{% endtest %}
