{#-
    Table properties of the silver tables partitioned by event day.

    Iceberg's default for a partitioned table spreads the rows over the write tasks by
    partition and writes them with its fanout writer: one open Parquet file per partition a task
    meets, each holding its buffers (dictionaries, pages) until the task ends. A first build or a
    full refresh reads all of bronze, so each of the few write tasks (`spark.sql.shuffle.partitions`,
    4 in profiles.yml) meets a share of every day of the history: 300 days of 10M employees ran
    the driver out of heap at 4g (benchmarks/dbt_scaling.py, benchmarks/RESULTS.md). With fanout
    off, Iceberg asks Spark to sort each task's rows by partition and keeps one file open at a
    time, whatever the history's length; the same build passed at 2g. An incremental append
    sorts only its increment.
-#}
{% macro clustered_write_properties() -%}
    {{ return({'write.spark.fanout.enabled': 'false'}) }}
{%- endmacro %}
