"""Dead letters: what the collector could not store, sent to the survey's dead-letter topic.

:func:`dead_letter` lays a :class:`~.validation.Rejection` out as a Kafka record,
:func:`redact_dead_letter` takes the raw respondent id out of it where the survey asks, and
:class:`KafkaDeadLetters` produces the records from a thread of its own (the
:class:`DeadLetterSink` the collector sends to). May import :mod:`streamanon.service.validation`
and the standard library; a Kafka client only through the producer it is given; no store, no
consumer.

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

import concurrent.futures
import contextlib
import json
import logging
import queue
import threading
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from streamanon.service.validation import Invalid, Rejection, Validator

log = logging.getLogger(__name__)

DEAD_LETTER_VALUE_BYTES = 512 * 1024  # room under the producer's 1 MiB for key and headers
DEAD_LETTER_KEY_BYTES = 4 * 1024
DETAIL_CHARS = 1024


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
    value stays null (header ``streamanon-null``); a record whose key and value are both null
    is refused by some clients, so such a key is sent empty, and the header says both were
    null."""
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
    """Produces rejections from a thread of its own.

    :meth:`send` only queues: the thread hands each dead letter to the producer (a
    :class:`~.kafka_clients.ServiceProducer`, whose ``send`` may wait for room in its queue
    and returns a future) and checks the broker's answer. A failed
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
            future.add_done_callback(lambda sent, letter=letter: self._answered(letter, sent))

    def _answered(self, letter: _Letter, sent: concurrent.futures.Future[Any]) -> None:
        exc = sent.exception()
        if exc is not None:
            self._failed(letter, exc)
            return
        with self._lock:
            self.sent += 1
        _settle(letter.done, True)

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
        _settle(letter.done, False)


def _settle(done: concurrent.futures.Future[bool], sent: bool) -> None:
    """Give a dead letter's outcome to whoever waits on it; one who stopped waiting may have
    cancelled the future, which must not end the sending thread."""
    if not done.done():
        with contextlib.suppress(concurrent.futures.InvalidStateError):
            done.set_result(sent)
