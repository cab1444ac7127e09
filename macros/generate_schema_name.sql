{#-
    Models land in the namespace their layer names (silver, gold), not in dbt's default
    "<target schema>_<custom schema>": the catalog's namespaces are the layers (ARCHITECTURE §1).
-#}
{% macro generate_schema_name(custom_schema_name, node) -%}
    {{ (custom_schema_name or target.schema) | trim }}
{%- endmacro %}
