"""Work on the tables once they exist: maintenance (compaction, expiry, orphans), the
dead-letter tools (list, stats, replay), the status view and the dbt runner. Imports the
streaming layer (ingestion) and below, never the commands."""
