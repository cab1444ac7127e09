"""The JVM Protobuf decoder (jvm/protobuf-decoder) through ingestion.protobuf_udf, in real Spark."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from pyspark.sql import functions as F

from ingestion import protobuf_udf
from ingestion.protobuf_udf import register_udf, udf_result_schema
from lakehouse.contracts import protobuf
from lakehouse.core.errors import LakehouseError
from producers import employees

pytestmark = pytest.mark.integration

NOW = datetime(2025, 3, 14, 9, 26, 53, tzinfo=UTC)


@pytest.fixture(scope="module")
def employee_descriptor() -> bytes:
    return protobuf.descriptor_set("employee").read_bytes()


@pytest.fixture(scope="module")
def employee_udf(spark, employee_descriptor) -> str:
    register_udf(spark, "test_decode_employee", employee_descriptor, employees.MESSAGE_NAME)
    return "test_decode_employee"


def _decode(spark, udf_name: str, values: list[bytes | None], *micros_of: str) -> list:
    """Rows of (i, payload, error_code, error_detail, <micros_of as unix microseconds>...), in input order."""
    frame = spark.createDataFrame(list(enumerate(values)), "i int, value binary")
    decoded = frame.select("i", F.call_function(udf_name, "value").alias("d"))
    # Microseconds since the epoch: collect() would turn timestamps into local-time datetimes.
    extra = [F.unix_micros(F.col(f"d.payload.{path}")).alias(path.replace(".", "_")) for path in micros_of]
    return decoded.select("i", "d.*", *extra).orderBy("i").collect()


def _micros(timestamp) -> int:
    return timestamp.seconds * 1_000_000 + timestamp.nanos // 1000


def test_employees_decode_field_by_field(spark, employee_udf):
    rng = random.Random(7)
    messages = [employees.make_employee(rng, NOW) for _ in range(300)]
    unknown_age = employees.make_employee(rng, NOW)
    unknown_age.ClearField("employee_age")
    sub_millisecond = employees.make_employee(rng, NOW)
    sub_millisecond.start_date.nanos = 123_456_789  # micros precision: the last three digits go
    messages += [unknown_age, sub_millisecond]

    rows = _decode(spark, employee_udf, [employees.encode(m) for m in messages], "start_date")

    assert len(rows) == len(messages)
    assert any(row.payload.employee_age is None for row in rows)
    for message, row in zip(messages, rows, strict=True):
        assert row.error_code is None and row.error_detail is None
        payload = row.payload
        assert payload.id == message.id
        assert payload.name == message.name
        assert payload.address == message.address
        assert payload.employee_age == (message.employee_age.value if message.HasField("employee_age") else None)
        assert row.start_date == _micros(message.start_date)
        assert payload.team.name == message.team.name
        assert payload.team.location == message.team.location
        assert payload.role == employees.Role.Name(message.role)
    assert rows[-1].start_date % 1_000_000 == 123_456


def test_bad_values_are_corrupt_payloads_not_failures(spark, employee_udf):
    rng = random.Random(11)
    truncated = [employees._truncated(employees.make_employee(rng, NOW), rng) for _ in range(20)]
    garbled = [employees._garbled(employees.make_employee(rng, NOW), rng) for _ in range(20)]
    no_start = employees._missing_start_date(employees.make_employee(rng, NOW), rng)

    rows = _decode(spark, employee_udf, [*truncated, *garbled, no_start, None], "start_date")

    for row in rows[:40]:
        assert row.payload is None
        assert row.error_code == "CORRUPT_PAYLOAD"
        assert 0 < len(row.error_detail) <= 200
    missing = rows[40]
    assert missing.error_code is None and missing.error_detail is None
    assert missing.payload.start_date is None and missing.start_date is None
    assert missing.payload.id is not None
    assert (rows[41].payload, rows[41].error_code, rows[41].error_detail) == (None, "CORRUPT_PAYLOAD", "no value")


def test_generated_code_gives_what_interpreted_evaluation_gives(spark, employee_udf):
    """The function is a Catalyst expression with generated code of its own (no UDF, so no
    conversion of each decoded row). The rows above come through Spark's local-relation
    shortcut, which evaluates without generated code; here a shuffle keeps the plan real, and
    CODEGEN_ONLY makes code that does not compile an error instead of a silent fallback."""
    rng = random.Random(5)
    values = [employees.encode(employees.make_employee(rng, NOW)) for _ in range(200)]
    values += [employees._garbled(employees.make_employee(rng, NOW), rng) for _ in range(20)] + [None]
    frame = spark.createDataFrame(list(enumerate(values)), "i int, value binary").repartition(3)
    query = frame.select("i", F.call_function(employee_udf, "value").alias("d"))

    decode = query._jdf.queryExecution().analyzed().projectList().apply(1).child()
    assert decode.getClass().getName() == "io.github.lakehouse.protobuf.DecodeExpression"
    assert decode.sql() == f"{employee_udf}(value)"

    def collected(**conf: str) -> list:
        previous = {key: spark.conf.get(key, None) for key in conf}
        for key, value in conf.items():
            spark.conf.set(key, value)
        try:
            return query.orderBy("i").collect()
        finally:
            for key, value in previous.items():
                spark.conf.unset(key) if value is None else spark.conf.set(key, value)

    generated = collected(**{"spark.sql.codegen.factoryMode": "CODEGEN_ONLY", "spark.sql.codegen.fallback": "false",
                             "spark.sql.codegen.wholeStage": "true"})
    interpreted = collected(**{"spark.sql.codegen.factoryMode": "NO_CODEGEN", "spark.sql.codegen.wholeStage": "false"})
    assert generated == interpreted
    assert sum(row.d.error_code == "CORRUPT_PAYLOAD" for row in generated) >= 21
    assert sum(row.d.payload is not None for row in generated) >= 200


def test_schema_json_is_the_udf_return_type(spark, employee_udf, employee_descriptor):
    expected = udf_result_schema(spark, employee_descriptor, employees.MESSAGE_NAME)
    returned = spark.range(1).select(F.call_function(employee_udf, F.lit(None).cast("binary")).alias("d"))
    assert returned.schema["d"].dataType == expected
    assert expected.fieldNames() == ["payload", "error_code", "error_detail"]
    assert expected["payload"].dataType.simpleString() == (
        "struct<id:int,name:string,address:string,employee_age:int,start_date:timestamp,"
        "team:struct<name:string,location:string>,role:string>"
    )


def test_registering_again_replaces_the_function(spark, employee_descriptor):
    register_udf(spark, "test_decode_again", employee_descriptor, employees.MESSAGE_NAME)
    team_type = register_udf(spark, "test_decode_again", employee_descriptor, "lakehouse.demo.Team")
    team = employees.Team(name="Search", location="Amsterdam")
    [row] = _decode(spark, "test_decode_again", [team.SerializeToString()])
    assert team_type["payload"].dataType.fieldNames() == ["name", "location"]
    assert (row.payload.name, row.payload.location) == ("Search", "Amsterdam")


def test_unknown_message_name_is_a_clear_error(spark, employee_descriptor):
    with pytest.raises(LakehouseError, match=r"lakehouse\.demo\.Nobody.*lakehouse\.demo\.Employee"):
        udf_result_schema(spark, employee_descriptor, "lakehouse.demo.Nobody")


def test_missing_jar_says_run_make_setup(spark, employee_descriptor, monkeypatch):
    monkeypatch.setattr(protobuf_udf, "UDF_CLASS", "io.github.lakehouse.protobuf.NoSuchDecoder")
    with pytest.raises(LakehouseError, match="make setup"):
        udf_result_schema(spark, employee_descriptor, employees.MESSAGE_NAME)


EVERYTHING_PROTO = """
syntax = "proto3";
package lakehouse.test;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

enum Color { RED = 0; GREEN = 1; }

message Inner {
  string label = 1;
  repeated int32 numbers = 2;
  google.protobuf.Timestamp at = 3;
}

message Everything {
  repeated string tags = 1;
  map<string, int64> counts = 2;
  uint32 small_unsigned = 3;
  bytes blob = 4;
  optional int32 maybe = 5;
  oneof choice {
    string text = 6;
    Inner inner_choice = 7;
  }
  Inner inner = 8;
  repeated Inner inners = 9;
  map<int32, Inner> inner_by_id = 10;
  google.protobuf.UInt32Value wrapped_u32 = 11;
  google.protobuf.StringValue wrapped_text = 12;
  google.protobuf.BytesValue wrapped_blob = 13;
  google.protobuf.DoubleValue wrapped_double = 14;
  google.protobuf.BoolValue wrapped_bool = 15;
  google.protobuf.Int64Value wrapped_i64 = 16;
  Color color = 17;
  fixed64 big = 18;
  sint32 negative = 19;
  float ratio = 20;
  bool flag = 21;
  optional string maybe_text = 22;
}

message Node {
  string name = 1;
  repeated Node children = 2;
}
"""


def _compile(folder: Path, name: str, text: str, message_name: str):
    """(descriptor set bytes, Python class of ``message_name``) of a .proto compiled on the fly."""
    from grpc_tools import protoc

    (folder / f"{name}.proto").write_text(text)
    out = folder / f"{name}.desc"
    well_known = Path(protoc.__file__).parent / "_proto"
    status = protoc.main([
        "protoc", f"--proto_path={folder}", f"--proto_path={well_known}",
        "--include_imports", f"--descriptor_set_out={out}", f"{name}.proto",
    ])
    assert status == 0
    data = out.read_bytes()
    pool = descriptor_pool.DescriptorPool()
    for file in descriptor_pb2.FileDescriptorSet.FromString(data).file:  # imports come first
        pool.Add(file)
    return data, message_factory.GetMessageClass(pool.FindMessageTypeByName(message_name))


@pytest.fixture(scope="module")
def everything(tmp_path_factory):
    return _compile(tmp_path_factory.mktemp("everything"), "everything", EVERYTHING_PROTO, "lakehouse.test.Everything")


def test_every_kind_of_field(spark, everything):
    descriptor, Everything = everything
    result = register_udf(spark, "test_decode_everything", descriptor, "lakehouse.test.Everything")
    assert result["payload"].dataType.simpleString() == (
        "struct<tags:array<string>,counts:map<string,bigint>,small_unsigned:bigint,blob:binary,maybe:int,"
        "text:string,inner_choice:struct<label:string,numbers:array<int>,at:timestamp>,"
        "inner:struct<label:string,numbers:array<int>,at:timestamp>,"
        "inners:array<struct<label:string,numbers:array<int>,at:timestamp>>,"
        "inner_by_id:map<int,struct<label:string,numbers:array<int>,at:timestamp>>,"
        "wrapped_u32:bigint,wrapped_text:string,wrapped_blob:binary,wrapped_double:double,wrapped_bool:boolean,"
        "wrapped_i64:bigint,color:string,big:bigint,negative:int,ratio:float,flag:boolean,maybe_text:string>"
    )
    assert not result["payload"].dataType["tags"].dataType.containsNull

    full = Everything(
        tags=["a", "b", "a"], counts={"x": 1, "y": -2}, small_unsigned=2**32 - 1, blob=b"\x00\xff",
        maybe=0, inner_choice={"label": "chosen"}, inner={"label": "in", "numbers": [3, 1]},
        inners=[{"label": "first"}, {"label": "second", "numbers": [7]}], inner_by_id={5: {"label": "five"}},
        color=1, big=2**64 - 1, negative=-5, ratio=0.5, flag=True, maybe_text="",
    )
    full.inner.at.seconds, full.inner.at.nanos = 1_700_000_000, 1_000
    full.wrapped_u32.value = 2**32 - 2
    full.wrapped_text.value = ""  # set to the default: still present, not null
    full.wrapped_blob.value = b"\x01"
    full.wrapped_double.value = 2.5
    full.wrapped_bool.value = False
    full.wrapped_i64.value = -(2**40)
    with_text = Everything(text="plain")
    unknown_color = Everything()
    unknown_color.color = 9  # open enum: a number the schema does not name
    out_of_range = Everything()
    out_of_range.inner.at.seconds = 253_402_300_800  # 10000-01-01: beyond Timestamp's range

    empty, full_row, text_row, color_row, bad_row = _decode(
        spark, "test_decode_everything",
        [b"", full.SerializeToString(), with_text.SerializeToString(), unknown_color.SerializeToString(),
         out_of_range.SerializeToString()],
        "inner.at",
    )

    e = empty.payload
    assert (e.tags, e.counts, e.small_unsigned, bytes(e.blob), e.maybe) == ([], {}, 0, b"", None)
    assert (e.text, e.inner_choice, e.inner, e.inners, e.inner_by_id) == (None, None, None, [], {})
    assert (e.wrapped_u32, e.wrapped_text, e.wrapped_blob, e.wrapped_double, e.wrapped_bool, e.wrapped_i64) == (
        None, None, None, None, None, None)
    assert (e.color, e.big, e.negative, e.ratio, e.flag, e.maybe_text) == ("RED", 0, 0, 0.0, False, None)

    f = full_row.payload
    assert full_row.error_code is None
    assert f.tags == ["a", "b", "a"] and f.counts == {"x": 1, "y": -2}
    assert f.small_unsigned == 2**32 - 1 and bytes(f.blob) == b"\x00\xff" and f.maybe == 0
    assert f.text is None and f.inner_choice.label == "chosen" and f.inner_choice.at is None
    assert (f.inner.label, f.inner.numbers) == ("in", [3, 1])
    assert full_row.inner_at == 1_700_000_000_000_001
    assert [(i.label, i.numbers) for i in f.inners] == [("first", []), ("second", [7])]
    assert f.inner_by_id[5].label == "five"
    assert (f.wrapped_u32, f.wrapped_text, bytes(f.wrapped_blob)) == (2**32 - 2, "", b"\x01")
    assert (f.wrapped_double, f.wrapped_bool, f.wrapped_i64) == (2.5, False, -(2**40))
    assert (f.color, f.big, f.negative, f.ratio, f.flag, f.maybe_text) == ("GREEN", -1, -5, 0.5, True, "")

    assert (text_row.payload.text, text_row.payload.inner_choice) == ("plain", None)
    assert color_row.payload.color == "9"
    assert bad_row.payload is None and bad_row.error_code == "CORRUPT_PAYLOAD"
    assert bad_row.error_detail.startswith("inner.at: timestamp out of range")


def test_recursive_message_is_refused_by_name(spark, everything):
    descriptor, _ = everything
    with pytest.raises(LakehouseError, match=r"lakehouse\.test\.Node\.children.*recursive"):
        udf_result_schema(spark, descriptor, "lakehouse.test.Node")


# --- Differential: python-protobuf (upb) is the oracle for what the bytes mean. ---------------

WRAPPERS = {f"google.protobuf.{name}Value" for name in
            ("Int32", "UInt32", "Int64", "UInt64", "Float", "Double", "Bool", "String", "Bytes")}
MIN_SECONDS, MAX_SECONDS = -62_135_596_800, 253_402_300_799
FD = descriptor_pb2.FieldDescriptorProto


class _Refused(Exception):
    """Read by python-protobuf, corrupt for the decoder: a timestamp out of Spark's range, or a
    missing required field (protobuf-java's parser checks them, upb's does not)."""


def _spark_timestamp(seconds: int, nanos: int) -> datetime:
    if not (MIN_SECONDS <= seconds <= MAX_SECONDS and 0 <= nanos <= 999_999_999):
        raise _Refused
    micros = seconds * 1_000_000 + nanos // 1000
    # As pyspark's TimestampType.fromInternal, so both sides land in the same local time.
    return datetime.fromtimestamp(micros // 1_000_000).replace(microsecond=micros % 1_000_000)


def _expected_scalar(field, value):
    if field.type == FD.TYPE_ENUM:
        named = field.enum_type.values_by_number.get(value)
        return named.name if named else str(value)
    if field.type in (FD.TYPE_UINT64, FD.TYPE_FIXED64) and value >= 2**63:
        return value - 2**64  # Spark has no unsigned long
    if field.type == FD.TYPE_STRING and isinstance(value, bytes):
        return value.decode(errors="replace")  # invalid UTF-8 where unchecked (proto2), as protobuf-java reads it
    return value


def _expected_value(field, value):
    if field.type not in (FD.TYPE_MESSAGE, FD.TYPE_GROUP):
        return _expected_scalar(field, value)
    name = field.message_type.full_name
    if name == "google.protobuf.Timestamp":
        return _spark_timestamp(value.seconds, value.nanos)
    if name in WRAPPERS:
        return _expected_scalar(field.message_type.fields_by_name["value"], value.value)
    return _expected_message(value)


def _expected_message(message) -> dict:
    """The payload the decoder should give, from a python-protobuf message (the same type mapping)."""
    out = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            out[field.name] = {key: _expected_value(value_field, item) for key, item in value.items()}
        elif field.is_repeated:
            out[field.name] = [_expected_value(field, item) for item in value]
        elif field.has_presence and not message.HasField(field.name):
            out[field.name] = None
        else:
            out[field.name] = _expected_value(field, value)
    return out


def _normalized(value):
    """NaN equal to itself; bytearray (from Spark) as bytes."""
    if isinstance(value, float) and value != value:
        return "NaN"
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, dict):
        return {_normalized(k): _normalized(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalized(v) for v in value]
    return value


def _mutated(data: bytes, rng: random.Random, pool: list[bytes]) -> bytes:
    kind = rng.randrange(5)
    if kind == 0 and data:  # flip bytes
        buffer = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            buffer[rng.randrange(len(buffer))] = rng.randrange(256)
        return bytes(buffer)
    if kind == 1:  # cut
        return data[: rng.randint(0, len(data))]
    if kind == 2:  # insert random bytes
        at = rng.randint(0, len(data))
        return data[:at] + rng.randbytes(rng.randint(1, 6)) + data[at:]
    if kind == 3:  # damaged, then another message: the damage must not hide in the merge
        return _mutated(data, rng, pool) + rng.choice(pool)
    return rng.randbytes(rng.randint(0, 40))


# The wire type each declared type is written with (protobuf's encoding guide)
WIRE_TYPES = {**dict.fromkeys((FD.TYPE_INT32, FD.TYPE_INT64, FD.TYPE_UINT32, FD.TYPE_UINT64, FD.TYPE_SINT32,
                               FD.TYPE_SINT64, FD.TYPE_BOOL, FD.TYPE_ENUM), 0),
              **dict.fromkeys((FD.TYPE_FIXED64, FD.TYPE_SFIXED64, FD.TYPE_DOUBLE), 1),
              **dict.fromkeys((FD.TYPE_STRING, FD.TYPE_BYTES, FD.TYPE_MESSAGE), 2),
              FD.TYPE_GROUP: 3, **dict.fromkeys((FD.TYPE_FIXED32, FD.TYPE_SFIXED32, FD.TYPE_FLOAT), 5)}


def _varint(data: bytes, at: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[at]
        at += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return result, at


def _tag(data: bytes, at: int) -> tuple[int, int, int]:
    """(field number, wire type, position after): the low 32 bits, as protobuf-java reads a tag."""
    tag, at = _varint(data, at)
    tag &= 0xFFFFFFFF
    return tag >> 3, tag & 7, at


def _skipped(data: bytes, at: int, wire_type: int) -> int:
    if wire_type == 0:
        return _varint(data, at)[1]
    if wire_type in (1, 5):
        return at + (8 if wire_type == 1 else 4)
    if wire_type == 2:
        length, at = _varint(data, at)
        return at + length
    while True:  # a group: up to its end tag
        _, inner, at = _tag(data, at)
        if inner == 4:
            return at
        at = _skipped(data, at, inner)


def _wrong_wire_type(data: bytes, descriptor, at: int = 0, end: int | None = None) -> bool:
    """Whether well-formed bytes (python-protobuf read them) hold a field of ``descriptor``, at any
    depth, with a wire type its declared type cannot take: an independent reading of what the
    decoder calls SCHEMA_MISMATCH, where python-protobuf keeps such a field as an unknown one. A
    repeated scalar may come packed; map entries are messages of a key and a value."""
    end = len(data) if end is None else end
    while at < end:
        number, wire_type, at = _tag(data, at)
        if wire_type == 4:  # the end of the group being read
            return False
        field, start = descriptor.fields_by_number.get(number), at
        at = _skipped(data, at, wire_type)
        if field is None:
            continue
        expected = WIRE_TYPES[field.type]
        if wire_type == expected:
            if field.type == FD.TYPE_MESSAGE:
                length, body = _varint(data, start)
                if _wrong_wire_type(data, field.message_type, body, body + length):
                    return True
            elif field.type == FD.TYPE_GROUP and _wrong_wire_type(data, field.message_type, start, at):
                return True
        elif not (field.is_repeated and expected != 2 and wire_type == 2):  # packed
            return True
    return False


def _compare_with_python(spark, udf_name: str, message_class, values: list[bytes]) -> tuple[int, list[bytes], int]:
    """Decode with the UDF and with python-protobuf: (how many python-protobuf parsed, values decoded
    otherwise, how many of those parsed had a field of the wrong wire type).

    A message python-protobuf reads but whose field came with a wrong wire type is expected
    SCHEMA_MISMATCH (python-protobuf keeps the field as an unknown one), unless it is also
    refused for a value (a timestamp out of range): corrupt comes first. A proto2 required field
    then missing is not refused: it was sent, with the wrong wire type."""
    from google.protobuf.message import DecodeError

    rows = _decode(spark, udf_name, values)
    parsed, different, mismatches = 0, [], 0
    for value, row in zip(values, rows, strict=True):
        mismatch = False
        try:
            message = message_class.FromString(value)
            mismatch = _wrong_wire_type(value, message_class.DESCRIPTOR)
            if not message.IsInitialized() and not mismatch:
                raise _Refused
            expected = _expected_message(message)
        except (DecodeError, _Refused):
            expected, mismatch = None, False
        if expected is None:
            agrees = (row.payload, row.error_code) == (None, "CORRUPT_PAYLOAD")
        elif mismatch:
            parsed, mismatches = parsed + 1, mismatches + 1
            agrees = (row.payload, row.error_code) == (None, "SCHEMA_MISMATCH")
        else:
            parsed += 1
            assert row.error_code is None, (value, row.error_detail)  # never refuses what the oracle reads
            agrees = _normalized(row.payload.asDict(recursive=True)) == _normalized(expected)
        if not agrees:
            different.append(value)
    return parsed, different, mismatches


def _check_against_python(spark, udf_name: str, message_class, pool: list[bytes], rng: random.Random) -> None:
    # Valid messages, and two of them back to back (Protobuf merges them): exactly the same.
    merged = [rng.choice(pool) + rng.choice(pool) for _ in range(len(pool))]
    parsed, different, mismatches = _compare_with_python(spark, udf_name, message_class, pool + merged)
    assert parsed == 2 * len(pool) and different == [] and mismatches == 0

    # Damaged bytes: protobuf-java (whose CodedInputStream the decoder reads with) and upb read a
    # few malformed inputs differently: tags longer than 32 bits and junk in a varint's 10th byte
    # (Java ignores the excess bits), map entries carrying stray fields (Java keeps the entry, upb
    # drops it). So: no refusal where upb reads the message (asserted in _compare_with_python),
    # and the same result in nearly every case.
    damaged = [_mutated(rng.choice(pool), rng, pool) for _ in range(2000)]
    damaged.append(b"\x0b" * 50_000)  # deeply nested unknown groups: an error, not a stack overflow
    parsed, different, mismatches = _compare_with_python(spark, udf_name, message_class, damaged)
    assert 100 < parsed < len(damaged) - 100  # both outcomes well exercised
    assert mismatches > 0  # and a field of the wrong wire type in well-formed bytes (12 to 27 of 2,000 here)
    assert len(different) <= len(damaged) // 100, different[:5]


def _random_inner(rng: random.Random) -> dict:
    inner = {}
    if rng.random() < 0.7:
        inner["label"] = rng.choice(["", "x", "ünïcødé", "a longer label " * 3])
    if rng.random() < 0.5:
        inner["numbers"] = [rng.randint(-(2**31), 2**31 - 1) for _ in range(rng.randint(0, 4))]
    if rng.random() < 0.5:
        inner["at"] = {"seconds": rng.randint(-2_000_000_000, 4_000_000_000), "nanos": rng.randrange(10**9)}
    return inner


def _random_everything(rng: random.Random, Everything):
    m = Everything()
    p = rng.random
    if p() < 0.6:
        m.tags.extend(rng.choice(["a", "b", "", "ß"]) for _ in range(rng.randint(0, 4)))
    if p() < 0.6:
        for _ in range(rng.randint(0, 3)):
            m.counts[rng.choice(["x", "y", "z", ""])] = rng.randint(-(2**63), 2**63 - 1)
    if p() < 0.6:
        m.small_unsigned = rng.choice([0, 1, 2**31, 2**32 - 1])
    if p() < 0.5:
        m.blob = rng.randbytes(rng.randint(0, 8))
    if p() < 0.5:
        m.maybe = rng.randint(-5, 5)
    choice = rng.randrange(3)
    if choice == 1:
        m.text = rng.choice(["", "t"])
    elif choice == 2:
        m.inner_choice.CopyFrom(m.inner_choice.__class__(**_random_inner(rng)))
    if p() < 0.5:
        m.inner.CopyFrom(m.inner.__class__(**_random_inner(rng)))
    for _ in range(rng.randint(0, 2)):
        m.inners.add(**_random_inner(rng))
    for _ in range(rng.randint(0, 2)):
        m.inner_by_id[rng.randint(-3, 3)].CopyFrom(m.inner.__class__(**_random_inner(rng)))
    if p() < 0.5:
        m.wrapped_u32.value = rng.choice([0, 7, 2**32 - 1])
    if p() < 0.5:
        m.wrapped_text.value = rng.choice(["", "w"])
    if p() < 0.5:
        m.wrapped_blob.value = rng.randbytes(rng.randint(0, 3))
    if p() < 0.5:
        m.wrapped_double.value = rng.choice([0.0, -1.5, 1e300])
    if p() < 0.5:
        m.wrapped_bool.value = rng.random() < 0.5
    if p() < 0.5:
        m.wrapped_i64.value = rng.randint(-(2**63), 2**63 - 1)
    if p() < 0.6:
        m.color = rng.choice([0, 1, 5])
    if p() < 0.5:
        m.big = rng.choice([0, 1, 2**63, 2**64 - 1])
    if p() < 0.5:
        m.negative = rng.randint(-(2**31), 2**31 - 1)
    if p() < 0.5:
        m.ratio = rng.choice([0.0, 0.5, -2.25, float("inf")])
    if p() < 0.5:
        m.flag = True
    if p() < 0.3:
        m.maybe_text = rng.choice(["", "m"])
    return m


def test_everything_agrees_with_python_protobuf(spark, everything):
    descriptor, Everything = everything
    register_udf(spark, "test_decode_fuzz_everything", descriptor, "lakehouse.test.Everything")
    rng = random.Random(2024)
    pool = [_random_everything(rng, Everything).SerializeToString() for _ in range(400)]
    _check_against_python(spark, "test_decode_fuzz_everything", Everything, pool, rng)


def test_employees_agree_with_python_protobuf(spark, employee_udf):
    rng = random.Random(99)
    pool = [employees.encode(employees.make_employee(rng, NOW)) for _ in range(400)]
    _check_against_python(spark, employee_udf, employees.Employee, pool, rng)


LEGACY_PROTO = """
syntax = "proto2";
package lakehouse.test2;

enum Size { SMALL = 1; LARGE = 2; }

message Part {
  required string code = 1;
  optional int32 count = 2 [default = 7];
}

message Legacy {
  required int64 id = 1;
  optional string note = 2 [default = "none"];
  optional Size size = 3;
  repeated Size sizes = 4 [packed = true];
  optional group Extra = 5 { optional int32 level = 6; repeated string words = 7; }
  repeated Part parts = 8;
  optional Part main = 9;
  repeated sint64 deltas = 10;
}
"""


def test_proto2_required_closed_enums_groups(spark, tmp_path):
    """Proto2: required fields, closed enums (an unknown number is dropped), groups, packed repeated."""
    descriptor, Legacy = _compile(tmp_path, "legacy", LEGACY_PROTO, "lakehouse.test2.Legacy")
    register_udf(spark, "test_decode_legacy", descriptor, "lakehouse.test2.Legacy")
    rng = random.Random(5)
    pool = []
    # Values of at most 6 bytes on the wire: damaged 10-byte varints are among the inputs
    # protobuf-java and upb read differently (see _check_against_python).
    for _ in range(300):
        m = Legacy(id=rng.randint(0, 2**40))
        if rng.random() < 0.5:
            m.note = rng.choice(["", "n"])
        if rng.random() < 0.5:
            m.size = rng.choice([1, 2])
        m.sizes.extend(rng.choice([1, 2]) for _ in range(rng.randint(0, 3)))
        if rng.random() < 0.5:
            m.extra.level = rng.randint(-9, 9)
            m.extra.words.extend(rng.choice(["w", "ö"]) for _ in range(rng.randint(0, 2)))
        for _ in range(rng.randint(0, 2)):
            m.parts.add(code=rng.choice(["p", "q"]), **({"count": 3} if rng.random() < 0.5 else {}))
        if rng.random() < 0.5:
            m.main.code = "m"
        m.deltas.extend(rng.randint(-(2**39), 2**39) for _ in range(rng.randint(0, 3)))
        pool.append(m.SerializeToString())
    _check_against_python(spark, "test_decode_legacy", Legacy, pool, rng)

    unknown_size = Legacy(id=1, size=2).SerializeToString() + b"\x18\x09"  # size = 9: not a Size
    unknown_in_packed = Legacy(id=1).SerializeToString() + b"\x22\x03\x01\x09\x02"  # sizes = [1, 9, 2]
    no_id = Legacy(note="x").SerializePartialToString()
    part_without_code = Legacy(id=1).SerializeToString() + b"\x42\x02\x10\x01"  # parts += [Part(count=1)]
    rows = _decode(spark, "test_decode_legacy", [unknown_size, unknown_in_packed, no_id, part_without_code])
    assert rows[0].payload.size == "LARGE" and rows[1].payload.sizes == ["SMALL", "LARGE"]
    assert (rows[0].payload.note, rows[0].payload.extra, rows[0].payload.main) == (None, None, None)
    assert (rows[2].error_code, rows[2].error_detail) == ("CORRUPT_PAYLOAD", "id: missing required field")
    assert (rows[3].error_code, rows[3].error_detail) == ("CORRUPT_PAYLOAD", "parts.code: missing required field")


def _field(number: int, wire_type: int, payload: bytes) -> bytes:
    """One field on the wire: its tag, then ``payload`` (a length-delimited one's length included)."""
    from google.protobuf.internal.encoder import _VarintBytes

    tag = _VarintBytes(number << 3 | wire_type)
    return tag + (_VarintBytes(len(payload)) + payload if wire_type == 2 else payload)


def test_a_field_with_the_wrong_wire_type_is_a_schema_mismatch_naming_it(spark, everything, tmp_path):
    """A producer that changed a field's type sends it with another wire type: protobuf-java (and
    this decoder before) skipped it as an unknown field, and the column held the default (0, "",
    null) in silence. Now the record is SCHEMA_MISMATCH, naming the field's path and both wire
    types, at any depth; the changes protobuf's spec calls compatible still read (a repeated
    scalar packed or not), and a message that is also corrupt is CORRUPT_PAYLOAD (that check
    comes first)."""
    descriptor, Everything = everything
    register_udf(spark, "test_decode_wire_types", descriptor, "lakehouse.test.Everything")
    inner_label_varint = _field(1, 0, b"\x05")
    cases = {
        "small_unsigned: wire type 2 (length-delimited) where its declared type uint32 takes wire type 0 (varint)":
            _field(3, 2, b"ab"),
        "inner.label: wire type 0 (varint) where its declared type string takes wire type 2 (length-delimited)":
            _field(8, 2, inner_label_varint),
        "inners.numbers: wire type 5 (32-bit) where its declared type repeated int32 takes wire type 0 (varint)":
            _field(9, 2, _field(1, 2, b"ok") + _field(2, 5, b"\x01\x00\x00\x00")),
        "counts.value: wire type 2 (length-delimited) where its declared type int64 takes wire type 0 (varint)":
            _field(2, 2, _field(1, 2, b"x") + _field(2, 2, b"7")),
        "inner_by_id.key: wire type 2 (length-delimited) where its declared type int32 takes wire type 0 (varint)":
            _field(10, 2, _field(1, 2, b"5")),
        "inner_by_id.value.at.seconds: wire type 1 (64-bit) where its declared type int64 takes wire type 0 "
        "(varint)": _field(10, 2, _field(1, 0, b"\x05") + _field(2, 2, _field(3, 2, _field(1, 1, bytes(8))))),
        "wrapped_u32.value: wire type 2 (length-delimited) where its declared type uint32 takes wire type 0 "
        "(varint)": _field(11, 2, _field(1, 2, b"\x07")),
        "color: wire type 5 (32-bit) where its declared type enum lakehouse.test.Color takes wire type 0 (varint)":
            _field(17, 5, b"\x01\x00\x00\x00"),
        # a singular scalar sent as a packed list: not compatible by the spec ("not generally safe")
        "maybe: wire type 2 (length-delimited) where its declared type int32 takes wire type 0 (varint)":
            _field(5, 2, b"\x01\x02"),
        "inner: wire type 0 (varint) where its declared type lakehouse.test.Inner takes wire type 2 "
        "(length-delimited)": _field(8, 0, b"\x01"),
    }
    good = Everything(small_unsigned=9, maybe=1).SerializeToString()
    packed_and_not = _field(8, 2, _field(2, 2, b"\x01\x02") + _field(2, 0, b"\x03"))  # inner.numbers = [1, 2, 3]
    also_corrupt = _field(3, 2, b"ab") + b"\x0a\x09short"  # a mismatch, then a string cut short
    end_group = _field(3, 4, b"")  # an end-group tag of a known field: a corrupt message, as before
    values = [good + bytes(v) for v in cases.values()] + [packed_and_not, also_corrupt, end_group]
    rows = _decode(spark, "test_decode_wire_types", values)

    for (detail, _), row in zip(cases.items(), rows, strict=False):
        assert (row.payload, row.error_code, row.error_detail) == (None, "SCHEMA_MISMATCH", detail)
    assert rows[-3].error_code is None and rows[-3].payload.inner.numbers == [1, 2, 3]
    assert (rows[-2].payload, rows[-2].error_code) == (None, "CORRUPT_PAYLOAD")
    assert (rows[-1].payload, rows[-1].error_code) == (None, "CORRUPT_PAYLOAD")

    # proto2: a required field sent with another wire type is a mismatch, not "missing"; a group
    # sent as a length-delimited message is one too
    legacy, Legacy = _compile(tmp_path, "legacy", LEGACY_PROTO, "lakehouse.test2.Legacy")
    register_udf(spark, "test_decode_legacy_wire_types", legacy, "lakehouse.test2.Legacy")
    wrong_id = _field(1, 2, b"12")
    group_as_message = Legacy(id=1).SerializeToString() + _field(5, 2, _field(6, 0, b"\x01"))
    id_row, group_row = _decode(spark, "test_decode_legacy_wire_types", [wrong_id, group_as_message])
    assert (id_row.error_code, id_row.error_detail) == (
        "SCHEMA_MISMATCH", "id: wire type 2 (length-delimited) where its declared type int64 takes wire type 0 "
                           "(varint)")
    assert (group_row.error_code, group_row.error_detail) == (
        "SCHEMA_MISMATCH", "extra: wire type 2 (length-delimited) where its declared type group "
                           "lakehouse.test2.Legacy.Extra takes wire type 3 (start-group)")


def test_a_producer_type_change_is_a_schema_mismatch_of_the_stream_not_a_default(spark, employee_udf,
                                                                                 employee_descriptor):
    """The employees stream's decoding (ingestion/formats/protobuf.py decode_protobuf): a producer that
    made `employee_age` a plain int32 (it is a google.protobuf.Int32Value) sends a varint where a
    message is declared; one that made `id` a string sends it length-delimited. Before, the
    first landed with a null age and the second with id 0, in silence; now each is a dead row
    SCHEMA_MISMATCH naming the field, and a corrupt message is still CORRUPT_PAYLOAD."""
    from ingestion.formats.protobuf import decode_protobuf
    from lakehouse.contracts.streams import get_stream

    spec = get_stream("employees")
    rng = random.Random(3)
    good = employees.make_employee(rng, NOW)
    without_age, without_id = employees.make_employee(rng, NOW), employees.make_employee(rng, NOW)
    without_age.ClearField("employee_age")
    without_id.id = 0
    values = [employees.encode(good), employees.encode(without_age) + _field(4, 0, b"\x2a"),
              employees.encode(without_id) + _field(1, 2, b"1234"), b"\x0a\x09short"]
    raw = spark.createDataFrame([(b"k", v, "employees", 0, i, NOW) for i, v in enumerate(values)],
                                "key binary, value binary, topic string, partition int, offset long, "
                                "timestamp timestamp")
    columns = udf_result_schema(spark, employee_descriptor, employees.MESSAGE_NAME)["payload"].dataType
    rows = decode_protobuf(raw, employee_udf, columns, spec.required_columns, spec.event_time_column,
                                   NOW).orderBy("offset").collect()
    assert [(r._error_code, r._error_detail) for r in rows[:3]] == [
        (None, None),
        ("SCHEMA_MISMATCH", "wrong wire type for field employee_age: wire type 0 (varint) where its declared type "
                            "google.protobuf.Int32Value takes wire type 2 (length-delimited)"),
        ("SCHEMA_MISMATCH", "wrong wire type for field id: wire type 2 (length-delimited) where its declared type "
                            "int32 takes wire type 0 (varint)")]
    assert rows[0].id == good.id and rows[1].id is None and rows[2].id is None
    assert rows[3]._error_code == "CORRUPT_PAYLOAD"
