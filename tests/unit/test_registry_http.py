"""The Confluent registry client against a registry speaking HTTP: request shapes and errors.

The server below lives in the test and implements the endpoints the project calls, with the
request and response bodies of Confluent's public Schema Registry API reference:

    POST /subjects/{subject}/versions      {"schema": ..., "schemaType": ...} -> {"id": N}
    GET  /schemas/ids/{id}                 -> {"schema": ..., "schemaType": ...}
    GET  /subjects/{subject}/versions      -> [1, 2]
    GET  /subjects/{subject}/versions/{v}  -> {"subject", "id", "version", "schema", "schemaType"}
    errors                                 -> {"error_code": 40401|40403|409|42201|50001, "message": ...}

Compatibility is the server's business; the client must turn its 409 into one clear line.
The mock:// registry of confluent_kafka never exercises any of this (no HTTP at all).
"""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

import pytest

from lakehouse.contracts.registry import ConfluentSchemaRegistry, SchemaNotFound, registry_for
from lakehouse.core.errors import LakehouseError
from lakehouse.core.local_kafka import free_port
from lakehouse.core.settings import Settings

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
V1 = json.dumps({"type": "record", "name": "Purchase", "fields": [{"name": "id", "type": "string"}]})
V2 = json.dumps({"type": "record", "name": "Purchase", "fields": [
    {"name": "id", "type": "string"}, {"name": "coupon", "type": ["null", "string"], "default": None}]})
INCOMPATIBLE = json.dumps({"type": "record", "name": "Purchase", "fields": [{"name": "id", "type": "long"}]})


class Registry:
    """The registry's state and the requests it saw."""

    def __init__(self, password: str | None = None):
        self.schemas: dict[int, tuple[str, str]] = {}  # id -> (schema, schemaType)
        self.subjects: dict[str, list[int]] = {}
        self.requests: list[dict] = []
        self.password = password
        self.fail_with_500 = False


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
            latest = registry.schemas[ids[-1]][0] if ids else None
            # BACKWARD compatibility, as far as this test's schemas go: a field may not change type.
            if latest is not None:
                before = {f["name"]: f["type"] for f in json.loads(latest)["fields"]}
                if any(f["name"] in before and before[f["name"]] != f["type"] for f in parsed["fields"]):
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

    return Handler


@pytest.fixture
def http_registry():
    """(registry state, base URL, server) of a registry on a free loopback port."""
    started = []

    def start(password: str | None = None) -> tuple[Registry, str]:
        registry = Registry(password)
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(registry))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
        userinfo = f"lake:{password}@" if password is not None else ""
        return registry, f"http://{userinfo}127.0.0.1:{server.server_address[1]}"

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


def test_register_sends_the_schema_as_the_api_reference_says_and_ids_follow_the_server(http_registry):
    registry, url = http_registry()
    client = ConfluentSchemaRegistry(url)
    assert client.register("purchases-value", V1) == 1
    assert client.register("purchases-value", V2) == 2
    [first, second] = registry.requests
    assert (first["method"], first["path"]) == ("POST", "/subjects/purchases-value/versions")
    assert first["content_type"] == CONTENT_TYPE
    assert first["body"]["schema"] == V1  # the schema as a string, not as nested JSON
    assert first["body"].get("schemaType", "AVRO") == "AVRO"
    assert second["body"]["schema"] == V2


def test_the_same_schema_under_another_subject_keeps_its_id_and_json_schemas_say_their_type(http_registry):
    registry, url = http_registry()
    client = ConfluentSchemaRegistry(url)
    schema_id = client.register("purchases-value", V1)
    assert ConfluentSchemaRegistry(url).register("purchases-archive-value", V1) == schema_id
    json_schema = json.dumps({"type": "object", "properties": {"id": {"type": "string"}}})
    client.register("user_events-value", json_schema, "JSON")
    assert registry.requests[-1]["body"]["schemaType"] == "JSON"


def test_get_schema_reads_schemas_ids_and_an_unknown_id_is_schema_not_found(http_registry):
    registry, url = http_registry()
    ConfluentSchemaRegistry(url).register("purchases-value", V1)
    reader = ConfluentSchemaRegistry(url)  # a new client: nothing cached
    assert json.loads(reader.get_schema(1)) == json.loads(V1)
    assert registry.requests[-1]["method"] == "GET" and registry.requests[-1]["path"] == "/schemas/ids/1"
    with pytest.raises(SchemaNotFound, match="schema id 99 is not in the registry"):
        reader.get_schema(99)


def test_subject_schemas_lists_every_version_and_an_unknown_subject_is_empty(http_registry):
    registry, url = http_registry()
    writer = ConfluentSchemaRegistry(url)
    writer.register("purchases-value", V1)
    writer.register("purchases-value", V2)
    schemas = ConfluentSchemaRegistry(url).subject_schemas("purchases-value")
    assert {i: json.loads(s) for i, s in schemas.items()} == {1: json.loads(V1), 2: json.loads(V2)}
    paths = [r["path"] for r in registry.requests if r["method"] == "GET"]
    assert "/subjects/purchases-value/versions" in paths and "/subjects/purchases-value/versions/2" in paths
    assert ConfluentSchemaRegistry(url).subject_schemas("nobody-value") == {}


def test_an_incompatible_or_invalid_schema_is_one_clear_line(http_registry):
    _, url = http_registry()
    client = ConfluentSchemaRegistry(url)
    client.register("purchases-value", V1)
    with pytest.raises(LakehouseError) as refused:
        client.register("purchases-value", INCOMPATIBLE)
    assert "purchases-value" in str(refused.value) and "incompatible" in str(refused.value)
    assert "\n" not in str(refused.value)
    with pytest.raises(LakehouseError, match="refused a schema for purchases-value"):
        client.register("purchases-value", '{"type": "record", "name": ')  # 422 from the server


def test_a_server_error_is_an_error_not_a_missing_schema(http_registry):
    registry, url = http_registry()
    registry.fail_with_500 = True
    with pytest.raises(LakehouseError, match="schema registry error for schema id 1") as failed:
        ConfluentSchemaRegistry(url).get_schema(1)
    assert not isinstance(failed.value, SchemaNotFound)


def test_credentials_in_the_url_go_as_basic_auth_and_never_into_messages(http_registry):
    registry, url = http_registry(password="s3cret")
    client = ConfluentSchemaRegistry(url)
    assert client.register("purchases-value", V1) == 1
    assert registry.requests[0]["authorization"] == "Basic " + base64.b64encode(b"lake:s3cret").decode()
    with pytest.raises(SchemaNotFound) as missing:
        client.get_schema(42)
    assert "s3cret" not in str(missing.value) and "lake:***@" in str(missing.value)
    wrong = ConfluentSchemaRegistry(url.replace("s3cret", "wrong"))
    with pytest.raises(LakehouseError) as refused:
        wrong.register("purchases-value", V1)
    assert "wrong" not in str(refused.value)


def test_an_unreachable_registry_is_one_line_naming_the_way_out():
    url = f"http://lake:s3cret@127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(LakehouseError) as unreachable:
        ConfluentSchemaRegistry(url).get_schema(1)
    message = str(unreachable.value)
    assert message.startswith("cannot reach the schema registry at http://lake:***@127.0.0.1")
    assert "s3cret" not in message and "unset LAKEHOUSE_SCHEMA_REGISTRY_URL" in message


def test_the_purchases_producer_registers_through_the_configured_registry(http_registry, tmp_path):
    from producers import purchases

    registry, url = http_registry()
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_SCHEMA_REGISTRY_URL": url})
    client = registry_for(settings)
    assert isinstance(client, ConfluentSchemaRegistry)
    ids = purchases.register_schemas(client)  # what `lakehouse produce purchases` does first
    assert sorted(registry.subjects[purchases.SUBJECT]) == sorted(set(ids.values()))
    assert all(r["path"] == f"/subjects/{purchases.SUBJECT}/versions" for r in registry.requests)
