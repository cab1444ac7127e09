"""The fault manifest names exactly the records a consumer cannot read, for every event stream.

A reference reader per format classifies each message read back from the real broker; the set
of unreadable ones, with their codes, must equal the manifest's dead letters record for record.
The readers share no code with the producers (an oracle that decodes with the code under test
agrees with it whatever it does):

- employees: the Protobuf runtime over a descriptor set this test compiles itself from the .proto;
- purchases: the Confluent framing unpacked here with struct, the writer schema read straight from
  the registry's JSON file, the body read by fastavro;
- user_events: json and the JSON Schema file, read here.
"""

import io
import json
import struct

import fastavro
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from lakehouse.contracts import SCHEMAS_DIR
from producers.faults import FaultRates
from producers.run import produce
from tests.integration.kafka_read import read_topic

pytestmark = pytest.mark.integration

COUNT = 3000
FAULTS = FaultRates(duplicate=0.03, late=0.03, out_of_order=0.03, corrupt=0.01, invalid=0.01,
                    unknown_schema_id=0.01, evolve_after=0.5)
JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "object": dict, "array": list}


@pytest.fixture(scope="module")
def employee_class(tmp_path_factory):
    """The Employee message class, from a descriptor set compiled here with protoc."""
    from pathlib import Path

    from grpc_tools import protoc

    out = tmp_path_factory.mktemp("proto") / "employee.desc"
    well_known = Path(protoc.__file__).parent / "_proto"
    assert protoc.main(["protoc", f"-I{SCHEMAS_DIR}", f"-I{well_known}", "--include_imports",
                        f"--descriptor_set_out={out}", "Employee.proto"]) == 0
    files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    [name] = [f"{f.package}.{m.name}" for f in files.file for m in f.message_type if m.name == "Employee"]
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def read_employee(value: bytes, settings, employee_class) -> str | None:
    try:
        employee = employee_class.FromString(value)
    except DecodeError:
        return "CORRUPT_PAYLOAD"
    return None if employee.HasField("start_date") else "MISSING_REQUIRED_FIELD"


def registered_schemas(settings) -> dict[int, dict]:
    """{schema id: parsed Avro schema}, from the local registry's file (its documented format)."""
    document = json.loads((settings.home / "registry" / "schemas.json").read_text())
    return {int(i): fastavro.parse_schema(json.loads(entry["schema"])) for i, entry in document["schemas"].items()}


def read_purchase(value: bytes, settings, _) -> str | None:
    if len(value) < 5:
        return "CORRUPT_PAYLOAD"
    magic, schema_id = struct.unpack(">bI", value[:5])  # magic byte 0, then a big-endian schema id
    if magic != 0:
        return "CORRUPT_PAYLOAD"
    schema = registered_schemas(settings).get(schema_id)
    if schema is None:
        return "UNKNOWN_SCHEMA_ID"
    body = io.BytesIO(value[5:])
    try:
        fastavro.schemaless_reader(body, schema, None)
    except (EOFError, ValueError, UnicodeDecodeError, IndexError):
        return "CORRUPT_PAYLOAD"
    return None if body.tell() == len(value) - 5 else "CORRUPT_PAYLOAD"  # bytes left over: not this schema


def read_user_event(value: bytes, settings, _) -> str | None:
    schema = json.loads((SCHEMAS_DIR / "user_events.schema.json").read_text())
    try:
        event = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        return "CORRUPT_PAYLOAD"
    if not isinstance(event, dict):
        return "CORRUPT_PAYLOAD"
    for name, declared in schema["properties"].items():
        kind = JSON_TYPES[declared["type"]]
        if event.get(name) is not None and (not isinstance(event[name], kind) or isinstance(event[name], bool)
                                            and declared["type"] != "boolean"):
            return "SCHEMA_MISMATCH"
    if any(event.get(field) is None for field in schema["required"]):
        return "MISSING_REQUIRED_FIELD"
    return None


@pytest.mark.parametrize("stream, reader, kept", [
    ("employees", read_employee, {"duplicate", "late", "out_of_order"}),
    ("purchases", read_purchase, {"duplicate", "late", "out_of_order", "evolved"}),
    ("user_events", read_user_event, {"duplicate", "late", "out_of_order", "evolved"}),
])
def test_manifest_matches_what_a_consumer_reads(kafka, settings, employee_class, stream, reader, kept):
    # Other tests of the session may have written to the topic before.
    topic_before = {(m.partition(), m.offset()) for m in read_topic(kafka, stream, missing_ok=True)}
    report = produce(settings, stream, count=COUNT, faults=FAULTS, seed=21, progress=False)
    manifest = report.manifest()
    assert report.failed == 0
    assert kept <= set(manifest["faults"]), manifest["faults"]
    expected = {(d["partition"], d["offset"]): d["error_code"] for d in manifest["dead_letters"]}
    assert len(expected) > 20

    found = {}
    messages = [m for m in read_topic(kafka, stream) if (m.partition(), m.offset()) not in topic_before]
    assert len(messages) == report.delivered
    for message in messages:
        code = reader(message.value(), settings, employee_class)
        if code:
            found[(message.partition(), message.offset())] = code
    assert found == expected
