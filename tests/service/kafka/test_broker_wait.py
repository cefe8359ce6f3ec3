"""Waiting for a broker is bounded by its timeout even when the Kafka client itself hangs: a
final suite run found ``streamanon serve --embedded-broker`` stuck for 15 minutes before it
printed the broker's address (the test's readline waited on it until pytest-timeout). A broker
that cannot bind its port exits at once, and the wait must not then probe whatever else
listens there."""

from __future__ import annotations

import logging
import socket
import threading
import time

import pytest

from streamanon.service.broker import BrokerError, EmbeddedBroker, wait_for_kafka
from streamanon.service.kafka_clients import LIBRDKAFKA_CLIENTS_LOGGER


class _HangingAdmin:
    """A Kafka admin client whose metadata request never returns."""

    release = threading.Event()

    def __init__(self, *args, **kwargs):
        pass

    def list_topics(self, timeout=None):
        self.release.wait()

    def close(self):
        pass


def test_a_client_that_never_answers_fails_the_wait_within_its_timeout(monkeypatch):
    import confluent_kafka.admin

    monkeypatch.setattr(confluent_kafka.admin, "AdminClient", _HangingAdmin)
    started = time.monotonic()
    try:
        with pytest.raises(BrokerError, match="no Kafka broker answered"):
            wait_for_kafka("127.0.0.1:1", timeout=1.0)
        assert time.monotonic() - started < 5  # bounded by the timeout, not the client
    finally:
        _HangingAdmin.release.set()


class _FirstHangs:
    """The first admin client hangs; every later one answers."""

    made = 0
    release = threading.Event()

    def __init__(self, *args, **kwargs):
        type(self).made += 1
        self.hangs = type(self).made == 1

    def list_topics(self, timeout=None):
        if self.hangs:
            self.release.wait()
        return []

    def close(self):
        pass


def test_a_client_that_hangs_once_is_replaced_by_a_new_one(monkeypatch):
    import confluent_kafka.admin

    monkeypatch.setattr(confluent_kafka.admin, "AdminClient", _FirstHangs)
    try:
        wait_for_kafka("127.0.0.1:1", timeout=10.0, attempt_timeout=0.5)
        assert _FirstHangs.made == 2
    finally:
        _FirstHangs.release.set()


def test_the_wait_stops_as_soon_as_the_broker_process_is_gone():
    started = time.monotonic()
    with pytest.raises(BrokerError, match="exited"):
        wait_for_kafka("127.0.0.1:1", timeout=20.0, alive=lambda: False)
    assert time.monotonic() - started < 5


def test_the_probe_reports_only_its_own_outcome_not_the_clients_refused_connections(caplog):
    """A broker that has not started listening refuses the probe: that is what the wait is for,
    so the Kafka client's own ERROR lines ("Connection failed: ... ECONNREFUSED") must not
    reach the log; a run of ``serve --embedded-broker`` printed one before the broker's
    address, which its test reads as the first line."""
    caplog.set_level(logging.DEBUG)
    with pytest.raises(BrokerError, match="no Kafka broker answered"):
        wait_for_kafka(f"127.0.0.1:{_refusing_port()}", timeout=1.5)
    from_the_client = [r for r in caplog.records if r.name.startswith(LIBRDKAFKA_CLIENTS_LOGGER)
                       and r.levelno >= logging.INFO]
    assert not from_the_client, [f"{r.levelname} {r.name}" for r in from_the_client]
    restored = logging.getLogger(LIBRDKAFKA_CLIENTS_LOGGER).getEffectiveLevel()
    assert restored == logging.DEBUG


def _refusing_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def taken_port():
    """A loopback port held by a listener that accepts and never answers, as another test's
    server would hold a port that ``free_port`` had just handed out."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def test_a_port_taken_before_the_broker_binds_it_is_replaced_by_another(subprocesses, monkeypatch,
                                                                       taken_port):
    from streamanon.service import broker as module

    ports = iter([taken_port])
    real = module.free_port
    monkeypatch.setattr(module, "free_port",
                        lambda host="127.0.0.1": next(ports, None) or real(host))
    started = time.monotonic()
    with EmbeddedBroker(startup_timeout=20.0) as broker:
        assert broker.port != taken_port
        assert broker.process is not None and broker.process.poll() is None
    assert time.monotonic() - started < 10  # not a wait on the foreign listener


def test_a_given_port_that_is_in_use_fails_at_once_naming_it(subprocesses, taken_port):
    started = time.monotonic()
    with pytest.raises(BrokerError, match=f"port {taken_port}.*in use"):
        EmbeddedBroker(port=taken_port, startup_timeout=20.0).start()
    assert time.monotonic() - started < 5
