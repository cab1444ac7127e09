"""The `employees` stream: Protobuf `lakehouse.demo.Employee` messages (schemas/Employee.proto).

Generation is pure (a random source and a clock reading in, messages and bytes out);
producing is done by producers.delivery. The key is the id as text.

Built for throughput (the target is 150k messages/s per process, serialization included):
every message is one of a few thousand pre-built profiles (name, address, age, team, role)
with a fresh id and start date, so a message costs one random draw, two field updates and
one serialization in C, not the construction of four nested objects.
"""

from __future__ import annotations

import itertools
import random
import threading
import weakref
from collections.abc import Iterator
from datetime import UTC, datetime
from functools import cache, lru_cache

from lakehouse.contracts import protobuf
from producers.delivery import Outgoing, stream_producer
from producers.faults import Budget, FaultHooks, FaultRates, inject

_pb2 = protobuf.load("employee")  # compiles Employee.proto first if needed
Employee = _pb2.Employee
Team = _pb2.Team
Role = _pb2.Role

TOPIC = "employees"
MESSAGE_NAME = Employee.DESCRIPTOR.full_name  # for Spark's from_protobuf

FIRST_NAMES = [
    "Aisha", "Ana", "Andrei", "Bo", "Carlos", "Chen", "Chloe", "Daniel", "Elena", "Emeka",
    "Fatima", "Felix", "Giulia", "Hana", "Hugo", "Ines", "Ivan", "James", "Jonas", "Kai",
    "Karin", "Lars", "Leila", "Liam", "Lucia", "Mateo", "Maya", "Mei", "Mohammed", "Nadia",
    "Noah", "Olga", "Omar", "Priya", "Rafael", "Ravi", "Sara", "Sofia", "Tomasz", "Yuki",
]
LAST_NAMES = [
    "Adeyemi", "Alvarez", "Andersson", "Bauer", "Becker", "Chen", "Costa", "Dubois", "Fischer", "Garcia",
    "Hansen", "Ivanova", "Jensen", "Kim", "Kowalski", "Larsen", "Martin", "Meyer", "Moreau", "Müller",
    "Nakamura", "Novak", "Okafor", "Patel", "Rossi", "Santos", "Schmidt", "Silva", "Singh", "Smith",
    "Sørensen", "Tanaka", "Weber", "Wójcik", "Yilmaz", "Zhang",
]
STREETS = [
    "Main Street", "Station Road", "Church Lane", "Park Avenue", "Mill Road", "High Street",
    "Harbour Way", "Elm Street", "Lindenallee", "Rue du Marché", "Calle Mayor", "Via Roma",
]
# Team -> the office it sits in: headcount by team and role is a gold table.
TEAMS = {
    "Payments": "Berlin", "Checkout": "Berlin", "Search": "Amsterdam", "Recommendations": "Amsterdam",
    "Data Platform": "Lisbon", "Analytics": "Lisbon", "Mobile": "Warsaw", "Web": "Warsaw",
    "Logistics": "Madrid", "Customer Care": "Madrid", "Security": "Dublin", "Infrastructure": "Dublin",
}
ROLES = [Role.DEVELOPER, Role.MANAGER, Role.ARCHITECT]
ROLE_WEIGHTS = [75, 15, 10]
AGE_UNKNOWN_RATE = 0.1  # exercises the Int32Value wrapper: absent, not 0

PROFILES = 4096  # a power of two: a profile is picked with a bit mask
_PROFILE_BITS = PROFILES.bit_length() - 1
MAX_START_DELAY_MS = 5_000

MAX_ID = 2**31 - 1  # int32 ids

# The id sequence of each random source: consecutive ids from a starting point drawn from
# it, so the same seed gives the same employees, while processes producing at once (each
# with its own seed, or none) draw far-apart starting points instead of all counting from 1.
# Weak keys: a sequence lives as long as its random source.
_id_sequences: weakref.WeakKeyDictionary[random.Random, Iterator[int]] = weakref.WeakKeyDictionary()


def _ids(rng: random.Random) -> Iterator[int]:
    ids = _id_sequences.get(rng)
    if ids is None:
        start = rng.randint(1, MAX_ID)
        # start..MAX_ID, then 1..MAX_ID over and over: all C iterators, nothing stored.
        wrapped = itertools.chain.from_iterable(itertools.repeat(range(1, MAX_ID + 1)))
        ids = _id_sequences[rng] = itertools.chain(range(start, MAX_ID + 1), wrapped)
    return ids


@cache
def profiles() -> tuple[Employee, ...]:
    """The pre-built profiles: everything but id and start date, from a fixed seed. Read-only."""
    rng = random.Random("employee-profiles")
    teams = list(TEAMS.items())
    built = []
    for _ in range(PROFILES):
        team, location = rng.choice(teams)
        profile = Employee(
            name=f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}",
            address=f"{rng.randint(1, 250)} {rng.choice(STREETS)}, {location}",
            team=Team(name=team, location=location),
            role=rng.choices(ROLES, ROLE_WEIGHTS)[0],
        )
        if rng.random() >= AGE_UNKNOWN_RATE:
            profile.employee_age.value = rng.randint(21, 66)
        built.append(profile)
    return tuple(built)


_scratch = threading.local()


def _scratch_profiles() -> tuple[Employee, ...]:
    """This thread's own mutable copies of the profiles, for the serialize-in-place fast path."""
    pool = getattr(_scratch, "pool", None)
    if pool is None:
        pool = _scratch.pool = tuple(_copy(profile) for profile in profiles())
    return pool


def _copy(message: Employee) -> Employee:
    fresh = Employee()
    fresh.CopyFrom(message)
    return fresh


@lru_cache(maxsize=4)
def _epoch_ms(now: datetime) -> int:
    # Cached: datetime.timestamp() costs more than the rest of an employee, and callers pass
    # the same clock reading for thousands of employees.
    return int(now.timestamp() * 1000)


def _fill(message: Employee, employee_id: int, start_ms: int) -> None:
    """Set the two varying fields; every other field comes from the profile."""
    seconds, millis = divmod(start_ms, 1000)
    message.id = employee_id
    start = message.start_date
    start.seconds = seconds
    start.nanos = millis * 1_000_000


def make_employee(rng: random.Random, now: datetime) -> Employee:
    """A new employee starting within the last few seconds of ``now``.

    Ids are consecutive per random source (unique until 2^31 employees), so ``rng`` carries
    a little state besides its own: the same seed still gives the same employees.
    """
    ids = _ids(rng)  # before the first draw, as in `payloads`: both consume rng alike
    bits = rng.getrandbits(_PROFILE_BITS + 16)
    employee = _copy(profiles()[bits & (PROFILES - 1)])
    _fill(employee, next(ids), _epoch_ms(now) - (bits >> _PROFILE_BITS) % MAX_START_DELAY_MS)
    return employee


def key(employee: Employee) -> bytes:
    return str(employee.id).encode()


def encode(employee: Employee) -> bytes:
    return employee.SerializeToString()


def decode(data: bytes) -> Employee:
    """Parse one message value; google.protobuf.message.DecodeError if it is not an Employee."""
    return Employee.FromString(data)


def payloads(rng: random.Random, now: datetime, count: int) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) of ``count`` employees: the same bytes as ``make_employee`` then ``encode``
    for the same random source, without a new message per employee (the producer's fast path)."""
    pool, ids, now_ms = _scratch_profiles(), _ids(rng), _epoch_ms(now)
    getrandbits, mask, shift = rng.getrandbits, PROFILES - 1, _PROFILE_BITS
    for _ in range(count):
        bits = getrandbits(shift + 16)
        employee = pool[bits & mask]
        employee_id = next(ids)
        # Filled and serialized with no yield in between: generators sharing this thread's
        # pool cannot see each other's half-filled message.
        _fill(employee, employee_id, now_ms - (bits >> shift) % MAX_START_DELAY_MS)
        yield str(employee_id).encode(), employee.SerializeToString()


def _late(employee: Employee, rng: random.Random) -> Employee:
    late = _copy(employee)
    late.start_date.seconds -= rng.randint(2, 30) * 86_400
    return late


def _truncated(employee: Employee, rng: random.Random) -> bytes:
    # A plain cut can end on a field boundary and still parse: append a string field that
    # claims 127 bytes and carries fewer, which no Protobuf parser accepts.
    return encode(employee) + b"\x1a\x7f" + rng.randbytes(rng.randint(0, 64))


def _garbled(employee: Employee, rng: random.Random) -> bytes:
    return b"\x0f" + rng.randbytes(rng.randint(8, 48))  # field 1 with wire type 7: never valid


def _missing_start_date(employee: Employee, rng: random.Random) -> bytes:
    broken = _copy(employee)
    broken.ClearField("start_date")  # part of the identity (id, start_date) and the event time
    return encode(broken)


HOOKS = FaultHooks(
    encode=encode,
    late=_late,
    corrupt={"truncated": _truncated, "garbled": _garbled},
    invalid={"missing_field": _missing_start_date},
)


def messages(count: int | None, faults: FaultRates = FaultRates(), seed: int | None = None,
             duration: float | None = None) -> Iterator[Outgoing]:
    """``count`` employees, or as many as ``duration`` seconds allow, with faults injected."""
    rng = random.Random(seed)
    if faults != FaultRates():
        budget = Budget(count, duration)

        def make(now):
            employee = make_employee(rng, now)
            return key(employee), employee

        yield from inject(budget.records(make), faults, seed, HOOKS, budget.share_done)
        return
    for chunk in Budget(count, duration).chunks():
        # A fresh clock reading per chunk keeps start dates near real time. Plain tuples in
        # Outgoing's field order: building a NamedTuple costs a third of an employee.
        for message_key, value in payloads(rng, datetime.now(UTC), chunk):
            yield message_key, value, None, None


produce = stream_producer(TOPIC, messages, doc="Produce employees to the `employees` topic.")
