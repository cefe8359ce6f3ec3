"""The collector: survey responses from Kafka into the store, bad ones to the dead-letter topic.

Validation, de-duplication and storage are plain functions and classes that the tests call
without a broker (:class:`Validator`, :func:`process_batch`); :class:`KafkaCollector` is the
thin driver that feeds them batches from Kafka.

The driver consumes with aiokafka ``getmany`` batches (aiokafka is the client underneath
faust-streaming). A faust agent spends about 90 us of per-event machinery on every message,
which caps it near 9-11k records/s on this hardware (SPEC section 6), below the 20k/s this
service must sustain; batches end to end do not have that ceiling.

Guarantees:

- every message is either stored or dead-lettered, with a machine-readable reason;
- offsets are committed only after the store has committed the batch, so a crash loses
  nothing; a redelivered message is recognised by its source (``partition:offset``) and
  stored at most once;
- identifiers never reach the store: only an HMAC-SHA256 of the respondent id is kept, for
  de-duplication; logs carry counts and reasons, never values.

Dead-letter messages (topic ``<prefix>.<survey>.deadletter``) carry the original key and value
bytes unchanged, and headers ``streamanon-reason`` (one of :data:`REASONS`),
``streamanon-detail`` (which field and what was wrong, no values) and ``streamanon-source``
(``topic:partition:offset``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from streamanon.config import Config, SurveyConfig
from streamanon.store import RecordRow, Store

log = logging.getLogger(__name__)

REASONS = (
    "invalid_json",  # not UTF-8 JSON
    "not_an_object",  # JSON, but not an object
    "missing_field",
    "unexpected_field",
    "wrong_type",
    "not_finite",  # NaN or infinity
    "out_of_bounds",
    "duplicate_respondent",  # respondent already stored (duplicates = "reject")
    "closed",  # sent after the survey closed
    "unknown_survey",
)


@dataclass(frozen=True)
class Message:
    """What the collector needs of a Kafka message."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: float  # seconds (producer time)

    @property
    def source(self) -> str:
        return f"{self.partition}:{self.offset}"


@dataclass(frozen=True)
class Rejection:
    message: Message
    reason: str
    detail: str


class Invalid(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def _reject_constant(name: str) -> float:
    raise Invalid("not_finite", f"{name} is not a finite number")


@dataclass
class Validated:
    rid_hash: bytes
    qi: np.ndarray
    confidential: dict[str, Any]
    label: str | None


class Validator:
    """Checks one response against a survey's schema and pseudonymises its respondent id."""

    def __init__(self, survey: SurveyConfig, hmac_key: bytes) -> None:
        self.survey = survey
        self._key = hmac_key
        self.fields = survey.fields
        self.qi = survey.quasi_identifiers
        self.identifier = survey.identifier
        self.confidential = survey.names("confidential")
        self.label = (survey.names("label") or [None])[0]
        self.required = {n for n, spec in self.fields.items() if spec.required}

    def pseudonym(self, respondent_id: str) -> bytes:
        return hmac.new(self._key, respondent_id.encode("utf-8"), hashlib.sha256).digest()

    def validate(self, raw: bytes | None) -> Validated:
        """The record, or :class:`Invalid` with a reason from :data:`REASONS`."""
        if raw is None:
            raise Invalid("invalid_json", "empty message")
        try:
            obj = json.loads(raw, parse_constant=_reject_constant)
        except Invalid:
            raise
        except (ValueError, UnicodeDecodeError) as exc:
            raise Invalid("invalid_json", f"not valid JSON ({type(exc).__name__})") from None
        if not isinstance(obj, dict):
            raise Invalid("not_an_object", f"expected a JSON object, got {type(obj).__name__}")
        missing = [n for n in self.required if obj.get(n) is None]
        if missing:
            raise Invalid("missing_field", f"missing field(s): {', '.join(sorted(missing))}")
        extra = [n for n in obj if n not in self.fields]
        if extra:
            raise Invalid("unexpected_field", f"unexpected field(s): {', '.join(sorted(extra))}")
        for name, value in obj.items():
            if value is not None:
                self._check(name, value)
        rid = obj[self.identifier]
        qi = np.array([float(obj[n]) for n in self.qi], dtype=np.float64)
        return Validated(
            rid_hash=self.pseudonym(str(rid)),
            qi=qi,
            confidential={n: obj.get(n) for n in self.confidential},
            label=None if self.label is None or obj.get(self.label) is None
            else str(obj[self.label]),
        )

    def _check(self, name: str, value: Any) -> None:
        spec = self.fields[name]
        kind = spec.type or ("float" if spec.role == "quasi_identifier" else None)
        if spec.role == "identifier":
            if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
                raise Invalid("wrong_type", f"{name}: expected a non-empty string or integer")
            return
        if kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise Invalid("wrong_type", f"{name}: expected an integer")
        elif kind == "float":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise Invalid("wrong_type", f"{name}: expected a number")
            if not math.isfinite(value):
                raise Invalid("not_finite", f"{name} is not a finite number")
        elif kind == "str":
            if not isinstance(value, str):
                raise Invalid("wrong_type", f"{name}: expected a string")
        elif kind == "bool":
            if not isinstance(value, bool):
                raise Invalid("wrong_type", f"{name}: expected true or false")
        elif isinstance(value, (dict, list)):
            raise Invalid("wrong_type", f"{name}: expected a scalar")
        if spec.min is not None and value < spec.min:
            raise Invalid("out_of_bounds", f"{name}: below the minimum {spec.min:g}")
        if spec.max is not None and value > spec.max:
            raise Invalid("out_of_bounds", f"{name}: above the maximum {spec.max:g}")


@dataclass
class BatchResult:
    stored: int = 0
    redelivered: int = 0
    rejected: list[Rejection] = field(default_factory=list)
    arrival_times: list[float] = field(default_factory=list)


def process_batch(messages: Sequence[Message], validator: Validator, store: Store,
                  closed_at: float | None, now: float | None = None) -> BatchResult:
    """Validate, de-duplicate and store one batch of one survey's messages.

    Returns what was stored and what must go to the dead-letter topic. The caller produces the
    rejections and commits the offsets afterwards.
    """
    survey = validator.survey
    result = BatchResult()
    candidates: list[tuple[Message, Validated]] = []
    for msg in messages:
        if closed_at is not None and msg.timestamp > closed_at:
            result.rejected.append(Rejection(msg, "closed", "sent after the survey closed"))
            continue
        try:
            candidates.append((msg, validator.validate(msg.value)))
        except Invalid as exc:
            result.rejected.append(Rejection(msg, exc.reason, exc.detail))
    if not candidates:
        return result
    seen_sources = store.sources(survey.id, [m.source for m, _ in candidates])
    known = (store.respondents(survey.id, [v.rid_hash for _, v in candidates])
             if survey.duplicates == "reject" else {})
    arrived = time.time() if now is None else now
    rows: list[RecordRow] = []
    for msg, rec in candidates:
        if msg.source in seen_sources:
            result.redelivered += 1  # stored before a crash; the offset was not committed
            continue
        if survey.duplicates == "reject":
            if rec.rid_hash in known:
                result.rejected.append(Rejection(msg, "duplicate_respondent",
                                                 "this respondent has already answered"))
                continue
            known[rec.rid_hash] = msg.source
        rows.append(RecordRow(arrived_at=arrived, source=msg.source, rid_hash=rec.rid_hash,
                              qi=rec.qi.tobytes(), confidential=json.dumps(rec.confidential),
                              label=rec.label))
    result.stored = store.insert_records(survey.id, rows)
    result.arrival_times = [arrived] * result.stored
    return result


class DeadLetterSink(Protocol):
    def send(self, topic: str, rejection: Rejection) -> None: ...

    def flush(self) -> None: ...


class KafkaDeadLetters:
    """Produces rejections with kafka-python: original bytes, reason in headers."""

    def __init__(self, producer: Any) -> None:
        self.producer = producer

    def send(self, topic: str, rejection: Rejection) -> None:
        msg = rejection.message
        self.producer.send(topic, key=msg.key, value=msg.value or b"", headers=[
            ("streamanon-reason", rejection.reason.encode()),
            ("streamanon-detail", rejection.detail.encode()),
            ("streamanon-source", f"{msg.topic}:{msg.partition}:{msg.offset}".encode()),
        ])

    def flush(self) -> None:
        self.producer.flush()


@dataclass
class SurveyIngest:
    """Per-survey collector state the service shares with the collector."""

    config: SurveyConfig
    validator: Validator
    closed_at: float | None = None
    stored: int = 0
    rejected: dict[str, int] = field(default_factory=dict)


class KafkaCollector:
    """Consumes every survey's response topic in batches and hands them to :func:`process_batch`.

    ``on_stored(survey_id, arrival_times)`` is called after each committed batch (the arrival
    estimator listens); store work runs in ``executor`` so the event loop stays free.
    """

    def __init__(self, config: Config, store: Store, surveys: dict[str, SurveyIngest],
                 dead_letters: DeadLetterSink, *, on_stored: Callable[[str, list[float]], None],
                 executor: Any = None, consumer_factory: Callable[..., Any] | None = None,
                 on_control: Callable[[bytes | None], None] | None = None) -> None:
        self.config = config
        self.store = store
        self.surveys = surveys
        self.dead_letters = dead_letters
        self.on_stored = on_stored
        self.on_control = on_control
        self.executor = executor
        self._consumer_factory = consumer_factory
        self._topics = {config.topic(sid, "responses"): sid for sid in surveys}
        self._consumer: Any = None
        self._task: asyncio.Task | None = None
        self._positions: dict[Any, int] = {}
        self.batches = 0

    async def start(self) -> None:
        from aiokafka import AIOKafkaConsumer

        factory = self._consumer_factory or AIOKafkaConsumer
        self._consumer = factory(
            *self._topics, self.config.control_topic,
            bootstrap_servers=self.config.kafka.bootstrap_servers,
            group_id=self.config.kafka.group_id, enable_auto_commit=False,
            auto_offset_reset="earliest", max_partition_fetch_bytes=8 * 1024 * 1024,
            fetch_max_bytes=64 * 1024 * 1024, session_timeout_ms=30_000,
        )
        await self._consumer.start()
        self._task = asyncio.create_task(self._run(), name="collector")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # shutting down
                await self._task
        if self._consumer is not None:
            await self._consumer.stop()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batches = await self._consumer.getmany(
                timeout_ms=200, max_records=self.config.kafka.batch_max_records)
            if not batches:
                continue
            offsets = {}
            for tp, records in batches.items():
                msgs = [Message(r.topic, r.partition, r.offset, r.key, r.value,
                                (r.timestamp or time.time() * 1000) / 1000.0) for r in records]
                if tp.topic == self.config.control_topic:
                    for m in msgs:
                        if self.on_control is not None:
                            self.on_control(m.value)
                else:
                    await loop.run_in_executor(self.executor, self._handle, tp.topic, msgs)
                offsets[tp] = records[-1].offset + 1
            await self._consumer.commit(offsets)
            self._positions.update(offsets)
            self.batches += 1

    def _handle(self, topic: str, msgs: list[Message]) -> None:
        sid = self._topics.get(topic)
        ingest = self.surveys.get(sid) if sid else None
        if ingest is None:
            return
        result = process_batch(msgs, ingest.validator, self.store, ingest.closed_at)
        dead_topic = self.config.topic(ingest.config.id, "deadletter")
        for rejection in result.rejected:
            self.dead_letters.send(dead_topic, rejection)
            ingest.rejected[rejection.reason] = ingest.rejected.get(rejection.reason, 0) + 1
        if result.rejected:
            self.dead_letters.flush()
            log.info("survey %s: %d message(s) dead-lettered", ingest.config.id,
                     len(result.rejected))
        ingest.stored += result.stored
        if result.stored:
            self.on_stored(ingest.config.id, result.arrival_times)

    async def drain(self, survey_id: str, timeout: float = 120.0) -> None:
        """Wait until every message already in the survey's topic has been handled."""
        from aiokafka import TopicPartition

        topic = self.config.topic(survey_id, "responses")
        partitions = self._consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in partitions]
        if not tps:
            return
        ends = await self._consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self._positions.get(tp, 0) >= end or end == 0 for tp, end in ends.items()):
                committed = [await self._consumer.committed(tp) or 0 for tp in tps]
                if all(c >= ends[tp] for c, tp in zip(committed, tps, strict=True)):
                    return
            await asyncio.sleep(0.05)
        raise TimeoutError(f"survey {survey_id}: the collector did not catch up in {timeout} s")
