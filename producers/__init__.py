"""Kafka producers of the demo streams (ARCHITECTURE §5), with switchable fault injection."""
