"""Producer throughput per stream, one process, against the local broker (acks=all, idempotent).

For each stream: first the messages alone (generation + serialization, no Kafka), then the
same number produced to a fresh topic and acknowledged. Unique payloads, no faults. Prints
one line per stream and a final `RESULT {json}` line.

    python benchmarks/producer_throughput.py [--count 300000] [--streams employees purchases ...]

Starts the local broker on a free port under a temporary state folder (jars from
.lakehouse/jars, i.e. after `make setup`) unless LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS is set.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lakehouse.core import local_kafka  # noqa: E402
from lakehouse.core.settings import Settings, default_home  # noqa: E402
from producers.delivery import ensure_topic, send_all  # noqa: E402
from producers.faults import FaultRates  # noqa: E402
from producers.run import MESSAGE_SOURCES  # noqa: E402


def measure(settings: Settings, stream: str, count: int) -> dict:
    source = MESSAGE_SOURCES[stream]
    started = time.perf_counter()
    size = sum(len(message[1] or b"") for message in source(settings, count, FaultRates(), 1))
    serialize_s = time.perf_counter() - started

    topic = f"bench_{stream}_{time.time_ns()}"
    ensure_topic(settings, topic, partitions=3)
    report = send_all(settings, topic, source(settings, count, FaultRates(), 2), total=count, progress=False,
                      track_faults=False)
    if report.failed:
        raise SystemExit(f"{stream}: {report.failed} messages not delivered: {report.errors}")
    return {
        "stream": stream,
        "messages": report.delivered,
        "serialize_msgs_per_s": round(count / serialize_s),
        "produce_msgs_per_s": round(report.delivered / report.seconds),
        "produce_mb_per_s": round(report.bytes / report.seconds / 1e6, 2),
        "avg_message_bytes": round(size / count, 1),
        "seconds": round(report.seconds, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=300_000, help="messages per stream")
    parser.add_argument("--streams", nargs="+", default=sorted(MESSAGE_SOURCES))
    args = parser.parse_args()

    own_broker = not os.environ.get("LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS")
    home = Path(tempfile.mkdtemp(prefix="bench-producers-"))
    (home / "jars").symlink_to(Path(default_home()) / "jars")
    settings = Settings.from_env({**os.environ, "LAKEHOUSE_HOME": str(home),
                                  "LAKEHOUSE_KAFKA_PORT": str(local_kafka.free_port())})
    if own_broker:
        local_kafka.start(settings)
    try:
        results = []
        for stream in args.streams:
            result = measure(settings, stream, args.count)
            results.append(result)
            print(f"{stream:<12} serialize {result['serialize_msgs_per_s']:>9,} msg/s   "
                  f"produce {result['produce_msgs_per_s']:>9,} msg/s  {result['produce_mb_per_s']:>6} MB/s  "
                  f"({result['avg_message_bytes']} B/msg)", flush=True)
    finally:
        if own_broker:
            local_kafka.stop(settings)
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
               "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}
    print("RESULT " + json.dumps({"benchmark": "producer_throughput", "count": args.count,
                                  "machine": machine, "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
