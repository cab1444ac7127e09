"""What several test folders and the benchmarks share; never the project's own code.

Servers that stand in for what a real deployment talks to (a Confluent-API schema registry:
registry_server.py); synthetic data written straight into the ingestion's bronze tables
(bronze_history.py, bronze_rows.py, change_patterns.py); readers of what a run did (Spark's event
log: spark_events.py); a producer's messages caught instead of sent (deliveries.py). Tests build
from here and from the product, never from benchmarks/; the benchmarks import from here
(tests/unit/test_suite_layout.py checks the direction)."""
