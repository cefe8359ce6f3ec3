"""The collector's consumer, aiokafka against confluent-kafka: same run, broker and messages.

    python -m simulations.bench_ingest_consumers                  # 200,000 records, 3 repeats
    python -m simulations.bench_ingest_consumers --n 50000 --repeat 1   # a quick look

Against the embedded broker (Tansu). Each repeat produces ``--n`` responses (the ingest
benchmark's: 17 fields, 15 float quasi-identifiers, a respondent id, one int answer; about 420
bytes each) into a fresh topic of 4 partitions, then each client reads the whole topic once,
in an order that alternates between repeats, with a consumer group of its own, the way the
collector reads: subscribed, from the earliest offset, batches of at most 10,000 records
(``kafka.batch_max_records``), each record's partition, offset and value touched, and each
batch's next offsets committed (awaited) before the next fetch. No validation, no store, no
worker: the client alone.

- **aiokafka**: ``AIOKafkaConsumer`` as the collector builds it (through
  :func:`streamanon.service.kafka_clients.group_consumer`, the fetch sizes of
  ``KafkaCollector.start``), ``getmany`` then ``commit``;
- **confluent-kafka**: librdkafka's ``Consumer`` with the same group settings and fetch
  sizes, ``consume`` then a synchronous ``commit``.

The rate is records over the seconds from the first record received to the last (the group
join, which the embedded broker holds for half the session timeout, is reported apart); the
CPU is this process's (every thread: librdkafka fetches in threads of its own) over the same
span, in microseconds per record. Medians over ``--repeat`` runs; the ratio is
confluent-kafka's median rate over aiokafka's.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import time

import numpy as np

from simulations.bench_service import M, responses, send
from streamanon.service.broker import EmbeddedBroker, ensure_topics
from streamanon.service.kafka_clients import KafkaSettings, group_consumer

PARTITIONS = 4
BATCH = 10_000  # kafka.batch_max_records's default
SESSION_MS = 10_000
CLIENTS = ("aiokafka", "confluent-kafka")


Timing = tuple[float, float, float]


async def read_aiokafka(bootstrap: str, topic: str, n: int) -> Timing:
    """(seconds to the first record, seconds from the first record to the ``n``-th, CPU
    seconds of the process over the latter)."""
    consumer = group_consumer(
        KafkaSettings(bootstrap), group_id=f"bench-{secrets.token_hex(4)}",
        enable_auto_commit=False, auto_offset_reset="earliest",
        max_partition_fetch_bytes=8 * 1024 * 1024, fetch_max_bytes=64 * 1024 * 1024,
        session_timeout_ms=SESSION_MS, heartbeat_interval_ms=SESSION_MS // 3)
    started = time.perf_counter()
    consumer.subscribe([topic])
    await consumer.start()
    try:
        seen = size = 0
        first = cpu = 0.0
        while seen < n:
            batches = await consumer.getmany(timeout_ms=200, max_records=BATCH)
            if not batches:
                continue
            if not seen:
                first, cpu = time.perf_counter(), time.process_time()
            offsets = {}
            for tp, records in batches.items():
                for r in records:
                    size += len(r.value) + r.partition
                    offsets[tp] = r.offset + 1
                seen += len(records)
            await consumer.commit(offsets)
        return (first - started, time.perf_counter() - first,
                time.process_time() - cpu)
    finally:
        await consumer.stop()


def read_confluent(bootstrap: str, topic: str, n: int) -> Timing:
    """As :func:`read_aiokafka`, by librdkafka."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"bench-{secrets.token_hex(4)}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "max.partition.fetch.bytes": 8 * 1024 * 1024, "fetch.max.bytes": 64 * 1024 * 1024,
        "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": SESSION_MS // 3})
    started = time.perf_counter()
    consumer.subscribe([topic])
    try:
        seen = size = 0
        first = cpu = 0.0
        while seen < n:
            messages = consumer.consume(num_messages=BATCH, timeout=0.2)
            if not messages:
                continue
            if not seen:
                first, cpu = time.perf_counter(), time.process_time()
            offsets: dict[int, int] = {}
            for m in messages:
                if m.error() is not None:
                    raise KafkaException(m.error())
                size += len(m.value()) + m.partition()
                offsets[m.partition()] = m.offset() + 1
            seen += len(messages)
            consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()],
                            asynchronous=False)
        return (first - started, time.perf_counter() - first,
                time.process_time() - cpu)
    finally:
        consumer.close()


def one_repeat(bootstrap: str, n: int, repeat: int) -> dict[str, Timing]:
    topic = f"consumers-{secrets.token_hex(4)}"
    ensure_topics(bootstrap, {topic: PARTITIONS})
    X = np.random.default_rng(repeat).standard_normal((n, M))
    send(bootstrap, topic, responses(X))
    out = {}
    order = CLIENTS if repeat % 2 == 0 else CLIENTS[::-1]
    for client in order:
        if client == "aiokafka":
            out[client] = asyncio.run(read_aiokafka(bootstrap, topic, n))
        else:
            out[client] = read_confluent(bootstrap, topic, n)
        join, seconds, cpu = out[client]
        print(f"repeat {repeat + 1}: {client:<16} {n / seconds:>10,.0f} records/s, "
              f"{cpu / n * 1e6:.2f} CPU us/record (join {join:.1f} s)", flush=True)
    return out


def table(n: int, runs: list[dict[str, Timing]]) -> str:
    rates = {c: [n / r[c][1] for r in runs] for c in CLIENTS}
    joins = {c: [r[c][0] for r in runs] for c in CLIENTS}
    cpu = {c: [r[c][2] / n * 1e6 for r in runs] for c in CLIENTS}
    lines = ["| client | records/s (median) | each repeat | CPU us/record (median) "
             "| group join, s (median) |", "|---|---:|---|---:|---:|"]
    for c in CLIENTS:
        each = ", ".join(f"{x:,.0f}" for x in rates[c])
        lines.append(f"| {c} | {statistics.median(rates[c]):,.0f} | {each} | "
                     f"{statistics.median(cpu[c]):.2f} | {statistics.median(joins[c]):.1f} |")
    ratio = statistics.median(rates["confluent-kafka"]) / statistics.median(rates["aiokafka"])
    lines.append(f"\nconfluent-kafka / aiokafka: {ratio:.2f} ({n:,} records, {PARTITIONS} "
                 f"partitions, {len(runs)} repeat(s))")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000, help="records per repeat")
    parser.add_argument("--repeat", type=int, default=3, help="repeats (medians over them)")
    args = parser.parse_args(argv)
    with EmbeddedBroker() as broker:
        runs = [one_repeat(broker.bootstrap, args.n, r) for r in range(args.repeat)]
    print(table(args.n, runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
