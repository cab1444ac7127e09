"""Streaming ingestion: Kafka topics into bronze Iceberg tables, unreadable records to dead letters."""
