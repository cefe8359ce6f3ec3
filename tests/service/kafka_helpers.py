"""Producing survey responses and reading result topics in tests (confluent-kafka, assign
mode)."""

from __future__ import annotations

import concurrent.futures
import json
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient


@dataclass
class Record:
    """A message read back: its place, key, value, headers and timestamp (ms)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    timestamp: int
    timestamp_type: int


def record_of(message: Any) -> Record:
    """A confluent-kafka ``Message`` as a :class:`Record` (its timestamp type: 0 CreateTime,
    1 LogAppendTime, as Kafka numbers them)."""
    kind, stamp = message.timestamp()
    return Record(message.topic(), message.partition(), message.offset(), message.key(),
                  message.value(), message.headers() or [], stamp, max(kind - 1, 0))


def produce(bootstrap: str, topic: str, messages: list[tuple[bytes | None, bytes]],
            client: dict[str, Any] | None = None) -> None:
    """``client``: more librdkafka settings (e.g. ``security.protocol``,
    ``ssl.ca.location``)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **(client or {})})
    for key, value in messages:
        while True:
            try:
                producer.produce(topic, key=key, value=value)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0, f"not every message reached {topic}"


def consumer(bootstrap: str, client: dict[str, Any] | None = None) -> Any:
    """A consumer that never joins its group (assign only) nor commits."""
    return Consumer({"bootstrap.servers": bootstrap, "group.id": "tests-reader",
                     "enable.auto.commit": False, "allow.auto.create.topics": False,
                     **(client or {})})


def partitions(reader: Any, topic: str, timeout: float) -> list[int]:
    """The partitions of ``topic``, waiting up to ``timeout`` seconds for it to exist."""
    deadline = time.monotonic() + timeout
    while True:
        found = reader.list_topics(topic, timeout=10).topics.get(topic)
        if found is not None and found.error is None and found.partitions:
            return sorted(found.partitions)
        if time.monotonic() > deadline:
            return []
        time.sleep(0.2)


def topic_names(bootstrap: str) -> set[str]:
    """The topics the brokers have."""
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics)


def delete_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until its answer is in
    for future in admin.delete_topics([topic], request_timeout=30).values():
        future.result(30)


def read_topic(bootstrap: str, topic: str, *, until: Any = None, expected: int | None = None,
               timeout: float = 60, client: dict[str, Any] | None = None) -> list[Record]:
    """Every message of ``topic`` from the beginning, until ``until(messages)`` is true or
    ``expected`` messages were read; ``client``: more librdkafka settings."""
    reader = consumer(bootstrap, client)
    deadline = time.monotonic() + timeout
    parts = partitions(reader, topic, timeout)
    reader.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    out: list[Record] = []
    while parts and time.monotonic() < deadline:
        out.extend(record_of(m) for m in reader.consume(500, 0.5) if m.error() is None)
        if (until is not None and until(out)) or (expected is not None and len(out) >= expected):
            break
    reader.close()
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
    reader = consumer(bootstrap)
    try:
        parts = partitions(reader, topic, timeout)
        assert parts, f"topic {topic} does not exist"
        return {p: reader.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)[1]
                for p in parts}
    finally:
        reader.close()


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


def secured_round_trip(svc: Any, config: Any, env: dict[str, str], bootstrap: str,
                       client: dict[str, Any], what: str) -> None:
    """A started service on brokers only ``client``'s settings reach (TLS, SASL): 60
    responses and a malformed one in, a close through ``streamanon close --via-kafka`` (the
    control topic), the release and the dead letter read back with ``client``. A release that
    comes out proves that every client of the service and of the CLI spoke ``what``."""
    import subprocess
    import sys

    topic = f"{svc.prefix}.wellbeing.responses"
    produce(bootstrap, topic, [(None, response(i)) for i in range(60)] + [(None, b"{")], client)
    svc.wait_for("wellbeing", lambda s: s["stored"] == 60, what=f"ingest over {what}")
    closed = subprocess.run([sys.executable, "-m", "streamanon", "close", "wellbeing",
                             "--config", str(config), "--via-kafka"],
                            capture_output=True, text=True, env=env, timeout=60)
    assert closed.returncode == 0, closed.stderr
    svc.wait_for("wellbeing", lambda s: s["state"] == "RELEASED", what="release")
    released = read_topic(bootstrap, f"{svc.prefix}.wellbeing.release", expected=61,
                          client=client)
    assert [release_kind(r) for r in released] == ["record"] * 60 + ["manifest"]
    dead = read_topic(bootstrap, f"{svc.prefix}.wellbeing.deadletter", expected=1,
                      client=client)
    assert [headers(r)["streamanon-reason"] for r in dead] == ["invalid_json"]
