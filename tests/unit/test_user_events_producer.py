import json
import random
from datetime import UTC, datetime

import jsonschema
import pytest

from producers.faults import DEAD_LETTER_CODES, FaultRates
from producers.user_events import SCHEMA, UNREADABLE, encode, inject_fault, make_event, messages

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def test_generated_events_satisfy_the_json_schema():
    rng = random.Random(1)
    validator = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker())
    for _ in range(200):
        validator.validate(json.loads(encode(make_event(rng, NOW))))


def test_same_seed_same_events():
    first = [make_event(random.Random(7), NOW) for _ in range(3)]
    second = [make_event(random.Random(7), NOW) for _ in range(3)]
    assert first == second


@pytest.mark.parametrize("kind", UNREADABLE)
def test_every_fault_kind_breaks_the_contract(kind):
    rng = random.Random(3)
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for _ in range(50):
        payload = inject_fault(kind, make_event(rng, NOW), rng)
        try:
            document = json.loads(payload)
        except (json.JSONDecodeError, UnicodeDecodeError):
            assert DEAD_LETTER_CODES[kind] == "CORRUPT_PAYLOAD"
            continue
        assert DEAD_LETTER_CODES[kind] != "CORRUPT_PAYLOAD"
        assert not validator.is_valid(document)


def test_fault_rates_do_not_change_which_events_a_seed_gives():
    """Re-sending with the same seed must repeat the same event ids, faults or not."""
    clean = [m.key for m in messages(300, FaultRates(), seed=11)]
    faulty = [m.key for m in messages(300, FaultRates(corrupt=0.2, late=0.2, out_of_order=0.2), seed=11)]
    assert len(set(clean)) == 300
    assert sorted(clean) == sorted(faulty)


def count_kinds(sent) -> dict:
    kinds: dict = {}
    for message in sent:
        kinds[message.fault] = kinds.get(message.fault, 0) + 1
    return kinds


def test_injected_faults_are_labelled_and_shaped_as_promised():
    count = 4000
    rates = FaultRates(duplicate=0.05, late=0.05, out_of_order=0.05, corrupt=0.02, invalid=0.02)
    sent = list(messages(count, rates, seed=5))
    kinds = count_kinds(sent)
    assert len(sent) == count + kinds["duplicate"]  # re-sends are extra, held-back ones are not
    assert set(kinds) == {None, "duplicate", "late", "out_of_order", *UNREADABLE}
    for kind, rate in [("late", 0.05), ("duplicate", 0.05), ("out_of_order", 0.05),
                       ("truncated", 0.01), ("missing_field", 0.01)]:
        assert 0.5 * rate * count < kinds[kind] < 1.5 * rate * count, kind

    validator = jsonschema.Draft202012Validator(SCHEMA)
    first_seen: dict = {}
    normal_times = []
    for position, message in enumerate(sent):
        if message.fault == "duplicate":  # a re-send follows its original, byte for byte
            assert first_seen[message.key][1] == message.value
            continue
        first_seen.setdefault(message.key, (position, message.value))
        if message.fault in UNREADABLE:
            try:
                document = json.loads(message.value)
            except (json.JSONDecodeError, UnicodeDecodeError):
                assert DEAD_LETTER_CODES[message.fault] == "CORRUPT_PAYLOAD"
                continue
            assert not validator.is_valid(document)
        else:
            document = json.loads(message.value)
            validator.validate(document)
            if message.fault is None:
                normal_times.append(document["event_timestamp"])
    late_times = [json.loads(m.value)["event_timestamp"] for m in sent if m.fault == "late"]
    assert max(late_times) < min(normal_times)  # days in the past, not seconds

    # A held-back message goes out after messages generated after it.
    order = [m.key for m in messages(count, FaultRates(), seed=5)]
    position = {key: i for i, key in enumerate(m.key for m in sent)}
    held = [m.key for m in sent if m.fault == "out_of_order"]
    assert all(position[key] > order.index(key) for key in held)


def test_schema_evolution_adds_a_field_in_the_second_part_of_the_run():
    count = 1000
    sent = list(messages(count, FaultRates(evolve_after=0.5), seed=9))
    evolved = [m for m in sent if m.fault == "evolved"]
    assert len(evolved) == count // 2
    assert all("referrer" in json.loads(m.value) for m in evolved)
    assert all("referrer" not in json.loads(m.value) for m in sent if m.fault is None)
    assert [m.fault for m in sent] == [None] * (count // 2) + ["evolved"] * (count // 2)
