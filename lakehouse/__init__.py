"""The streaming lakehouse's own packages, one floor each (docs/ARCHITECTURE.md, "Layers"):

    lakehouse.commands     the CLI, the demo, the cluster launchers          (top)
    lakehouse.operations   maintenance, dead-letter tools, status, dbt runner
    expectations           quality suites, runner, report
    ingestion, producers   the streaming job; the demo's producers and CDC simulator
    lakehouse.contracts    streams, schemas, registry, wire format, error codes
    lakehouse.core         settings, Spark session, errors, Kafka admin, local platform

A package imports only the floors below it (tests/unit/test_layers.py checks it).
"""

__version__ = "0.1.0"
