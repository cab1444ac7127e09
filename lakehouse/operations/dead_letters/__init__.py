"""The dead-letter tools behind `lakehouse dlq` (ARCHITECTURE §7): bronze.dead_letters read,
and fixed records replayed into bronze.

    filters   which dead letters a command reads: --stream, --reason, --since, --until (pure)
    text      what the commands print: tables, hex dumps, escaped bytes, reports (pure)
    queries   stats, list, show: reads of bronze.dead_letters
    replay    decode the original bytes again with the stream's current decoder (schemas as
              they are now) and append what now reads to the stream's bronze table

By default only pending dead letters (never successfully replayed) count. A dead letter stays
in the table after its replay, as the record of what happened: ``replayed_at`` says when its
record reached bronze, ``replay_attempts`` and ``last_replay_at`` how often and when it was
tried; a record that still fails keeps ``replayed_at`` null and gets the new reason.

filters and text import neither pyspark nor the ingestion: `lakehouse dlq` checks its
arguments with them before Spark starts.
"""

TABLE = "bronze.dead_letters"  # ingestion.dead_letters.TABLE, without importing pyspark
REPLAY_COLUMNS = ("replayed_at", "replay_attempts", "last_replay_at")
