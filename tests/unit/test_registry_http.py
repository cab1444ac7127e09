"""The Confluent registry client against a registry speaking HTTP: request shapes and errors.

The server (tests/support/registry_server.py) implements the endpoints the project calls, with
the request and response bodies of Confluent's public Schema Registry API reference.
Compatibility is the server's business; the client must turn its 409 into one clear line.
The mock:// registry of confluent_kafka never exercises any of this (no HTTP at all).
"""

from __future__ import annotations

import base64
import json
from contextlib import ExitStack

import pytest

from lakehouse.contracts.registry import ConfluentSchemaRegistry, SchemaNotFound, registry_for
from lakehouse.core.errors import LakehouseError
from lakehouse.core.local_kafka import free_port
from lakehouse.core.settings import Settings
from tests.support.registry_server import CONTENT_TYPE, registry_server

V1 = json.dumps({"type": "record", "name": "Purchase", "fields": [{"name": "id", "type": "string"}]})
V2 = json.dumps({"type": "record", "name": "Purchase", "fields": [
    {"name": "id", "type": "string"}, {"name": "coupon", "type": ["null", "string"], "default": None}]})
INCOMPATIBLE = json.dumps({"type": "record", "name": "Purchase", "fields": [{"name": "id", "type": "long"}]})


@pytest.fixture
def http_registry():
    """Start a registry on a free loopback port: (registry state, base URL)."""
    with ExitStack() as stack:
        yield lambda password=None: stack.enter_context(registry_server(password))


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


def test_the_server_is_backward_compatible_as_avro_resolves_and_none_accepts_anything(http_registry):
    """What the integration tests rely on: a BACKWARD registry takes Avro's promotions (int to
    double) and a nested record's fields in another order, refuses a type no promotion reaches;
    a subject set to NONE takes it."""
    registry, url = http_registry()
    client = ConfluentSchemaRegistry(url)

    def schema(quantity, nested_fields):
        return json.dumps({"type": "record", "name": "P", "fields": [
            {"name": "quantity", "type": quantity},
            {"name": "ship", "type": ["null", {"type": "record", "name": "Ship", "fields": nested_fields}],
             "default": None}]})

    city, zip_code = {"name": "city", "type": "string"}, {"name": "zip", "type": "string"}
    client.register("p-value", schema("int", [city, zip_code]))
    client.register("p-value", schema("double", [zip_code, city]))  # a promotion, fields by name
    client.register("p-value", schema("double", [zip_code, city, {"name": "country", "type": ["null", "string"],
                                                                  "default": None}]))
    with pytest.raises(LakehouseError, match="incompatible"):
        client.register("p-value", schema("string", [zip_code, city]))  # double is not read as a string
    with pytest.raises(LakehouseError, match="incompatible"):  # a field added without a default
        client.register("p-value", schema("double", [zip_code, city, {"name": "country", "type": "string"}]))
    client.client.set_compatibility("p-value", "NONE")
    assert registry.compatibility == {"p-value": "NONE"}
    client.register("p-value", schema("string", [zip_code, city]))
    assert len(registry.subjects["p-value"]) == 4
