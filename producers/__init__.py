"""Kafka producers of the demo streams (DESIGN §5), with switchable fault injection."""
