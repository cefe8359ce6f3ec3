"""Dead letters: bounded so the broker takes them, originals kept (null included), every send
checked, retried and counted, and none of it on the caller's thread."""

from __future__ import annotations

import concurrent.futures
import json
import secrets
import threading
import time

import pytest

from streamanon.service.config import parse_config
from streamanon.service.deadletters import DEAD_LETTER_VALUE_BYTES, KafkaDeadLetters
from streamanon.service.validation import Invalid, Message, Rejection, Validator
from tests.service.kafka_helpers import read_topic

# the compatibility subset: each test on Apache Kafka and on the embedded broker
pytestmark = pytest.mark.both_brokers

ENV = {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32}
SCHEMA = {"rid": {"role": "identifier"},
          "age": {"role": "quasi_identifier", "type": "int", "min": 16, "max": 110}}


def service_producer(bootstrap):
    """The dead-letter producer exactly as the service configures it."""
    from streamanon.service.kafka_clients import KafkaSettings, producer

    return producer(KafkaSettings(bootstrap), {"linger.ms": 20, "batch.size": 512 * 1024,
                                               "acks": "all"})


def rejection_of(value, key=b"R1", offset=0):
    cfg = parse_config({"surveys": [{"id": "s", "k": 3, "schema": SCHEMA}]}, ENV)
    try:
        Validator(cfg.surveys[0], cfg.hmac_key).validate(value)
    except Invalid as exc:
        return Rejection(Message("in", 0, offset, key, value, 0.0), exc.reason, exc.detail)
    raise AssertionError("valid")


def test_a_dead_letter_too_large_for_the_broker_is_cut_with_a_header(broker):
    body = {"rid": "R1", "age": 40, **{f"k{i}": 1 for i in range(60_000)}}
    value = json.dumps(body, separators=(",", ":")).encode()
    assert 600_000 < len(value) < 700_000  # with its 60,000 names in the detail: over 1 MiB
    rejection = rejection_of(value)
    assert rejection.reason == "unexpected_field"
    producer = service_producer(broker.bootstrap)
    sink = KafkaDeadLetters(producer)
    topic = f"dl{secrets.token_hex(4)}"
    try:
        assert sink.send(topic, rejection).result(timeout=60) is True
        sink.flush()
    finally:
        sink.close()
        producer.close()
    [record] = read_topic(broker.bootstrap, topic, expected=1)
    headers = dict(record.headers)
    assert headers["streamanon-reason"] == b"unexpected_field"
    assert headers["streamanon-truncated"] == str(len(value)).encode()
    assert record.value == value[:DEAD_LETTER_VALUE_BYTES]
    assert len(headers["streamanon-detail"]) <= 1024
    assert headers["streamanon-source"] == b"in:0:0"
    assert record.key == b"R1"
    assert (sink.sent, sink.failed) == (1, 0)


def test_null_keys_and_values_stay_null_in_the_dead_letter(broker):
    producer = service_producer(broker.bootstrap)
    sink = KafkaDeadLetters(producer)
    topic = f"dl{secrets.token_hex(4)}"
    try:
        futures = [sink.send(topic, rejection_of(None, key=b"R7", offset=0)),
                   sink.send(topic, rejection_of(None, key=None, offset=1)),
                   sink.send(topic, rejection_of(b"{", key=None, offset=2))]
        assert [f.result(timeout=60) for f in futures] == [True, True, True]
    finally:
        sink.close()
        producer.close()
    records = sorted(read_topic(broker.bootstrap, topic, expected=3),
                     key=lambda r: dict(r.headers)["streamanon-source"])
    assert [(r.key, r.value) for r in records] == [(b"R7", None), (b"", None), (None, b"{")]
    notes = [dict(r.headers).get("streamanon-null") for r in records]
    assert notes == [b"value", b"key,value", None]
    assert all(b"tombstone" in dict(r.headers)["streamanon-detail"] for r in records[:2])


def answered(error=None):
    """A send's future, answered: acknowledged, or failed with ``error``."""
    future = concurrent.futures.Future()
    if error is None:
        future.set_result((0, 0))
    else:
        future.set_exception(error)
    return future


class FlakyProducer:
    """Fails the first ``failures`` sends, by a raised error or a failed future in turn."""

    def __init__(self, failures, delay=0.0):
        self.failures, self.delay, self.calls = failures, delay, []
        self.lock = threading.Lock()

    def send(self, topic, key=None, value=None, headers=None):
        time.sleep(self.delay)
        with self.lock:
            self.calls.append((topic, key, value, headers))
            n = len(self.calls)
        if n <= self.failures:
            if n % 2:
                raise TimeoutError("metadata not available")
            return answered(RuntimeError("NotLeaderForPartition"))
        return answered()

    def flush(self, timeout=None):
        pass


def test_dead_letter_sends_are_checked_retried_and_counted():
    producer = FlakyProducer(failures=2)
    sink = KafkaDeadLetters(producer, attempts=3, retry_backoff=0.01)
    assert sink.send("dl", rejection_of(b"{")).result(timeout=5) is True
    assert (sink.sent, sink.retried, sink.failed) == (1, 2, 0)
    assert len(producer.calls) == 3

    producer = FlakyProducer(failures=10)
    sink = KafkaDeadLetters(producer, attempts=3, retry_backoff=0.01)
    assert sink.send("dl", rejection_of(b"{")).result(timeout=5) is False  # given up, counted
    assert (sink.sent, sink.retried, sink.failed) == (0, 2, 1)
    assert sink.flush(timeout=5)
    sink.close()


class BlockedProducer(FlakyProducer):
    """Every send waits until the test releases it: a broker that does not answer."""

    def __init__(self):
        super().__init__(failures=0)
        self.release = threading.Event()

    def send(self, topic, key=None, value=None, headers=None):
        self.release.wait(30)
        return super().send(topic, key, value, headers)


def test_sending_a_dead_letter_never_blocks_the_caller():
    producer = BlockedProducer()
    sink = KafkaDeadLetters(producer)
    # send() returns while the producer is still blocked: nothing of the send runs in the caller
    futures = [sink.send("dl", rejection_of(b"{", offset=i)) for i in range(4)]
    assert not any(f.done() for f in futures) and producer.calls == []
    producer.release.set()
    assert all(f.result(timeout=10) for f in futures) and sink.sent == 4
    sink.close()


@pytest.mark.parametrize("limit", [DEAD_LETTER_VALUE_BYTES])
def test_the_dead_letter_bound_leaves_room_under_the_default_request_size(limit):
    assert limit + 16 * 1024 < 1024 * 1024
