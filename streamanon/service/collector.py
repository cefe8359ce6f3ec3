"""The collector: survey responses from Kafka into the store, bad ones to the dead-letter topic.

Validation (:mod:`streamanon.service.validation`), de-duplication and storage are plain
functions and classes that the tests call without a broker (:class:`~.validation.Validator`,
:func:`process_batch`); :class:`KafkaCollector` is the thin driver that feeds them batches from
Kafka.

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
  of the stored record, see :func:`store_records`), wherever it was read, and stored at most
  once; it is counted (``redelivered``) and logged;
- identifiers never reach the store: only an HMAC-SHA256 of the respondent id is kept, for
  de-duplication; logs carry counts and reasons, never values.

Dead-letter messages (topic ``<prefix>.<survey>.deadletter``) carry the original key and value
bytes (a null stays null), and headers ``streamanon-reason`` (one of :data:`~.validation.REASONS`),
``streamanon-detail`` (which field and what was wrong, no values; sender-chosen field names
escaped and bounded) and ``streamanon-source`` (``topic:partition:offset``). A value longer than
:data:`DEAD_LETTER_VALUE_BYTES` is cut to that prefix with header ``streamanon-truncated`` (the
original length), so that every dead letter fits the broker's 1 MiB request limit; see
:func:`dead_letter`. A survey with ``dead_letter_identifier = "redact"`` gets no raw respondent
id in its dead letters (:func:`redact_dead_letter`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import queue
import sys
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import orjson

from streamanon.service.config import Config, SurveyConfig
from streamanon.service.health import cancel_task, pool_health
from streamanon.service.offsets import GroupOffsets, broker_errors
from streamanon.service.store import Store, StoreUnavailable, record_digest
from streamanon.service.validation import (
    Closure,
    Invalid,
    Message,
    Rejection,
    Validated,
    Validator,
    check_batch,
    check_columns,
    unprocessable,
)

log = logging.getLogger(__name__)

DEAD_LETTER_VALUE_BYTES = 512 * 1024  # room under the producer's 1 MiB for key and headers
DEAD_LETTER_KEY_BYTES = 4 * 1024
DETAIL_CHARS = 1024
CONTROL_MAX_BYTES = 64 * 1024  # a control message is a few dozen bytes
DEAD_LETTER_WAIT = 10.0  # seconds a batch's commit waits for its dead letters' acknowledgement

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
    return result


class DeadLetterSink(Protocol):
    def send(self, topic: str, rejection: Rejection) -> concurrent.futures.Future[bool]:
        """Queue a dead letter; never blocks. The future says whether the broker took it."""
        ...

    def flush(self, timeout: float | None = None) -> bool: ...

    def close(self, timeout: float = 10.0) -> None: ...


def dead_letter(rejection: Rejection) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]:
    """Key, value and headers of a rejection's dead letter: the original bytes, cut to a
    prefix (with a header giving the original length) where they would not fit a 1 MiB
    request, and a detail bounded to :data:`DETAIL_CHARS` printable ASCII characters. A null
    value stays null (header ``streamanon-null``); kafka-python refuses a record whose key and
    value are both null, so such a key is sent empty, and the header says both were null."""
    msg = rejection.message
    detail = rejection.detail
    if not (detail.isascii() and detail.isprintable()):
        detail = json.dumps(detail)[1:-1]
    headers = [("streamanon-reason", rejection.reason.encode()),
               ("streamanon-detail", detail[:DETAIL_CHARS].encode()),
               ("streamanon-source", f"{msg.topic}:{msg.partition}:{msg.offset}".encode())]
    if rejection.redacted is not None:
        headers.append(("streamanon-redacted", rejection.redacted.encode()))
    key, value = msg.key, msg.value
    if value is not None and len(value) > DEAD_LETTER_VALUE_BYTES:
        headers.append(("streamanon-truncated", str(len(value)).encode()))
        value = bytes(value[:DEAD_LETTER_VALUE_BYTES])
    if key is not None and len(key) > DEAD_LETTER_KEY_BYTES:
        headers.append(("streamanon-key-truncated", str(len(key)).encode()))
        key = bytes(key[:DEAD_LETTER_KEY_BYTES])
    if value is None:
        headers.append(("streamanon-null", b"value" if key is not None else b"key,value"))
        key = b"" if key is None else key
    return key, value, headers


def redact_dead_letter(rejection: Rejection, validator: Validator) -> Rejection:
    """The rejection as its survey's ``dead_letter_identifier`` wants it dead-lettered.

    ``"keep"`` returns it as it is. ``"redact"`` leaves no raw respondent id in the dead
    letter: the key (producers often set it to the id) and, in a value that parses as a JSON
    object, the identifier field and every field outside the schema (an id under a misspelt
    name) become pseudonyms: the hex of :meth:`Validator.pseudonym` of their text (a string
    itself, any other value its JSON), the HMAC the store keeps, so an operator holding an id
    can still find its dead letters. Any other value (invalid JSON, too deep, too large, not an
    object) may hold the id anywhere and is withheld: sent empty. ``redacted`` (header
    ``streamanon-redacted``) is ``pseudonymised`` or ``withheld: <why>``. The value is parsed
    as the validator parses responses, bounded in size and nesting."""
    if validator.survey.dead_letter_identifier == "keep":
        return rejection
    msg = rejection.message
    key = msg.key and validator.pseudonym(msg.key.decode("utf-8", "replace")).hex().encode()
    value, redacted = msg.value, "pseudonymised"
    if value:
        try:
            obj = validator.parse(value)
            for name, field_value in obj.items():
                if field_value is not None and (name == validator.identifier
                                                or name not in validator.known):
                    text = (field_value if isinstance(field_value, str)
                            else orjson.dumps(field_value).decode())
                    obj[name] = validator.pseudonym(text).hex()
            value = orjson.dumps(obj)
        except Invalid as exc:
            value, redacted = b"", f"withheld: {exc.detail}"
        except orjson.JSONEncodeError:  # orjson writes at most 254 levels, reads 1,024
            value, redacted = b"", "withheld: nested too deeply to write again"
        except Exception as exc:  # fail closed: a redaction that did not finish sends nothing
            value, redacted = b"", f"withheld: {type(exc).__name__}"
    return Rejection(msg._replace(key=key, value=value), rejection.reason, rejection.detail,
                     redacted)


@dataclass
class _Letter:
    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    done: concurrent.futures.Future[bool]
    attempt: int = 1


class KafkaDeadLetters:
    """Produces rejections with kafka-python from a thread of its own.

    :meth:`send` only queues: the thread hands each dead letter to the producer (whose
    ``send`` may wait for metadata or buffer space) and checks the broker's answer. A failed
    send is retried ``attempts`` times with exponential backoff from ``retry_backoff``
    seconds; :attr:`sent`, :attr:`retried` and :attr:`failed` count the outcomes.
    """

    def __init__(self, producer: Any, *, attempts: int = 5, retry_backoff: float = 1.0) -> None:
        self.producer = producer
        self.attempts = attempts
        self.retry_backoff = retry_backoff
        self.sent = self.retried = self.failed = 0
        self._lock = threading.Lock()
        self._outstanding: set[concurrent.futures.Future[bool]] = set()
        self._queue: queue.SimpleQueue[_Letter | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._send_loop, name="dead-letters",
                                        daemon=True)
        self._thread.start()

    def send(self, topic: str, rejection: Rejection) -> concurrent.futures.Future[bool]:
        key, value, headers = dead_letter(rejection)
        done: concurrent.futures.Future[bool] = concurrent.futures.Future()
        with self._lock:
            self._outstanding.add(done)
        done.add_done_callback(self._forget)
        self._queue.put(_Letter(topic, key, value, headers, done))
        return done

    @property
    def alive(self) -> bool:
        """Whether the sending thread runs (for the health check)."""
        return self._thread.is_alive()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every dead letter queued so far is sent or given up."""
        with self._lock:
            waiting = list(self._outstanding)
        return not concurrent.futures.wait(waiting, timeout).not_done

    def close(self, timeout: float = 10.0) -> None:
        if not self.flush(timeout):
            log.warning("%d dead letter(s) not confirmed at shutdown", len(self._outstanding))
        self._queue.put(None)
        self._thread.join(timeout)

    def _forget(self, done: concurrent.futures.Future[bool]) -> None:
        with self._lock:
            self._outstanding.discard(done)

    def _send_loop(self) -> None:
        while (letter := self._queue.get()) is not None:
            try:
                future = self.producer.send(letter.topic, key=letter.key, value=letter.value,
                                            headers=letter.headers)
            except Exception as exc:
                self._failed(letter, exc)
                continue
            future.add_callback(self._delivered, letter)
            future.add_errback(self._failed, letter)

    def _delivered(self, letter: _Letter, _metadata: Any) -> None:
        with self._lock:
            self.sent += 1
        letter.done.set_result(True)

    def _failed(self, letter: _Letter, exc: BaseException) -> None:
        if letter.attempt < self.attempts:
            with self._lock:
                self.retried += 1
            delay = self.retry_backoff * 2 ** (letter.attempt - 1)
            log.warning("dead letter to %s not sent (%s); retry %d in %.1f s", letter.topic,
                        type(exc).__name__, letter.attempt, delay)
            letter.attempt += 1
            timer = threading.Timer(delay, self._queue.put, (letter,))
            timer.daemon = True
            timer.start()
            return
        with self._lock:
            self.failed += 1
        log.error("dead letter to %s given up after %d attempt(s) (%s)", letter.topic,
                  letter.attempt, type(exc).__name__)
        letter.done.set_result(False)


@dataclass
class SurveyIngest:
    """Per-survey collector state the service shares with the collector."""

    config: SurveyConfig
    validator: Validator
    closed_at: float | None = None
    closure: Closure | None = None  # set by :meth:`KafkaCollector.take_close` with the marks
    received: int = 0
    stored: int = 0
    redelivered: int = 0  # read again and recognised by identity: not stored twice
    rejected: dict[str, int] = field(default_factory=dict)
    dead_letters_unsent: int = 0  # dead letters the broker never took (counted in rejected too)


# -- the ingest worker process ------------------------------------------------------------------

_WORKER: dict[str, Any] = {}


def _worker_start(config_json: str, hmac_key: bytes) -> None:
    from streamanon.service.store import open_store

    # Hand the interpreter lock over within 1 ms, not 5: the store thread needs it back
    # after each SQLite step, while this thread validates (see _ingest).
    sys.setswitchinterval(0.001)
    config = Config.model_validate_json(config_json)
    _WORKER["validators"] = {
        s.id: Validator(s, hmac_key, max_message_bytes=config.kafka.max_message_bytes)
        for s in config.surveys}
    _WORKER["store"] = open_store(config.store.url)


Columns = tuple[list[int], list[int], list[Any], list[float]]


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


def _worker_ingest(batches: list[tuple[str, Columns, Closure | None]]) -> list[Outcome]:
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


class KafkaCollector:
    """Consumes every survey's response topic in batches; an ingest worker process validates
    and stores them (:func:`~.validation.check_columns`, :func:`store_records`).

    The event loop fetches batch N + 1 while the worker handles batch N; offsets are committed
    in order, each only after the worker's store transaction for it has committed. A separate
    process, not a thread: validation is pure Python, and SQLite releases the interpreter lock
    for every row it writes, so two threads of one process mostly wait for each other.
    ``on_stored(survey_id, arrival_times)`` is called for each committed batch.

    No broker, worker or store fault ends the loop; it waits and goes on, and what it read
    again is recognised by identity. A failed fetch is retried with exponential backoff (at
    most :attr:`MAX_BACKOFF` s); a failed commit is logged and left out. A record that cannot
    be decoded (a corrupt or unreadable compressed batch) is found by reading each partition
    alone, dead-lettered ``unprocessable`` and skipped. An ingest worker that dies is replaced
    (``on_restart("collector")``) and handed the same batches; a batch that kills or fails it
    :attr:`WORKER_ATTEMPTS` times is split until the message responsible is alone, which is
    then dead-lettered ``unprocessable``. A store that refuses writes
    (:class:`~streamanon.service.store.StoreUnavailable`) pauses consumption: the batch is kept and
    retried, nothing is committed, and :attr:`store_paused` reports the store down.
    """

    def __init__(self, config: Config, surveys: dict[str, SurveyIngest],
                 dead_letters: DeadLetterSink, *, on_stored: Callable[[str, list[float]], None],
                 consumer_factory: Callable[..., Any] | None = None,
                 on_control: Callable[[bytes | None], None] | None = None,
                 worker_pool_factory: Callable[[], concurrent.futures.Executor] | None = None,
                 on_restart: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.surveys = surveys
        self.dead_letters = dead_letters
        self.on_stored = on_stored
        self.on_control = on_control
        self._consumer_factory = consumer_factory
        self._topics = {config.topic(sid, "responses"): sid for sid in surveys}
        self._consumer: Any = None
        self._task: asyncio.Task | None = None
        self._positions: dict[Any, int] = {}
        self.offsets = GroupOffsets(config)
        self._marking = asyncio.Lock()  # held while a close mark is taken (see take_close)
        self.batches = 0
        self._worker: Any = None
        self._worker_pool_factory = worker_pool_factory or self._default_worker_pool
        self.on_restart = on_restart
        self.store_paused = False  # the store refuses writes: ingest waits (see health)
        # Called with a batch's {TopicPartition: next offset} once its records are committed
        # to the store and its dead letters sent (before its offsets are committed): for
        # measurements of the ingest latency; it sees positions only, never values.
        self.on_batch_stored: Callable[[dict[Any, int]], None] | None = None
        self.worker_restarts = 0
        self._generation = 0  # rebalances of the group (see _commit)
        self._next_offset: dict[Any, int] = {}  # after the last record handed on, by partition
        self._rewind_needed = False
        self._suspects: dict[Any, int | None] | None = None  # partitions read alone, see _fetch
        self._fetch_failures = self._store_failures = 0
        self._paused_at = self._isolated_until = 0.0

    WORKER_ATTEMPTS = 3  # tries of a batch that kills or fails the worker before it is split
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
        jobs: list[tuple[str, Columns, Closure | None]]
        generation: int
        future: asyncio.Future | None = None
        pool: Any = None  # the worker pool the future runs in

        def ready(self) -> bool:
            return self.future is None or self.future.done()

    async def start(self) -> None:
        from aiokafka import AIOKafkaConsumer

        self._worker = self._worker_pool_factory()
        await asyncio.get_running_loop().run_in_executor(self._worker, _worker_ingest, [])

        factory = self._consumer_factory or AIOKafkaConsumer
        self._consumer = factory(
            **self.config.kafka_options(),
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
        await self._consumer.start()
        self._task = asyncio.create_task(self._run(), name="collector")
        self._task.add_done_callback(self._report_death)

    def _default_worker_pool(self) -> concurrent.futures.Executor:
        from streamanon.service.processes import worker_pool

        return worker_pool(1, _worker_start, (self.config.model_dump_json(by_alias=True),
                                              self.config.hmac_key))

    def _rebalance_listener(self) -> Any:
        """Counts the group's rebalances in :attr:`_generation`, and forgets where the
        revoked partitions were read to: what a partition holds after a rebalance is the
        group's business again (a broker restarted without durable storage starts its logs
        over)."""
        from aiokafka.abc import ConsumerRebalanceListener

        collector = self

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            async def on_partitions_revoked(self, revoked: Any) -> None:
                collector._generation += 1
                for tp in revoked:
                    collector._next_offset.pop(tp, None)

            async def on_partitions_assigned(self, assigned: Any) -> None:
                collector._generation += 1

        return Listener()

    @staticmethod
    def _report_death(task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.critical("the collector stopped (%s); restart the service",
                         type(task.exception()).__name__)

    async def stop(self) -> None:
        await cancel_task(self._task)  # its exception, if any, was logged by _report_death
        if self._consumer is not None:
            await self._consumer.stop()
        if self._worker is not None:
            self._worker.shutdown(wait=True, cancel_futures=True)
        await asyncio.get_running_loop().run_in_executor(None, self.dead_letters.close)
        await self.offsets.stop()

    async def _run(self) -> None:
        pending: deque[KafkaCollector._Batch] = deque()
        while True:
            if not pending and not pool_health(self._worker, "ingest worker").ok:
                await self._restart_worker()  # it died while idle
            records, skipped = await self._fetch(20 if pending else 200)
            offsets: dict[Any, int] = dict(skipped)
            work: dict[str, list[Any]] = {}
            for tp, batch in records.items():
                if tp.topic == self.config.control_topic:
                    for r in batch:
                        self._control(message_of(r))
                elif tp.topic in self._topics:  # a Message for the rejected ones only
                    work.setdefault(self._topics[tp.topic], []).extend(batch)
                offsets[tp] = max(offsets.get(tp, 0), batch[-1].offset + 1)
                self._next_offset[tp] = offsets[tp]
            if offsets:
                pending.append(self._Batch(offsets, work, await self._jobs(work) if work else [],
                                           self._generation))
                if work:
                    pending[-1].future, pending[-1].pool = self._submit(pending[-1].jobs)
            while pending and (pending[0].ready() or len(pending) > 1):
                done = pending[0]
                results = await self._results(done)
                pending.popleft()
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
        from aiokafka.errors import CorruptRecordException, KafkaError, UnsupportedCodecError

        return (isinstance(exc, (CorruptRecordException, UnsupportedCodecError))
                or not isinstance(exc, (KafkaError, TimeoutError, ConnectionError)))

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
        ingest = self.surveys[survey_id]
        sent = self.dead_letters.send(self.config.topic(survey_id, "deadletter"), Rejection(
            Message(tp.topic, tp.partition, offset, None, b"", None), "unprocessable",
            f"the record could not be read from the broker ({type(exc).__name__}); "
            "its bytes are unknown"))
        ingest.rejected["unprocessable"] = ingest.rejected.get("unprocessable", 0) + 1
        ingest.received += 1
        done, _ = await asyncio.wait({asyncio.wrap_future(sent)}, timeout=DEAD_LETTER_WAIT)
        if not done or not done.pop().result():
            ingest.dead_letters_unsent += 1

    def _submit(self, jobs: list[tuple[str, Columns, Closure | None]]
                ) -> tuple[asyncio.Future, Any]:
        """Hand ``jobs`` to the worker: the future of its results, and the pool it runs in."""
        loop = asyncio.get_running_loop()
        pool = self._worker
        try:
            return loop.run_in_executor(pool, _worker_ingest, jobs), pool
        except concurrent.futures.BrokenExecutor as exc:  # it died before we noticed
            failed = loop.create_future()
            failed.set_exception(exc)
            return failed, pool

    async def _results(self, batch: KafkaCollector._Batch
                       ) -> list[Outcome]:
        """The worker's results for a batch; if it kills or fails the worker
        :attr:`WORKER_ATTEMPTS` times, for the batch in parts (:meth:`_bisect`)."""
        if not batch.jobs:
            return []
        results = await self._attempts(batch.jobs, self.WORKER_ATTEMPTS, batch.future,
                                       batch.pool)
        if results is None:
            results = await self._bisect(batch.work, batch.jobs)
        return results

    async def _attempts(self, jobs: list[tuple[str, Columns, Closure | None]], attempts: int,
                        future: asyncio.Future | None = None, pool: Any = None
                        ) -> list[Outcome] | None:
        """The worker's results for ``jobs`` (already running as ``future`` in ``pool``, or
        not yet handed over), or None once they killed or failed the worker ``attempts``
        times. A worker that dies is replaced and given the jobs again: the store committed
        their transaction or did not, and what it committed is recognised when it comes
        again. A store that refuses writes is waited for as long as it takes
        (:meth:`_store_refused`): it is no fault of the jobs."""
        failures = 0
        while True:
            if future is None:
                future, pool = self._submit(jobs)
            try:
                results = await future
            except concurrent.futures.BrokenExecutor:
                if pool is self._worker:  # not yet replaced: it died under these jobs
                    failures += 1
                    await self._restart_worker()
            except StoreUnavailable as exc:
                await self._store_refused(exc)
            except Exception as exc:
                failures += 1
                log.error("the ingest worker failed on a batch (%s); try %d of %d",
                          type(exc).__name__, failures, attempts)
                await asyncio.sleep(self.backoff(failures + 1))
            else:
                if self.store_paused:
                    self._store_back()
                return results
            if failures >= attempts:
                return None
            future = None

    async def _bisect(self, work: dict[str, list[Any]],
                      jobs: list[tuple[str, Columns, Closure | None]]
                      ) -> list[Outcome]:
        """A batch that kills or fails the worker, handled in halves, the halves that fail in
        halves again, down to the message(s) responsible: each of those is tried
        :attr:`WORKER_ATTEMPTS` times alone, then dead-lettered ``unprocessable``. Parts
        keep the batch's order and its closures; each part is one store transaction."""
        closures = {sid: closure for sid, _, closure in jobs}
        log.error("a batch of %d message(s) failed the ingest worker %d times; handling it in "
                  "parts to find the message(s) responsible",
                  sum(map(len, work.values())), self.WORKER_ATTEMPTS)
        results: list[Outcome] = []
        stack = self._halves(list(work.items()))[::-1]
        while stack:
            part = stack.pop()
            size = sum(len(msgs) for _, msgs in part)
            got = await self._attempts([(sid, _columns(msgs), closures[sid])
                                        for sid, msgs in part],
                                       self.WORKER_ATTEMPTS if size == 1 else 1)
            if got is not None:
                results += got
            elif size > 1:
                stack += self._halves(part)[::-1]
            else:
                [(sid, [msg])] = part
                log.error("survey %s: message %s:%d:%d failed the ingest worker %d times; "
                          "dead-lettered", sid, msg.topic, msg.partition, msg.offset,
                          self.WORKER_ATTEMPTS)
                results.append(Outcome(sid, 0, 0, [(
                    msg.partition, msg.offset, "unprocessable",
                    f"the ingest worker died or failed on this message {self.WORKER_ATTEMPTS} "
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

    async def _restart_worker(self) -> None:
        """A new ingest worker process for one that died, counted by ``on_restart``; tried
        again with backoff while a new one cannot start (its store cannot be opened)."""
        loop = asyncio.get_running_loop()
        tries = 0
        while True:
            old, self._worker = self._worker, self._worker_pool_factory()
            old.shutdown(wait=False, cancel_futures=True)
            self.worker_restarts += 1
            log.error("the ingest worker process exited; started a new one (restart %d), "
                      "which is handed the same batches", self.worker_restarts)
            if self.on_restart is not None:
                self.on_restart("collector")
            try:
                await loop.run_in_executor(self._worker, _worker_ingest, [])
                return
            except concurrent.futures.BrokenExecutor:
                tries += 1
                await asyncio.sleep(self.backoff(tries))

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

    def _store_back(self) -> None:
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

    def _control(self, msg: Message) -> None:
        """Hand a control message to the service; one it cannot take is logged and skipped."""
        if self.on_control is None:
            return
        where = f"{msg.topic}:{msg.partition}:{msg.offset}"
        if msg.value is not None and len(msg.value) > CONTROL_MAX_BYTES:
            log.warning("control message %s skipped: %d bytes, more than %d", where,
                        len(msg.value), CONTROL_MAX_BYTES)
            return
        try:
            self.on_control(msg.value)
        except Exception as exc:  # its text may quote the message: the type only
            log.warning("control message %s skipped: %s", where, type(exc).__name__)

    async def _finish(self, results: list[Outcome],
                      work: dict[str, list[Any]]) -> None:
        """Dead-letter what the worker rejected (original bytes), update the counters, and
        wait, without blocking the event loop, for the broker to take the dead letters before
        the batch's offsets are committed (at most :data:`DEAD_LETTER_WAIT` s: a dead-letter
        topic that does not answer slows ingest down but does not stop it; the sink goes on
        retrying and counts what it gives up)."""
        deliveries: list[tuple[SurveyIngest, concurrent.futures.Future[bool]]] = []
        for survey_id, stored, redelivered, rejections, arrived in results:
            ingest = self.surveys[survey_id]
            if rejections:
                by_position = {(m.partition, m.offset): m for m in work[survey_id]}
                dead_topic = self.config.topic(survey_id, "deadletter")
                for partition, offset, reason, detail in rejections:
                    rejection = redact_dead_letter(Rejection(
                        message_of(by_position[(partition, offset)]), reason, detail),
                        ingest.validator)
                    deliveries.append((ingest, self.dead_letters.send(dead_topic, rejection)))
                    ingest.rejected[reason] = ingest.rejected.get(reason, 0) + 1
                log.info("survey %s: %d message(s) dead-lettered", survey_id, len(rejections))
            ingest.stored += stored
            ingest.received += stored + redelivered + len(rejections)
            if redelivered:
                ingest.redelivered += redelivered
                log.info("survey %s: %d response(s) already stored (redelivered), skipped",
                         survey_id, redelivered)
            if stored:
                self.on_stored(survey_id, [arrived] * stored)
        if deliveries:
            waiting = {asyncio.wrap_future(f): ingest for ingest, f in deliveries}
            done, pending = await asyncio.wait(waiting, timeout=DEAD_LETTER_WAIT)
            for f in done:
                if not f.result():
                    waiting[f].dead_letters_unsent += 1
            if pending:
                log.warning("%d dead letter(s) not acknowledged within %.0f s; committing, "
                            "the sender goes on retrying", len(pending), DEAD_LETTER_WAIT)

    async def _jobs(self, work: dict[str, list[Any]]
                    ) -> list[tuple[str, Columns, Closure | None]]:
        """The worker's jobs for one batch, each with its survey's closure as it is now. A
        close mark being taken holds them back until it is set (see :meth:`take_close`)."""
        async with self._marking:
            return [(sid, _columns(msgs), self.surveys[sid].closure)
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
            self.surveys[survey_id].closure = Closure(closed_at, marks)
        return marks

    async def drain(self, survey_id: str, marks: dict[int, int]) -> None:
        """Wait until every message of the survey below its close marks has been handled:
        the group's committed offsets (committed only after the store) have reached the
        marks. What was committed before a restart counts, so nothing has to arrive to move
        a partition on; a partition whose log is now shorter than its mark (a recreated topic)
        needs its current end only. Waits as long as it takes, saying so every minute: a
        release must not be lost to a collector that is slow or restarting."""
        from aiokafka import TopicPartition

        topic = self.config.topic(survey_id, "responses")
        targets = dict(marks)
        started = checked = time.monotonic()
        next_note = started + 60.0
        behind: int | str = "?"
        while True:
            now = time.monotonic()
            try:
                unsure = [p for p, target in targets.items()
                          if self._positions.get(TopicPartition(topic, p), 0) < target]
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
