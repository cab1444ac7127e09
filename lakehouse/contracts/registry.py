"""Schema registries: where a framed message's schema id is turned back into its schema.

Two implementations of one small interface (`register`, `get_schema`):

* `LocalSchemaRegistry`: a JSON file in the state folder, for the embedded local platform
  (no Confluent-compatible registry server installs from the reachable package registries).
* `ConfluentSchemaRegistry`: any Confluent-compatible server, when
  ``LAKEHOUSE_SCHEMA_REGISTRY_URL`` is set (credentials, if any, as ``https://user:secret@host``).

The local file, ``<home>/registry/schemas.json``, is meant to be read by other processes
(the ingestion job) too::

    {"format": 1,
     "schemas": {"1": {"schema": "<schema text>", "schema_type": "AVRO"}, ...},
     "subjects": {"purchases-value": [1, 2]}}

Ids follow Confluent's rules: one id per distinct schema (the same schema under another
subject keeps its id), starting at 1, never changed or reused. Subjects list their ids in
version order. Writers take an exclusive lock, re-read, and replace the file atomically,
so readers never see a half-written file and two producers never hand out one id twice.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from lakehouse.core.errors import LakehouseError
from lakehouse.core.locks import file_lock
from lakehouse.core.settings import Settings, redact_url

FILE_FORMAT = 1
SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")


class SchemaNotFound(LookupError):
    """No schema has this id: the message was framed by another registry, or is garbage."""


class SchemaRegistry(Protocol):
    def register(self, subject: str, schema_str: str, schema_type: str = "AVRO") -> int: ...

    def get_schema(self, schema_id: int) -> str: ...

    def subject_schemas(self, subject: str) -> dict[int, str]: ...


def value_subject(topic: str) -> str:
    """The subject of a topic's message values (Confluent's default TopicNameStrategy)."""
    return f"{topic}-value"


def registry_path(settings: Settings) -> Path:
    return settings.home / "registry" / "schemas.json"


def registry_for(settings: Settings) -> SchemaRegistry:
    if settings.schema_registry_url:
        return ConfluentSchemaRegistry(settings.schema_registry_url)
    return LocalSchemaRegistry(registry_path(settings))


def _identity(schema_str: str, schema_type: str) -> tuple[str, str]:
    """What makes two schema texts "the same schema": JSON ones compare parsed, not by spacing."""
    if schema_type in ("AVRO", "JSON"):
        try:
            return schema_type, json.dumps(json.loads(schema_str), sort_keys=True, separators=(",", ":"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{schema_type} schema is not valid JSON: {exc}") from None
    return schema_type, schema_str.strip()


class LocalSchemaRegistry:
    def __init__(self, path: Path | str):
        self.path = Path(path)
        self._lock_path = self.path.with_name(self.path.name + ".lock")
        # Ids never change, so what was read once stays true; only misses go back to the file.
        self._schemas: dict[int, str] = {}
        self._registered: dict[tuple[str, str, str], int] = {}

    def register(self, subject: str, schema_str: str, schema_type: str = "AVRO") -> int:
        if schema_type not in SCHEMA_TYPES:
            raise ValueError(f"unknown schema type {schema_type!r}; known: {', '.join(SCHEMA_TYPES)}")
        identity = _identity(schema_str, schema_type)
        known = self._registered.get((subject, *identity))
        if known is not None:
            return known
        with self._locked():
            state = self._read()
            schema_id = next(
                (int(i) for i, entry in state["schemas"].items()
                 if _identity(entry["schema"], entry["schema_type"]) == identity),
                None,
            )
            if schema_id is None:
                schema_id = max(map(int, state["schemas"]), default=0) + 1
                state["schemas"][str(schema_id)] = {"schema": schema_str, "schema_type": schema_type}
            versions = state["subjects"].setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
                self._write(state)  # a new schema always lands here: new ids are in no subject yet
        self._registered[(subject, *identity)] = schema_id
        return schema_id

    def get_schema(self, schema_id: int) -> str:
        schema = self._schemas.get(schema_id)
        if schema is None:
            self._schemas = {int(i): entry["schema"] for i, entry in self._read()["schemas"].items()}
            schema = self._schemas.get(schema_id)
            if schema is None:
                raise SchemaNotFound(f"schema id {schema_id} is not in {self.path}")
        return schema

    def subject_versions(self, subject: str) -> list[int]:
        """The schema ids of a subject, oldest first (empty if the subject is unknown)."""
        return list(self._read()["subjects"].get(subject, []))

    def subject_schemas(self, subject: str) -> dict[int, str]:
        """{schema id: schema text} of every version of a subject, oldest first: one file read."""
        state = self._read()
        return {schema_id: state["schemas"][str(schema_id)]["schema"]
                for schema_id in state["subjects"].get(subject, [])}

    @contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            held = file_lock(self._lock_path).acquire()
        except OSError as exc:
            raise LakehouseError(f"cannot write the schema registry at {self.path.parent}: {exc.strerror}") from None
        with held:  # released on leaving
            yield

    def _read(self) -> dict:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {"format": FILE_FORMAT, "schemas": {}, "subjects": {}}
        except OSError as exc:
            raise LakehouseError(f"cannot read the schema registry {self.path}: {exc.strerror}") from None
        try:
            state = json.loads(text)
            if not isinstance(state, dict) or state.get("format") != FILE_FORMAT:
                raise ValueError(f"not a registry file of format {FILE_FORMAT}")
            if not isinstance(state.get("schemas"), dict) or not isinstance(state.get("subjects"), dict):
                raise ValueError("no schemas or subjects")
        except ValueError as exc:
            raise LakehouseError(
                f"schema registry {self.path} is damaged ({exc}); restore it from a backup: "
                "messages in Kafka refer to its ids"
            ) from None
        return state

    def _write(self, state: dict) -> None:
        # A temporary file in the same folder, then an atomic rename: readers see the old
        # file or the new one, never a partial one, even if this process dies half-way.
        descriptor, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".schemas-", suffix=".json")
        try:
            with os.fdopen(descriptor, "w") as out:
                os.fchmod(out.fileno(), 0o644)  # mkstemp's 0600 would hide the ids from other users
                json.dump(state, out, indent=2, sort_keys=True)
                out.write("\n")
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


class ConfluentSchemaRegistry:
    """The same interface over confluent_kafka's client (which caches ids and schemas itself).

    Constructing it does not contact the server; the first register/get_schema does.
    A ``mock://`` URL gives confluent_kafka's in-memory mock, for tests.
    """

    def __init__(self, url: str):
        from confluent_kafka.schema_registry import SchemaRegistryClient

        self.url = url
        try:
            # max.retries 1: an unreachable registry fails in seconds, not after minutes of backoff.
            self.client = SchemaRegistryClient.new_client({"url": url, "max.retries": 1})
        except (ValueError, TypeError) as exc:
            raise LakehouseError(f"invalid LAKEHOUSE_SCHEMA_REGISTRY_URL {redact_url(url)!r}: {exc}") from None

    def register(self, subject: str, schema_str: str, schema_type: str = "AVRO") -> int:
        from confluent_kafka.schema_registry import Schema, SchemaRegistryError

        try:
            return self.client.register_schema(subject, Schema(schema_str, schema_type))
        except SchemaRegistryError as exc:
            # 409: incompatible with the subject's earlier versions; 422: invalid schema.
            raise LakehouseError(f"schema registry refused a schema for {subject}: {exc}") from None
        except _transport_errors() as exc:
            raise self._unreachable(exc) from None

    def get_schema(self, schema_id: int) -> str:
        from confluent_kafka.schema_registry import SchemaRegistryError

        try:
            return self.client.get_schema(schema_id).schema_str
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                where = redact_url(self.url)
                raise SchemaNotFound(f"schema id {schema_id} is not in the registry at {where}") from None
            raise LakehouseError(f"schema registry error for schema id {schema_id}: {exc}") from None
        except _transport_errors() as exc:
            raise self._unreachable(exc) from None

    def subject_schemas(self, subject: str) -> dict[int, str]:
        from confluent_kafka.schema_registry import SchemaRegistryError

        try:
            versions = self.client.get_versions(subject)
            registered = [self.client.get_version(subject, version) for version in sorted(versions)]
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                return {}
            raise LakehouseError(f"schema registry error for subject {subject}: {exc}") from None
        except _transport_errors() as exc:
            raise self._unreachable(exc) from None
        return {entry.schema_id: entry.schema.schema_str for entry in registered}

    def _unreachable(self, exc: Exception) -> LakehouseError:
        return LakehouseError(
            f"cannot reach the schema registry at {redact_url(self.url)}: {exc} "
            "(unset LAKEHOUSE_SCHEMA_REGISTRY_URL to use the local file registry)"
        )


def _transport_errors() -> tuple[type[Exception], ...]:
    # confluent_kafka talks HTTP through httpx (or its fork httpx2), imported in this module.
    try:
        from confluent_kafka.schema_registry.common._httpx_compat import httpx

        return (httpx.TransportError, OSError)
    except ImportError:
        return (OSError,)
