"""Dead letters without raw respondent ids (issue 13): with ``dead_letter_identifier =
"redact"`` the identifier (and any field outside the schema, and the key) becomes its
pseudonym, and a value that does not parse as a JSON object is withheld, whatever its bytes;
the dead-letter topic is created with a bounded retention."""

from __future__ import annotations

import json
import secrets

import pytest

from streamanon.service.config import ConfigError, parse_config
from streamanon.service.deadletters import KafkaDeadLetters, dead_letter, redact_dead_letter
from streamanon.service.validation import Invalid, Message, Rejection, Validator
from tests.service.kafka_helpers import read_topic
from tests.service.messages.test_messages_dead_letters import service_producer

ENV = {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32}
SCHEMA = {"rid": {"role": "identifier"},
          "age": {"role": "quasi_identifier", "type": "int", "min": 16, "max": 110},
          "answer": {"role": "confidential", "type": "int", "required": False}}
RID = "R-secret-4711"


def validator(policy: str | None = "redact") -> Validator:
    survey = {"id": "s", "k": 3, "schema": SCHEMA}
    if policy is not None:
        survey["dead_letter_identifier"] = policy
    cfg = parse_config({"surveys": [survey]}, ENV)
    return Validator(cfg.surveys[0], cfg.hmac_key)


def rejected(v: Validator, value: bytes | None, key: bytes | None = RID.encode()) -> Rejection:
    """The rejection the collector makes of ``value`` (which must be invalid)."""
    try:
        v.validate(value)
    except Invalid as exc:
        return Rejection(Message("in", 0, 7, key, value, None), exc.reason, exc.detail)
    raise AssertionError("valid")


def sent(v: Validator, value: bytes | None, key: bytes | None = RID.encode()
         ) -> tuple[bytes | None, bytes | None, dict[str, bytes]]:
    key, value, headers = dead_letter(redact_dead_letter(rejected(v, value, key), v))
    return key, value, dict(headers)


def nested(depth: int, inner: str = json.dumps(RID)) -> str:
    return "[" * depth + inner + "]" * depth


def test_keep_is_the_default_and_leaves_the_dead_letter_as_sent():
    v = validator(None)
    assert v.survey.dead_letter_identifier == "keep"
    rejection = rejected(v, json.dumps({"rid": RID, "age": 200}).encode())
    assert redact_dead_letter(rejection, v) == rejection


def test_the_identifier_and_the_key_become_the_pseudonym_the_store_keeps():
    v = validator()
    key, value, headers = sent(v, json.dumps({"rid": RID, "age": 200, "answer": 3}).encode())
    pseudonym = v.pseudonym(RID).hex()
    assert json.loads(value) == {"rid": pseudonym, "age": 200, "answer": 3}
    assert key == pseudonym.encode()
    assert headers["streamanon-redacted"] == b"pseudonymised"
    assert headers["streamanon-reason"] == b"out_of_bounds"


def test_an_integer_identifier_gets_the_pseudonym_of_its_text():
    v = validator()
    _, value, _ = sent(v, b'{"rid": 18, "age": 15}', key=None)
    assert json.loads(value)["rid"] == v.pseudonym("18").hex()


def test_fields_outside_the_schema_are_pseudonymised_as_well():
    v = validator()
    _, value, headers = sent(v, json.dumps({"RID": RID, "age": 40, "mail": ["x@y"]}).encode())
    body = json.loads(value)
    assert body == {"RID": v.pseudonym(RID).hex(), "age": 40,
                    "mail": v.pseudonym('["x@y"]').hex()}
    assert headers["streamanon-reason"] == b"missing_field"


HOSTILE = {
    "invalid JSON": json.dumps({"rid": RID}).encode()[:-1],
    "not UTF-8": b'{"rid": "' + RID.encode() + b'\xff"}',
    "byte-order mark": b"\xef\xbb\xbf" + json.dumps({"rid": RID, "age": 200}).encode(),
    "NaN": b'{"rid": "' + RID.encode() + b'", "age": NaN}',
    "not an object": json.dumps([RID, 40]).encode(),
    "a string": json.dumps(RID).encode(),
    "JSON null": b"null",
    "nested 5,000 deep": nested(5000).encode(),
    "nested too deep to write again": ('{"rid": "' + RID + '", "age": '
                                       + nested(300, "40") + "}").encode(),
    "an identifier nested too deep to write again": ('{"rid": ' + nested(300) + "}").encode(),
    "over kafka.max_message_bytes": json.dumps({"rid": RID, "pad": "x" * (2 << 20)}).encode(),
}


@pytest.mark.parametrize("value", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_value_that_is_not_a_json_object_is_withheld(value):
    v = validator()
    key, sent_value, headers = sent(v, value)
    assert sent_value == b""
    assert headers["streamanon-redacted"].startswith(b"withheld: ")
    assert key == v.pseudonym(RID).hex().encode()
    assert not any(RID.encode() in part for part in (key, sent_value, *headers.values()))


def test_a_null_value_stays_null_and_its_key_is_pseudonymised():
    v = validator()
    key, value, headers = sent(v, None)
    assert (key, value) == (v.pseudonym(RID).hex().encode(), None)
    assert headers["streamanon-null"] == b"value"
    key, value, headers = sent(v, None, key=None)
    assert (key, value, headers["streamanon-null"]) == (b"", None, b"key,value")


def test_a_key_that_is_not_utf8_is_pseudonymised_too():
    v = validator()
    key, _, _ = sent(v, b"[]", key=b"\xffR\xfe")
    assert key == v.pseudonym("\ufffdR\ufffd").hex().encode()


def test_the_collector_redacts_what_it_dead_letters():
    import asyncio

    from streamanon.service.collector import KafkaCollector
    from streamanon.service.ingest import Outcome, SurveyIngest
    from tests.service.kafka_helpers import MemoryDeadLetters


    v = validator()
    cfg = parse_config({"surveys": [v.survey.model_dump(by_alias=True)]}, ENV)
    sink = MemoryDeadLetters()
    message = Message("streamanon.s.responses", 0, 7, RID.encode(),
                      json.dumps({"rid": RID, "age": 9}).encode(), None)

    async def finish():
        collector = KafkaCollector(cfg, {"s": SurveyIngest(v.survey, v)}, sink,
                                   on_stored=lambda *_: None)
        await collector._finish([Outcome(survey="s", stored=0, redelivered=0, rejections=[
            (0, 7, "out_of_bounds", "age: below the minimum 16")], arrived=0.0)],
            {"s": [message]})

    asyncio.run(finish())
    [(topic, rejection)] = sink.sent
    assert topic == "streamanon.s.deadletter"
    assert rejection == redact_dead_letter(
        Rejection(message, "out_of_bounds", "age: below the minimum 16"), v)
    assert RID.encode() not in rejection.message.value + rejection.message.key


class LateSink:
    """A dead-letter sink whose sender settles each letter ``after`` seconds later: given up
    (False) or taken (True) in turn, as the real sink does after its retries."""

    def __init__(self, after: float) -> None:
        self.after, self.outcomes = after, iter([False, True])

    def send(self, topic, rejection):
        import concurrent.futures
        import threading

        done = concurrent.futures.Future()
        threading.Timer(self.after, done.set_result, (next(self.outcomes),)).start()
        return done


def test_a_dead_letter_given_up_after_the_batch_went_on_is_counted_unsent(monkeypatch):
    """The batch waits DEAD_LETTER_WAIT (10 s) for its dead letters, the sink gives one up only
    after its retries (1 + 2 + 4 + 8 s): the count of letters never taken was kept only for
    those settled within the wait, so it stayed 0 in /api/status and /metrics."""
    import asyncio

    from streamanon.service import collector as collector_module
    from streamanon.service.collector import KafkaCollector
    from streamanon.service.ingest import Outcome, SurveyIngest

    monkeypatch.setattr(collector_module, "DEAD_LETTER_WAIT", 0.05)
    v = validator()
    cfg = parse_config({"surveys": [v.survey.model_dump(by_alias=True)]}, ENV)
    messages = [Message("streamanon.s.responses", 0, offset, RID.encode(),
                        json.dumps({"rid": RID, "age": 9}).encode(), None) for offset in (7, 8)]
    ingest = SurveyIngest(v.survey, v)

    async def finish() -> int:
        collector = KafkaCollector(cfg, {"s": ingest}, LateSink(after=0.3),
                                   on_stored=lambda *_: None)
        await collector._finish([Outcome(survey="s", stored=0, redelivered=0, rejections=[
            (0, 7, "out_of_bounds", "age: below the minimum 16"),
            (0, 8, "out_of_bounds", "age: below the minimum 16")], arrived=0.0)],
            {"s": messages})
        during = ingest.dead_letters_unsent  # the batch went on before the sink settled
        await asyncio.sleep(1.0)
        return during

    assert asyncio.run(finish()) == 0
    assert ingest.dead_letters_unsent == 1  # the one given up; the one taken is not counted


def test_the_policy_is_checked_with_its_key():
    with pytest.raises(ConfigError) as exc:
        validator("hash")
    assert "surveys[0](s).dead_letter_identifier" in str(exc.value)


def test_the_dead_letter_topics_are_created_with_a_bounded_retention():
    cfg = parse_config({"surveys": [{"id": "s", "k": 3, "schema": SCHEMA}]}, ENV)
    assert cfg.kafka.dead_letter_retention_ms == 7 * 24 * 3600 * 1000
    assert cfg.topic_configs() == {"streamanon.s.deadletter": {"retention.ms": "604800000"}}
    cfg = parse_config({"surveys": [{"id": "s", "k": 3, "schema": SCHEMA}]},
                       {**ENV, "STREAMANON_KAFKA_DEAD_LETTER_RETENTION_MS": "-1"})
    assert cfg.topic_configs()["streamanon.s.deadletter"] == {"retention.ms": "-1"}


def test_ensure_topics_passes_the_topic_settings_to_the_broker(monkeypatch):
    import concurrent.futures
    from types import SimpleNamespace

    import confluent_kafka.admin

    from streamanon.service.broker import ensure_topics

    created = []

    class Admin:
        def __init__(self, options):
            pass

        def list_topics(self, timeout=None):
            return SimpleNamespace(topics={"old": None})

        def create_topics(self, topics, request_timeout=None):
            created.extend(topics)
            done = concurrent.futures.Future()
            done.set_result(None)
            return {t.topic: done for t in topics}

    monkeypatch.setattr(confluent_kafka.admin, "AdminClient", Admin)
    ensure_topics("b:1", {"old": 1, "a.deadletter": 2, "a.release": 1},
                  configs={"a.deadletter": {"retention.ms": "1000"}, "old": {"x": "y"}})
    assert {t.topic: (t.num_partitions, t.config) for t in created} == {
        "a.deadletter": (2, {"retention.ms": "1000"}), "a.release": (1, {})}


def test_a_redacted_dead_letter_goes_through_kafka(broker):
    from streamanon.service.broker import ensure_topics

    v = validator()
    topic = f"dl{secrets.token_hex(4)}"
    ensure_topics(broker.bootstrap, [topic], 1, configs={topic: {"retention.ms": "60000"}})
    producer = service_producer(broker.bootstrap)
    sink = KafkaDeadLetters(producer)
    try:
        futures = [sink.send(topic, redact_dead_letter(rejected(v, value), v))
                   for value in (json.dumps({"rid": RID, "age": 9}).encode(), b"[" * 5000)]
        assert [f.result(timeout=60) for f in futures] == [True, True]
    finally:
        sink.close()
        producer.close()
    records = read_topic(broker.bootstrap, topic, expected=2)
    assert [dict(r.headers)["streamanon-redacted"] for r in records] == [
        b"pseudonymised", b"withheld: nested too deeply"]
    assert json.loads(records[0].value)["rid"] == v.pseudonym(RID).hex()
    assert records[1].value == b""
    assert not any(RID.encode() in (r.key or b"") + (r.value or b"") for r in records)
