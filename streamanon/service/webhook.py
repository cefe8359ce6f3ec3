"""Survey submissions over HTTP(S): KoboToolbox's REST Services, or plain JSON objects.

A survey with a ``[surveys.webhook]`` section takes ``POST /api/surveys/<survey>/submissions``
(:mod:`.web`). :class:`WebhookIntake` answers each request:

- 404 for a survey without a webhook; 429 (``Retry-After``) past the client's rate
  (a token bucket per client address: :class:`RateLimiter`); 401 for wrong or missing HTTP
  Basic credentials (constant-time comparison, no detail); 413 for a body larger than
  ``max_body_bytes``;
- 422 with the reason and which field (never a value) for a submission that fails the survey's
  schema, once the submission is on the dead-letter topic: nothing is lost;
- 202 once the response is on the survey's responses topic, acknowledged by the brokers
  (``acks = all``); from there the collector stores it as any message, so a re-sent submission
  (KoboToolbox retries a failed push) is stored once, by identity;
- 503 (``Retry-After``) when the broker does not acknowledge in time: the sender retries.

:func:`from_kobo` turns a KoboToolbox submission into a response with the schema's names
(pure): group paths (``household/age``) are the field names, a ``select_multiple`` answer
(space-separated choice names) fills the schema's boolean fields ``QUESTION/CHOICE``, values
sent as text are read as the schema's types, and every field the schema does not name
(metadata such as ``_id``, ``_uuid``, ``formhub/uuid``, ``start``, ``__version__``) is dropped;
``meta/instanceID`` is the identity when the schema's identifier is named ``instanceID``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import logging
import math
import re
import time
from collections import OrderedDict
from typing import Any

import orjson

from streamanon.service.config import Config, SurveyConfig
from streamanon.service.deadletters import KafkaDeadLetters, redact_dead_letter
from streamanon.service.out_of_domain import refuses_for_domain
from streamanon.service.validation import (
    Invalid,
    Message,
    Rejection,
    Validator,
)

log = logging.getLogger(__name__)

#: What ``streamanon_webhook_submissions_total`` counts, by ``outcome``.
OUTCOMES = ("accepted", "invalid", "unauthorized", "rate_limited", "too_large", "unavailable")
ACK_SECONDS = 10.0  # how long a submission waits for the brokers before 503
RETRY_AFTER = "30"
_INTEGER = re.compile(r"[+-]?\d+")
_TRUE, _FALSE = {"true", "1", "yes", "ok"}, {"false", "0", "no"}


def basic_auth_ok(header: str | None, username: str, password: str) -> bool:
    """Whether an ``Authorization`` header carries these HTTP Basic credentials; both are
    compared in constant time, whichever is wrong."""
    user, pw = b"", b""
    if header and header[:6].lower() == "basic ":
        try:
            user, _, pw = base64.b64decode(header[6:].strip(), validate=True).partition(b":")
        except (binascii.Error, ValueError):
            user, pw = b"", b""
    same_user = hmac.compare_digest(user, username.encode())
    same_password = hmac.compare_digest(pw, password.encode())
    return bool(password) and same_user and same_password


class RateLimiter:
    """A token bucket per client: ``rate`` requests a second, bursts of ``burst``; at most
    ``clients`` buckets are kept (the least recently used are forgotten)."""

    def __init__(self, rate: float, burst: int, clients: int = 10_000) -> None:
        self.rate, self.burst, self.clients = rate, burst, clients
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def allow(self, client: str, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        tokens, last = self._buckets.pop(client, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - last) * self.rate)
        allowed = tokens >= 1.0
        self._buckets[client] = (tokens - 1.0 if allowed else tokens, now)
        while len(self._buckets) > self.clients:
            self._buckets.popitem(last=False)
        return allowed


def _typed(name: str, value: Any, survey: SurveyConfig) -> Any:
    """A KoboToolbox value (text) as the schema's type of ``name``; :class:`Invalid` when it
    cannot be read so (the detail names the field, never the value)."""
    if not isinstance(value, str):
        if isinstance(value, (list, dict)):
            raise Invalid("wrong_type", f"{name}: a repeat or a group as a list; flatten "
                                        "repeats before sending")
        return value
    if value == "":
        return None
    spec = survey.fields[name]
    kind = spec.type or ("float" if spec.role in ("quasi_identifier", "weight") else None)
    if kind == "int" or (spec.role == "identifier" and spec.type == "int"):
        if not _INTEGER.fullmatch(value.strip()):
            raise Invalid("wrong_type", f"{name}: expected an integer")
        return int(value)
    if kind == "float":
        try:
            number = float(value)
        except ValueError:
            raise Invalid("wrong_type", f"{name}: expected a number") from None
        return number if math.isfinite(number) else value  # the validator names it
    if kind == "bool":
        if value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        if survey.clamps:  # a level off its levels: the validator codes it missing
            return value
        raise Invalid("wrong_type", f"{name}: expected true or false")
    if kind in ("category", "ordinal") and spec.levels and value not in spec.levels:
        # levels given as numbers arrive as text
        for level in spec.levels:
            if not isinstance(level, str) and str(level) == value:
                return level
    return value


def from_kobo(submission: Any, survey: SurveyConfig) -> dict[str, Any]:
    """A KoboToolbox REST Services submission as a response with the schema's names."""
    if not isinstance(submission, dict):
        raise Invalid("not_an_object", "expected a JSON object")
    fields = survey.fields
    choices: dict[str, dict[str, str]] = {}  # question -> {choice: field}
    for name, spec in fields.items():
        question, slash, choice = name.rpartition("/")
        if slash and spec.type == "bool" and question not in fields:
            choices.setdefault(question, {})[choice] = name
    out: dict[str, Any] = {}
    for key, value in submission.items():
        name = key
        if key == "meta/instanceID" and key not in fields and survey.identifier == "instanceID":
            name = "instanceID"
        if name in fields:
            out[name] = _typed(name, value, survey)
        elif key in choices and isinstance(value, str):
            picked = set(value.split())
            unknown = picked - set(choices[key])
            if unknown and not survey.clamps:  # clamped: a choice it does not know, unpicked
                raise Invalid("out_of_levels", f"{key}: {len(unknown)} choice(s) not in the "
                                               "schema")
            out.update({field: choice in picked for choice, field in choices[key].items()})
        elif key in choices:
            raise Invalid("wrong_type", f"{key}: expected space-separated choice names")
    return out


class WebhookIntake:
    """The submissions endpoint's work for every survey with a webhook: checks, then the
    responses topic (or the dead-letter topic), answered once the brokers acknowledge."""

    def __init__(self, config: Config, producer: Any, telemetry: Any = None,
                 store: Any = None) -> None:
        self.config, self.producer, self.telemetry = config, producer, telemetry
        self.store = store  # notes an out_of_domain = "refuse" survey's refusals
        self.surveys = {s.id: s for s in config.surveys if s.webhook is not None}
        self.validators = {sid: Validator(s, config.hmac_key,
                                          max_message_bytes=config.kafka.max_message_bytes)
                           for sid, s in self.surveys.items()}
        self.limiters = {sid: RateLimiter(s.webhook.rate_per_second, s.webhook.burst)
                         for sid, s in self.surveys.items() if s.webhook is not None}
        self._dead_letters: KafkaDeadLetters | None = None

    def client(self, sid: str, remote: str | None, forwarded: str | None) -> str:
        """The client a rate applies to: the peer, or with ``forwarded_for`` the address the
        (trusted) reverse proxy appended last to ``X-Forwarded-For``."""
        hook = self.surveys[sid].webhook
        if hook is not None and hook.forwarded_for and forwarded:
            return forwarded.split(",")[-1].strip()
        return remote or "-"

    async def submit(self, sid: str, *, authorization: str | None, client: str,
                     body: bytes | None) -> tuple[int, dict[str, Any], dict[str, str]]:
        """(HTTP status, JSON body, headers) for one submission; ``body`` None: larger than
        the survey's ``max_body_bytes``."""
        survey = self.surveys[sid]
        hook = survey.webhook
        assert hook is not None
        if not self.limiters[sid].allow(client):
            return self._answer(sid, "rate_limited", 429, {"error": "too many submissions"},
                                {"Retry-After": "1"})
        if not basic_auth_ok(authorization, hook.username, self.config.webhook_password):
            return self._answer(sid, "unauthorized", 401, {"error": "unauthorized"},
                                {"WWW-Authenticate": 'Basic realm="streamanon"'})
        if body is None:
            return self._answer(sid, "too_large", 413, {
                "error": f"a submission is at most {hook.max_body_bytes} bytes"}, {})
        validator = self.validators[sid]
        try:
            obj = validator.parse(body)
            response = obj if hook.format == "json" else from_kobo(obj, survey)
            value = orjson.dumps(response)
            validator.validate(value)
        except Invalid as why:
            return await self._dead_letter(sid, body, why)
        key = str(response[survey.identifier]).encode()
        try:
            sent = self.producer.send(self.config.topic(sid, "responses"), key=key, value=value)
            await asyncio.to_thread(sent.result, ACK_SECONDS)
        except Exception as exc:  # any broker failure: the sender retries
            log.warning("survey %s: a submission was not acknowledged by the brokers (%s); "
                        "answered 503", sid, type(exc).__name__, extra={"survey": sid})
            return self._answer(sid, "unavailable", 503, {"error": "the broker did not "
                                "acknowledge; retry later"}, {"Retry-After": RETRY_AFTER})
        return self._answer(sid, "accepted", 202, {"survey": sid, "accepted": True}, {})

    async def _dead_letter(self, sid: str, body: bytes, why: Invalid
                           ) -> tuple[int, dict[str, Any], dict[str, str]]:
        if self._dead_letters is None:
            self._dead_letters = KafkaDeadLetters(self.producer)
        rejection = redact_dead_letter(Rejection(
            Message(f"webhook:{sid}", -1, -1, None, body, None), why.reason, why.detail),
            self.validators[sid])
        future = self._dead_letters.send(self.config.topic(sid, "deadletter"), rejection)
        try:
            # shielded: giving up the wait must not cancel the dead letter itself
            stored = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)),
                                            ACK_SECONDS * 3)
        except Exception:  # not stored in time (a timeout included): retry later
            stored = False
        if not stored:
            return self._answer(sid, "unavailable", 503, {
                "error": "the submission is invalid and could not be dead-lettered; retry "
                         "later", "reason": why.reason}, {"Retry-After": RETRY_AFTER})
        if self.store is not None and refuses_for_domain(self.surveys[sid], [why.reason]):
            await asyncio.to_thread(self.store.note_refused, sid)  # the release reads it
        return self._answer(sid, "invalid", 422, {"survey": sid, "reason": why.reason,
                                                  "detail": why.detail}, {})

    def _answer(self, sid: str, outcome: str, status: int, body: dict[str, Any],
                headers: dict[str, str]) -> tuple[int, dict[str, Any], dict[str, str]]:
        if self.telemetry is not None:
            self.telemetry.count_submission(sid, outcome)
        return status, body, headers

    def close(self) -> None:
        if self._dead_letters is not None:
            self._dead_letters.close()
