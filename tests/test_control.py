"""Signed control messages: only an unaltered, fresh, first-time message with the right key is
acted on, and no message carries the secret."""

from __future__ import annotations

import json

import pytest

from streamanon.service.control import ControlRejected, ControlVerifier, sign

TOKEN = "t" * 32


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(1_800_000_000.0)


@pytest.fixture
def verifier(clock: Clock) -> ControlVerifier:
    return ControlVerifier(TOKEN, max_age=300, clock=clock)


def reason(verifier: ControlVerifier, raw: bytes | None) -> str:
    with pytest.raises(ControlRejected) as info:
        verifier.verify(raw)
    return info.value.reason


def test_a_signed_message_is_accepted_and_carries_no_secret(verifier, clock):
    raw = sign("close", "wellbeing", TOKEN, now=clock.now)
    assert verifier.verify(raw) == ("close", "wellbeing")
    assert TOKEN not in raw.decode()
    assert verifier.verify(sign("start_base", "panel", TOKEN, now=clock.now - 299)) \
        == ("start_base", "panel")


def test_the_same_message_is_acted_on_once(verifier, clock):
    raw = sign("close", "wellbeing", TOKEN, now=clock.now)
    verifier.verify(raw)
    clock.now += 60
    assert reason(verifier, raw) == "replayed"


def test_an_altered_message_fails_its_signature(verifier, clock):
    msg = json.loads(sign("close", "wellbeing", TOKEN, now=clock.now))
    for key, value in (("survey", "other"), ("command", "start_base"),
                       ("issued_at", clock.now + 1), ("nonce", "0" * 32)):
        assert reason(verifier, json.dumps({**msg, key: value}).encode()) == "bad signature"
    wrong_key = sign("close", "wellbeing", "x" * 32, now=clock.now)
    assert reason(verifier, wrong_key) == "bad signature"


def test_a_message_outside_the_window_is_refused(verifier, clock):
    old = sign("close", "wellbeing", TOKEN, now=clock.now - 301)
    assert "ago" in reason(verifier, old)
    ahead = sign("close", "wellbeing", TOKEN, now=clock.now + 301)
    assert "in the future" in reason(verifier, ahead)


def test_the_old_plain_token_format_is_refused_without_echoing_it(verifier):
    raw = json.dumps({"command": "close", "survey": "wellbeing", "token": TOKEN}).encode()
    text = reason(verifier, raw)
    assert "signed" in text and TOKEN not in text


@pytest.mark.parametrize("raw", [None, b"", b"garbage", b"[1, 2]", b"[" * 5000 + b"]" * 5000,
                                 b'{"command": "close"}',
                                 b'{"command": "close", "survey": "s", "issued_at": NaN, '
                                 b'"nonce": "n", "signature": "s"}'])
def test_malformed_messages_are_refused_with_a_reason(verifier, raw):
    assert reason(verifier, raw)


def test_an_unknown_command_cannot_be_signed():
    with pytest.raises(ValueError, match="unknown control command"):
        sign("drop_table", "wellbeing", TOKEN)
