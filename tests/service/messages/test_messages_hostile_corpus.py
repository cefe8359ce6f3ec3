"""A hostile corpus against the real service, produced with a client the service does not use
(confluent-kafka, librdkafka): every message is answered, the other survey's ingest never
stops, and the service stays up.

Survey ``wellbeing`` receives more than 40 kinds of message, some in batches of every
compression codec; survey ``census`` receives valid responses before, during and after (and a
few bad ones of its own); the control topic receives poison too. Each message's partition and
offset come from its delivery report, so every dead letter is checked against the reason that
its own message must get.
"""

from __future__ import annotations

import collections
import json
import urllib.request
from dataclasses import dataclass, field

from streamanon.service.deadletters import DEAD_LETTER_VALUE_BYTES, DETAIL_CHARS
from streamanon.service.validation import REASONS
from tests.service.kafka_helpers import DROP, read_topic, response

CENSUS = """
[[surveys]]
id = "census"
close = "on-command"
k = 5

[surveys.schema]
respondent_id = { role = "identifier", type = "str" }
age = { role = "quasi_identifier", type = "int", min = 0, max = 120 }
score = { role = "quasi_identifier", type = "float" }
answer = { role = "confidential", type = "str" }
region = { role = "label", type = "str" }
"""
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
DEEP = b"[" * 5000 + b"]" * 5000
STORED = "stored"
REDELIVERED = "redelivered"  # the same record again: recognised by identity, stored once


def census(i: int, **override) -> bytes:
    body = {"respondent_id": f"C{i:06d}", "age": i % 90, "score": i * 0.5, "answer": "yes",
            "region": "north"}
    body.update(override)
    return json.dumps(body).encode()


def patched(i: int, field: str, literal: bytes) -> bytes:
    """A valid response whose ``field`` is the raw JSON text ``literal``."""
    return response(i, **{field: "@@"}).replace(b'"@@"', literal)


@dataclass
class Kind:
    name: str
    value: bytes | None
    expected: str  # a reason from REASONS, or "stored"
    key: bytes | None = b""
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    codec: str = "none"


def wellbeing_corpus() -> list[Kind]:
    n = iter(range(100_000, 200_000))
    wide = {"respondent_id": "W1", "age": 40, "income": 1.0, "height": 170.0,
            "satisfaction": 3, "ticket": 1}
    kinds = [
        Kind("valid", response(next(n)), STORED),
        Kind("deep arrays", DEEP, "invalid_json"),
        Kind("deep arrays in a field", patched(next(n), "comment", DEEP), "invalid_json"),
        Kind("deep objects", b'{"a": ' * 5000 + b"1" + b"}" * 5000, "invalid_json"),
        Kind("660 KB with 60,000 extra keys",
             json.dumps({**wide, **{f"k{i}": 1 for i in range(60_000)}},
                        separators=(",", ":")).encode(), "unexpected_field"),
        Kind("10,000 keys", json.dumps({**wide, **{f"extra{i}": i for i in range(10_000)}})
             .encode(), "unexpected_field"),
        Kind("2 MB message", response(next(n), comment="c" * 2_000_000), "too_large"),
        Kind("900 KB string in an ignored field", response(next(n), comment="c" * 900_000),
             STORED),
        Kind("huge string in an int field", response(next(n), ticket="t" * 100_000),
             "wrong_type"),
        Kind("invalid UTF-8", b'{"respondent_id": "\xff\xfe", "age": 40}', "invalid_json"),
        Kind("invalid UTF-8 bytes only", b"\xc3\x28\xa0\xa1", "invalid_json"),
        Kind("UTF-8 BOM", b"\xef\xbb\xbf" + response(next(n)), "invalid_json"),
        Kind("UTF-16 BOM", b"\xff\xfe" + response(next(n)).decode().encode("utf-16-le"),
             "invalid_json"),
        Kind("duplicate keys, last valid", response(next(n)).replace(
            b'"age": ', b'"age": 300, "age": '), STORED),
        Kind("duplicate keys, last out of bounds", response(next(n)).replace(
            b', "income"', b', "age": 300, "income"'), "out_of_bounds"),
        Kind("top-level array", b"[1, 2, 3]", "not_an_object"),
        Kind("top-level string", b'"hello"', "not_an_object"),
        Kind("top-level number", b"42", "not_an_object"),
        Kind("top-level null", b"null", "not_an_object"),
        Kind("empty object", b"{}", "missing_field"),
        Kind("NaN", patched(next(n), "income", b"NaN"), "not_finite"),
        Kind("nan", patched(next(n), "income", b"nan"), "invalid_json"),
        Kind("NaN as a string", response(next(n), income="NaN"), "wrong_type"),
        Kind("Infinity", patched(next(n), "height", b"Infinity"), "not_finite"),
        Kind("-Infinity", patched(next(n), "height", b"-Infinity"), "not_finite"),
        Kind("1e999", patched(next(n), "income", b"1e999"), "not_finite"),
        Kind("400-digit integer", patched(next(n), "ticket", b"9" * 400), "out_of_bounds"),
        Kind("integer beyond int64", patched(next(n), "ticket", str(2**63).encode()),
             "out_of_bounds"),
        Kind("number as a string", response(next(n), age="40"), "wrong_type"),
        Kind("bool for an int", response(next(n), age=True), "wrong_type"),
        Kind("float for an int", response(next(n), age=40.5), "wrong_type"),
        Kind("out of bounds", response(next(n), age=200), "out_of_bounds"),
        Kind("missing field", response(next(n), height=DROP), "missing_field"),
        Kind("empty identifier", response(next(n), respondent_id=""), "wrong_type"),
        Kind("object identifier", response(next(n), respondent_id={"a": 1}), "wrong_type"),
        Kind("bidi field name", response(next(n), **{"\u202eexe.txt": 1}), "unexpected_field"),
        Kind("10,000-character field name", response(next(n), **{"f" * 10_000: 1}),
             "unexpected_field"),
        Kind("control characters in a value", response(next(n), comment="\x00\x1b[2J\u202e"),
             STORED),
        Kind("lone surrogate", patched(next(n), "comment", b'"\\ud800"'), "invalid_json"),
        Kind("trailing garbage", response(next(n)) + b" x", "invalid_json"),
        Kind("trailing comma", response(next(n))[:-1] + b", }", "invalid_json"),
        Kind("whitespace only", b"   \n\t ", "invalid_json"),
        Kind("NUL bytes", b"\x00" * 64, "invalid_json"),
        Kind("empty value", b"", "invalid_json"),
        Kind("tombstone", None, "invalid_json", key=b"R-tomb"),
        Kind("null key and null value", None, "invalid_json", key=None),
        Kind("null key", response(next(n)), STORED, key=None),
        Kind("100 KB key", response(next(n)), STORED, key=b"k" * 100_000),
        Kind("binary headers", response(next(n)), STORED,
             headers=[("bin", b"\x00\xff\xfe\x80"), ("", b""), ("h" * 300, b"\x80" * 5000)]),
        Kind("binary headers, bad value", response(next(n), age="x"), "wrong_type",
             headers=[("streamanon-reason", b"\xff"), ("streamanon-source", b"forged")]),
    ]
    first = next(n)
    kinds += [Kind("respondent, first answer", response(first), STORED, key=b"dup"),
              Kind("respondent, the same answer again", response(first), REDELIVERED,
                   key=b"dup"),
              Kind("respondent, another answer", response(first, age=77),
                   "duplicate_respondent", key=b"dup")]
    for codec in CODECS:
        kinds += [Kind(f"{codec} batch, valid", response(next(n)), STORED, codec=codec)
                  for _ in range(5)]
        kinds.append(Kind(f"{codec} batch, bad", b"{", "invalid_json", codec=codec))
    for kind in kinds:
        if kind.key == b"":
            kind.key = f"key-{kind.name}".encode()
    return kinds


def census_corpus() -> list[Kind]:
    return [
        Kind("integer identifier", census(900_001, respondent_id=18), "wrong_type"),
        Kind("int for a str answer", census(900_002, answer=3), "wrong_type"),
        Kind("1e999", census(900_003, score=1.5).replace(b"1.5", b"1e999"), "not_finite"),
        Kind("deep arrays", DEEP, "invalid_json"),
        Kind("2 MB message", census(900_004, answer="a" * 2_000_000), "too_large"),
        Kind("tombstone", None, "invalid_json", key=b"C-tomb"),
    ]


class Producers:
    """One confluent-kafka producer per codec; delivery reports give each message's place."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer

        self.producers = {codec: Producer({
            "bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20,
            "message.max.bytes": 8_000_000, "enable.idempotence": False})
            for codec in CODECS}
        self.places: dict[tuple[str, int, int], Kind] = {}
        self.errors: list[str] = []

    def send(self, topic: str, kinds: list[Kind]) -> None:
        for kind in kinds:
            def report(err, msg, kind=kind):
                if err is not None:
                    self.errors.append(f"{kind.name}: {err}")
                else:
                    self.places[(msg.topic(), msg.partition(), msg.offset())] = kind
            self.producers[kind.codec].produce(topic, value=kind.value, key=kind.key,
                                               headers=kind.headers or None,
                                               on_delivery=report)
        for producer in self.producers.values():
            assert producer.flush(60) == 0
        assert not self.errors, self.errors

    def close(self) -> None:
        """Drop what is still queued: librdkafka would retry it after the broker is gone."""
        for producer in self.producers.values():
            producer.purge()
            producer.close()
        self.producers.clear()


def expected_counts(kinds: list[Kind]) -> tuple[int, int, collections.Counter]:
    stored = sum(k.expected == STORED for k in kinds)
    redelivered = sum(k.expected == REDELIVERED for k in kinds)
    return stored, redelivered, collections.Counter(
        k.expected for k in kinds if k.expected not in (STORED, REDELIVERED))


def test_hostile_corpus_across_two_surveys(service_factory, broker):
    svc = service_factory(k=5, extra=CENSUS)
    svc.start()
    producers = Producers(broker.bootstrap)
    try:
        answered_and_up(svc, broker, producers)
    finally:
        producers.close()


def answered_and_up(svc, broker, producers: Producers) -> None:
    """Produce the corpus, the other survey's waves and the control poison; check every
    answer, message by message, and that the service is still up."""
    a_topic, b_topic = (f"{svc.prefix}.{s}.responses" for s in ("wellbeing", "census"))
    hostile, bad_census = wellbeing_corpus(), census_corpus()
    assert len({k.name for k in hostile}) >= 40
    waves = [[Kind(f"census {w}-{i}", census(w * 1000 + i), STORED) for i in range(200)]
             for w in range(3)]

    producers.send(b_topic, waves[0])
    producers.send(a_topic, hostile)
    producers.send(f"{svc.prefix}.control", [
        Kind("control: deep", DEEP, ""), Kind("control: deep in an object",
                                              b'{"command": ' + DEEP + b"}", ""),
        Kind("control: invalid UTF-8", b"\xff\xfe", ""), Kind("control: tombstone", None, "",
                                                              key=b"c"),
        Kind("control: unhashable survey", json.dumps({
            "command": "close", "survey": ["census"], "token": svc.token}).encode(), ""),
        Kind("control: 1 MB", b"{" * 1_000_000, "")])
    producers.send(b_topic, waves[1] + bad_census)
    producers.send(b_topic, waves[2])

    for sid, kinds in (("wellbeing", hostile), ("census", [*waves[0], *waves[1],
                                                           *bad_census, *waves[2]])):
        stored, redelivered, rejected = expected_counts(kinds)
        produced = len(kinds)
        try:
            status = svc.wait_for(sid, lambda s, n=produced: s["stored"] + s["redelivered"]
                                  + sum(s["dead_lettered"].values()) >= n, timeout=180,
                                  what=f"{sid}: every message answered")
        except TimeoutError as exc:  # where the unanswered messages are: on the broker?
            topic = f"{svc.prefix}.{sid}.responses"
            delivered = collections.Counter(p for (t, p, _) in producers.places if t == topic)
            read = partitions_read(broker.bootstrap, topic, produced)
            raise AssertionError(f"{exc}\n{sid}: delivered by partition {dict(delivered)}, "
                                 f"readable by a fresh consumer {dict(read)}") from exc
        assert status["stored"] == stored, sid
        assert status["redelivered"] == redelivered, sid
        assert collections.Counter(status["dead_lettered"]) == rejected, sid
        assert status["state"] == "OPEN"  # the poisoned close command did nothing

        dead = read_topic(broker.bootstrap, f"{svc.prefix}.{sid}.deadletter",
                          expected=sum(rejected.values()), timeout=90)
        assert len(dead) == sum(rejected.values()), sid
        for record in dead:
            headers = dict(record.headers)
            reason = headers["streamanon-reason"].decode()
            assert reason in REASONS
            topic, partition, offset = headers["streamanon-source"].decode().rsplit(":", 2)
            kind = producers.places[(topic, int(partition), int(offset))]
            assert reason == kind.expected, kind.name
            assert len(headers["streamanon-detail"]) <= DETAIL_CHARS
            if kind.value is None:
                assert record.value is None and b"value" in headers["streamanon-null"]
            elif len(kind.value) > DEAD_LETTER_VALUE_BYTES:
                assert record.value == kind.value[:DEAD_LETTER_VALUE_BYTES]
                assert headers["streamanon-truncated"] == str(len(kind.value)).encode()
            else:
                assert record.value == kind.value, kind.name

    assert svc.proc is not None and svc.proc.poll() is None
    with urllib.request.urlopen(f"{svc.http}/healthz", timeout=10) as r:
        assert r.status == 200


def partitions_read(bootstrap: str, topic: str, expected: int,
                    timeout: float = 30.0) -> dict[int, int]:
    """Records per partition a fresh consumer reads from ``topic`` (librdkafka, which reads
    the corpus's snappy batch: kafka-python without a snappy library stopped this report)."""
    import time

    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"report-{time.time()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    counts: collections.Counter = collections.Counter()
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while sum(counts.values()) < expected and time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=0.5):
                if message.error() is None:
                    counts[message.partition()] += 1
    finally:
        consumer.close()
    return dict(counts)
