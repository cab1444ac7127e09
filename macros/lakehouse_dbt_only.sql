{#-
    The project's on-run-start hook (dbt_project.yml): a dbt command that writes tables runs only
    when `lakehouse dbt` started it. That command holds the dbt-tables lock for it
    (lakehouse/core/locks.py) and says so in LAKEHOUSE_DBT_LOCK_HOLDER: without the lock, two runs
    at once append the same increment twice (first_occurrences drops only ids already committed),
    and `lakehouse maintain` may compact a table under a MERGE. dbt's Jinja cannot take a file
    lock itself, so a plain `dbt run`, `build`, `seed` or `snapshot` (or `retry` of one) is
    refused, in one line that names the same command through `lakehouse dbt`.

    Commands that only read run as they are: `dbt test`, `source freshness`, `docs generate`
    (which runs the hooks too), compile, show, ls, parse, debug. The list names what may run, so
    a command dbt adds later is refused until it is known to only read (as
    lakehouse/operations/dbt.py READ_ONLY_COMMANDS decides who takes the lock). profiles.yml
    refuses every plain command whose LAKEHOUSE_CONFIG_FILE or LAKEHOUSE_PROFILE it would ignore. dbt also renders the hook
    when it parses the project (`execute` false), for every command: nothing is refused then.
-#}
{% macro writes_tables() -%}
  {{ return(flags.WHICH not in ('test', 'freshness', 'source', 'generate', 'serve', 'compile', 'show', 'list', 'ls',
                                'parse', 'debug')) }}
{%- endmacro %}


{% macro refuse_unless_lakehouse_dbt() %}
  {%- if execute and writes_tables() and not env_var('LAKEHOUSE_DBT_LOCK_HOLDER', '') -%}
    {%- set command = invocation_args_dict.get('invocation_command') or ('dbt ' ~ flags.WHICH) -%}
    {{ exceptions.raise_compiler_error(
        "`" ~ command ~ "` writes tables, which needs the dbt-tables lock that other dbt runs and "
        ~ "`lakehouse maintain` take: run it as `lakehouse " ~ command ~ "`") }}
  {%- endif -%}
{% endmacro %}
