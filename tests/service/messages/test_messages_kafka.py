"""The real collector against the embedded broker: batches in every compression codec, and
poison on the control topic, consumed without stopping."""

from __future__ import annotations

import asyncio
import json
import secrets
import time

import pytest

from streamanon.service.broker import ensure_topics
from streamanon.service.collector import KafkaCollector
from streamanon.service.config import parse_config
from streamanon.service.ingest import SurveyIngest
from streamanon.service.store import open_store
from streamanon.service.validation import Validator
from tests.service.kafka_helpers import ENV, SCHEMA, MemoryDeadLetters, response

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def make_config(broker, tmp_path):
    prefix = f"m{secrets.token_hex(4)}"
    return parse_config({
        "kafka": {"bootstrap_servers": broker.bootstrap, "topic_prefix": prefix,
                  "group_id": f"{prefix}-collector", "partitions": 2},
        "store": {"url": f"sqlite:///{tmp_path / 'store.db'}"},
        "surveys": [{"id": "s", "k": 3, "schema": SCHEMA}]}, ENV)


def confluent_produce(bootstrap, topic, messages, codec):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                         "linger.ms": 20, "enable.idempotence": False,
                         "message.max.bytes": 8_000_000})
    try:
        for key, value in messages:
            producer.produce(topic, key=key, value=value)
        assert producer.flush(30) == 0
    finally:
        producer.purge()
        producer.close()


async def collect(config, until, *, on_control=None, timeout=90.0):
    store = open_store(config.store.url)
    surveys = {}
    for sc in config.surveys:
        store.ensure_survey(sc.id)
        surveys[sc.id] = SurveyIngest(sc, Validator(sc, config.hmac_key))
    dead = MemoryDeadLetters()
    collector = KafkaCollector(config, surveys, dead, on_stored=lambda sid, times: None,
                               on_control=on_control)
    await collector.start()
    try:
        deadline = time.monotonic() + timeout
        while not until(surveys):
            assert collector._task is not None
            if collector._task.done():
                raise AssertionError(f"the collector stopped: {collector._task.exception()!r}")
            assert time.monotonic() < deadline, {s: (i.stored, i.rejected)
                                                 for s, i in surveys.items()}
            await asyncio.sleep(0.1)
        assert not collector._task.done()
    finally:
        await collector.stop()
    return surveys, dead, store


def test_batches_in_every_compression_codec_are_consumed(broker, tmp_path):
    config = make_config(broker, tmp_path)
    topic = config.topic("s", "responses")
    ensure_topics(broker.bootstrap, {topic: 2, config.control_topic: 1})
    per_codec = 50
    for c, codec in enumerate(CODECS):
        batch = [(f"R{c}-{i}".encode(), response(c * 1000 + i)) for i in range(per_codec)]
        batch.append((None, b"{not json"))
        confluent_produce(broker.bootstrap, topic, batch, codec)
    total = len(CODECS) * (per_codec + 1)
    surveys, dead, store = asyncio.run(collect(
        config, lambda s: s["s"].received >= total))
    assert surveys["s"].stored == len(CODECS) * per_codec == store.count("s")
    assert [r.reason for _, r in dead.sent] == ["invalid_json"] * len(CODECS)


def test_poison_on_the_control_topic_is_logged_and_skipped(broker, tmp_path, caplog):
    config = make_config(broker, tmp_path)
    topic = config.topic("s", "responses")
    ensure_topics(broker.bootstrap, {topic: 2, config.control_topic: 1})
    seen = []

    def on_control(raw):  # what the service's handler does first
        seen.append(json.loads(raw or b"")["command"])

    deep = b"[" * 5000 + b"]" * 5000
    confluent_produce(broker.bootstrap, config.control_topic, [
        (None, deep), (None, b'{"a": ' + deep + b"}"), (None, b"\xff"), (None, None),
        (None, b"{" * 2_000_000), (None, json.dumps({"command": "noop"}).encode())], "none")
    confluent_produce(broker.bootstrap, topic, [(None, response(i)) for i in range(20)], "lz4")
    asyncio.run(collect(
        config, lambda s: s["s"].stored >= 20 and "noop" in seen, on_control=on_control))
    assert seen == ["noop"]
    assert "control message" in caplog.text and "skipped" in caplog.text


@pytest.mark.parametrize("codec", ["snappy", "lz4", "zstd"])
def test_codec_libraries_are_installed(codec):
    from aiokafka import codec as aiokafka_codec

    assert getattr(aiokafka_codec, f"has_{codec}")()
