"""Per-format decoding and validation, pure: Kafka rows in, validated records out (DataFrames).

Input: the Kafka source's columns (key, value, topic, partition, offset, timestamp, ...).
Output of every ``decode_*``: the stream's bronze payload columns (and format extras such
as ``RESCUED``, ``SCHEMA_ID`` or the CDC changelog columns), the Kafka columns, and
``ERROR_CODE`` / ``ERROR_DETAIL``, null for a good record and naming the reason
(ARCHITECTURE §7) for one that must go to dead letters. A decode that "succeeds" into garbage
(an all-null Avro struct, a Protobuf message without its identity) is caught here too.

One module per wire format, each importable alone: `protobuf`, `avro`, `json_events`,
`debezium`, `dms`. What they share: `checks` (the dead-letter checks every format runs and
the per-batch constants), `strict_json` (the JSON token rules of the CDC row images),
`changelog` (the changelog shape both CDC formats produce, and the row fields a contract
lacks), `bronze_shape` (a decoded batch as bronze rows, good and dead), `column_types` (which
producer types a column holds exactly, and the union of writer schemas). Nothing here imports
the rest of ingestion: the job and decoders use the formats, never the reverse.
"""
