{#- cdc_history_written_versions (macros/cdc_history.sql): the versions a run writes, stamped
    (var `carried`: a stored version whose filled `name` changed is written too) -#}
with versions as (select * from {{ ref('versions') }})
{{ cdc_history_written_versions("timestamp'2026-11-02 00:00:00'", ['name'] if var('carried', false) else []) }}
select * from final
