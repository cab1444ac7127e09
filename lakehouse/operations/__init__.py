"""Work on the tables once they exist: maintenance (compaction, expiry, orphans), the
dead-letter tools (list, stats, replay), the status view, `lakehouse migrate` (an older
lakehouse's dead-letter table into the bronze tables) and the dbt runner. Imports the
streaming layer (ingestion) and below, never the commands."""
