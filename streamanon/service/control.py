"""Control messages on ``<prefix>.control``: signed, timed, and acted on once.

A control message asks the service to close a survey or to start its base run now. It carries
no secret. It is signed with HMAC-SHA256, keyed by the deployment's control token
(``STREAMANON_HTTP_TOKEN``, the same secret as the HTTP control endpoints), over the command,
the survey, the moment it was issued and a random nonce::

    {"command": "close", "survey": "wellbeing", "issued_at": 1764143800.25,
     "nonce": "9f2c...", "signature": "hex HMAC-SHA256"}

The service acts on a message only when the signature verifies, the issue time is within
``max_age`` seconds of its own clock (either side), and the nonce has not been seen within that
window, so a message read off the topic can neither be altered nor replayed later. Messages of
the earlier format, which carried the token itself, are refused. :func:`sign` makes a message
(``streamanon close SURVEY --via-kafka`` uses it); :class:`ControlVerifier` checks one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import secrets
import time
from collections.abc import Callable

COMMANDS = ("close", "start_base")
MAX_AGE_SECONDS = 300.0
_DOMAIN = "streamanon-control-v1"


class ControlRejected(Exception):
    """A control message the service does not act on; ``reason`` is safe to log (no content)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _signature(token: str, command: str, survey: str, issued_at: float, nonce: str) -> str:
    text = "\n".join((_DOMAIN, command, survey, repr(float(issued_at)), nonce))
    return hmac.new(token.encode(), text.encode(), hashlib.sha256).hexdigest()


def sign(command: str, survey: str, token: str, *, now: float | None = None,
         nonce: str | None = None) -> bytes:
    """The JSON bytes of a signed control message."""
    if command not in COMMANDS:
        raise ValueError(f"unknown control command {command!r}; one of {', '.join(COMMANDS)}")
    issued_at = time.time() if now is None else float(now)
    nonce = nonce or secrets.token_hex(16)
    return json.dumps({"command": command, "survey": survey, "issued_at": issued_at,
                       "nonce": nonce,
                       "signature": _signature(token, command, survey, issued_at, nonce)},
                      separators=(",", ":")).encode()


class ControlVerifier:
    """Checks control messages against the token, the clock and the nonces already used.

    Nonces are remembered for ``2 * max_age`` seconds, in memory: after a restart a message
    issued before it could be acted on again within its window, which changes nothing, since
    both commands are idempotent (a second close or base start of a survey is a no-op).
    """

    def __init__(self, token: str, *, max_age: float = MAX_AGE_SECONDS,
                 clock: Callable[[], float] = time.time) -> None:
        self._token = token
        self.max_age = max_age
        self._clock = clock
        self._seen: dict[str, float] = {}  # nonce -> when it may be forgotten

    def verify(self, raw: bytes | None) -> tuple[str, str]:
        """``(command, survey)`` of a message to act on, or :class:`ControlRejected`."""
        try:
            msg = json.loads(raw or b"")
        except (ValueError, RecursionError):
            raise ControlRejected("not JSON") from None
        if not isinstance(msg, dict):
            raise ControlRejected("not a JSON object")
        if "token" in msg:
            raise ControlRejected("carries a plain token; control messages are signed now "
                                  "(streamanon close SURVEY --via-kafka)")
        command, survey = msg.get("command"), msg.get("survey")
        issued_at, nonce, signature = msg.get("issued_at"), msg.get("nonce"), msg.get("signature")
        if not (isinstance(command, str) and isinstance(survey, str) and isinstance(nonce, str)
                and isinstance(signature, str) and type(issued_at) in (int, float)
                and math.isfinite(issued_at) and 0 < len(nonce) <= 128):
            raise ControlRejected("not a {command, survey, issued_at, nonce, signature} object")
        expected = _signature(self._token, command, survey, issued_at, nonce)
        if not hmac.compare_digest(expected.encode(), signature.encode("utf-8", "replace")):
            raise ControlRejected("bad signature")
        now = self._clock()
        if abs(now - issued_at) > self.max_age:
            when = "ago" if now > issued_at else "in the future"
            raise ControlRejected(f"issued {abs(now - issued_at):.0f} s {when}, outside the "
                                  f"{self.max_age:.0f} s window")
        self._seen = {n: until for n, until in self._seen.items() if until > now}
        if nonce in self._seen:
            raise ControlRejected("replayed")
        self._seen[nonce] = now + 2 * self.max_age
        if command not in COMMANDS:
            raise ControlRejected("unknown command")
        return command, survey
