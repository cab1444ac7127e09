"""A schema registry speaking Confluent's Schema Registry API over HTTP, for tests.

It implements the endpoints the project calls, with the request and response bodies of
Confluent's public API reference, and a subject's compatibility setting:

    POST /subjects/{subject}/versions      {"schema": ..., "schemaType": ...} -> {"id": N}
    GET  /schemas/ids/{id}                 -> {"schema": ..., "schemaType": ...}
    GET  /subjects/{subject}/versions      -> [1, 2]
    GET  /subjects/{subject}/versions/{v}  -> {"subject", "id", "version", "schema", "schemaType"}
    PUT  /config/{subject}                 {"compatibility": "NONE"} -> {"compatibility": "NONE"}
    errors                                 -> {"error_code": 40401|40403|409|42201|50001, "message": ...}

Compatibility is the server's business, as in Confluent's: BACKWARD (the default) accepts an
Avro schema whose readers read the subject's latest version's data by Avro's schema resolution
(fields matched by name, a reader field the writer lacks needs a default, the promotions
int -> long/float/double, long -> float/double, float -> double, string <-> bytes; logical types
are not compared, as Avro's own checker does not), NONE accepts anything. So a producer may
register what a real registry accepts: `quantity` from int to double, a nested record's fields
in another order, a nested field added with a default.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
# Avro's promotions (specification, "Schema Resolution"): writer type -> the reader types that read it
PROMOTIONS = {"int": {"long", "float", "double"}, "long": {"float", "double"}, "float": {"double"},
              "string": {"bytes"}, "bytes": {"string"}}


class Registry:
    """The registry's state and the requests it saw."""

    def __init__(self, password: str | None = None):
        self.schemas: dict[int, tuple[str, str]] = {}  # id -> (schema, schemaType)
        self.subjects: dict[str, list[int]] = {}
        self.compatibility: dict[str, str] = {}  # subject -> level; BACKWARD when absent
        self.requests: list[dict] = []
        self.password = password
        self.fail_with_500 = False


def _kind(schema) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        complex_kind = schema["type"] in ("record", "enum", "array", "map", "fixed")
        return schema["type"] if complex_kind else _kind(schema["type"])
    return schema


def reads(reader, writer, named: dict | None = None) -> bool:
    """Whether data written with ``writer`` reads with ``reader`` (Avro schema resolution)."""
    named = {} if named is None else named
    for schema in (reader, writer):
        if isinstance(schema, dict) and "name" in schema:
            named.setdefault(schema["name"], schema)
    reader = named.get(reader, reader) if isinstance(reader, str) and reader not in PRIMITIVES else reader
    writer = named.get(writer, writer) if isinstance(writer, str) and writer not in PRIMITIVES else writer
    r, w = _kind(reader), _kind(writer)
    if w == "union":
        return all(reads(reader, branch, named) for branch in writer)
    if r == "union":
        return any(reads(branch, writer, named) for branch in reader)
    if r in PRIMITIVES or w in PRIMITIVES:
        return r == w or r in PROMOTIONS.get(w, ())
    if r != w:
        return False
    if r == "record":
        written = {f["name"]: f for f in writer["fields"]}
        return all(reads(f["type"], written[f["name"]]["type"], named) if f["name"] in written else "default" in f
                   for f in reader["fields"])
    if r == "array":
        return reads(reader["items"], writer["items"], named)
    if r == "map":
        return reads(reader["values"], writer["values"], named)
    if r == "enum":
        return set(writer["symbols"]) <= set(reader["symbols"]) or "default" in reader
    return reader.get("size") == writer.get("size")  # fixed


def handler_for(registry: Registry):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # keep pytest's output clean
            pass

        def _reply(self, status: int, body) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, code: int, message: str) -> None:
            self._reply(status, {"error_code": code, "message": message})

        def _handle(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            path = urlsplit(self.path).path
            registry.requests.append({"method": method, "path": path, "query": urlsplit(self.path).query,
                                      "content_type": self.headers.get("Content-Type"),
                                      "accept": self.headers.get("Accept"),
                                      "authorization": self.headers.get("Authorization"),
                                      "body": json.loads(raw) if raw else None})
            if registry.password is not None:
                expected = "Basic " + base64.b64encode(f"lake:{registry.password}".encode()).decode()
                if self.headers.get("Authorization") != expected:
                    return self._error(401, 40101, "Unauthorized")
            if registry.fail_with_500:
                return self._error(500, 50001, "Error in the backend data store")
            parts = [unquote(p) for p in path.strip("/").split("/")]
            if method == "POST" and len(parts) == 3 and parts[0] == "subjects" and parts[2] == "versions":
                return self._register(parts[1], json.loads(raw))
            if method == "PUT" and len(parts) == 2 and parts[0] == "config":
                level = json.loads(raw).get("compatibility")
                registry.compatibility[parts[1]] = level
                return self._reply(200, {"compatibility": level})
            if method == "GET" and parts[:2] == ["schemas", "ids"] and len(parts) == 3:
                found = registry.schemas.get(int(parts[2]))
                if found is None:
                    return self._error(404, 40403, "Schema not found")
                return self._reply(200, {"schema": found[0], "schemaType": found[1]})
            if method == "GET" and parts[0] == "subjects" and len(parts) in (3, 4) and parts[2] == "versions":
                ids = registry.subjects.get(parts[1])
                if ids is None:
                    return self._error(404, 40401, f"Subject '{parts[1]}' not found.")
                if len(parts) == 3:
                    return self._reply(200, list(range(1, len(ids) + 1)))
                version = len(ids) if parts[3] == "latest" else int(parts[3])
                if not 1 <= version <= len(ids):
                    return self._error(404, 40402, "Version not found.")
                schema, kind = registry.schemas[ids[version - 1]]
                return self._reply(200, {"subject": parts[1], "id": ids[version - 1], "version": version,
                                         "schema": schema, "schemaType": kind})
            return self._error(404, 404, "HTTP 404 Not Found")

        def _register(self, subject: str, body: dict) -> None:
            schema, kind = body.get("schema"), body.get("schemaType", "AVRO")
            try:
                parsed = json.loads(schema)
            except (TypeError, json.JSONDecodeError):
                return self._error(422, 42201, "Either the input schema or one of its references is invalid")
            ids = registry.subjects.setdefault(subject, [])
            latest = registry.schemas[ids[-1]] if ids else None
            backward = registry.compatibility.get(subject, "BACKWARD") == "BACKWARD"
            if backward and latest is not None and kind == "AVRO" and latest[1] == "AVRO" \
                    and not reads(parsed, json.loads(latest[0])):
                return self._error(409, 409, "Schema being registered is incompatible with an earlier schema "
                                             f"for subject \"{subject}\"")
            known = next((i for i, (s, k) in registry.schemas.items() if json.loads(s) == parsed and k == kind), None)
            schema_id = known or len(registry.schemas) + 1
            registry.schemas[schema_id] = (schema, kind)
            if schema_id not in ids:
                ids.append(schema_id)
            return self._reply(200, {"id": schema_id})

        def do_GET(self):  # noqa: N802 (http.server's name)
            self._handle("GET")

        def do_POST(self):  # noqa: N802
            self._handle("POST")

        def do_PUT(self):  # noqa: N802
            self._handle("PUT")

    return Handler


@contextmanager
def registry_server(password: str | None = None) -> Iterator[tuple[Registry, str]]:
    """(registry state, base URL) of a registry on a free loopback port, until the block ends;
    with ``password``, requests need HTTP basic auth as user ``lake`` (the URL carries it)."""
    registry = Registry(password)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(registry))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    userinfo = f"lake:{password}@" if password is not None else ""
    try:
        yield registry, f"http://{userinfo}127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
