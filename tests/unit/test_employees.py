import os
import random
from datetime import UTC, datetime, timedelta

import pytest
from google.protobuf import descriptor_pb2
from google.protobuf.message import DecodeError

from lakehouse.contracts import protobuf
from lakehouse.core.errors import LakehouseError
from producers import employees
from producers.employees import Employee, Role, decode, encode, key, make_employee, payloads
from tests.support.deliveries import capture_sends

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


# --- compiling the .proto ------------------------------------------------------------------

def test_compiling_is_idempotent_and_follows_the_proto(tmp_path):
    schemas, out = tmp_path / "schemas", tmp_path / "generated"
    schemas.mkdir()
    proto = schemas / "Employee.proto"
    proto.write_bytes((protobuf.SCHEMAS_DIR / "Employee.proto").read_bytes())

    assert protobuf.compile_all(schemas, out) == [proto]
    files = sorted(p.name for p in out.iterdir())
    assert files == ["__init__.py", "employee.desc", "employee_pb2.py"]
    stamps = {name: (out / name).stat().st_mtime_ns for name in files}

    assert protobuf.compile_all(schemas, out) == []  # up to date: nothing rewritten
    assert {name: (out / name).stat().st_mtime_ns for name in files} == stamps

    earlier = proto.stat().st_mtime_ns - 10**9
    for name in files:  # as if the .proto had been edited after the last compile
        os.utime(out / name, ns=(earlier, earlier))
    assert protobuf.is_stale(proto, out)
    assert protobuf.compile_all(schemas, out) == [proto]
    assert protobuf.compile_all(schemas, out) == []


def test_descriptor_set_is_self_contained_for_spark():
    descriptors = descriptor_pb2.FileDescriptorSet.FromString(protobuf.descriptor_set("employee").read_bytes())
    files = {f.name: f for f in descriptors.file}
    # --include_imports: from_protobuf resolves Timestamp and Int32Value from this file alone.
    assert {"employee.proto", "google/protobuf/timestamp.proto", "google/protobuf/wrappers.proto"} <= set(files)
    ours = files["employee.proto"]
    assert ours.package == "lakehouse.demo"
    assert [m.name for m in ours.message_type] == ["Employee", "Team"]
    assert [v.name for v in ours.enum_type[0].value] == ["MANAGER", "DEVELOPER", "ARCHITECT"]
    assert employees.MESSAGE_NAME == "lakehouse.demo.Employee"


def test_a_broken_proto_is_one_clear_error(tmp_path):
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "Broken.proto").write_text('syntax = "proto3";\nmessage Broken { Missing field = 1; }\n')
    with pytest.raises(LakehouseError, match=r"cannot compile Broken.proto: .*Broken.proto:2:.*Missing") as error:
        protobuf.compile_all(schemas, tmp_path / "generated")
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(("file", "module"), [("Employee.proto", "employee"), ("PurchaseOrder.proto", "purchase_order"),
                                              ("events.proto", "events"), ("HTTPLog.proto", "httplog")])
def test_module_names_are_snake_case(tmp_path, file, module):
    assert protobuf.module_name(tmp_path / file) == module


def test_the_shipped_outputs_are_up_to_date():
    protobuf.compile_all()
    proto = protobuf.SCHEMAS_DIR / "Employee.proto"
    assert not protobuf.is_stale(proto)
    assert all(path.exists() for path in protobuf.outputs(proto))


# --- generating and encoding ---------------------------------------------------------------

def test_round_trip_keeps_every_field():
    rng = random.Random(1)
    for _ in range(500):
        employee = make_employee(rng, NOW)
        decoded = decode(encode(employee))
        assert decoded == employee
        assert decoded.HasField("employee_age") == employee.HasField("employee_age")


def test_an_unset_age_stays_unset_and_zero_stays_zero():
    unknown = Employee(id=1, name="A B")
    assert not decode(encode(unknown)).HasField("employee_age")
    zero = Employee(id=2, name="C D")
    zero.employee_age.value = 0  # the wrapper's point: 0 is a value, not "unknown"
    decoded = decode(encode(zero))
    assert decoded.HasField("employee_age") and decoded.employee_age.value == 0


def test_generated_employees_look_real():
    rng = random.Random(2)
    batch = [make_employee(rng, NOW) for _ in range(2000)]
    first = batch[0].id
    assert [e.id for e in batch] == list(range(first, first + 2000))  # unique, in call order
    unset = sum(not e.HasField("employee_age") for e in batch)
    assert 0.05 * len(batch) < unset < 0.2 * len(batch)
    assert all(21 <= e.employee_age.value <= 66 for e in batch if e.HasField("employee_age"))
    assert {e.role for e in batch} == {Role.MANAGER, Role.DEVELOPER, Role.ARCHITECT}
    assert all(employees.TEAMS[e.team.name] == e.team.location for e in batch)
    assert all(e.address.endswith(", " + e.team.location) for e in batch)
    assert len({e.name for e in batch}) > 500
    earliest = NOW - timedelta(milliseconds=employees.MAX_START_DELAY_MS)
    assert all(earliest <= e.start_date.ToDatetime(tzinfo=UTC) <= NOW for e in batch)
    assert key(batch[0]) == str(first).encode()


def test_same_seed_same_employees_and_each_source_has_its_own_ids():
    seven = random.Random(7)
    first = [make_employee(seven, NOW) for _ in range(3)]
    again = random.Random(7)
    assert first == [make_employee(again, NOW) for _ in range(3)]
    a, b = random.Random(7), random.Random(8)
    ids_a, ids_b = [make_employee(a, NOW).id for _ in range(3)], [make_employee(b, NOW).id for _ in range(3)]
    assert ids_a == [first[0].id + i for i in range(3)]
    # Parallel producers with other seeds do not all count from the same point.
    assert abs(ids_a[0] - ids_b[0]) > 1_000_000


def test_ids_wrap_within_int32(monkeypatch):
    rng = random.Random(1)
    monkeypatch.setattr(rng, "randint", lambda low, high: high - 1)
    assert [make_employee(rng, NOW).id for _ in range(4)] == [employees.MAX_ID - 1, employees.MAX_ID, 1, 2]


def test_fast_path_gives_the_same_bytes_as_make_and_encode():
    made = [make_employee(r := random.Random(5), NOW)] + [make_employee(r, NOW) for _ in range(2999)]
    fast = list(payloads(random.Random(5), NOW, 3000))
    assert fast == [(key(e), encode(e)) for e in made]


def test_fast_path_leaves_returned_messages_alone():
    rng = random.Random(6)
    kept = make_employee(rng, NOW)
    snapshot = encode(kept)
    list(payloads(rng, NOW, 5000))  # reuses this thread's scratch profiles, never handed-out messages
    assert encode(kept) == snapshot
    assert not employees.profiles()[0].id  # the shared profiles stay templates


def test_garbage_does_not_decode():
    with pytest.raises(DecodeError):
        decode(b"\xff\xff\xff\xff")


def test_produce_sends_count_keyed_employees(monkeypatch):
    sent = capture_sends(monkeypatch)
    employees.produce(None, 2500, seed=3, progress=False)
    batch = sent["employees"]
    assert len(batch) == 2500
    assert all(partition is None and fault is None for _k, _v, partition, fault in batch)
    ids = [decode(value).id for _k, value, _p, _f in batch]
    assert ids == list(range(ids[0], ids[0] + 2500))
    assert all(k == str(decode(v).id).encode() for k, v, _p, _f in batch)


def test_produce_for_a_duration_stops_by_itself():
    produced = sum(1 for _ in employees.messages(None, seed=1, duration=0.2))
    assert produced > 0


def test_unreadable_employees_never_parse_and_missing_start_date_is_detectable():
    """The fault hooks promise codes to ingestion: corrupt bytes never parse as an Employee
    (a plain cut could end on a field boundary and still parse), and the invalid kind parses
    but lacks start_date, part of the identity."""
    import random
    from datetime import UTC, datetime

    from google.protobuf.message import DecodeError

    rng = random.Random(1)
    now = datetime(2026, 11, 21, tzinfo=UTC)
    for _ in range(300):
        employee = employees.make_employee(rng, now)
        for hook in employees.HOOKS.corrupt.values():
            with pytest.raises(DecodeError):
                decode(hook(employee, rng))
        [missing] = employees.HOOKS.invalid.values()
        parsed = decode(missing(employee, rng))
        assert not parsed.HasField("start_date") and parsed.id == employee.id
        late = employees.HOOKS.late(employee, rng)
        assert employee.start_date.seconds - late.start_date.seconds >= 2 * 86_400
