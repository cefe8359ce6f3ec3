"""Late is the service's decision (issue 13): a response is late when it was appended to the log
after the close (its offset is at or past its partition's close mark), whatever the producer's
clock says; nothing is on time after the drain or the release; without marks, the broker's
log-append time or the time the collector received it decides."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest
from confluent_kafka import Producer

from streamanon.service.config import parse_config
from streamanon.service.ingest import LOG_APPEND_TIME, message_of
from streamanon.service.validation import Closure, Message, Validator, check_batch
from tests.service.kafka_helpers import headers, produce, read_topic, response

ENV = {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32}
CLOSED_AT = 1000.0


@pytest.fixture
def validator() -> Validator:
    config = parse_config({"surveys": [{"id": "s", "k": 3, "schema": {
        "rid": {"role": "identifier", "type": "str"},
        "age": {"role": "quasi_identifier", "type": "int"}}}]}, ENV)
    return Validator(config.surveys[0], config.hmac_key)


def message(offset: int, rid: str, partition: int = 0, log_append_time: float | None = None
            ) -> Message:
    body = json.dumps({"rid": rid, "age": 40}).encode()
    return Message("t", partition, offset, None, body, log_append_time)


def closed(messages: list[Message], validator: Validator, closure: Closure,
           received_at: float) -> list[int]:
    rejected, _ = check_batch(messages, validator, closure, received_at)
    assert {r.reason for r in rejected} <= {"closed"}
    return sorted(r.message.offset for r in rejected)


def test_a_message_past_its_close_mark_is_late_whatever_its_producer_said(validator):
    closure = Closure(CLOSED_AT, {0: 10, 1: 4})
    batch = [message(9, "A"), message(10, "B"), message(3, "C", partition=1),
             message(4, "D", partition=1), message(0, "E", partition=2)]  # no mark: a new one
    # read long after the close: the backlog below the marks is on time all the same
    assert closed(batch, validator, closure, received_at=CLOSED_AT + 3600) == [0, 4, 10]


def test_nothing_is_on_time_once_the_survey_is_drained_or_released(validator):
    closure = Closure(CLOSED_AT, {0: 10}, final=True)
    batch = [message(0, "A", log_append_time=CLOSED_AT - 60), message(11, "B")]
    assert closed(batch, validator, closure, received_at=CLOSED_AT - 60) == [0, 11]


def test_without_marks_the_log_append_time_or_else_the_receive_time_decides(validator):
    closure = Closure(CLOSED_AT)
    stamped = [message(0, "A", log_append_time=CLOSED_AT - 1),
               message(1, "B", log_append_time=CLOSED_AT + 1)]
    assert closed(stamped, validator, closure, received_at=CLOSED_AT + 60) == [1]
    unstamped = [message(2, "C")]
    assert closed(unstamped, validator, closure, received_at=CLOSED_AT - 1) == []
    assert closed(unstamped, validator, closure, received_at=CLOSED_AT + 1) == [2]


def test_a_message_keeps_only_the_brokers_time():
    record = SimpleNamespace(topic="t", partition=0, offset=5, key=None, value=b"{}",
                             timestamp=1_700_000_000_000, timestamp_type=0)
    assert message_of(record).timestamp is None  # CreateTime: the producer's clock
    record.timestamp_type = LOG_APPEND_TIME
    assert message_of(record).timestamp == 1_700_000_000.0


def test_a_back_dated_response_after_the_release_is_dead_lettered_closed(service_factory,
                                                                         broker):
    svc = service_factory(k=5)
    svc.start()
    topic = f"{svc.prefix}.wellbeing.responses"
    produce(broker.bootstrap, topic, [(None, response(i)) for i in range(50)])
    svc.wait_for("wellbeing", lambda s: s["stored"] == 50, what="ingest")
    svc.post("/api/surveys/wellbeing/close")
    status = svc.wait_for("wellbeing", lambda s: s["state"] == "RELEASED", timeout=60,
                          what="release")
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    back_dated = int((status["close_requested_at"] - 3600) * 1000)  # an hour before the close
    producer.produce(topic, value=response(50), timestamp=back_dated)
    assert producer.flush(30) == 0
    svc.wait_for("wellbeing", lambda s: s["dead_lettered"].get("closed") == 1, timeout=30,
                 what="the dead letter")
    time.sleep(0.5)
    assert svc.survey("wellbeing")["stored"] == 50
    [letter] = read_topic(broker.bootstrap, f"{svc.prefix}.wellbeing.deadletter", expected=1)
    assert headers(letter)["streamanon-reason"] == "closed"
