"""The release publisher shared by the surveys of one service: one publish at a time, so a
delivery failure of one survey's release is never hidden by another survey's publish."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from streamanon.errors import PublishError
from streamanon.service.config import parse_config
from streamanon.service.publisher import ReleasePublisher

ENV = {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32}
K = 4


class _Error:
    def __init__(self, text: str) -> None:
        self.text = text

    def str(self) -> str:  # confluent_kafka.KafkaError's accessor
        return self.text


class _FakeProducer:
    """librdkafka's Producer as ReleasePublisher uses it: produce queues, flush delivers
    (calling the delivery callback for a failed message, as librdkafka does from flush),
    ``during_flush`` runs something at the point where another thread would run."""

    def __init__(self, publisher: ReleasePublisher, fail: set[bytes]) -> None:
        self.publisher = publisher
        self.fail = fail
        self.queue: list[tuple[str, bytes]] = []
        self.topics: dict[str, list[bytes]] = {}
        self.during_flush: Any = None

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                partition: int = -1, headers: Any = None) -> None:  # librdkafka's order
        self.queue.append((topic, value))

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = 0) -> int:
        queued, self.queue = self.queue, []
        for topic, value in queued:
            if value in self.fail:
                self.publisher._delivered(_Error("Broker: Message size too large"), None)
            else:
                self.topics.setdefault(topic, []).append(value)
        hook, self.during_flush = self.during_flush, None
        if hook is not None:
            hook()
        return 0

    def purge(self, *args: Any, **kwargs: Any) -> None:
        self.queue.clear()


def test_a_concurrent_publish_of_another_survey_does_not_hide_a_delivery_failure():
    """ReleasePublisher is one per service and Releaser.publish runs it in a thread per
    survey (asyncio.to_thread): two surveys closing together publish concurrently. With one
    list of delivery errors on the shared publisher, cleared at the start of every publish,
    an error of survey A's record reported while A waits in its flush was erased when survey
    B's publish started: A saw no error and its manifest went out after a run that lacks a
    record, a silent loss. Now a publish waits for the one under way."""
    publisher = ReleasePublisher(parse_config(
        {"kafka": {"bootstrap_servers": "127.0.0.1:1"}, "surveys": [
            {"id": "s1", "k": K, "schema": {"rid": {"role": "identifier"},
                                             "age": {"role": "quasi_identifier"}}}]},
        ENV), timeout=1.0)
    fake = _FakeProducer(publisher, fail={b'{"a":1}'})
    publisher._producer = fake  # no broker: the producer is faked
    publisher._keeper.producer = lambda: fake  # and so is the one a failed publish renews
    a = [b'{"a":0}', b'{"a":1}', b'{"a":2}']
    b = [b'{"b":0}']
    other = threading.Thread(
        target=lambda: publisher.publish("b.release", b, {"release_id": "rb"}))

    def b_starts() -> None:  # while A's flush is under way, survey B's publish starts
        other.start()
        other.join(timeout=0.5)  # B runs now unless it waits for A

    fake.during_flush = b_starts
    with pytest.raises(PublishError):  # A's failure reported: A is sent again
        publisher.publish("a.release", a, {"release_id": "ra"})
    other.join(timeout=10)
    assert not other.is_alive()
    assert fake.topics["b.release"] == [*b, fake.topics["b.release"][-1]]  # B went out whole
    assert json.loads(fake.topics["b.release"][-1])["release_id"] == "rb"
    assert not any(json.loads(v).get("release_id") == "ra"
                   for v in fake.topics.get("a.release", []))  # no manifest for A's cut run
