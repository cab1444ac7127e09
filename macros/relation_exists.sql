{#- Whether `relation` exists in the catalog, as a table or as a view.

    Not load_relation alone: dbt-spark fills its relation cache with SHOW TABLE EXTENDED, which
    lists a catalog's tables but not its Iceberg views. A view built in the same run is cached as
    it is created, but on `dbt run --select customers_mirror` the changelog view is not built, so
    load_relation says none, and a macro that then skips its work (filling the columns a change
    did not carry, ending versions at a TRUNCATE) gives a wrong answer in silence. When the cache
    misses, the catalog is asked (SHOW VIEWS; SHOW NAMESPACES first, which a missing schema
    answers with no row rather than an error). -#}
{% macro relation_exists(relation) -%}
    {%- if load_relation(relation) is not none -%}
        {{ return(true) }}
    {%- endif -%}
    {%- if run_query("show namespaces like '" ~ relation.schema ~ "'").rows | length == 0 -%}
        {{ return(false) }}
    {%- endif -%}
    {%- set views = run_query("show views in " ~ relation.schema ~ " like '" ~ relation.identifier ~ "'") -%}
    {{ return(views.rows | length > 0) }}
{%- endmacro %}
