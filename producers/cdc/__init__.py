"""Change data capture: a simulated source database, its change streams, and their oracle.

- ``source``: the SQLite source database (tables of ``source_tables.sql``).
- ``simulator``: ``CdcSimulator`` commits random transactions and returns their ``Change``s;
  its database is the authoritative state (ARCHITECTURE §9).
- ``debezium`` (`customers`) and ``dms`` (`accounts`): wire formats, encode and decode.
- ``oracle``: ``NormalizedChange`` (the bronze changelog row, ARCHITECTURE §6) and ``apply``, the
  reference semantics of a mirror.
- ``faults``: duplicated and reordered delivery, as pure functions over messages.
"""
