"""The service's position reads: a topic's partition ends and the release check's records.

    python -m simulations.bench_position_reads                # 1,000 records, 7 repeats
    python -m simulations.bench_position_reads --repeat 3 --waits 1,50

Against the embedded broker, on a topic of one partition holding ``--n`` keyed records, each
read is timed ``--repeat`` times for each reader setting of ``--waits`` (librdkafka's
``fetch.wait.max.ms``, :data:`streamanon.service.offsets.READ_FETCH_WAIT_MS`), the settings
taking turns within each repeat so that all see the same machine:

- ``high_watermarks``: the partition's end offset (the close marks, the drain);
- ``messages_before_end``: the end and the records at ``end - 1``, ``end - 2`` and
  ``end - 1 - n`` (what :func:`streamanon.service.publisher.release_is_complete` reads after
  each publish, on the path from close to release).

Each read makes its own client, as the service's do. Prints the median and every repeat, in
milliseconds.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from simulations.common import commit, machine
from streamanon.service import offsets
from streamanon.service.broker import EmbeddedBroker, ensure_topics
from streamanon.service.config import Config, parse_config
from streamanon.service.kafka_clients import KafkaSettings, rdkafka_producer

TOPIC = "bench.positions"


def config_for(bootstrap: str) -> Config:
    return parse_config({"kafka": {"bootstrap_servers": bootstrap}, "surveys": [{
        "id": "s", "k": 3, "schema": {"rid": {"role": "identifier"},
                                      "q": {"role": "quasi_identifier"}}}]},
        {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32})


def fill(config: Config, n: int) -> None:
    producer = rdkafka_producer(KafkaSettings.from_config(config), {"linger.ms": 5})
    for i in range(n):
        producer.produce(TOPIC, key=f"r:{i}".encode(), value=b"x" * 400)
    producer.flush(30)


def timed(read: Callable[[], object]) -> float:
    started = time.perf_counter()
    read()
    return 1000 * (time.perf_counter() - started)


def run(n: int, repeat: int, waits: list[int]) -> list[tuple[str, int, list[float]]]:
    """Every (read, wait) with its times in ms, from one broker and one topic."""
    saved = offsets.READ_FETCH_WAIT_MS
    with EmbeddedBroker() as broker:
        config = config_for(broker.bootstrap)
        ensure_topics(broker.bootstrap, {TOPIC: 1})
        fill(config, n)
        reads = {"high_watermarks": lambda: offsets.high_watermarks(config, TOPIC),
                 "messages_before_end": lambda: offsets.messages_before_end(
                     config, TOPIC, [1, 2, n + 1])}
        times: dict[tuple[str, int], list[float]] = {(r, w): [] for r in reads for w in waits}
        try:
            for turn in range(repeat):
                for wait in waits if turn % 2 == 0 else waits[::-1]:
                    offsets.READ_FETCH_WAIT_MS = wait
                    for name, read in reads.items():
                        times[name, wait].append(timed(read))
        finally:
            offsets.READ_FETCH_WAIT_MS = saved
    return [(name, wait, ms) for (name, wait), ms in times.items()]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1000, help="records on the topic")
    parser.add_argument("--repeat", type=int, default=7, help="times each read is timed")
    parser.add_argument("--waits", default=f"{offsets.READ_FETCH_WAIT_MS},50",
                        help="comma-separated fetch.wait.max.ms of the readers compared")
    args = parser.parse_args(argv)
    waits = [int(w) for w in args.waits.split(",")]
    rows = run(args.n, args.repeat, waits)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {machine()}, "
          f"commit {commit()}; {args.n:,} records, {args.repeat} repeats\n")
    print("| read | fetch.wait.max.ms | ms (median) | each repeat |")
    print("|---|---:|---:|---|")
    for name, wait, ms in rows:
        print(f"| {name} | {wait} | {statistics.median(ms):.0f} | "
              f"{', '.join(f'{m:.0f}' for m in ms)} |")


if __name__ == "__main__":
    main()
