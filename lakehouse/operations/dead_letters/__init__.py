"""The dead-letter tools behind `lakehouse dlq` (ARCHITECTURE §7): the view bronze.dead_letters
(every stream's dead rows) read, and fixed records replayed in place of their dead rows.

    filters   which dead letters a command reads: --stream, --reason, --since, --until (pure)
    text      what the commands print: tables, hex dumps, escaped bytes, reports (pure)
    queries   stats, list, show: reads of the view bronze.dead_letters
    replay    decode the original bytes again with the stream's current decoder (schemas as
              they are now); one MERGE per stream table replaces each dead row that reads
              now by its decoded row

By default only pending dead letters (still dead rows) count. A replayed record's row keeps
what happened, and the view still lists it with --include-replayed: ``replayed_at`` says when
it was replaced, ``replay_attempts`` and ``last_replay_at`` how often and when it was tried,
its reason the one it had; a record that still fails stays dead and gets the new reason.

filters and text import neither pyspark nor the ingestion: `lakehouse dlq` checks its
arguments with them before Spark starts.
"""

TABLE = "bronze.dead_letters"  # ingestion.dead_letters.VIEW, without importing pyspark
