"""Waiting for a broker is bounded by its timeout even when the Kafka client itself hangs: a
final suite run found ``streamanon serve --embedded-broker`` stuck for 15 minutes before it
printed the broker's address (the test's readline waited on it until pytest-timeout)."""

from __future__ import annotations

import threading
import time

import pytest

from streamanon.service.broker import BrokerError, wait_for_kafka


class _HangingAdmin:
    """A Kafka admin client whose metadata request never returns."""

    release = threading.Event()

    def __init__(self, **kwargs):
        pass

    def list_topics(self):
        self.release.wait()

    def close(self):
        pass


def test_a_client_that_never_answers_fails_the_wait_within_its_timeout(monkeypatch):
    import kafka

    monkeypatch.setattr(kafka, "KafkaAdminClient", _HangingAdmin)
    started = time.monotonic()
    try:
        with pytest.raises(BrokerError, match="no Kafka broker answered"):
            wait_for_kafka("127.0.0.1:1", timeout=1.0)
        assert time.monotonic() - started < 5  # bounded by the timeout, not the client
    finally:
        _HangingAdmin.release.set()
