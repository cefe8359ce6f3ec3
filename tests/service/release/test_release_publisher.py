"""The release topic's producer (librdkafka, issue 17): records in order, each keyed by its
release id and index, then the manifest; a broker that does not take them is a PublishError,
which the service treats as a broker fault (it sends the release again), never a silent
loss."""

from __future__ import annotations

import json
import time

import pytest

from streamanon.errors import PublishError
from streamanon.service.broker import ensure_topics, free_port
from streamanon.service.config import parse_config
from streamanon.service.offsets import broker_errors
from streamanon.service.publisher import ReleaseMessage, ReleasePublisher, release_message
from tests.service.kafka_helpers import headers, read_topic, topic_names
from tests.service.release.test_publisher import ENV

# the compatibility subset: each test on Apache Kafka and on the embedded broker
pytestmark = pytest.mark.both_brokers


def config_for(bootstrap: str):
    return parse_config({"kafka": {"bootstrap_servers": bootstrap}, "surveys": [
        {"id": "s1", "k": 3, "schema": {"rid": {"role": "identifier"},
                                        "age": {"role": "quasi_identifier"}}}]}, ENV)


def test_records_then_the_manifest_in_order_each_keyed_by_release_and_index(broker):
    config = config_for(broker.bootstrap)
    topic = "rp.release"
    ensure_topics(broker.bootstrap, [topic], 1)
    publisher = ReleasePublisher(config)
    messages = [json.dumps({"x": i}).encode() for i in range(2500)]
    publisher.publish(topic, messages, {"type": "manifest", "release_id": "r1", "count": 2500})
    publisher.close()
    got = read_topic(broker.bootstrap, topic, expected=2501)
    assert [r.value for r in got[:-1]] == messages
    assert [r.key for r in got[:3]] == [b"r1:0", b"r1:1", b"r1:2"]
    assert [headers(r) for r in got[:-1]] == [{}] * 2500  # records carry no headers
    assert [release_message(r.key, r.headers) for r in got[:-1]] == [
        ReleaseMessage("record", "r1", i) for i in range(2500)]
    assert got[-1].key == b"r1:manifest"
    assert headers(got[-1]) == {"streamanon-type": "manifest", "streamanon-release": "r1"}
    assert release_message(got[-1].key, got[-1].headers) == ReleaseMessage("manifest", "r1", None)
    assert json.loads(got[-1].value)["count"] == 2500
    assert publisher.closed


def test_a_broker_that_does_not_answer_is_a_publish_error():
    config = config_for(f"127.0.0.1:{free_port()}")  # nobody listens
    publisher = ReleasePublisher(config, timeout=2.0)
    started = time.monotonic()
    with pytest.raises(PublishError) as caught:
        publisher.publish("rp.release", [b"{}"] * 10, {"release_id": "r2"})
    assert isinstance(caught.value, broker_errors())  # the service sends it again
    assert time.monotonic() - started < 30  # bounded, not forever (a hang guard, not speed)


def test_a_missing_release_topic_is_a_broker_error_not_an_auto_created_topic(broker):
    """A broker replaced by an empty one has no release topic. The producer let the broker
    auto-create it (with the broker's default partitions) in the middle of a publish; it now
    fails the publish, and the service makes the topic with one partition and sends it all
    again (found by the fault suite, simulations/faults.py, scenario e)."""
    config = config_for(broker.bootstrap)
    topic = "rp.vanished.release"
    publisher = ReleasePublisher(config, timeout=20.0)
    started = time.monotonic()
    with pytest.raises(broker_errors()):
        publisher.publish(topic, [b"{}"] * 10, {"release_id": "r3"})
    assert time.monotonic() - started < 20  # the missing topic fails it, not the timeout
    assert topic not in topic_names(broker.bootstrap)


def test_a_release_message_is_read_from_its_key_or_from_the_headers_of_earlier_versions():
    assert release_message(b"ab12:7", None) == ReleaseMessage("record", "ab12", 7)
    assert release_message(b"ab12:manifest", [("streamanon-type", b"manifest")]) == \
        ReleaseMessage("manifest", "ab12", None)
    old_record = [("streamanon-type", b"record"), ("streamanon-release", b"ab12"),
                  ("streamanon-index", b"41")]
    assert release_message(None, old_record) == ReleaseMessage("record", "ab12", 41)
    old_manifest = [("streamanon-type", b"manifest"), ("streamanon-release", b"ab12")]
    assert release_message(None, old_manifest) == ReleaseMessage("manifest", "ab12", None)
    assert release_message(b"respondent-9", None) is None  # neither a release key ...
    assert release_message(None, [("streamanon-reason", b"invalid_json")]) is None  # ... nor
    assert release_message(b"ab12:x1", None) is None
