import json
import multiprocessing

import pytest

from lakehouse.contracts import wire
from lakehouse.contracts.registry import (
    ConfluentSchemaRegistry,
    LocalSchemaRegistry,
    SchemaNotFound,
    registry_for,
    registry_path,
)
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings, redact_url


def schema(name: str) -> str:
    return json.dumps({"type": "record", "name": name, "fields": [{"name": "id", "type": "long"}]})


# --- wire format ---------------------------------------------------------------------------

def test_frame_is_magic_byte_then_big_endian_id_then_body():
    assert wire.frame(1, b"body") == b"\x00\x00\x00\x00\x01body"
    assert wire.frame(0x01020304, b"") == b"\x00\x01\x02\x03\x04"


@pytest.mark.parametrize("schema_id", [0, 1, 255, 256, 70_000, 2**31 - 1])
@pytest.mark.parametrize("body", [b"", b"\x00", b"\x00\x00\x00\x00\x01 looks framed itself", bytes(range(256))])
def test_unframe_inverts_frame(schema_id, body):
    assert wire.unframe(wire.frame(schema_id, body)) == (schema_id, body)


def test_unframe_accepts_any_bytes_like():
    framed = wire.frame(7, b"abc")
    assert wire.unframe(bytearray(framed)) == (7, b"abc")
    assert wire.unframe(memoryview(framed)) == (7, b"abc")


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\x00\x00\x01"])
def test_unframe_rejects_short_input(data):
    with pytest.raises(ValueError, match=f"{len(data)} bytes, need at least 5"):
        wire.unframe(data)


def test_unframe_rejects_none():
    with pytest.raises(ValueError, match="no value"):
        wire.unframe(None)


@pytest.mark.parametrize("first", [b"\x01", b"\xff", b"{"])
def test_unframe_rejects_a_wrong_magic_byte(first):
    with pytest.raises(ValueError, match=f"magic byte 0x{first[0]:02x}, expected 0x00"):
        wire.unframe(first + b"\x00\x00\x00\x01{}")


@pytest.mark.parametrize("schema_id", [-1, 2**31, "1", 1.0])
def test_frame_rejects_ids_outside_int32(schema_id):
    with pytest.raises(ValueError, match="schema id must be an int"):
        wire.frame(schema_id, b"")


# --- local registry ------------------------------------------------------------------------

def test_ids_start_at_1_and_the_same_schema_keeps_its_id(tmp_path):
    registry = LocalSchemaRegistry(tmp_path / "registry" / "schemas.json")
    assert registry.register("a-value", schema("A")) == 1
    assert registry.register("b-value", schema("B")) == 2
    assert registry.register("a-value", schema("A")) == 1
    # Spacing and key order do not make another schema.
    reformatted = json.dumps(json.loads(schema("A")), indent=4, sort_keys=True)
    assert registry.register("a-value", reformatted) == 1
    assert registry.get_schema(1) == schema("A")
    assert registry.get_schema(2) == schema("B")


def test_a_schema_under_another_subject_keeps_its_id(tmp_path):
    registry = LocalSchemaRegistry(tmp_path / "schemas.json")
    first = registry.register("a-value", schema("A"))
    assert registry.register("other-value", schema("A")) == first
    assert registry.subject_versions("a-value") == [first]
    assert registry.subject_versions("other-value") == [first]
    assert registry.subject_versions("unknown") == []


def test_subjects_list_versions_in_registration_order(tmp_path):
    registry = LocalSchemaRegistry(tmp_path / "schemas.json")
    ids = [registry.register("p-value", schema(name)) for name in ("V1", "V2", "V3")]
    assert registry.subject_versions("p-value") == ids == [1, 2, 3]


def test_ids_are_stable_across_instances_and_files(tmp_path):
    path = tmp_path / "schemas.json"
    first = LocalSchemaRegistry(path)
    assert first.register("a-value", schema("A")) == 1
    assert first.register("b-value", schema("B")) == 2

    second = LocalSchemaRegistry(path)
    assert second.register("b-value", schema("B")) == 2
    assert second.register("c-value", schema("C")) == 3
    # The first instance finds an id registered after it cached what it knew.
    assert first.get_schema(3) == schema("C")
    assert first.register("c-value", schema("C")) == 3

    elsewhere = LocalSchemaRegistry(tmp_path / "other" / "schemas.json")
    assert elsewhere.register("c-value", schema("C")) == 1
    assert LocalSchemaRegistry(path).get_schema(3) == schema("C")


def test_the_file_is_plain_json_for_other_readers(tmp_path):
    path = tmp_path / "schemas.json"
    LocalSchemaRegistry(path).register("a-value", schema("A"))
    state = json.loads(path.read_text())
    assert state == {
        "format": 1,
        "schemas": {"1": {"schema": schema("A"), "schema_type": "AVRO"}},
        "subjects": {"a-value": [1]},
    }


def test_unknown_id_is_schema_not_found(tmp_path):
    registry = LocalSchemaRegistry(tmp_path / "schemas.json")
    with pytest.raises(SchemaNotFound, match="schema id 9"):
        registry.get_schema(9)
    registry.register("a-value", schema("A"))
    with pytest.raises(SchemaNotFound):
        registry.get_schema(2)


def test_invalid_schemas_and_types_are_refused(tmp_path):
    registry = LocalSchemaRegistry(tmp_path / "schemas.json")
    with pytest.raises(ValueError, match="not valid JSON"):
        registry.register("a-value", "{not json")
    with pytest.raises(ValueError, match="unknown schema type"):
        registry.register("a-value", schema("A"), schema_type="XML")
    assert registry.register("e-value", "syntax = 'proto3';", schema_type="PROTOBUF") == 1


@pytest.mark.parametrize("content", ["{broken", "[]", '{"format": 99, "schemas": {}, "subjects": {}}', '{"format": 1}'])
def test_a_damaged_file_is_one_clear_error(tmp_path, content):
    path = tmp_path / "schemas.json"
    path.write_text(content)
    with pytest.raises(LakehouseError, match="is damaged") as error:
        LocalSchemaRegistry(path).register("a-value", schema("A"))
    assert "\n" not in str(error.value)
    assert path.read_text() == content  # never overwritten


def _register_range(args):
    path, names = args
    registry = LocalSchemaRegistry(path)
    return {name: registry.register(f"{name}-value", schema(name)) for name in names}


def test_two_processes_registering_at_once_never_share_or_lose_an_id(tmp_path):
    path = tmp_path / "schemas.json"
    names = [f"S{i}" for i in range(30)]
    work = [(path, names[:20]), (path, list(reversed(names[10:])))]  # S10..S19 registered by both
    with multiprocessing.get_context("fork").Pool(2) as pool:
        first, second = pool.map(_register_range, work)
    assert {name: first[name] for name in names[10:20]} == {name: second[name] for name in names[10:20]}
    ids = {**first, **second}
    assert sorted(ids.values()) == list(range(1, 31))
    registry = LocalSchemaRegistry(path)
    assert all(registry.get_schema(i) == schema(name) for name, i in ids.items())


# --- choosing a registry -------------------------------------------------------------------

def test_registry_for_picks_the_local_file_without_a_url(tmp_path):
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)})
    registry = registry_for(settings)
    assert isinstance(registry, LocalSchemaRegistry)
    assert registry.path == registry_path(settings) == tmp_path / "registry" / "schemas.json"


def test_registry_for_picks_confluent_with_a_url(tmp_path):
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path),
                                  "LAKEHOUSE_SCHEMA_REGISTRY_URL": "http://registry.invalid:8081"})
    registry = registry_for(settings)  # constructing does not connect
    assert isinstance(registry, ConfluentSchemaRegistry)
    assert registry.url == "http://registry.invalid:8081"


def test_confluent_registry_round_trip_on_the_client_mock():
    registry = ConfluentSchemaRegistry("mock://unit-tests")
    schema_id = registry.register("a-value", schema("A"))
    assert registry.register("a-value", schema("A")) == schema_id
    assert json.loads(registry.get_schema(schema_id)) == json.loads(schema("A"))
    with pytest.raises(SchemaNotFound):
        registry.get_schema(schema_id + 100)


def test_confluent_registry_rejects_a_bad_url_in_one_line():
    with pytest.raises(LakehouseError, match="invalid LAKEHOUSE_SCHEMA_REGISTRY_URL 'ftp://x'"):
        ConfluentSchemaRegistry("ftp://x")


def test_passwords_stay_out_of_messages():
    assert redact_url("https://user:s3cret@registry:8081") == "https://user:***@registry:8081"
    assert redact_url("http://registry:8081") == "http://registry:8081"
