"""Streaming ingestion: Kafka topics into bronze Iceberg tables, one commit per batch; an
unreadable record is a dead row of the same table (a dead letter)."""
