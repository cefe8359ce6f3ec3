"""Where partitions end and how far the collector group has come, read from the broker.

The close of a survey is placed in its log by the partitions' end offsets (the close marks), and
the drain before the release waits for the group's committed offsets to reach them; a publish is
checked against the messages the release topic ends in. These reads use clients of their own,
which never join the collector's group, so they answer while the collector is still joining after
a restart.

An end offset is read as the high watermark of a fetch, not with a ListOffsets request: every
Kafka-compatible broker reports the high watermark with each fetch, while the embedded broker's
answer to ListOffsets ("latest") does not match its log (it gave 139 for a partition holding 162
messages).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

from streamanon.service.config import Config
from streamanon.service.health import stop_consumer
from streamanon.service.kafka_clients import (
    KafkaSettings,
    group_consumer,
    group_partition,
    position_reader,
    reader_beginning,
    reader_partition,
)
from streamanon.service.kafka_clients import (
    broker_errors as broker_errors,  # re-exported: the close and the release wait them out
)

FETCH_TIMEOUT_SECONDS = 30.0
#: How long the broker may hold a reader's fetch for data (librdkafka's ``fetch.wait.max.ms``).
#: A reader is short-lived and reads a few records: librdkafka sends the fetch for a newly
#: assigned offset only once the one in flight is answered, so each read of
#: :func:`messages_before_end` waited up to this long (at 50 ms, 108 ms for the release check's
#: three reads against 12 ms at 1 ms: ``simulations/bench_position_reads.py``).
READ_FETCH_WAIT_MS = 1


class Record(NamedTuple):
    """A message read back, whichever client read it."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]


def _reader(config: Config) -> Any:
    """A librdkafka consumer for reading positions: small fetches, short waits, no group
    (:func:`~.kafka_clients.position_reader`). A read never creates the topic: the service
    makes its topics with their own partitions, a broker's auto-creation would give its
    default."""
    return position_reader(KafkaSettings.from_config(config), {
        "max.partition.fetch.bytes": 64 * 1024, "fetch.wait.max.ms": READ_FETCH_WAIT_MS,
        "auto.offset.reset": "earliest", "allow.auto.create.topics": False})


def _partitions(consumer: Any, topic: str) -> list[int]:
    """The partitions of ``topic`` by the brokers' metadata (none: the topic does not exist)."""
    found = consumer.list_topics(topic, timeout=FETCH_TIMEOUT_SECONDS).topics.get(topic)
    if found is None or found.error is not None:
        return []
    return sorted(found.partitions)


def _fetch_high_watermarks(consumer: Any, topic: str, partitions: list[int]) -> dict[int, int]:
    """Each partition's high watermark from a fetch of its first batch (the watermark
    librdkafka keeps from the last fetch answer, ``cached=True``), one partition at a time
    (assigned together, the records fetched from one hold back the fetches of the others
    until they are all consumed)."""
    out = {}
    deadline = time.monotonic() + FETCH_TIMEOUT_SECONDS
    for partition in partitions:
        consumer.assign([reader_beginning(topic, partition)])
        while (high := consumer.get_watermark_offsets(reader_partition(topic, partition),
                                                      cached=True)[1]) < 0:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no fetch answer for {topic}[{partition}] in "
                                   f"{FETCH_TIMEOUT_SECONDS:.0f} s")
            consumer.consume(1, 0.05)
        out[partition] = int(high)
    return out


def high_watermarks(config: Config, topic: str) -> dict[int, int]:
    """{partition: end offset} of ``topic``, each from a fetch's high watermark (blocking)."""
    consumer = _reader(config)
    try:
        return _fetch_high_watermarks(consumer, topic, _partitions(consumer, topic))
    finally:
        consumer.close()


def messages_before_end(config: Config, topic: str, back: Sequence[int],
                        partition: int = 0) -> tuple[int, dict[int, Any]]:
    """The partition's end offset and its messages (:class:`Record`) at ``end - b`` for each
    ``b`` of ``back``, by offset; an offset the partition does not hold (before its start) is
    left out; a topic the broker does not have is empty (blocking)."""
    consumer = _reader(config)
    try:
        if partition not in _partitions(consumer, topic):
            return 0, {}
        end = _fetch_high_watermarks(consumer, topic, [partition])[partition]
        found: dict[int, Any] = {}
        for offset in sorted({end - b for b in back if 0 <= end - b < end}):
            consumer.assign([reader_partition(topic, partition, offset)])
            deadline = time.monotonic() + FETCH_TIMEOUT_SECONDS
            while time.monotonic() < deadline:
                records = [m for m in consumer.consume(1, 0.2) if m.error() is None]
                if records:
                    if records[0].offset() == offset:
                        m = records[0]
                        found[offset] = Record(offset, m.key(), m.value(), m.headers() or [])
                    break
        return end, found
    finally:
        consumer.close()


class GroupOffsets:
    """The end offsets of a topic's partitions and the collector group's committed offsets.

    The consumer that reads the commits carries the group id (to see the group's commits,
    whoever made them) but has no subscription, so it never joins the group."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._consumer: Any = None
        self._lock = asyncio.Lock()

    async def _client(self) -> Any:
        async with self._lock:
            if self._consumer is None:
                consumer = group_consumer(KafkaSettings.from_config(self.config),
                                          group_id=self.config.kafka.group_id,
                                          enable_auto_commit=False)
                await consumer.start()
                self._consumer = consumer
        return self._consumer

    async def ends(self, topic: str) -> dict[int, int]:
        """{partition: end offset} of ``topic`` now."""
        return await asyncio.to_thread(high_watermarks, self.config, topic)

    async def committed(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        """{partition: the group's committed offset} (0 where nothing was committed)."""
        consumer = await self._client()
        return {p: await consumer.committed(group_partition(topic, p)) or 0 for p in partitions}

    async def stop(self) -> None:
        async with self._lock:
            if self._consumer is not None:
                await stop_consumer(self._consumer)
                self._consumer = None
