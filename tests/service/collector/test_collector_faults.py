"""The consumer loop against broker, worker and store faults: it waits and goes on, and every
message is stored once or dead-lettered.

The broker side is a fake consumer that raises aiokafka's own exception types and behaves as
aiokafka does when a record cannot be decoded; the ingest worker is the real process, with
faults injected through the collector's ``worker_pool_factory`` (a worker initializer from this
module that wraps the worker's ingest function or its store). One test reads a genuinely
corrupt batch from the embedded broker.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
from aiokafka import TopicPartition
from aiokafka.errors import (
    CommitFailedError,
    CorruptRecordException,
    KafkaConnectionError,
    NodeNotReadyError,
    RequestTimedOutError,
)

from streamanon.service import ingest as ingest_module
from streamanon.service.broker import ensure_topics
from streamanon.service.collector import KafkaCollector
from streamanon.service.config import parse_config
from streamanon.service.health import PartHealth, store_health
from streamanon.service.ingest import SurveyIngest
from streamanon.service.processes import worker_pool
from streamanon.service.store import SQLiteStore, StoreUnavailable, open_store
from streamanon.service.telemetry import Telemetry
from streamanon.service.validation import Validator
from tests.service.kafka_helpers import ENV, SCHEMA, MemoryDeadLetters, produce, response

SECRET = b"R0000"  # respondent ids: never in a log line


def make_config(tmp_path: Path, bootstrap: str = "127.0.0.1:9") -> Any:
    prefix = f"f{secrets.token_hex(4)}"
    return parse_config({
        "kafka": {"bootstrap_servers": bootstrap, "topic_prefix": prefix,
                  "group_id": f"{prefix}-collector", "partitions": 2},
        "store": {"url": f"sqlite:///{tmp_path / 'store.db'}"},
        "surveys": [{"id": "s", "k": 3, "schema": SCHEMA}]}, ENV)


# -- a consumer with aiokafka's behaviour on faults ---------------------------------------------

class Record(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int = 0
    timestamp_type: int = 0


CORRUPT = "corrupt"  # a log entry that cannot be decoded


class FakeConsumer:
    """Enough of ``AIOKafkaConsumer`` for the collector. A record that cannot be decoded makes
    ``getmany`` raise, as aiokafka does: its partition's position stays where that fetch
    began, while partitions drained earlier in the same call have moved on and their records
    are lost with the exception. ``fetch_faults`` and ``commit_faults`` are raised by the next
    calls."""

    def __init__(self, logs: dict[TopicPartition, list[Any]]) -> None:
        self.logs = logs
        self.positions = dict.fromkeys(logs, 0)
        self.commits: list[dict[TopicPartition, int]] = []
        self.commit_faults: list[BaseException] = []
        self.fetch_faults: list[BaseException] = []
        self.fetches: list[float] = []
        self.handed: list[tuple[int, int]] = []  # (partition, offset) of every record returned
        self._paused: set[TopicPartition] = set()
        self.topics: tuple[str, ...] = ()

    def __call__(self, *topics: str, **options: Any) -> FakeConsumer:  # the factory
        self.topics += topics
        self.options = options
        return self

    def subscribe(self, topics: Any = (), listener: Any = None, **_: Any) -> None:
        self.topics = tuple(topics)

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def assignment(self) -> set[TopicPartition]:
        return {tp for tp in self.logs if tp.topic in self.topics}

    def pause(self, *tps: TopicPartition) -> None:
        self._paused |= set(tps)

    def resume(self, *tps: TopicPartition) -> None:
        self._paused -= set(tps)

    def paused(self) -> set[TopicPartition]:
        return set(self._paused)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.positions[tp] = offset

    async def seek_to_beginning(self, *tps: TopicPartition) -> None:
        for tp in tps:
            self.positions[tp] = 0

    async def position(self, tp: TopicPartition) -> int:
        return self.positions[tp]

    async def committed(self, tp: TopicPartition) -> int | None:
        return next((c[tp] for c in reversed(self.commits) if tp in c), None)

    def committed_now(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for commit in self.commits:
            out.update({tp.partition: offset for tp, offset in commit.items()})
        return out

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        if self.commit_faults:
            raise self.commit_faults.pop(0)
        self.commits.append(dict(offsets))

    async def getmany(self, *partitions: TopicPartition, timeout_ms: int = 0,
                      max_records: int | None = None) -> dict[TopicPartition, list[Record]]:
        self.fetches.append(time.monotonic())
        if self.fetch_faults:
            raise self.fetch_faults.pop(0)
        limit = max_records or 500
        out: dict[TopicPartition, list[Record]] = {}
        # the higher partition first: a fault in partition 0 then loses partition 1's records
        for tp in sorted(partitions or self.assignment(), key=lambda t: -t.partition):
            if tp in self._paused:
                continue
            log, pos, got = self.logs[tp], self.positions[tp], []
            while pos < len(log) and limit > 0:
                if log[pos] == CORRUPT:
                    raise CorruptRecordException(f"Invalid CRC - {tp}")
                got.append(log[pos])
                pos += 1
                limit -= 1
            if got:
                out[tp] = got
                self.positions[tp] = pos
        if not out:
            await asyncio.sleep(min(timeout_ms, 50) / 1000)
        for records in out.values():
            self.handed += [(r.partition, r.offset) for r in records]
        return out

    def append(self, partition: int, values: list[Any]) -> None:
        tp = next(tp for tp in self.logs if tp.partition == partition)
        log = self.logs[tp]
        for value in values:
            log.append(value if value == CORRUPT else Record(
                tp.topic, tp.partition, len(log), None, value))


def fake_consumer(config: Any, partitions: int = 2) -> FakeConsumer:
    topic = config.topic("s", "responses")
    return FakeConsumer({TopicPartition(topic, p): [] for p in range(partitions)})


class Harness:
    """A :class:`KafkaCollector` over ``consumer`` with a real worker and SQLite store."""

    def __init__(self, config: Any, consumer: Any, *, pool_factory: Any = None) -> None:
        self.config = config
        self.consumer = consumer
        self.store = open_store(config.store.url)
        sc = config.surveys[0]
        self.store.ensure_survey(sc.id)
        self.ingest = SurveyIngest(sc, Validator(sc, config.hmac_key))
        self.dead = MemoryDeadLetters()
        self.restarts: list[str] = []
        self.collector = KafkaCollector(
            config, {sc.id: self.ingest}, self.dead, on_stored=lambda sid, times: None,
            consumer_factory=consumer, worker_pool_factory=pool_factory,
            on_restart=self.restarts.append)

    async def __aenter__(self) -> Harness:
        await self.collector.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.collector.stop()

    async def wait(self, until: Any, timeout: float = 60.0, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while not until():
            task = self.collector._task
            assert task is not None
            if task.done():
                raise AssertionError(f"the collector stopped: {task.exception()!r}")
            assert time.monotonic() < deadline, (what, self.ingest.stored, self.ingest.rejected,
                                                 getattr(self.consumer, "commits", None))
            await asyncio.sleep(0.02)

    def alive(self) -> bool:
        task = self.collector._task
        return task is not None and not task.done()

    def stored_tickets(self) -> list[int]:
        records = self.store.load_records("s", 3)
        return sorted(int(c["ticket"]) for c in records.confidential)

    def dead_letters(self) -> list[tuple[int, int, str]]:
        return sorted((r.message.partition, r.message.offset, r.reason) for _, r in self.dead.sent)


def no_values_in(caplog: Any) -> None:
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert SECRET.decode() not in text and "ticket" not in text


# -- worker fault injection (runs in the worker process) ----------------------------------------

POISON = b"POISON"


def faulty_worker(config_json: str, hmac_key: bytes, fault: str, flag: str) -> None:
    """The ingest worker's initializer, then a fault: ``poison`` kills the process on every
    batch holding a POISON message, ``raise`` makes such a batch raise instead, ``die-once``
    kills it on the first batch while ``flag`` exists (deleting it), ``store`` makes the
    store's writes raise :class:`StoreUnavailable` while ``flag`` exists."""
    ingest_module._worker_start(config_json, hmac_key)
    real = ingest_module._worker_ingest

    def marked(batches: list[Any]) -> bool:
        return any(isinstance(v, bytes) and POISON in v
                   for _, columns, _ in batches for column in columns for v in column)

    def ingest(batches: list[Any]) -> Any:
        if fault == "poison" and marked(batches):
            os.kill(os.getpid(), signal.SIGKILL)
        if fault == "raise" and marked(batches):
            raise RuntimeError("a bug in the worker")
        if fault == "die-once" and batches and os.path.exists(flag):
            os.unlink(flag)
            os.kill(os.getpid(), signal.SIGKILL)
        return real(batches)

    ingest_module._worker_ingest = ingest
    if fault == "store":
        ingest_module._WORKER["store"] = FlakyStore(ingest_module._WORKER["store"], flag)


class FlakyStore:
    """A store whose writes fail as a full disk does while ``flag`` exists."""

    def __init__(self, store: Any, flag: str) -> None:
        self._store = store
        self._flag = flag

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def insert_records(self, survey: str, rows: Any) -> int:
        if os.path.exists(self._flag):
            raise StoreUnavailable("the store cannot write now (test)")
        return self._store.insert_records(survey, rows)


def faulty_pool(config: Any, fault: str, flag: Path) -> Any:
    args = (config.model_dump_json(by_alias=True), config.hmac_key, fault, str(flag))
    return lambda: worker_pool(1, faulty_worker, args)


def worker_pid(collector: KafkaCollector) -> int:
    return next(iter(collector.worker.pool._processes))


# -- broker faults -------------------------------------------------------------------------------

def test_commit_failures_are_logged_by_type_and_ingest_goes_on(tmp_path, caplog):
    config = make_config(tmp_path)
    consumer = fake_consumer(config)
    consumer.commit_faults = [CommitFailedError("rebalanced"), KafkaConnectionError("gone"),
                              NodeNotReadyError("not ready"), RequestTimedOutError()]

    async def run() -> Harness:
        async with Harness(config, consumer) as h:
            for round_ in range(6):
                consumer.append(round_ % 2, [response(round_ * 10 + i) for i in range(10)])
                await h.wait(lambda r=round_: h.ingest.stored == (r + 1) * 10, what="stored")
            await h.wait(lambda: consumer.committed_now() == {0: 30, 1: 30}, what="commit")
            assert h.alive()
        return h

    with caplog.at_level(logging.INFO, "streamanon.service"):
        h = asyncio.run(run())
    assert h.stored_tickets() == list(range(60))
    assert not consumer.commit_faults  # every scripted failure was met
    text = caplog.text
    assert "CommitFailedError" in text and "KafkaConnectionError" in text
    no_values_in(caplog)


def test_the_consumer_gets_the_configured_session_timeout(tmp_path):
    config = make_config(tmp_path)
    config.kafka.session_timeout_ms = 12_000
    consumer = fake_consumer(config)

    async def run() -> None:
        async with Harness(config, consumer):
            pass

    asyncio.run(run())
    assert consumer.options["session_timeout_ms"] == 12_000
    assert consumer.options["group_id"] == config.kafka.group_id


def test_fetch_errors_back_off_exponentially_and_ingest_goes_on(tmp_path):
    config = make_config(tmp_path)
    consumer = fake_consumer(config)
    consumer.append(0, [response(i) for i in range(5)])
    consumer.fetch_faults = [KafkaConnectionError("gone"), NodeNotReadyError("x"),
                             RequestTimedOutError(), KafkaConnectionError("gone")]

    async def run() -> Harness:
        async with Harness(config, consumer) as h:
            await h.wait(lambda: h.ingest.stored == 5)
            assert h.alive()
        return h

    h = asyncio.run(run())
    assert h.stored_tickets() == list(range(5))
    assert consumer.committed_now() == {0: 5}
    # four failed fetches, then one that succeeds: each wait at least the backoff (a lower
    # bound only: a loaded machine makes waits longer, never shorter)
    gaps = np.diff(consumer.fetches[:5])
    assert (gaps >= [KafkaCollector.backoff(i) - 0.01 for i in range(1, 5)]).all(), gaps


def test_the_backoff_doubles_up_to_its_cap():
    delays = [KafkaCollector.backoff(i) for i in range(1, 10)]
    assert delays[:4] == [0.1, 0.2, 0.4, 0.8]
    assert max(delays) == KafkaCollector.MAX_BACKOFF == delays[-1]


def test_an_unreadable_record_is_dead_lettered_and_the_rest_stored_once(tmp_path, caplog):
    config = make_config(tmp_path)
    consumer = fake_consumer(config)
    consumer.append(1, [response(100 + i) for i in range(3)])
    consumer.append(0, [response(0), response(1), CORRUPT, CORRUPT, response(4), response(5)])

    async def run() -> Harness:
        async with Harness(config, consumer) as h:
            await h.wait(lambda: consumer.committed_now() == {0: 6, 1: 3}, what="past it")
            consumer.append(0, [response(6)])
            consumer.append(1, [response(103)])
            await h.wait(lambda: consumer.committed_now() == {0: 7, 1: 4}, what="after it")
            assert h.alive()
        return h

    with caplog.at_level(logging.INFO, "streamanon.service"):
        h = asyncio.run(run())
    assert h.stored_tickets() == [0, 1, 4, 5, 6, 100, 101, 102, 103]
    assert h.dead_letters() == [(0, 2, "unprocessable"), (0, 3, "unprocessable")]
    assert h.ingest.rejected == {"unprocessable": 2}
    assert "CorruptRecordException" in caplog.text
    no_values_in(caplog)


def spoil(batch: bytearray, how: str) -> bytearray:
    """A v2 record batch made unreadable: its records replaced by a gzip header with nothing
    after it, marked gzip, the CRC computed after (``garbage``); or its CRC spoilt (``crc``).
    The header is 61 bytes: the length at 8, the CRC at 17 (of what follows the attributes),
    the attributes at 21 (the codec in their low 3 bits)."""
    import struct

    from aiokafka.record.util import calc_crc32c

    if how == "crc":
        batch[17] ^= 0xFF
        return batch
    out = bytearray(batch[:61]) + b"\x1f\x8b\x08\x00"
    struct.pack_into(">i", out, 8, len(out) - 12)
    attributes = struct.unpack_from(">h", out, 21)[0]
    struct.pack_into(">h", out, 21, (attributes & ~0x07) | 1)
    struct.pack_into(">I", out, 17, calc_crc32c(bytes(out[21:])))
    return out


def corrupt_produce(bootstrap: str, topic: str, values: list[bytes], how: str) -> None:
    """Send ``values`` in one batch that no client can read (:func:`spoil`), built by an
    aiokafka producer whose batches are spoilt once built."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.producer.message_accumulator import BatchBuilder

    saved = BatchBuilder._build

    def spoilt(self: Any) -> Any:
        if self._buffer is None:
            self._buffer = spoil(saved(self), how)
        return self._buffer

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=50,
                                    max_batch_size=1024 * 1024)
        await producer.start()
        try:
            sent = [await producer.send(topic, value=v, partition=0) for v in values]
            await asyncio.wait_for(asyncio.gather(*sent), 30)
        finally:
            await producer.stop()

    BatchBuilder._build = spoilt
    try:
        asyncio.run(run())
    finally:
        BatchBuilder._build = saved


# On the embedded broker only: Apache Kafka checks each batch's CRC when it is produced and
# refuses a corrupt one (CORRUPT_MESSAGE), so it never hands one to a consumer.
def test_corrupt_batches_from_the_broker_are_dead_lettered_and_skipped(tansu_broker, tmp_path,
                                                                     caplog):
    config = make_config(tmp_path, tansu_broker.bootstrap)
    topic = config.topic("s", "responses")
    ensure_topics(tansu_broker.bootstrap, {topic: 1, config.control_topic: 1})
    produce(tansu_broker.bootstrap, topic, [(None, response(i)) for i in range(3)])
    corrupt_produce(tansu_broker.bootstrap, topic, [response(10), response(11)], "garbage")
    corrupt_produce(tansu_broker.bootstrap, topic, [response(20)], "crc")
    produce(tansu_broker.bootstrap, topic, [(None, response(i)) for i in range(3, 6)])

    async def run() -> Harness:
        async with Harness(config, None) as h:
            await h.wait(lambda: h.ingest.received == 9, timeout=80, what="every message")
            assert h.alive()
        return h

    with caplog.at_level(logging.INFO, "streamanon.service"):
        h = asyncio.run(run())
    assert h.stored_tickets() == list(range(6))
    assert h.dead_letters() == [(0, 3, "unprocessable"), (0, 4, "unprocessable"),
                                (0, 5, "unprocessable")]
    no_values_in(caplog)


# -- worker faults -------------------------------------------------------------------------------

def test_a_worker_killed_under_a_batch_is_replaced_and_the_batch_stored_once(tmp_path,
                                                                           subprocesses):
    config = make_config(tmp_path)
    consumer = fake_consumer(config)
    flag = tmp_path / "die-once"

    async def run() -> Harness:
        async with Harness(config, consumer,
                           pool_factory=faulty_pool(config, "die-once", flag)) as h:
            flag.touch()
            consumer.append(0, [response(i) for i in range(20)])
            await h.wait(lambda: h.ingest.stored == 20, what="stored")
            await h.wait(lambda: consumer.committed_now() == {0: 20}, what="commit")
            assert not flag.exists() and h.alive()
        return h

    h = asyncio.run(run())
    assert h.stored_tickets() == list(range(20))
    assert h.restarts == ["collector"]
    assert h.dead.sent == []


def test_an_idle_worker_killed_from_outside_is_replaced(tmp_path, subprocesses):
    config = make_config(tmp_path)
    consumer = fake_consumer(config)

    async def run() -> Harness:
        async with Harness(config, consumer) as h:
            consumer.append(0, [response(i) for i in range(5)])
            await h.wait(lambda: h.ingest.stored == 5)
            os.kill(worker_pid(h.collector), signal.SIGKILL)
            await h.wait(lambda: h.restarts == ["collector"], what="restart")
            consumer.append(1, [response(i) for i in range(5, 10)])
            await h.wait(lambda: h.ingest.stored == 10, what="stored after")
            assert h.alive()
        return h

    h = asyncio.run(run())
    assert h.stored_tickets() == list(range(10))


@pytest.mark.parametrize("fault", ["poison", "raise"])
def test_a_poison_message_is_dead_lettered_alone_and_the_rest_stored_once(tmp_path, fault,
                                                                          caplog, subprocesses):
    config = make_config(tmp_path)
    consumer = fake_consumer(config)
    poison = response(5)[:-1] + b', "x": "' + POISON + b'"}'
    values = [response(i) for i in range(5)] + [poison] + [response(i) for i in range(6, 8)]

    async def run() -> Harness:
        async with Harness(config, consumer,
                           pool_factory=faulty_pool(config, fault, tmp_path / "x")) as h:
            consumer.append(0, values)
            await h.wait(lambda: consumer.committed_now() == {0: 8}, timeout=80,
                         what="past the poison")
            consumer.append(0, [response(8)])
            await h.wait(lambda: h.ingest.stored == 8, what="after the poison")
            assert h.alive()
        return h

    with caplog.at_level(logging.INFO, "streamanon.service"):
        h = asyncio.run(run())
    assert h.stored_tickets() == [0, 1, 2, 3, 4, 6, 7, 8]
    assert h.dead_letters() == [(0, 5, "unprocessable")]
    # 3 tries of the batch, then halves: 4 (dies), 2 (dies), the poison alone 3 times
    expected = 8 if fault == "poison" else 0
    assert len(h.restarts) == expected
    no_values_in(caplog)


# -- store faults --------------------------------------------------------------------------------

@pytest.mark.heavy  # seconds: make test runs it, make check leaves it out
def test_a_store_that_cannot_write_pauses_ingest_until_it_can(tmp_path, caplog):
    config = make_config(tmp_path)
    consumer = fake_consumer(config)
    flag = tmp_path / "store-full"
    flag.touch()

    async def run() -> Harness:
        async with Harness(config, consumer,
                           pool_factory=faulty_pool(config, "store", flag)) as h:
            consumer.append(0, [response(i) for i in range(10)])
            await h.wait(lambda: h.collector.store_paused, what="paused")
            handed = len(consumer.handed)
            consumer.append(0, [response(i) for i in range(10, 20)])
            consumer.append(1, [response(i) for i in range(20, 30)])
            fetches = len(consumer.fetches)
            await asyncio.sleep(3.0)
            assert h.collector.store_paused and h.alive()
            assert len(consumer.fetches) > fetches  # still polling: the group keeps it
            assert len(consumer.handed) == handed  # but nothing new taken in
            assert consumer.paused() == consumer.assignment()
            assert consumer.commits == [] and h.dead.sent == [] and h.ingest.stored == 0
            flag.unlink()
            await h.wait(lambda: h.ingest.stored == 30, what="stored after")
            await h.wait(lambda: consumer.committed_now() == {0: 20, 1: 10}, what="commit")
            assert not h.collector.store_paused and consumer.paused() == set()
        return h

    with caplog.at_level(logging.INFO, "streamanon.service"):
        h = asyncio.run(run())
    assert h.stored_tickets() == list(range(30))
    assert h.dead.sent == [] and h.restarts == []
    messages = [r.getMessage() for r in caplog.records]
    assert sum("paused" in m for m in messages) == 1, messages
    assert sum("resumed" in m for m in messages) == 1, messages


def test_the_store_is_down_in_health_while_it_refuses_writes():
    async def answering() -> str:
        return "OPEN"

    async def check() -> tuple[PartHealth, PartHealth]:
        return (await store_health(answering(), writes_refused=True),
                await store_health(answering(), writes_refused=False))

    down, up = asyncio.run(check())
    assert not down.ok and "writes" in down.detail
    assert up.ok


def test_a_full_sqlite_database_raises_store_unavailable(tmp_path):
    store = SQLiteStore(tmp_path / "small.db")
    pages = store._execute("PRAGMA page_count")[0][0]
    store._execute(f"PRAGMA max_page_count = {pages + 2}")
    with pytest.raises(StoreUnavailable, match="full"):
        store._execute("CREATE TABLE filler AS SELECT zeroblob(100000) AS x")
    store._execute("CREATE TABLE filler (x BLOB)")
    with pytest.raises(StoreUnavailable, match="full"), store._transaction():
        store._execute("INSERT INTO filler VALUES (zeroblob(100000))")
    store._execute("PRAGMA max_page_count = 1000000")
    assert store.ensure_survey("s").state == "OPEN"  # no transaction was left open
    assert store._execute("SELECT COUNT(*) FROM filler")[0][0] == 0
    store.close()


def test_a_restart_counts_as_a_failure_of_its_part_once_per_outage():
    telemetry = Telemetry()
    up, down = PartHealth(True, "running"), PartHealth(False, "the ingest worker exited")
    telemetry.count_restart("collector")  # no check saw it down
    assert telemetry.part_failures["collector"] == 1
    telemetry.observe_health({"collector": down})  # another outage, seen by a check ...
    telemetry.count_restart("collector")  # ... and ended by the restart: counted once
    assert telemetry.part_failures["collector"] == 2
    assert telemetry.parts_up["collector"]
    telemetry.observe_health({"collector": up})
    assert telemetry.part_failures["collector"] == 2


def test_sqlite_operational_errors_other_than_unavailability_are_left_alone(tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    with pytest.raises(sqlite3.OperationalError):
        store._execute("SELECT * FROM no_such_table")
    store.close()
