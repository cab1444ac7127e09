"""Producing one stream, or all, from one or several processes: what `lakehouse produce` runs.

A package of its own, above `producers.cdc`: it dispatches to the event streams and the CDC
streams, and `producers.cdc` uses `producers.delivery` and `producers.faults`; as a module of
`producers` it made the two packages import each other."""

from __future__ import annotations

import multiprocessing
from functools import partial, reduce

from lakehouse.contracts.registry import registry_for
from lakehouse.core import logs
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings
from producers import employees, purchases, user_events
from producers.cdc import stream as cdc_stream
from producers.delivery import DeliveryReport
from producers.faults import FaultRates

# Stream name -> its produce function (settings, count, faults, seed, progress, duration, rate).
PRODUCERS = {
    "employees": employees.produce,
    "purchases": purchases.produce,
    "user_events": user_events.produce,
    "customers": partial(cdc_stream.produce, stream="customers"),
    "accounts": partial(cdc_stream.produce, stream="accounts"),
}


CDC_STREAMS = set(cdc_stream.FORMATS)

def _cdc_messages(settings, count, faults, seed, *, stream):
    return cdc_stream.messages(settings, stream, count, faults, seed, None, first_start=False)


# Stream name -> the messages alone, no Kafka: (settings, count, faults, seed) -> Outgoing
# messages. For measuring generation and serialization apart from delivery (benchmarks/).
MESSAGE_SOURCES = {
    "employees": lambda settings, count, faults, seed: employees.messages(count, faults, seed),
    "purchases": lambda settings, count, faults, seed: purchases.messages(
        count, purchases.register_schemas(registry_for(settings)), seed, faults=faults),
    "user_events": lambda settings, count, faults, seed: user_events.messages(count, faults, seed),
    **{name: partial(_cdc_messages, stream=name) for name in cdc_stream.FORMATS},
}


def _one_process(stream, settings, count, faults, seed, duration, rate) -> DeliveryReport:
    logs.configure()  # a spawned process starts with none: the parent's form, by LAKEHOUSE_LOG_FORMAT
    return PRODUCERS[stream](settings, count, faults, seed, False, duration, rate)


def _streams_of_topic(topic: str) -> list[str]:
    """The configured streams that read ``topic``."""
    from lakehouse.contracts.streams import load_pipeline

    return [spec.name for spec in load_pipeline().values() if spec.topic == topic]


def produce(
    settings: Settings,
    stream: str,
    count: int | None = None,
    duration: float | None = None,
    rate: float | None = None,
    faults: FaultRates = FaultRates(),
    seed: int | None = None,
    processes: int = 1,
    progress: bool = True,
    key_space: int | None = None,
) -> DeliveryReport:
    if stream not in PRODUCERS:
        writers = [name for name, fmt in cdc_stream.FORMATS.items() if fmt.transaction_topic
                   and stream in {fmt.transaction_topic, *_streams_of_topic(fmt.transaction_topic)}]
        if writers:
            raise LakehouseError(f"stream {stream!r} is a connector's transaction topic: the {writers[0]} producer "
                                 f"writes it with the changes (`lakehouse produce {writers[0]}`)")
        raise LakehouseError(f"unknown stream {stream!r}; producible: {', '.join(sorted(PRODUCERS))}")
    if (count is None) == (duration is None):
        raise LakehouseError("give either a message count or a duration")
    if processes < 1 or (count is not None and count < 0) or (rate is not None and rate <= 0):
        raise LakehouseError("processes must be >= 1, count >= 0 and rate > 0")
    options = {}
    if key_space is not None:
        if stream not in CDC_STREAMS or key_space < 1:
            raise LakehouseError("--key-space applies to the CDC streams (customers, accounts) and must be >= 1")
        options["key_space"] = key_space
    if processes > 1 and stream in CDC_STREAMS:
        raise LakehouseError(f"{stream} is produced by one process: its source database orders the changes")
    if processes == 1:
        return PRODUCERS[stream](settings, count, faults, seed, progress, duration, rate, **options)
    # Spawned, not forked: the parent may hold a JVM or librdkafka threads.
    shares = [None] * processes if count is None else [
        count // processes + (1 if i < count % processes else 0) for i in range(processes)]
    jobs = [
        (stream, settings, share, faults, None if seed is None else seed * 1000 + i, duration,
         None if rate is None else rate / processes)
        for i, share in enumerate(shares)
    ]
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        reports = pool.starmap(_one_process, jobs)
    return reduce(DeliveryReport.merge, reports)
