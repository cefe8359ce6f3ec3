"""Ingest: validated survey responses into the store, and the worker process that does it.

Storage with de-duplication by identity (:func:`store_records`, :func:`process_batch`, plain
functions that the tests call without a broker), the ingest worker process's entry points
(:func:`_worker_start`, :func:`_worker_ingest`: multiprocessing names them by this module's
path) and :class:`IngestWorker`, which hands the worker its jobs, replaces it when it dies and
splits a batch that keeps failing it. The Kafka driver (:mod:`streamanon.service.collector`)
feeds it batches; this module knows consumer records only as objects with ``partition``,
``offset``, ``value`` and ``timestamp`` fields. May import the service's configuration, store,
validation, health and processes modules; never the collector, the dead letters or a Kafka
client.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import logging
import queue
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

from streamanon.service.config import Config, SurveyConfig
from streamanon.service.health import pool_health
from streamanon.service.out_of_domain import refuses_for_domain
from streamanon.service.store import Store, StoreUnavailable, record_digest
from streamanon.service.validation import (
    Closure,
    Message,
    Rejection,
    Validated,
    Validator,
    check_batch,
    check_columns,
    unprocessable,
)

log = logging.getLogger(__name__)

LOG_APPEND_TIME = 1  # a record's timestamp type when the broker set it (Kafka protocol)


def message_of(record: Any) -> Message:
    """A consumer record as a :class:`Message`: its time only if the broker set it (a
    :class:`Message` is returned as it is)."""
    if isinstance(record, Message):
        return record
    return Message(record.topic, record.partition, record.offset, record.key, record.value,
                   record.timestamp / 1000.0 if record.timestamp_type == LOG_APPEND_TIME
                   else None)


@dataclass
class BatchResult:
    stored: int = 0
    redelivered: int = 0
    rejected: list[Rejection] = field(default_factory=list)
    arrival_times: list[float] = field(default_factory=list)


def store_batch(candidates: Sequence[tuple[Message, Validated]], survey: SurveyConfig,
                store: Store, now: float | None = None) -> BatchResult:
    """Second half of :func:`process_batch`: skip redeliveries, reject duplicate respondents,
    store the rest in one transaction (:func:`store_records`, here with the messages)."""
    result = BatchResult()
    if not candidates:
        return result
    done = store_records(survey, store, [m.partition for m, _ in candidates],
                         [m.offset for m, _ in candidates], [v for _, v in candidates], now)
    result.stored, result.redelivered = done.stored, done.redelivered
    result.rejected = [Rejection(candidates[i][0], reason, detail)
                       for i, reason, detail in done.rejected]
    result.arrival_times = [done.arrived] * done.stored
    return result


class Stored(NamedTuple):
    """What :func:`store_records` did; rejections by index into its records."""

    stored: int
    redelivered: int
    rejected: list[tuple[int, str, str]]  # index, reason, detail
    arrived: float


def store_records(survey: SurveyConfig, store: Store, partitions: Sequence[int],
                  offsets: Sequence[int], records: Sequence[Validated],
                  now: float | None = None) -> Stored:
    """Store validated records (read at ``partitions`` and ``offsets``) in one transaction:
    skip redeliveries, reject duplicate respondents (:func:`prepare_records`, then
    :func:`store_prepared`)."""
    kept, prepared, rejected = prepare_records(survey, records)
    if len(kept) < len(records):
        partitions, offsets = [partitions[i] for i in kept], [offsets[i] for i in kept]
    done = store_prepared(survey, store, partitions, offsets, prepared, now)
    return done._replace(rejected=rejected + [(kept[i], reason, detail)
                                              for i, reason, detail in done.rejected])


Prepared = tuple[bytes, bytes, bytes, str, str | None]  # pseudonym, digest, qi, JSON, label


def prepare_records(survey: SurveyConfig, records: Sequence[Validated]
                    ) -> tuple[list[int], list[Prepared], list[tuple[int, str, str]]]:
    """What is stored of each record, no store needed: its pseudonym, :func:`record_digest`,
    quasi-identifier bytes, confidential answers as JSON and label. Returns the indexes of
    the records prepared, their rows, and the rejections (``unprocessable``: a record that
    cannot be serialised, which validation rules out; a bug otherwise)."""
    kept: list[int] = []
    prepared: list[Prepared] = []
    rejected: list[tuple[int, str, str]] = []
    dumps = orjson.dumps
    for i, rec in enumerate(records):
        try:
            confidential = dumps(rec.confidential).decode()
        except (TypeError, ValueError) as exc:
            log.error("survey %s: a record could not be serialised (%s); dead-lettered",
                      survey.id, type(exc).__name__)
            rejected.append((i, "unprocessable", unprocessable(exc).detail))
            continue
        qi = rec.qi.tobytes()
        kept.append(i)
        prepared.append((rec.rid_hash, record_digest(qi, confidential, rec.label), qi,
                         confidential, rec.label))
    return kept, prepared, rejected


def store_prepared(survey: SurveyConfig, store: Store, partitions: Sequence[int],
                   offsets: Sequence[int], prepared: Sequence[Prepared],
                   now: float | None = None) -> Stored:
    """Store prepared records (:func:`prepare_records`) in one transaction, rejections by
    index into ``prepared``.

    A redelivery is a record whose identity (respondent pseudonym and :func:`record_digest`
    of what is stored) is stored already or earlier in the batch, wherever and whenever it was
    read: the Kafka partition and offset play no part, so offsets that start again never drop
    a response. Under ``duplicates = "reject"`` another answer of a stored respondent is
    dead-lettered ``duplicate_respondent``; under ``"allow"`` it is stored."""
    arrived = time.time() if now is None else now
    if not prepared:
        return Stored(0, 0, [], arrived)
    reject = survey.duplicates == "reject"
    known = store.respondents(survey.id, [p[0] for p in prepared]) if reject else {}
    rows: list[tuple[Any, ...]] = []  # laid out as RecordRow, which costs more to make
    rejected: list[tuple[int, str, str]] = []
    redelivered = 0
    for i, (rid_hash, digest, qi, confidential, label) in enumerate(prepared):
        if reject:
            stored = known.get(rid_hash)
            if stored is not None and digest in stored:
                redelivered += 1  # stored before (a crash, a replay, an offset reset)
                continue
            if stored is not None:
                rejected.append((i, "duplicate_respondent",
                                 "this respondent has already answered"))
                continue
            known[rid_hash] = {digest}
        rows.append((arrived, partitions[i], offsets[i], rid_hash, digest, qi, confidential,
                     label))
    stored_now = store.insert_records(survey.id, rows)
    # the store skips known identities: those were redelivered too
    return Stored(stored_now, redelivered + len(rows) - stored_now, rejected, arrived)


def process_batch(messages: Sequence[Message], validator: Validator, store: Store,
                  closed_at: float | Closure | None, now: float | None = None) -> BatchResult:
    """Validate, de-duplicate and store one batch of one survey's messages; ``closed_at`` is
    the survey's :class:`Closure`, or only the moment of its close.

    Returns what was stored and what must go to the dead-letter topic. The caller produces the
    rejections and commits the offsets afterwards.
    """
    closure = Closure(closed_at) if isinstance(closed_at, (int, float)) else closed_at
    rejected, candidates = check_batch(messages, validator, closure, now)
    result = store_batch(candidates, validator.survey, store, now)
    result.rejected = rejected + result.rejected
    if refuses_for_domain(validator.survey, [r.reason for r in rejected]):
        store.note_refused(validator.survey.id)
    return result


@dataclass
class SurveyIngest:
    """Per-survey collector state the service shares with the collector."""

    config: SurveyConfig
    validator: Validator
    closed_at: float | None = None
    closure: Closure | None = None  # set by :meth:`~.collector.KafkaCollector.take_close`
    received: int = 0
    stored: int = 0
    redelivered: int = 0  # read again and recognised by identity: not stored twice
    rejected: dict[str, int] = field(default_factory=dict)
    dead_letters_unsent: int = 0  # dead letters the broker never took (counted in rejected too)

    def watch_dead_letter(self, sent: concurrent.futures.Future[bool],
                          loop: asyncio.AbstractEventLoop) -> None:
        """Count the dead letter ``sent`` in :attr:`dead_letters_unsent` if the sink gives it
        up, whenever that is: after its retries, long after the batch stopped waiting for
        it. The count is kept on ``loop``'s thread."""
        def settled(done: concurrent.futures.Future[bool]) -> None:
            if not done.cancelled() and done.exception() is None and done.result() is False:
                with contextlib.suppress(RuntimeError):  # the loop closed at shutdown
                    loop.call_soon_threadsafe(self._count_unsent)

        sent.add_done_callback(settled)

    def _count_unsent(self) -> None:
        self.dead_letters_unsent += 1

    def count_rejected(self, reason: str) -> None:
        """A message dead-lettered for ``reason`` (received, not stored)."""
        self.rejected[reason] = self.rejected.get(reason, 0) + 1
        self.received += 1

    def count_batch(self, stored: int, redelivered: int) -> None:
        """A batch's responses stored, and those read again and recognised (its dead letters
        are counted by :meth:`count_rejected`)."""
        self.stored += stored
        self.received += stored + redelivered
        self.redelivered += redelivered

    def close_at_marks(self, closure: Closure) -> None:
        """This instance's closure: the close and the end offsets taken as its marks
        (:meth:`~.collector.KafkaCollector.take_close`)."""
        self.closure = closure


# -- the ingest worker process ------------------------------------------------------------------

_WORKER: dict[str, Any] = {}


# The worker's young generation: collected after this many new objects, not 700. A chunk makes
# a few objects per record that die with it; each collection walks the young objects, and
# every tenth one the next generation too: with 700, a chunk of 2,000 records paid for
# several.
WORKER_GC_THRESHOLD = (50_000, 20, 100)


def worker_gc() -> None:
    """The ingest worker's garbage collection: what start-up made (modules, configuration,
    validators) frozen, never walked again, and the thresholds of :data:`WORKER_GC_THRESHOLD`.
    Cycles are still collected, less often."""
    gc.freeze()
    gc.set_threshold(*WORKER_GC_THRESHOLD)


def _worker_start(config_json: str, hmac_key: bytes) -> None:
    from streamanon.service.store import open_store

    # Hand the interpreter lock over within 1 ms, not 5: the store thread needs it back
    # after each SQLite step, while this thread validates (see _ingest).
    sys.setswitchinterval(0.001)
    config = Config.model_validate_json(config_json)
    _WORKER["validators"] = {
        s.id: Validator(s, hmac_key, max_message_bytes=config.kafka.max_message_bytes)
        for s in config.surveys}
    _WORKER["store"] = store = open_store(config.store.url)
    try:
        store.load_identities()
    except StoreUnavailable as exc:  # read by the first insert instead
        log.warning("the ingest worker could not read the stored identities yet (%s)", exc)
    worker_gc()


Columns = tuple[list[int], list[int], list[Any], list[float]]
Job = tuple[str, Columns, Closure | None]  # a survey, its part of a batch, its closure


def _columns(records: list[Any]) -> Columns:
    """Partitions, offsets, values, timestamps (as :func:`message_of` takes them) of consumer
    records: lists of plain values pickle several times faster than a list of tuples."""
    return ([r.partition for r in records], [r.offset for r in records],
            [r.value for r in records],
            [r.timestamp / 1000.0 if r.timestamp_type == LOG_APPEND_TIME else None
             for r in records])


class Outcome(NamedTuple):
    """What the worker did with one survey's part of a batch; rejections by position."""

    survey: str
    stored: int
    redelivered: int
    rejections: list[tuple[int, int, str, str]]  # partition, offset, reason, detail
    arrived: float


def _worker_ingest(batches: list[Job]) -> list[Outcome]:
    """Validate and store batches in the worker; report what to dead-letter by position.
    The messages stay columns throughout: no object per message."""
    out = []
    for survey_id, columns, closure in batches:
        validator = _WORKER["validators"][survey_id]
        stored, redelivered, rejections = _ingest(validator, _WORKER["store"], columns, closure)
        out.append(Outcome(survey_id, stored, redelivered, rejections, time.time()))
    return out


WORKER_CHUNK = 2000  # records validated while the chunk before them is being written


class _Abort(Exception):
    """Validation failed: the writer rolls the job's transaction back."""


def _ingest(validator: Validator, store: Store, columns: Columns, closure: Closure | None
            ) -> tuple[int, int, list[tuple[int, int, str, str]]]:
    """One survey's job: stored, redelivered, rejections by position.

    Validation is pure Python and holds the interpreter lock; SQLite gives it up while it
    writes (a multi-row INSERT is one step) and PostgreSQL while it waits for the server. So
    the job goes in chunks of :data:`WORKER_CHUNK`: this thread validates and prepares a
    chunk (:func:`prepare_records`) while the store thread (:func:`_write_chunks`) writes the
    one before, all in one transaction."""
    partitions, offsets, values, stamps = columns
    chunks: queue.SimpleQueue[Any] = queue.SimpleQueue()
    writer = _WORKER.get("writer")
    if writer is None:
        writer = _WORKER["writer"] = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="store")
    writing = writer.submit(_write_chunks, validator.survey, store, chunks)
    rejections: list[tuple[int, int, str, str]] = []
    try:
        for start in range(0, len(values), WORKER_CHUNK):
            part = slice(start, start + WORKER_CHUNK)
            at_p, at_o = partitions[part], offsets[part]
            rejected, valid, records = check_columns(at_p, at_o, values[part], stamps[part],
                                                     validator, closure)
            kept, prepared, unserialisable = prepare_records(validator.survey, records)
            rejections += [(at_p[i], at_o[i], reason, detail) for i, reason, detail in rejected]
            rejections += [(at_p[valid[i]], at_o[valid[i]], reason, detail)
                           for i, reason, detail in unserialisable]
            if len(kept) < len(at_p):
                at_p, at_o = [at_p[valid[i]] for i in kept], [at_o[valid[i]] for i in kept]
            chunks.put((at_p, at_o, prepared))
            if writing.done():  # it failed (the store refuses writes): say so now
                break
    except BaseException:
        chunks.put(_Abort)
        concurrent.futures.wait([writing])
        raise
    chunks.put(None)
    stored, redelivered, rejected_at_store = writing.result()
    if refuses_for_domain(validator.survey, [reason for _, _, reason, _ in rejections]):
        # before the batch's offsets are committed: a crash here reads it again, and notes
        # it again (a flag)
        store.note_refused(validator.survey.id)
    return stored, redelivered, rejections + rejected_at_store


def _write_chunks(survey: SurveyConfig, store: Store, chunks: queue.SimpleQueue[Any]
                  ) -> tuple[int, int, list[tuple[int, int, str, str]]]:
    """The store thread's part of :func:`_ingest`: :func:`store_prepared` for each chunk
    until None, in one transaction (a chunk's respondents are looked up after the chunks
    before it are written, so a respondent's second answer is caught across chunks)."""
    stored = redelivered = 0
    rejections: list[tuple[int, int, str, str]] = []
    with store.transaction():
        while (chunk := chunks.get()) is not None:
            if chunk is _Abort:
                raise _Abort
            partitions, offsets, prepared = chunk
            done = store_prepared(survey, store, partitions, offsets, prepared)
            stored += done.stored
            redelivered += done.redelivered
            rejections += [(partitions[i], offsets[i], reason, detail)
                           for i, reason, detail in done.rejected]
    return stored, redelivered, rejections


class IngestWorker:
    """The ingest worker process as the Kafka driver sees it: jobs in, :class:`Outcome` out.

    A separate process, not a thread: validation is pure Python, and SQLite releases the
    interpreter lock for every row it writes, so two threads of one process mostly wait for
    each other. A worker that dies is replaced (``on_restart("collector")``) and handed the same
    jobs; jobs that kill or fail it :attr:`ATTEMPTS` times are split until the message
    responsible is alone, which is then reported ``unprocessable``. A store that refuses
    writes (:class:`~streamanon.service.store.StoreUnavailable`) is no fault of the jobs: the
    driver's ``store_refused(exc)`` is awaited (it pauses ingest and waits) and the jobs go
    again, and ``store_took()`` is called after every batch the store took. ``backoff(n)`` is
    the wait after the n-th failure in a row.
    """

    ATTEMPTS = 3  # tries of a batch that kills or fails the worker before it is split

    def __init__(self, config: Config, *, backoff: Callable[[int], float],
                 store_refused: Callable[[BaseException], Awaitable[None]],
                 store_took: Callable[[], None],
                 pool_factory: Callable[[], concurrent.futures.Executor] | None = None,
                 on_restart: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.backoff = backoff
        self.store_refused = store_refused
        self.store_took = store_took
        self._pool_factory = pool_factory or self._default_pool
        self.on_restart = on_restart
        self.pool: Any = None  # the process pool of one worker, replaced when it dies
        self.restarts = 0

    def _default_pool(self) -> concurrent.futures.Executor:
        from streamanon.service.processes import worker_pool

        return worker_pool(1, _worker_start, (self.config.model_dump_json(by_alias=True),
                                              self.config.hmac_key))

    async def start(self) -> None:
        """Start the worker process and wait until it has opened the store."""
        self.pool = self._pool_factory()
        await asyncio.get_running_loop().run_in_executor(self.pool, _worker_ingest, [])

    def shutdown(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)

    async def revive(self) -> None:
        """A new worker process if this one died while idle."""
        if not pool_health(self.pool, "ingest worker").ok:
            await self.restart()

    def submit(self, jobs: list[Job]) -> tuple[asyncio.Future, Any]:
        """Hand ``jobs`` to the worker: the future of its results, and the pool it runs in."""
        loop = asyncio.get_running_loop()
        pool = self.pool
        try:
            return loop.run_in_executor(pool, _worker_ingest, jobs), pool
        except concurrent.futures.BrokenExecutor as exc:  # it died before we noticed
            failed = loop.create_future()
            failed.set_exception(exc)
            return failed, pool

    async def results(self, work: dict[str, list[Any]], jobs: list[Job],
                      future: asyncio.Future | None = None, pool: Any = None
                      ) -> list[Outcome]:
        """The worker's results for the jobs of a batch (``work``: its consumer records by
        survey), already running as ``future`` in ``pool`` or not yet handed over; if they
        kill or fail the worker :attr:`ATTEMPTS` times, for the batch in parts
        (:meth:`_bisect`)."""
        if not jobs:
            return []
        results = await self._attempts(jobs, self.ATTEMPTS, future, pool)
        if results is None:
            results = await self._bisect(work, jobs)
        return results

    async def _attempts(self, jobs: list[Job], attempts: int,
                        future: asyncio.Future | None = None, pool: Any = None
                        ) -> list[Outcome] | None:
        """The worker's results for ``jobs`` (already running as ``future`` in ``pool``, or
        not yet handed over), or None once they killed or failed the worker ``attempts``
        times. A worker that dies is replaced and given the jobs again: the store committed
        their transaction or did not, and what it committed is recognised when it comes
        again. A store that refuses writes is waited for as long as it takes
        (``store_refused``): it is no fault of the jobs."""
        failures = 0
        while True:
            if future is None:
                future, pool = self.submit(jobs)
            try:
                results = await future
            except concurrent.futures.BrokenExecutor:
                if pool is self.pool:  # not yet replaced: it died under these jobs
                    failures += 1
                    await self.restart()
            except StoreUnavailable as exc:
                await self.store_refused(exc)
            except Exception as exc:
                failures += 1
                log.error("the ingest worker failed on a batch (%s); try %d of %d",
                          type(exc).__name__, failures, attempts)
                await asyncio.sleep(self.backoff(failures + 1))
            else:
                self.store_took()
                return results
            if failures >= attempts:
                return None
            future = None

    async def _bisect(self, work: dict[str, list[Any]], jobs: list[Job]) -> list[Outcome]:
        """A batch that kills or fails the worker, handled in halves, the halves that fail in
        halves again, down to the message(s) responsible: each of those is tried
        :attr:`ATTEMPTS` times alone, then dead-lettered ``unprocessable``. Parts keep the
        batch's order and its closures; each part is one store transaction."""
        closures = {sid: closure for sid, _, closure in jobs}
        log.error("a batch of %d message(s) failed the ingest worker %d times; handling it in "
                  "parts to find the message(s) responsible",
                  sum(map(len, work.values())), self.ATTEMPTS)
        results: list[Outcome] = []
        stack = self._halves(list(work.items()))[::-1]
        while stack:
            part = stack.pop()
            size = sum(len(msgs) for _, msgs in part)
            got = await self._attempts([(sid, _columns(msgs), closures[sid])
                                        for sid, msgs in part],
                                       self.ATTEMPTS if size == 1 else 1)
            if got is not None:
                results += got
            elif size > 1:
                stack += self._halves(part)[::-1]
            else:
                [(sid, [msg])] = part
                log.error("survey %s: message %s:%d:%d failed the ingest worker %d times; "
                          "dead-lettered", sid, msg.topic, msg.partition, msg.offset,
                          self.ATTEMPTS)
                results.append(Outcome(sid, 0, 0, [(
                    msg.partition, msg.offset, "unprocessable",
                    f"the ingest worker died or failed on this message {self.ATTEMPTS} "
                    "times; please report it")], time.time()))
        return results

    @staticmethod
    def _halves(part: list[tuple[str, list[Any]]]
                ) -> list[list[tuple[str, list[Any]]]]:
        """Two parts of about half the messages each: by survey, else by position."""
        if len(part) > 1:
            return [part[:len(part) // 2], part[len(part) // 2:]]
        [(sid, msgs)] = part
        return [[(sid, msgs[:len(msgs) // 2])], [(sid, msgs[len(msgs) // 2:])]]

    async def restart(self) -> None:
        """A new worker process for one that died, counted by ``on_restart``; tried again
        with backoff while a new one cannot start (its store cannot be opened)."""
        loop = asyncio.get_running_loop()
        tries = 0
        while True:
            old, self.pool = self.pool, self._pool_factory()
            old.shutdown(wait=False, cancel_futures=True)
            self.restarts += 1
            log.error("the ingest worker process exited; started a new one (restart %d), "
                      "which is handed the same batches", self.restarts)
            if self.on_restart is not None:
                self.on_restart("collector")
            try:
                await loop.run_in_executor(self.pool, _worker_ingest, [])
                return
            except concurrent.futures.BrokenExecutor:
                tries += 1
                await asyncio.sleep(self.backoff(tries))
