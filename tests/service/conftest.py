"""Fixtures that start real components: the brokers and the service process.

``broker`` is Apache Kafka (one KRaft node per test worker, ``simulations/apache_kafka.py``),
the broker operators run. A module that sets ``pytestmark = pytest.mark.both_brokers`` (the
compatibility subset: collector, control topic, publisher, dead letters, restart) runs each
of its tests on Apache Kafka and on the embedded broker (Tansu) that ``make demo`` and
``serve --embedded-broker`` start: ``broker`` is then parametrised over the two
(:func:`pytest_generate_tests`)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from simulations.apache_kafka import ApacheKafka
from streamanon.service.broker import EmbeddedBroker, free_port
from tests.service.lifecycle_helpers import ThreadComputePool

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _join_compute_pools(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every :class:`ThreadComputePool` a test made is idle before the next test starts
    (joined before the test's monkeypatches are undone, so its work runs patched to the end)."""
    yield
    ThreadComputePool.join_all()


#: The brokers a ``both_brokers`` test runs on, by the name its test id carries.
BROKERS = ("apache-kafka", "tansu")


#: Apache Kafka refuses a record over ``message.max.bytes`` (1 MB by default) at the producer,
#: where the embedded broker takes any size; the tests send 2 MB responses to see them
#: dead-lettered ``too_large`` by the service, so the broker lets them through.
LARGE_MESSAGES = {"message.max.bytes": str(8 * 1024 * 1024)}


@pytest.fixture(scope="session")
def apache_kafka_broker() -> Iterator[ApacheKafka]:
    """One Apache Kafka node for the worker's session (its log quoted if it fails to start)."""
    with ApacheKafka(settings=LARGE_MESSAGES) as kafka:
        yield kafka


@pytest.fixture(scope="session")
def tansu_broker() -> Iterator[EmbeddedBroker]:
    """The embedded broker (Tansu, in memory), as ``make demo`` starts it."""
    with EmbeddedBroker() as b:
        yield b


@pytest.fixture
def broker(request: pytest.FixtureRequest) -> ApacheKafka | EmbeddedBroker:
    """The broker a test runs on: Apache Kafka, or each of :data:`BROKERS` in turn for a
    ``both_brokers`` test. Either has ``bootstrap``."""
    name = getattr(request, "param", "apache-kafka")
    return request.getfixturevalue(
        "apache_kafka_broker" if name == "apache-kafka" else "tansu_broker")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker("both_brokers") and \
            "broker" in metafunc.fixturenames:
        metafunc.parametrize("broker", BROKERS, indirect=True)


SCHEMA = """
[surveys.schema]
respondent_id = { role = "identifier" }
age = { role = "quasi_identifier", type = "int", min = 16, max = 110 }
income = { role = "quasi_identifier", type = "float", min = 0 }
height = { role = "quasi_identifier", type = "float" }
satisfaction = { role = "confidential", type = "int", min = 1, max = 5 }
ticket = { role = "confidential", type = "int" }
comment = { role = "ignore", type = "str", required = false }
"""


def write_config(tmp: Path, bootstrap: str, *, survey: str = "wellbeing", k: int = 5,
                 close: str = "on-command", incremental: str = "nn_split_end",
                 extra: str = "", schema: str = SCHEMA,
                 engine: str = "mdav", formats: tuple[str, ...] = ("parquet", "csv"),
                 session_timeout_ms: int = 10_000) -> tuple[Path, dict[str, str]]:
    """A service configuration on ``bootstrap`` with one survey. The collector's session is
    10 s (the service's default is 30 s): the embedded broker holds a new group's first join
    for half of it, so each start waits 5 s instead of 15 s. Tests that kill services while
    they join keep the default (see ``streamanon.service.collector``)."""
    prefix = f"t{secrets.token_hex(4)}"
    port = free_port()
    text = f"""
[kafka]
bootstrap_servers = "{bootstrap}"
topic_prefix = "{prefix}"
group_id = "{prefix}-collector"
partitions = 2
session_timeout_ms = {session_timeout_ms}

[store]
url = "sqlite:///{tmp / 'store' / 'streamanon.db'}"

[output]
directory = "{tmp / 'releases'}"
formats = {json.dumps(list(formats))}

[http]
bind = "127.0.0.1:{port}"

[planner]
interval_seconds = 0.5
calibration_seconds = 0.5
{extra}

[[surveys]]
id = "{survey}"
close = "{close}"
k = {k}
engine = "{engine}"
incremental = "{incremental}"
""" + schema
    path = tmp / "streamanon.toml"
    path.write_text(text)
    env = {**os.environ, "STREAMANON_HMAC_KEY": secrets.token_hex(16),
           "STREAMANON_HTTP_TOKEN": secrets.token_hex(16),
           "STREAMANON_DATA_DIR": str(tmp / "data")}
    return path, env


class ServiceProcess:
    """``streamanon serve`` as a child process, with helpers to talk to it."""

    def __init__(self, config: Path, env: dict[str, str], log: Path) -> None:
        self.config, self.env, self.log = config, env, log
        self.proc: subprocess.Popen | None = None
        text = config.read_text()
        self.http = "http://" + text.split('bind = "')[1].split('"')[0]
        self.prefix = text.split('topic_prefix = "')[1].split('"')[0]
        self.token = env["STREAMANON_HTTP_TOKEN"]

    def start(self, timeout: float = 180) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "streamanon", "serve", "--config", str(self.config)],
                env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"service exited: {self.log.read_text()[-3000:]}")
            try:
                self.status()
                return
            except OSError:
                time.sleep(0.2)
        raise TimeoutError(f"service did not start: {self.log.read_text()[-3000:]}")

    def status(self) -> dict:
        """``/api/status`` as the data holder reads it: with the control token (the fields
        computed on the raw answers included; tests/service/test_surfaces.py reads it
        without)."""
        request = urllib.request.Request(f"{self.http}/api/status",
                                         headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=5) as r:
            return json.loads(r.read())

    def survey(self, sid: str) -> dict:
        return next(s for s in self.status()["surveys"] if s["id"] == sid)

    def post(self, path: str, token: str | None = None) -> tuple[int, dict]:
        req = urllib.request.Request(f"{self.http}{path}", method="POST", headers={
            "Authorization": f"Bearer {token if token is not None else self.token}"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, {}

    def wait_for(self, sid: str, predicate, timeout: float = 120, what: str = "") -> dict:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"service exited: {self.log.read_text()[-3000:]}")
            try:
                last = self.survey(sid)
                if predicate(last):
                    return last
            except OSError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"waiting for {what}: last status {last}\n"
                           f"{self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


def services(tmp_path: Path, broker: ApacheKafka | EmbeddedBroker, kind: type,
             configure: Any) -> Iterator[Any]:
    """A fixture's body: yields ``make(**kwargs)``, which writes a configuration with
    ``configure(tmp_path, bootstrap, **kwargs)`` and returns a ``kind`` service on it; every
    service made is stopped at the end."""
    started: list[Any] = []

    def make(**kwargs: Any) -> Any:
        config, env = configure(tmp_path, broker.bootstrap, **kwargs)
        svc = kind(config, env, tmp_path / "service.log")
        started.append(svc)
        return svc

    yield make
    for svc in started:
        svc.stop()


@pytest.fixture
def service_factory(tmp_path: Path, broker: ApacheKafka | EmbeddedBroker):
    yield from services(tmp_path, broker, ServiceProcess, write_config)
