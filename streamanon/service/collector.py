"""The collector: survey responses from Kafka into the store, bad ones to the dead-letter topic.

:class:`KafkaCollector` is the Kafka driver: the consumer loop, rebalances, offset commits,
back-off while the broker or the store is away, unreadable records, control messages, and the
close marks and drain. Validation (:mod:`streamanon.service.validation`), de-duplication,
storage and the ingest worker process (:mod:`streamanon.service.ingest`) and the dead letters
(:mod:`streamanon.service.deadletters`) are its parts, which the tests call without a broker.
May import those, the configuration, offsets and health modules, and the Kafka clients'
door (:mod:`streamanon.service.kafka_clients`, which loads a client library only when it
builds a client).

The driver consumes with aiokafka ``getmany`` batches (aiokafka is the client underneath
faust-streaming). A faust agent spends tens of microseconds of per-event machinery on every
message, which caps its rate below what this service must sustain (specification section 6;
the ingest benchmark, docs/benchmarks/service.md, has the figures); batches end to end do not
have that ceiling.

Guarantees:

- every message is either stored or dead-lettered, with a machine-readable reason, whatever its
  bytes: an error that one message provokes dead-letters that message (``unprocessable``) and
  never reaches the loop that serves the others; a control message the service cannot take is
  logged and skipped;
- offsets are committed only after the store has committed the batch, so a crash loses
  nothing; a redelivered response is recognised by its identity (respondent HMAC plus a digest
  of the stored record, see :func:`~.ingest.store_records`), wherever it was read, and stored
  at most once; it is counted (``redelivered``) and logged;
- identifiers never reach the store: only an HMAC-SHA256 of the respondent id is kept, for
  de-duplication; logs carry counts and reasons, never values.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from streamanon.service.config import Config
from streamanon.service.deadletters import DeadLetterSink, redact_dead_letter
from streamanon.service.health import cancel_task, stop_consumer
from streamanon.service.ingest import (
    IngestWorker,
    Job,
    Outcome,
    SurveyIngest,
    _columns,
    message_of,
)
from streamanon.service.kafka_clients import (
    KafkaSettings,
    broker_errors,
    fetch_errors,
    group_consumer,
    group_partition,
    rebalance_listener,
)
from streamanon.service.offsets import GroupOffsets
from streamanon.service.validation import Closure, Message, Rejection

log = logging.getLogger(__name__)

CONTROL_MAX_BYTES = 64 * 1024  # a control message is a few dozen bytes
DEAD_LETTER_WAIT = 10.0  # seconds a batch's commit waits for its dead letters' acknowledgement


class KafkaCollector:
    """Consumes every survey's response topic in batches; an ingest worker process
    (:attr:`worker`, an :class:`~.ingest.IngestWorker`) validates and stores them
    (:func:`~.validation.check_columns`, :func:`~.ingest.store_records`).

    The event loop fetches batch N + 1 while the worker handles batch N; offsets are committed
    in order, each only after the worker's store transaction for it has committed.
    ``on_stored(survey_id, arrival_times)`` is called for each committed batch.

    No broker, worker or store fault ends the loop; it waits and goes on, and what it read
    again is recognised by identity. A failed fetch is retried with exponential backoff (at
    most :attr:`MAX_BACKOFF` s); a failed commit is logged and left out. A record that cannot
    be decoded (a corrupt or unreadable compressed batch) is found by reading each partition
    alone, dead-lettered ``unprocessable`` and skipped. An ingest worker that dies is replaced
    (``on_restart("collector")``) and handed the same batches; a batch that kills or fails it
    :attr:`~.ingest.IngestWorker.ATTEMPTS` times is split until the message responsible is
    alone, which is then dead-lettered ``unprocessable``. A store that refuses writes
    (:class:`~streamanon.service.store.StoreUnavailable`) pauses consumption: the batch is kept and
    retried, nothing is committed, and :attr:`store_paused` reports the store down.
    """

    def __init__(self, config: Config, ingests: dict[str, SurveyIngest],
                 dead_letters: DeadLetterSink, *, on_stored: Callable[[str, list[float]], None],
                 consumer_factory: Callable[..., Any] | None = None,
                 on_control: Callable[[bytes | None], Awaitable[Any] | None] | None = None,
                 worker_pool_factory: Callable[[], concurrent.futures.Executor] | None = None,
                 on_restart: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.ingests = ingests
        self.dead_letters = dead_letters
        self.on_stored = on_stored
        self.on_control = on_control
        self._consumer_factory = consumer_factory
        self._topics = {config.topic(sid, "responses"): sid for sid in ingests}
        self._consumer: Any = None
        self._task: asyncio.Task | None = None
        self._positions: dict[Any, int] = {}
        self.offsets = GroupOffsets(config)
        self._marking = asyncio.Lock()  # held while a close mark is taken (see take_close)
        self.batches = 0
        self.worker = IngestWorker(config, backoff=self.backoff,
                                   store_refused=self._store_refused,
                                   store_took=self._store_took,
                                   pool_factory=worker_pool_factory, on_restart=on_restart)
        self.store_paused = False  # the store refuses writes: ingest waits (see health)
        # Called with a batch's {TopicPartition: next offset} once its records are committed
        # to the store and its dead letters sent (before its offsets are committed): for
        # measurements of the ingest latency; it sees positions only, never values.
        self.on_batch_stored: Callable[[dict[Any, int]], None] | None = None
        self._generation = 0  # rebalances of the group (see _commit)
        self._next_offset: dict[Any, int] = {}  # after the last record handed on, by partition
        self._rewind_needed = False
        self._suspects: dict[Any, int | None] | None = None  # partitions read alone, see _fetch
        self._fetch_failures = self._store_failures = 0
        self._paused_at = self._isolated_until = 0.0

    MAX_BACKOFF = 5.0  # seconds, at most, between tries while the broker or the store is away
    COMMIT_TIMEOUT = 30.0  # a commit the broker does not answer in time is left out
    ISOLATION_SECONDS = 2.0  # partitions read alone this long after the last unreadable fetch

    @classmethod
    def backoff(cls, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failure in a row: 0.1 s, doubling, at
        most :attr:`MAX_BACKOFF`."""
        return min(0.1 * 2.0 ** (max(failures, 1) - 1), cls.MAX_BACKOFF)

    @dataclass
    class _Batch:
        """A fetched batch on its way through the worker: the offsets to commit after it, its
        messages by survey, the worker's jobs, and the group generation it was read in."""

        offsets: dict[Any, int]
        work: dict[str, list[Any]]  # consumer records, by survey
        jobs: list[Job]
        generation: int
        future: asyncio.Future | None = None
        pool: Any = None  # the worker pool the future runs in
        controls: list[asyncio.Future] = field(default_factory=list)  # commands being applied

        def ready(self) -> bool:
            return ((self.future is None or self.future.done())
                    and all(c.done() for c in self.controls))

    async def start(self) -> None:
        await self.worker.start()

        factory = self._consumer_factory or group_consumer
        self._consumer = factory(
            KafkaSettings.from_config(self.config),
            group_id=self.config.kafka.group_id, enable_auto_commit=False,
            auto_offset_reset="earliest", max_partition_fetch_bytes=8 * 1024 * 1024,
            fetch_max_bytes=64 * 1024 * 1024,
            # The embedded broker holds a new group's first join for half the session timeout
            # and a join after a killed member for 1.8 times it: 5 s and 18 s at 10 s, 15 s
            # and 54 s at 30 s (measured). With 10 s, test_crash_safety's drain phase
            # (services killed while their collector joins) never drained (measured twice;
            # 30 s passes), so the default stays 30 s until that is understood; the tests
            # that do not kill services mid-join use 10 s.
            session_timeout_ms=self.config.kafka.session_timeout_ms,
            # aiokafka's 3 s, or a third of a shorter session (two beats may then be missed)
            heartbeat_interval_ms=min(3_000, self.config.kafka.session_timeout_ms // 3),
        )
        self._consumer.subscribe([*self._topics, self.config.control_topic],
                                 listener=self._rebalance_listener())
        # aiokafka's start waits for the group join, which the embedded broker holds for half
        # the session timeout (15 s of a 17.5 s service start): the loop starts the consumer,
        # and the service's start, its HTTP server with it, does not wait for the group
        self._task = asyncio.create_task(self._run(), name="collector")
        self._task.add_done_callback(self._report_death)

    def _rebalance_listener(self) -> Any:
        """Counts the group's rebalances in :attr:`_generation`, and forgets where the
        revoked partitions were read to: what a partition holds after a rebalance is the
        group's business again (a broker restarted without durable storage starts its logs
        over)."""
        async def revoked(partitions: Any) -> None:
            self._generation += 1
            for tp in partitions:
                self._next_offset.pop(tp, None)

        async def assigned(partitions: Any) -> None:
            self._generation += 1
            # when a restarted service first reads again: the broker may hold the join for a
            # member that was killed (its session or rebalance timeout)
            log.info("the group gave this collector %d partition(s) (rebalance %d)",
                     len(partitions), self._generation)

        return rebalance_listener(revoked, assigned)

    @staticmethod
    def _report_death(task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.critical("the collector stopped (%s); restart the service",
                         type(task.exception()).__name__)

    async def stop(self) -> None:
        await cancel_task(self._task)  # its exception, if any, was logged by _report_death
        if self._consumer is not None:
            await stop_consumer(self._consumer)
        self.worker.shutdown()
        await asyncio.get_running_loop().run_in_executor(None, self.dead_letters.close)
        await self.offsets.stop()

    async def _run(self) -> None:
        await self._consumer.start()
        pending: deque[KafkaCollector._Batch] = deque()
        while True:
            if not pending:
                await self.worker.revive()  # it may have died while idle
            records, skipped = await self._fetch(20 if pending else 200)
            offsets: dict[Any, int] = dict(skipped)
            work: dict[str, list[Any]] = {}
            controls: list[asyncio.Future] = []
            for tp, batch in records.items():
                if tp.topic == self.config.control_topic:
                    for r in batch:
                        applying = self._control(message_of(r))
                        if applying is not None:
                            controls.append(applying)
                elif tp.topic in self._topics:  # a Message for the rejected ones only
                    work.setdefault(self._topics[tp.topic], []).extend(batch)
                offsets[tp] = max(offsets.get(tp, 0), batch[-1].offset + 1)
                self._next_offset[tp] = offsets[tp]
            if offsets:
                pending.append(self._Batch(offsets, work, await self._jobs(work) if work else [],
                                           self._generation, controls=controls))
                if work:
                    pending[-1].future, pending[-1].pool = self.worker.submit(pending[-1].jobs)
            while pending and (pending[0].ready() or len(pending) > 1):
                done = pending[0]
                results = await self.worker.results(done.work, done.jobs, done.future,
                                                    done.pool)
                pending.popleft()
                if done.controls:  # a command is committed once it is applied (or given up)
                    await asyncio.gather(*done.controls, return_exceptions=True)
                await self._finish(results, done.work)
                if self.on_batch_stored is not None:
                    self.on_batch_stored(done.offsets)
                await self._commit(done.offsets, done.generation)

    async def _commit(self, offsets: dict[Any, int], generation: int) -> None:
        """Commit a handled batch's offsets. A commit that fails (the broker away or
        restarted, the group rebalanced) is logged by type and left out: later commits cover
        it, and what they do not is read again and recognised as stored. Offsets read before
        the group last rebalanced are not committed at all: the partitions may be another
        member's now, and after a restart of a broker without durable storage the offsets
        would name other messages of the new logs."""
        self.batches += 1
        if not offsets:
            return
        if generation != self._generation:
            log.info("%d offset(s) not committed: the group rebalanced after they were read; "
                     "their messages will be read again", len(offsets))
            return
        try:
            await asyncio.wait_for(self._consumer.commit(offsets), self.COMMIT_TIMEOUT)
        except broker_errors() as exc:
            log.warning("offsets not committed (%s); ingest goes on, and what was not "
                        "committed will be read again and recognised as stored",
                        type(exc).__name__)
            return
        self._positions.update(offsets)

    # -- faults ------------------------------------------------------------------------------

    @staticmethod
    def _unreadable(exc: BaseException) -> bool:
        """Whether a fetch failed on the data rather than on the broker: a corrupt or
        undecodable record (aiokafka's ``CorruptRecordException``, ``UnsupportedCodecError``,
        or whatever a decompressor raises, ``EOFError`` for a cut gzip stream)."""
        undecodable, broker = fetch_errors()
        return (isinstance(exc, undecodable)
                or not isinstance(exc, (broker, TimeoutError, ConnectionError)))

    async def _fetch(self, timeout_ms: int) -> tuple[dict[Any, list[Any]], dict[Any, int]]:
        """The next records by partition, and {partition: offset} of partitions moved past
        records that could not be read (dead-lettered). A broker fault is waited out with
        exponential backoff. After a record that cannot be decoded, each partition is read
        alone until it is found (:meth:`_fetch_each`); the failed fetch lost what it had
        taken from other partitions, so every partition is first put back to the last record
        handed on (:meth:`_rewind`)."""
        try:
            if self._rewind_needed:
                await self._rewind()
            if self._suspects is not None:
                found = await self._fetch_each(timeout_ms)
            else:
                found = await self._consumer.getmany(
                    timeout_ms=timeout_ms, max_records=self.config.kafka.batch_max_records), {}
        except Exception as exc:
            if self._unreadable(exc):
                log.error("a fetched batch could not be read (%s); reading each partition "
                          "alone to find the record", type(exc).__name__)
                self._rewind_needed = True
                self._suspects = {}
                self._isolated_until = time.monotonic() + self.ISOLATION_SECONDS
            else:
                self._fetch_failures += 1
                if self._fetch_failures == 1:
                    log.warning("fetching failed (%s); trying again with backoff while the "
                                "broker is away", type(exc).__name__)
                await asyncio.sleep(self.backoff(self._fetch_failures))
            return {}, {}
        if self._fetch_failures:
            log.info("fetching again after %d failed attempt(s)", self._fetch_failures)
            self._fetch_failures = 0
        return found

    async def _rewind(self) -> None:
        """Every assigned partition back to just after the last record handed on, else to
        the group's committed offset, else to its beginning."""
        for tp in self._consumer.assignment():
            if tp in self._next_offset:
                self._consumer.seek(tp, self._next_offset[tp])
                continue
            committed = await self._consumer.committed(tp)
            if committed is None:
                await self._consumer.seek_to_beginning(tp)
            else:
                self._consumer.seek(tp, committed)
        self._rewind_needed = False

    async def _fetch_each(self, timeout_ms: int) -> tuple[dict[Any, list[Any]], dict[Any, int]]:
        """One fetch per partition, so that a fault names its partition; a partition that
        failed (a suspect) is then read one record at a time, so that the fault names its
        offset. A record that fails twice at the same position is dead-lettered and skipped
        (once only: a fetch garbled on the way fails once). Whole fetches again once no
        partition has failed for :attr:`ISOLATION_SECONDS`."""
        suspects = self._suspects
        assert suspects is not None
        limit = self.config.kafka.batch_max_records
        found: dict[Any, list[Any]] = {}
        skipped: dict[Any, int] = {}
        assigned = self._consumer.assignment()
        for tp in [tp for tp in suspects if tp not in assigned]:  # another member's now
            suspects.pop(tp)
        for tp in sorted(assigned - self._consumer.paused(), key=str):
            walking = tp in suspects
            got: list[Any] = []
            try:
                if walking:
                    while len(got) < limit:
                        more = (await self._consumer.getmany(tp, max_records=1)).get(tp)
                        if not more:
                            break
                        got += more
                    if got:  # read past where it failed
                        suspects.pop(tp)
                else:
                    got = (await self._consumer.getmany(tp, max_records=limit)).get(tp, [])
            except Exception as exc:
                if not self._unreadable(exc):
                    raise
                position = await self._consumer.position(tp)
                if walking and suspects[tp] == position:
                    await self._skip_unreadable(tp, position, exc)
                    self._consumer.seek(tp, position + 1)
                    skipped[tp] = position + 1
                    suspects[tp] = None
                else:
                    suspects[tp] = position
                self._isolated_until = time.monotonic() + self.ISOLATION_SECONDS
            if got:
                found[tp] = got
        if not suspects and time.monotonic() >= self._isolated_until:
            self._suspects = None
            log.info("whole fetches again: no partition fails")
        elif not found and not skipped:
            await asyncio.sleep(timeout_ms / 1000)
        return found, skipped

    async def _skip_unreadable(self, tp: Any, offset: int, exc: BaseException) -> None:
        """Dead-letter a record that cannot be read (``unprocessable``, an empty value: its
        bytes are unknown) and wait, as :meth:`_finish` does, for the broker to take it."""
        log.error("%s:%d:%d cannot be read (%s); dead-lettered and skipped", tp.topic,
                  tp.partition, offset, type(exc).__name__)
        self._next_offset[tp] = offset + 1
        survey_id = self._topics.get(tp.topic)
        if survey_id is None:  # the control topic has no dead letters
            return
        ingest = self.ingests[survey_id]
        sent = self.dead_letters.send(self.config.topic(survey_id, "deadletter"), Rejection(
            Message(tp.topic, tp.partition, offset, None, b"", None), "unprocessable",
            f"the record could not be read from the broker ({type(exc).__name__}); "
            "its bytes are unknown"))
        ingest.watch_dead_letter(sent, asyncio.get_running_loop())
        ingest.count_rejected("unprocessable")
        await asyncio.wait({asyncio.wrap_future(sent)}, timeout=DEAD_LETTER_WAIT)

    async def _store_refused(self, exc: BaseException) -> None:
        """Backpressure while the store refuses writes: the batch is kept and tried again
        with backoff, no offset is committed, nothing is dead-lettered, and nothing new is
        fetched (:meth:`_idle`). :attr:`store_paused` tells the health check."""
        self._store_failures += 1
        if not self.store_paused:
            self.store_paused = True
            self._paused_at = time.monotonic()
            log.warning("the store refuses writes (%s); ingest paused, the batch is kept and "
                        "tried again until the store takes it", type(exc).__name__)
        await self._idle(self.backoff(self._store_failures))

    def _store_took(self) -> None:
        """Resume ingest after :meth:`_store_refused`, once the store took a batch."""
        if not self.store_paused:
            return
        self.store_paused = False
        self._store_failures = 0
        self._consumer.resume(*self._consumer.paused())
        log.warning("the store takes writes again; ingest resumed after %.0f s",
                    time.monotonic() - self._paused_at)

    async def _idle(self, seconds: float) -> None:
        """Wait ``seconds`` with every partition paused, polling all the while so that the
        group keeps this member (a member that stops polling is dropped after
        ``max_poll_interval_ms``). Records that come anyway (a partition assigned meanwhile)
        are put back to be read after the pause."""
        deadline = time.monotonic() + seconds
        self._consumer.pause(*self._consumer.assignment())
        try:
            records = await self._consumer.getmany(timeout_ms=int(seconds * 1000))
        except Exception as exc:  # the broker away too, or a bad record: read it later
            log.debug("polling while paused failed (%s)", type(exc).__name__)
            self._rewind_needed = True
            records = {}
        for tp, got in records.items():
            self._consumer.seek(tp, got[0].offset)
        await asyncio.sleep(max(deadline - time.monotonic(), 0.0))

    def _control(self, msg: Message) -> asyncio.Future | None:
        """Hand a control message to the service; one it cannot take is logged and skipped.
        What the service returns (the command being applied) is awaited before the message's
        offset is committed, so a command not yet applied is read again after a restart."""
        if self.on_control is None:
            return None
        where = f"{msg.topic}:{msg.partition}:{msg.offset}"
        if msg.value is not None and len(msg.value) > CONTROL_MAX_BYTES:
            log.warning("control message %s skipped: %d bytes, more than %d", where,
                        len(msg.value), CONTROL_MAX_BYTES)
            return None
        try:
            applying = self.on_control(msg.value)
        except Exception as exc:  # its text may quote the message: the type only
            log.warning("control message %s skipped: %s", where, type(exc).__name__)
            return None
        return None if applying is None else asyncio.ensure_future(applying)

    async def _finish(self, results: list[Outcome],
                      work: dict[str, list[Any]]) -> None:
        """Dead-letter what the worker rejected (original bytes), update the counters, and
        wait, without blocking the event loop, for the broker to take the dead letters before
        the batch's offsets are committed (at most :data:`DEAD_LETTER_WAIT` s: a dead-letter
        topic that does not answer slows ingest down but does not stop it; the sink goes on
        retrying and counts what it gives up)."""
        deliveries: list[concurrent.futures.Future[bool]] = []
        for survey_id, stored, redelivered, rejections, arrived in results:
            ingest = self.ingests[survey_id]
            if rejections:
                by_position = {(m.partition, m.offset): m for m in work[survey_id]}
                dead_topic = self.config.topic(survey_id, "deadletter")
                for partition, offset, reason, detail in rejections:
                    rejection = redact_dead_letter(Rejection(
                        message_of(by_position[(partition, offset)]), reason, detail),
                        ingest.validator)
                    sent = self.dead_letters.send(dead_topic, rejection)
                    ingest.watch_dead_letter(sent, asyncio.get_running_loop())
                    deliveries.append(sent)
                    ingest.count_rejected(reason)
                log.info("survey %s: %d message(s) dead-lettered", survey_id, len(rejections))
            ingest.count_batch(stored, redelivered)
            if redelivered:
                log.info("survey %s: %d response(s) already stored (redelivered), skipped",
                         survey_id, redelivered)
            if stored:
                self.on_stored(survey_id, [arrived] * stored)
        if deliveries:
            _, pending = await asyncio.wait({asyncio.wrap_future(f) for f in deliveries},
                                            timeout=DEAD_LETTER_WAIT)
            if pending:
                log.warning("%d dead letter(s) not acknowledged within %.0f s; committing, "
                            "the sender goes on retrying", len(pending), DEAD_LETTER_WAIT)

    async def _jobs(self, work: dict[str, list[Any]]) -> list[Job]:
        """The worker's jobs for one batch, each with its survey's closure as it is now. A
        close mark being taken holds them back until it is set (see :meth:`take_close`)."""
        async with self._marking:
            return [(sid, _columns(msgs), self.ingests[sid].closure)
                    for sid, msgs in work.items()]

    async def take_close(self, survey_id: str, closed_at: float,
                         keep: Callable[[dict[int, int]], Awaitable[dict[int, int]]]
                         ) -> dict[int, int]:
        """Close the survey in its log: read the end offsets of its response partitions, have
        ``keep`` store them (it returns the marks kept, the first ones if the survey had
        some), and judge every later batch of the survey by them (:class:`Closure`).

        No batch is handed to the worker while this runs, so every message handed over before
        was read before the end offsets were, and lies below them: the marks and the
        messages taken as on time always agree, with no moment in between."""
        async with self._marking:
            marks = await keep(await self.offsets.ends(self.config.topic(survey_id,
                                                                         "responses")))
            self.ingests[survey_id].close_at_marks(Closure(closed_at, marks))
        return marks

    async def drain(self, survey_id: str, marks: dict[int, int]) -> None:
        """Wait until every message of the survey below its close marks has been handled:
        the group's committed offsets (committed only after the store) have reached the
        marks. What was committed before a restart counts, so nothing has to arrive to move
        a partition on; a partition whose log is now shorter than its mark (a recreated topic)
        needs its current end only. Waits as long as it takes, saying so every minute: a
        release must not be lost to a collector that is slow or restarting."""
        topic = self.config.topic(survey_id, "responses")
        targets = dict(marks)
        started = checked = time.monotonic()
        next_note = started + 60.0
        behind: int | str = "?"
        while True:
            now = time.monotonic()
            try:
                unsure = [p for p, target in targets.items()
                          if self._positions.get(group_partition(topic, p), 0) < target]
                committed = await self.offsets.committed(topic, unsure) if unsure else {}
                behind = sum(max(targets[p] - offset, 0) for p, offset in committed.items())
                if behind == 0:
                    return
                if now - checked >= 5.0:
                    ends = await self.offsets.ends(topic)
                    targets = {p: min(mark, ends.get(p, 0)) for p, mark in marks.items()}
                    checked = now
            except broker_errors() as exc:  # the broker is away: wait for it
                behind = f"? ({type(exc).__name__} from the broker)"
            if now >= next_note:
                log.warning("survey %s: the close has waited %.0f s for the collector; "
                            "message(s) sent before it not handled yet: %s", survey_id,
                            now - started, behind)
                next_note += 60.0
            await asyncio.sleep(0.1)
