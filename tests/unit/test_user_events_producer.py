import json
import random
from datetime import UTC, datetime

import jsonschema
import pytest

from producers.user_events import FAULT_CODES, SCHEMA, encode, inject_fault, make_event

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


@pytest.mark.parametrize("kind", sorted(FAULT_CODES))
def test_every_fault_kind_breaks_the_contract(kind):
    rng = random.Random(3)
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for _ in range(50):
        payload = inject_fault(kind, make_event(rng, NOW), rng)
        try:
            document = json.loads(payload)
        except (json.JSONDecodeError, UnicodeDecodeError):
            assert FAULT_CODES[kind] == "CORRUPT_PAYLOAD"
            continue
        assert FAULT_CODES[kind] != "CORRUPT_PAYLOAD"
        assert not validator.is_valid(document)


def test_fault_rate_does_not_change_which_events_a_seed_gives(monkeypatch):
    """Re-sending with the same seed must repeat the same event ids, faults or not."""
    from producers import user_events

    sent: dict[float, list] = {}

    def fake_send_all(settings, topic, messages, total=None, progress=True):
        sent[rate] = [key for key, _value, _callback in messages]
        return user_events.DeliveryReport(topic=topic)

    monkeypatch.setattr(user_events, "ensure_topic", lambda *a, **k: None)
    monkeypatch.setattr(user_events, "send_all", fake_send_all)
    for rate in (0.0, 0.3):
        user_events.produce(None, 200, corrupt_rate=rate, seed=11, progress=False)
    assert sent[0.0] == sent[0.3]
    assert len(set(sent[0.0])) == 200
