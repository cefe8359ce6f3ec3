"""Producing survey responses and reading result topics in tests (kafka-python, assign mode)."""

from __future__ import annotations

import concurrent.futures
import json
import time
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition


def produce(bootstrap: str, topic: str, messages: list[tuple[bytes | None, bytes]],
            **client: Any) -> None:
    """``client``: more KafkaProducer options (e.g. ``security_protocol``, ``ssl_context``)."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **client)
    for key, value in messages:
        producer.send(topic, key=key, value=value)
    producer.flush()
    producer.close()


def read_topic(bootstrap: str, topic: str, *, until: Any = None, expected: int | None = None,
               timeout: float = 60, **client: Any) -> list[Any]:
    """Every message of ``topic`` from the beginning, until ``until(messages)`` is true or
    ``expected`` messages were read; ``client``: more KafkaConsumer options."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=1000, **client)
    deadline = time.monotonic() + timeout
    parts: set[int] = set()
    while not parts and time.monotonic() < deadline:
        parts = consumer.partitions_for_topic(topic) or set()
        if not parts:
            time.sleep(0.2)
    tps = [TopicPartition(topic, p) for p in sorted(parts)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    out: list[Any] = []
    while time.monotonic() < deadline:
        batch = consumer.poll(timeout_ms=500)
        for records in batch.values():
            out.extend(records)
        if (until is not None and until(out)) or (expected is not None and len(out) >= expected):
            break
    consumer.close()
    return out


def headers(record: Any) -> dict[str, str]:
    return {k: v.decode() for k, v in (record.headers or [])}


def release_meta(record: Any) -> Any:
    """A release topic record's kind, release id and index (``ReleaseMessage``), or None."""
    from streamanon.service.publisher import release_message

    return release_message(record.key, record.headers)


def release_kind(record: Any) -> str | None:
    """``record`` or ``manifest`` for a release topic message, else None."""
    meta = release_meta(record)
    return None if meta is None else meta.kind


def base_run(svc: Any, bootstrap: str, survey: str,
             messages: list[tuple[bytes | None, bytes]]) -> None:
    """The first stage of a two-stage release on the running service ``svc``: ``messages``
    produced and stored, then the base run asked for and done."""
    produce(bootstrap, f"{svc.prefix}.{survey}.responses", messages)
    svc.wait_for(survey, lambda s: s["stored"] == len(messages), what="the first responses")
    assert svc.post(f"/api/surveys/{survey}/base")[0] == 202
    svc.wait_for(survey, lambda s: s["state"] == "BASE_DONE", what="the base run")


def read_release(bootstrap: str, topic: str) -> tuple[list[Any], list[dict[str, Any]],
                                                      dict[str, Any]]:
    """The release topic ``topic`` read up to its manifest: every message, the records'
    bodies and the manifest's, in topic order."""
    records = read_topic(bootstrap, topic,
                         until=lambda out: any(release_kind(r) == "manifest" for r in out))
    manifests = [json.loads(r.value) for r in records if release_kind(r) == "manifest"]
    assert manifests, f"no manifest on {topic}"
    return (records, [json.loads(r.value) for r in records if release_kind(r) == "record"],
            manifests[0])


def toml_schema(schema: dict[str, dict[str, Any]]) -> str:
    """The ``[surveys.schema]`` table of ``schema`` (JSON scalars and lists are TOML too)."""
    lines = []
    for name, spec in schema.items():
        pairs = ", ".join(f"{key} = {json.dumps(value)}" for key, value in spec.items())
        lines.append(f"{name} = {{ {pairs} }}")
    return "\n[surveys.schema]\n" + "\n".join(lines) + "\n"


def response(i: int, **override: Any) -> bytes:
    body = {"respondent_id": f"R{i:06d}", "age": 18 + (i * 7) % 70,
            "income": 20000.0 + (i * 7919) % 50000, "height": 150.0 + (i * 31) % 45,
            "satisfaction": 1 + i % 5, "ticket": i}
    body.update(override)
    return json.dumps({k: v for k, v in body.items() if v is not _DROP}).encode()


_DROP = object()
DROP = _DROP


def end_offsets(bootstrap: str, topic: str, timeout: float = 30) -> dict[int, int]:
    """{partition: high watermark} of ``topic``: how many messages were ever written to each
    partition, read from the broker at once (no waiting for messages that may never come)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        deadline = time.monotonic() + timeout
        parts = consumer.partitions_for_topic(topic) or set()
        while not parts and time.monotonic() < deadline:
            time.sleep(0.2)
            parts = consumer.partitions_for_topic(topic) or set()
        assert parts, f"topic {topic} does not exist"
        offsets = consumer.end_offsets([TopicPartition(topic, p) for p in sorted(parts)])
        return {tp.partition: offset for tp, offset in offsets.items()}
    finally:
        consumer.close()


# The survey the collector tests use (responses as made by :func:`response`).
ENV = {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32}
SCHEMA = {
    "respondent_id": {"role": "identifier"},
    "age": {"role": "quasi_identifier", "type": "int", "min": 16, "max": 110},
    "income": {"role": "quasi_identifier", "type": "float", "min": 0},
    "height": {"role": "quasi_identifier", "type": "float"},
    "satisfaction": {"role": "confidential", "type": "int", "min": 1, "max": 5},
    "ticket": {"role": "confidential", "type": "int"},
}


class MemoryDeadLetters:
    """A dead-letter sink that keeps what it is sent, acknowledged at once."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []

    def send(self, topic: str, rejection: Any) -> concurrent.futures.Future[bool]:
        self.sent.append((topic, rejection))
        done: concurrent.futures.Future[bool] = concurrent.futures.Future()
        done.set_result(True)
        return done

    def flush(self, timeout: float | None = None) -> bool:
        return True

    def close(self, timeout: float | None = None) -> None:
        pass
