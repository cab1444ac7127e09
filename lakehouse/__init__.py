"""Shared core of the streaming lakehouse: configuration, Spark session, catalog, local Kafka, CLI."""

__version__ = "0.1.0"
