"""An idempotent producer whose brokers forgot it gets a fatal error, or times out, and sends
no more: the service's producers replace it at their next send after either
(``kafka_clients.ProducerKeeper``)."""

from __future__ import annotations

from streamanon.service.kafka_clients import ProducerKeeper


class Error:
    def __init__(self, fatal: bool) -> None:
        self._fatal = fatal

    def fatal(self) -> bool:
        return self._fatal

    def str(self) -> str:
        return "Broker: Unknown producer id" if self._fatal else "1/1 brokers are down"


class Producer:
    """confluent-kafka's Producer as the keeper makes it, without a client: a real one would
    report its own connection errors to the callback, at times of its own."""

    def __init__(self, options: dict) -> None:
        self.options = options

    def purge(self) -> None:
        pass

    def flush(self, timeout: float) -> int:
        return 0


def test_a_fatal_error_or_a_failed_delivery_gets_a_new_producer_and_other_errors_do_not(
        monkeypatch):
    import confluent_kafka

    monkeypatch.setattr(confluent_kafka, "Producer", Producer)
    seen = []
    watch = ProducerKeeper({"bootstrap.servers": "127.0.0.1:9", "enable.idempotence": True,
                            "error_cb": seen.append})
    first = watch.producer()
    watch._on_error(Error(fatal=False))
    assert watch.renewed(first) is first
    watch._on_error(Error(fatal=True))
    second = watch.renewed(first)
    assert second is not first and watch.spoiled is None
    assert watch.renewed(second) is second
    assert len(seen) == 2  # the options' own callback still hears every error
    watch.spoil("a delivery failed: Local: Message timed out")
    assert watch.renewed(second) is not second
