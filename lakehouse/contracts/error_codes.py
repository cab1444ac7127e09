"""The closed set of dead-letter reason codes (ARCHITECTURE §7), without importing pyspark.

The one source of truth: ingestion.dead_letters re-exports it for the ingestion job, and the
command line (`lakehouse dlq`) and the quality suites read it from here, so validating a
``--reason`` or listing suites never pays for a pyspark import.
"""

from __future__ import annotations

ERROR_CODES = {
    "CORRUPT_PAYLOAD": "the bytes are not a readable message of the stream's format",
    "SCHEMA_MISMATCH": "a field has a value of the wrong type for the declared schema",
    "MISSING_REQUIRED_FIELD": "a field the schema requires is absent or null",
    "EVENT_TIME_OUT_OF_RANGE": "the event time is implausible (before 2000 or more than a day ahead)",
    "UNKNOWN_SCHEMA_ID": "the registry schema id in the message header is not known",
    "INVALID_CDC_ENVELOPE": "a change record lacks the envelope fields its format requires",
}
