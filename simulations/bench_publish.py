"""Release topic formats and produce calls: what publishing costs per record.

    python -m simulations.bench_publish                 # 1,000,000 records, 3 rounds
    python -m simulations.bench_publish --n 20000 --rounds 1

Against the embedded broker (Tansu, on the same two cores), the same release messages (JSON of
15 cell means and an int answer, about 420 bytes) are published on one partition by
:class:`~streamanon.service.publisher.ReleasePublisher`'s producer settings in the two record
formats and ways of handing them to librdkafka, in turn within each round (the order
reversed every other round) so that all see the same machine:

- ``headers``: each record with the three headers ``streamanon-type``, ``-release`` and
  ``-index``, one ``produce`` call a record (the format of earlier versions);
- ``key``: each record keyed ``<release id>:<index>``, no headers, one ``produce`` call a
  record (the format published now, the way of earlier versions);
- ``batch``: the same keyed records handed over 10,000 at a time with librdkafka's
  ``produce_batch``, each batch once the local queue has room for all of it (an option
  measured and not taken: the broker, not the produce calls, sets the time).

For each, the seconds of the ``produce`` loop (Python), of the flush (the broker taking what is
still queued) and their sum; the table gives the fastest round of each.
"""

from __future__ import annotations

import argparse
import json
import secrets
import tempfile
import time
from pathlib import Path

import numpy as np

from simulations.bench_service import make_config
from streamanon.service.broker import EmbeddedBroker, ensure_topics
from streamanon.service.publisher import ReleasePublisher

FORMATS = ("headers", "key", "batch")
BATCH = 10_000
QUEUE = 1_000_000  # ReleasePublisher's queue.buffering.max.messages


def release_messages(n: int, seed: int = 1) -> list[bytes]:
    """``n`` release records of 15 cell means (cells of 10) and an answer, as JSON."""
    means = np.random.default_rng(seed).standard_normal((-(-n // 10), 15))
    return [json.dumps({**{f"q{j}": float(means[i // 10, j]) for j in range(15)},
                        "answer": i % 5}).encode() for i in range(n)]


def produce_all(publisher: ReleasePublisher, topic: str, messages: list[bytes],
                release_id: bytes, form: str) -> tuple[float, float]:
    """The records of one release in the format ``form``: seconds of the produce loop and of
    the flush."""
    producer = publisher._producer
    produce = producer.produce
    kind, release = ("streamanon-type", b"record"), ("streamanon-release", release_id)
    prefix = release_id + b":"
    started = time.perf_counter()
    if form == "batch":
        for start in range(0, len(messages), BATCH):
            batch = [{"value": value, "key": b"%b%d" % (prefix, i)}
                     for i, value in enumerate(messages[start:start + BATCH], start)]
            while len(producer) + len(batch) > QUEUE:  # room for all: none refused
                producer.poll(0.05)
            if producer.produce_batch(topic, batch, partition=0) != len(batch):
                raise RuntimeError("the producer refused part of a batch")
        produced = time.perf_counter()
        publisher._flush()
        return produced - started, time.perf_counter() - produced
    for i, value in enumerate(messages):
        while True:
            try:
                if form == "headers":
                    produce(topic, value, partition=0,
                            headers=[kind, release, ("streamanon-index", b"%d" % i)])
                else:
                    produce(topic, value, key=b"%b%d" % (prefix, i), partition=0)
                break
            except BufferError:
                producer.poll(0.05)
    produced = time.perf_counter()
    publisher._flush()
    return produced - started, time.perf_counter() - produced


def run(n: int, rounds: int) -> dict[str, list[tuple[float, float]]]:
    messages = release_messages(n)
    out: dict[str, list[tuple[float, float]]] = {form: [] for form in FORMATS}
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        config = make_config(broker.bootstrap, Path(tmp), ["s"], n)
        for r in range(rounds):
            for form in FORMATS if r % 2 == 0 else FORMATS[::-1]:  # each first in turn
                topic = f"bench.{form}.{r}"
                ensure_topics(broker.bootstrap, {topic: 1})
                publisher = ReleasePublisher(config)
                try:
                    out[form].append(produce_all(publisher, topic, messages,
                                                 secrets.token_hex(16).encode(), form))
                finally:
                    publisher.close()
    return out


def table(n: int, results: dict[str, list[tuple[float, float]]]) -> str:
    lines = [f"| record format ({n:,} records) | produce loop | flush | publish | per record |",
             "|---|---:|---:|---:|---:|"]
    for form in FORMATS:
        loop, flush = min(results[form], key=sum)
        label = {"headers": "three headers per record, `produce` each (earlier)",
                 "key": "key `<release id>:<index>`, no headers, `produce` each (now)",
                 "batch": "the same keys, `produce_batch` of 10,000 (not taken)"}[form]
        lines.append(f"| {label} | {loop:.2f} s | {flush:.2f} s | {loop + flush:.2f} s | "
                     f"{(loop + flush) / n * 1e6:.2f} us |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="records (default 1000000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    args = parser.parse_args(argv)
    results = run(args.n, args.rounds)
    print(f"\nrelease topic formats, embedded broker (Tansu), {args.n:,} records, fastest of "
          f"{args.rounds} round(s), 2 cores\n")
    print(table(args.n, results))


if __name__ == "__main__":
    main()
