"""The door to Kafka (``streamanon.service.kafka_clients``): one settings object, mapped once
per library, and every client built from it. No broker: the client classes are replaced by
recorders of what they were given."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from streamanon.service import kafka_clients
from streamanon.service.config import parse_config
from streamanon.service.kafka_clients import KafkaSettings

ENV = {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32,
       "STREAMANON_KAFKA_SASL_PASSWORD": "sasl-secret"}
SURVEY = {"id": "s", "close": "on-command", "k": 3, "schema": {
    "rid": {"role": "identifier"}, "age": {"role": "quasi_identifier", "type": "int"}}}


def settings_of(kafka: dict[str, Any]) -> KafkaSettings:
    return KafkaSettings.from_config(parse_config({"kafka": kafka, "surveys": [SURVEY]}, ENV))


def test_the_settings_come_from_the_kafka_section_and_the_secret(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("")
    settings = settings_of({"bootstrap_servers": "a:9093,b:9093", "security_protocol": "SASL_SSL",
                            "sasl_mechanism": "SCRAM-SHA-256", "sasl_username": "u",
                            "ssl_cafile": str(ca), "client_id": "anon-1"})
    assert settings == KafkaSettings("a:9093,b:9093", "SASL_SSL", "SCRAM-SHA-256", "u",
                                     "sasl-secret", ca, None, None, "anon-1")
    assert "sasl-secret" not in repr(settings)


def test_each_library_gets_the_same_settings_in_its_own_names(tmp_path: Path) -> None:
    settings = KafkaSettings("b:1", "SASL_SSL", "PLAIN", "u", "secret",
                             ssl_cafile=None, ssl_certfile=tmp_path / "c.pem",
                             ssl_keyfile=tmp_path / "c.key", client_id="me")
    assert settings.librdkafka_options() == {
        "bootstrap.servers": "b:1", "security.protocol": "SASL_SSL",
        "ssl.ca.location": "probe", "ssl.certificate.location": str(tmp_path / "c.pem"),
        "ssl.key.location": str(tmp_path / "c.key"), "sasl.mechanism": "PLAIN",
        "sasl.username": "u", "sasl.password": "secret", "client.id": "me"}
    plain = KafkaSettings("b:1")
    assert plain.python_options() == {"bootstrap_servers": "b:1",
                                      "security_protocol": "PLAINTEXT"}
    assert plain.librdkafka_options() == {"bootstrap.servers": "b:1",
                                          "security.protocol": "PLAINTEXT"}
    sasl = KafkaSettings("b:1", "SASL_PLAINTEXT", "SCRAM-SHA-512", "u", "secret",
                         client_id="me").python_options()
    assert sasl == {"bootstrap_servers": "b:1", "security_protocol": "SASL_PLAINTEXT",
                    "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "u",
                    "sasl_plain_password": "secret", "client_id": "me"}


class Recorder:
    """Stands for a client class: records the options it was built with."""

    made: ClassVar[list[tuple[str, dict[str, Any]]]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        options = args[0] if args and isinstance(args[0], dict) else kwargs
        self.made.append((type(self).__name__, dict(options)))

    def list_topics(self, *args: Any, **kwargs: Any) -> Any:
        from types import SimpleNamespace

        return SimpleNamespace(topics={"t": None})

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = 0) -> int:
        return 0


def test_every_client_is_built_from_the_one_settings_object(monkeypatch) -> None:
    import aiokafka
    import confluent_kafka
    import confluent_kafka.admin

    made: ClassVar[list[tuple[str, dict[str, Any]]]] = []
    for module, name in ((confluent_kafka.admin, "AdminClient"), (confluent_kafka, "Producer"),
                         (confluent_kafka, "Consumer"), (aiokafka, "AIOKafkaConsumer")):
        monkeypatch.setattr(module, name, type(name, (Recorder,), {"made": made}))
    settings = KafkaSettings("b:1", "SASL_PLAINTEXT", "PLAIN", "u", "secret", client_id="me")
    kafka_clients.probe(settings, 1.0)
    kafka_clients.create_topics(settings, {"t": 1})
    kafka_clients.producer(settings, {"acks": "all"}).close()
    kafka_clients.position_reader(settings, {"fetch.wait.max.ms": 50})
    kafka_clients.group_consumer(settings, group_id="g")
    kafka_clients.rdkafka_producer(settings, {"linger.ms": 5})
    assert [name for name, _ in made] == ["AdminClient", "AdminClient", "Producer", "Consumer",
                                          "AIOKafkaConsumer", "Producer"]
    for name, options in made:
        if name == "AIOKafkaConsumer":
            assert options.items() >= settings.python_options().items(), name
        else:
            assert options.items() >= settings.librdkafka_options().items(), name


def test_the_position_reader_never_joins_nor_commits(monkeypatch) -> None:
    import confluent_kafka

    made: ClassVar[list[tuple[str, dict[str, Any]]]] = []
    monkeypatch.setattr(confluent_kafka, "Consumer", type("Consumer", (Recorder,),
                                                          {"made": made}))
    kafka_clients.position_reader(KafkaSettings("b:1"), {"enable.auto.commit": False})
    [(_, options)] = made
    assert options["enable.auto.commit"] is False
    assert options["group.id"] != "streamanon"  # not the collector's group


@pytest.mark.parametrize("library", ["aiokafka", "confluent_kafka"])
def test_errors_of_every_library_are_broker_errors(library: str) -> None:
    import importlib

    errors = kafka_clients.broker_errors()
    base = {"aiokafka": "aiokafka.errors", "confluent_kafka": "confluent_kafka"}[library]
    module = importlib.import_module(base)
    kinds = [getattr(module, n) for n in ("KafkaError", "KafkaException") if hasattr(module, n)
             and isinstance(getattr(module, n), type)
             and issubclass(getattr(module, n), BaseException)]
    assert kinds and all(issubclass(k, errors) for k in kinds)


def test_the_service_producer_settles_its_futures_and_waits_for_room(monkeypatch) -> None:
    """:class:`~streamanon.service.kafka_clients.ServiceProducer` over a stand-in librdkafka
    producer: a delivery report settles the future (acknowledged, or failed with the error),
    and a full send queue makes ``send`` wait for room, not fail."""
    import confluent_kafka

    class Queueing(Recorder):
        full = 1  # the first produce finds the queue full

        def __init__(self, options: dict[str, Any]) -> None:
            self.reports: list[Any] = []

        def produce(self, topic: str, **kwargs: Any) -> None:
            if Queueing.full:
                Queueing.full -= 1
                raise BufferError("queue full")
            self.reports.append(kwargs["on_delivery"])

        def poll(self, timeout: float = 0) -> int:
            import time

            time.sleep(min(timeout, 0.01))
            return 0

    monkeypatch.setattr(confluent_kafka, "Producer", Queueing)
    sender = kafka_clients.producer(KafkaSettings("b:1"))
    ok, bad = sender.send("t", value=b"1"), sender.send("t", value=b"2")
    message = type("M", (), {"partition": lambda self: 0, "offset": lambda self: 7})()
    sender._producer.reports[0](None, message)
    sender._producer.reports[1](confluent_kafka.KafkaError(confluent_kafka.KafkaError._MSG_TIMED_OUT),
                                message)
    assert ok.result(1) == (0, 7)
    with pytest.raises(confluent_kafka.KafkaException):
        bad.result(1)
    assert sender.alive
    sender.close()
    assert not sender.alive


def test_importing_the_door_loads_no_kafka_client(subprocesses) -> None:
    code = ("import sys, streamanon.service.kafka_clients, streamanon.service.collector; "
            "print(sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('kafka', 'aiokafka', 'confluent_kafka')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "[]"
