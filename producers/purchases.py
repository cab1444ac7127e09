"""The `purchases` stream: Avro in the Confluent wire format, schema versions v1 and v2.

v2 (schemas/purchases-v2.avsc) adds an optional ``payment_method``; a topic carries both
versions at once, as it does while producers are upgraded one by one, and every message
names its writer schema by id. Both versions are registered under the subject
``purchases-value`` of the registry the settings choose (lakehouse.contracts.registry).

Generation is pure (a seeded random source in, dicts out); producing is done by
producers.delivery. The key is the transaction id.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from functools import lru_cache

from lakehouse.contracts import SCHEMAS_DIR, wire
from lakehouse.contracts.registry import SchemaRegistry, registry_for, value_subject
from lakehouse.core.settings import Settings
from producers import avro
from producers.delivery import DeliveryReport, Outgoing, produce_to_topic
from producers.faults import Budget, FaultHooks, FaultRates, inject

TOPIC = "purchases"
SUBJECT = value_subject(TOPIC)
VERSIONS = (1, 2)
SCHEMAS = {version: avro.load_schema(SCHEMAS_DIR / f"purchases-v{version}.avsc") for version in VERSIONS}

PRODUCTS = 500  # P-00001..P-00500: the product pages of the user_events stream
CUSTOMERS = 1000  # the customer ids of user_events: gold joins purchases to customers and their events
# Store -> currency and its rate to EUR: prices are list prices in EUR, converted per store.
STORES = {
    "S-001": ("EUR", 1.0), "S-002": ("EUR", 1.0), "S-003": ("EUR", 1.0), "S-004": ("EUR", 1.0),
    "S-005": ("GBP", 0.86), "S-006": ("GBP", 0.86), "S-007": ("USD", 1.08), "S-008": ("USD", 1.08),
    "S-009": ("PLN", 4.3), "S-010": ("SEK", 11.4),
}
QUANTITY_WEIGHTS = {1: 60, 2: 20, 3: 10, 4: 6, 5: 4}  # percent
PAYMENT_WEIGHTS = {"card": 50, "wallet": 20, "cash": 12, "voucher": 3, None: 15}  # percent; None: unknown
MAX_DELAY_MS = 5_000


def _percent_table(weights: dict) -> list:
    """100 entries, each value as often as its percentage: a weighted draw is one index."""
    if sum(weights.values()) != 100:
        raise ValueError(f"weights must add up to 100: {weights}")
    return [value for value, weight in weights.items() for _ in range(weight)]


# Everything that does not depend on the draw is computed once, not per purchase (throughput):
# each (product, store) pair's ids, currency and unit price; a product's list price is the
# same in every run, and a store converts it at its fixed rate.
_price_rng = random.Random("list-prices")
_LIST_PRICES = [round(_price_rng.uniform(0.5, 250.0), 2) for _ in range(PRODUCTS)]
_OFFERS = [
    (f"P-{product + 1:05d}", store_id, currency, round(_LIST_PRICES[product] * rate, 2))
    for product in range(PRODUCTS) for store_id, (currency, rate) in STORES.items()
]
_QUANTITIES = _percent_table(QUANTITY_WEIGHTS)
_PAYMENT_METHODS = _percent_table(PAYMENT_WEIGHTS)


def _uuid4(raw: bytes) -> str:
    """str(uuid.UUID(bytes=raw, version=4)) at half the cost: no UUID object, no int formatting."""
    b = bytearray(raw)
    b[6] = b[6] & 0x0F | 0x40  # version 4
    b[8] = b[8] & 0x3F | 0x80  # RFC 4122 variant
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


@lru_cache(maxsize=4)
def _epoch_ms(now: datetime) -> int:
    # Cached: datetime.timestamp() costs more than the rest of a purchase, and callers pass
    # the same clock reading for thousands of purchases.
    return int(now.timestamp() * 1000)


def make_purchase(rng: random.Random, now: datetime, version: int) -> dict:
    """A purchase made within the last few seconds of ``now``, as the given schema version has it.

    ``transaction_time`` is epoch milliseconds (the Avro long under timestamp-millis, written
    as is); `decode` gives it back as an aware UTC datetime. v2 purchases always have
    ``payment_method``, None when unknown; v1 purchases never do.
    """
    if version not in SCHEMAS:
        raise ValueError(f"unknown purchases schema version {version!r}; known: {VERSIONS}")
    # Two draws for everything: the transaction id, then one number cut into the other choices.
    transaction_id = _uuid4(rng.randbytes(16))
    draw = rng.getrandbits(64)
    draw, offer = divmod(draw, len(_OFFERS))
    draw, customer = divmod(draw, CUSTOMERS)
    draw, quantity = divmod(draw, 100)
    draw, delay = divmod(draw, MAX_DELAY_MS)
    product_id, store_id, currency, unit_price = _OFFERS[offer]
    quantity = _QUANTITIES[quantity]
    purchase = {
        "transaction_id": transaction_id,
        "customer_id": customer + 1,
        "product_id": product_id,
        "quantity": quantity,
        "unit_price": unit_price,
        "amount": round(quantity * unit_price, 2),
        "currency": currency,
        "transaction_time": _epoch_ms(now) - delay,
        "store_id": store_id,
    }
    if version >= 2:
        purchase["payment_method"] = _PAYMENT_METHODS[draw % 100]
    return purchase


def register_schemas(registry: SchemaRegistry) -> dict[int, int]:
    """Register every version under ``purchases-value``; version -> schema id."""
    return {version: registry.register(SUBJECT, schema.text) for version, schema in SCHEMAS.items()}


def key(purchase: dict) -> bytes:
    return purchase["transaction_id"].encode()


def encode(purchase: dict, schema_id: int, parsed_schema: dict) -> bytes:
    return avro.encode(purchase, schema_id, parsed_schema)


def decode(data: bytes, registry: SchemaRegistry) -> tuple[int, dict]:
    return avro.decode(data, registry)


def payloads(
    rng: random.Random, now: datetime, count: int, schema_ids: dict[int, int], versions: Sequence[int] = VERSIONS,
) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) of ``count`` purchases, each of a version drawn from ``versions``."""
    parsed = {version: SCHEMAS[version].parsed for version in versions}
    for _ in range(count):
        version = versions[0] if len(versions) == 1 else rng.choice(versions)
        purchase = make_purchase(rng, now, version)
        yield key(purchase), avro.encode(purchase, schema_ids[version], parsed[version])


# An id no registry of the demo hands out: the record must end as UNKNOWN_SCHEMA_ID.
UNKNOWN_SCHEMA_ID = 999_999_999


def fault_hooks(schema_ids: dict[int, int]) -> FaultHooks:
    """Faults of framed Avro records; a record is (schema version, purchase dict)."""
    parsed = {version: schema.parsed for version, schema in SCHEMAS.items()}

    def encode_record(record: tuple[int, dict]) -> bytes:
        version, purchase = record
        return avro.encode(purchase, schema_ids[version], parsed[version])

    def late(record, rng):
        version, purchase = record
        return version, {**purchase, "transaction_time": purchase["transaction_time"] - rng.randint(2, 30) * 86_400_000}

    def truncated(record, rng):
        framed = encode_record(record)  # any strict prefix of an Avro body fails to decode
        return framed[: wire.HEADER_SIZE + rng.randint(0, len(framed) - wire.HEADER_SIZE - 1)]

    def garbled(record, rng):
        return b"\x07" + rng.randbytes(rng.randint(8, 48))  # no Confluent magic byte

    def unknown_id(record, rng):
        return wire.frame(UNKNOWN_SCHEMA_ID, wire.unframe(encode_record(record))[1])

    def evolve(record, rng):
        version, purchase = record
        return 2, {**purchase, "payment_method": rng.choice(["card", "wallet", "cash", None])}

    # No "invalid" kind: the writer schema guarantees Avro field types; unreadable Avro is
    # covered by corrupt bytes and unknown schema ids.
    return FaultHooks(encode=encode_record, late=late, corrupt={"truncated": truncated, "garbled": garbled},
                      unknown_schema_id=unknown_id, evolve=evolve)


def messages(
    count: int | None,
    schema_ids: dict[int, int],
    seed: int | None = None,
    duration: float | None = None,
    versions: Sequence[int] = VERSIONS,
    faults: FaultRates = FaultRates(),
) -> Iterator[Outgoing]:
    """``count`` purchases (or as many as ``duration`` seconds allow).

    Without ``faults``: versions mixed evenly. With them: schema v1, switching to v2 at
    ``faults.evolve_after`` (schema evolution mid-stream), faults injected.
    """
    rng = random.Random(seed)
    if faults != FaultRates():
        budget = Budget(count, duration)

        def make(now):
            purchase = make_purchase(rng, now, 1)
            return key(purchase), (1, purchase)

        yield from inject(budget.records(make), faults, seed, fault_hooks(schema_ids), budget.share_done)
        return
    for chunk in Budget(count, duration).chunks():
        # A fresh clock reading per chunk keeps transaction times near real time. Plain tuples
        # in Outgoing's field order: cheaper than building the NamedTuple.
        for message_key, value in payloads(rng, datetime.now(UTC), chunk, schema_ids, versions):
            yield message_key, value, None, None


def produce(
    settings: Settings,
    count: int | None = None,
    faults: FaultRates = FaultRates(),
    seed: int | None = None,
    progress: bool = True,
    duration: float | None = None,
    rate: float | None = None,
    versions: Sequence[int] = VERSIONS,
    registry: SchemaRegistry | None = None,
) -> DeliveryReport:
    """Produce purchases, schemas registered first (the signature of every producer, see producers.run)."""
    versions = tuple(versions)
    if not versions or set(versions) - set(SCHEMAS):
        raise ValueError(f"versions must be a non-empty subset of {VERSIONS}, got {versions}")
    schema_ids = register_schemas(registry or registry_for(settings))
    return produce_to_topic(settings, TOPIC, messages(count, schema_ids, seed, duration, versions, faults), faults,
                            total=count, progress=progress, rate=rate)
