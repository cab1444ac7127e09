"""What producers and ingestion agree on: the streams of pipeline.yml, their schema files,
the schema registry, the Confluent wire framing, Protobuf compilation and the dead-letter
error codes. Imports only lakehouse.core."""

from pathlib import Path

SCHEMAS_DIR = Path(__file__).resolve().parent / "schemas"  # every stream's schema files
