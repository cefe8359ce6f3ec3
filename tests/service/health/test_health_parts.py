"""The health checks of each part, the failure counter and the systemd notifications, without a
broker: a real process pool with its process killed, stores that fail or hang, a notification
socket standing in for systemd's."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
import time
from collections.abc import Mapping
from types import SimpleNamespace

import pytest

from streamanon.service.health import (
    HealthMonitor,
    PartHealth,
    pool_health,
    sd_notify,
    store_health,
    task_health,
)
from streamanon.service.processes import worker_pool
from streamanon.service.telemetry import Telemetry

SECRET = "respondent-value-4711"


def test_a_process_pool_is_down_once_its_process_was_killed():
    pool = worker_pool(1)
    try:
        pid = pool.submit(os.getpid).result(timeout=60)
        assert pool_health(pool, "compute process") == PartHealth(True, "running")
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while pool_health(pool, "compute process").ok and time.monotonic() < deadline:
            time.sleep(0.02)
        assert pool_health(pool, "compute process") == PartHealth(
            False, "the compute process exited")
    finally:
        pool.shutdown(wait=True)
    assert pool_health(None, "compute process") == PartHealth(False, "not started")


def test_a_store_that_fails_or_hangs_is_down_and_its_error_text_is_not_shown():
    async def failing() -> None:
        raise OSError(f"disk I/O error near {SECRET}")

    async def hanging() -> None:
        await asyncio.sleep(60)

    async def answering() -> str:
        return "OPEN"

    async def check() -> tuple[PartHealth, PartHealth, PartHealth]:
        return (await store_health(answering(), timeout=1.0),
                await store_health(failing(), timeout=1.0),
                await store_health(hanging(), timeout=0.2))

    ok, failed, hung = asyncio.run(check())
    assert ok == PartHealth(True, "answering")
    assert failed == PartHealth(False, "a query failed (OSError)")
    assert hung == PartHealth(False, "no answer within 0.2 s")


def test_a_stopped_task_is_down_and_names_only_the_exception_type():
    async def crash() -> None:
        raise ValueError(f"cannot parse {SECRET}")

    async def check() -> tuple[PartHealth, PartHealth]:
        running = asyncio.create_task(asyncio.sleep(60))
        crashed = asyncio.create_task(crash())
        await asyncio.sleep(0.01)
        try:
            return (task_health(running, "consumer loop"), task_health(crashed, "consumer loop"))
        finally:
            running.cancel()

    running, crashed = asyncio.run(check())
    assert running.ok
    assert crashed == PartHealth(False, "the consumer loop stopped (ValueError)")


def test_failures_are_counted_once_per_outage():
    telemetry = Telemetry()
    up, down = PartHealth(True, "running"), PartHealth(False, "the compute process exited")
    assert telemetry.observe_health({"compute": up, "store": up}) == []
    assert telemetry.observe_health({"compute": down, "store": up}) == ["compute"]
    assert telemetry.observe_health({"compute": down, "store": up}) == []
    assert telemetry.observe_health({"compute": up, "store": up}) == []
    assert telemetry.observe_health({"compute": down, "store": up}) == ["compute"]
    text = telemetry.exposition([]).decode()
    assert 'streamanon_component_failures_total{component="compute"} 2.0' in text
    assert 'streamanon_component_failures_total{component="store"} 0.0' in text
    assert 'streamanon_component_up{component="compute"} 0.0' in text
    assert 'streamanon_component_up{component="store"} 1.0' in text


@pytest.fixture
def notify_socket():
    path = f"\0streamanon-test-{secrets.token_hex(6)}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(5)
    yield "@" + path[1:], sock
    sock.close()


def received(sock: socket.socket) -> list[str]:
    sock.setblocking(False)
    out = []
    try:
        while True:
            out.append(sock.recv(4096).decode())
    except BlockingIOError:
        return out
    finally:
        sock.settimeout(5)


def test_sd_notify_sends_one_datagram_and_is_silent_without_systemd(notify_socket):
    address, sock = notify_socket
    assert sd_notify("READY=1", {"NOTIFY_SOCKET": address})
    assert sock.recv(4096) == b"READY=1"
    assert not sd_notify("READY=1", {})
    assert not sd_notify("READY=1", {"NOTIFY_SOCKET": "@streamanon-nobody-listens"})


def test_the_watchdog_is_fed_only_while_every_part_is_healthy(notify_socket):
    address, sock = notify_socket
    healthy = {"store": PartHealth(True, "answering")}
    sick = {"store": PartHealth(False, "no answer within 3 s")}
    answers = [healthy, healthy, sick, sick, healthy]

    async def check() -> Mapping[str, PartHealth]:
        return answers.pop(0) if answers else healthy

    async def run() -> None:
        monitor = HealthMonitor(check, env={"NOTIFY_SOCKET": address,
                                            "WATCHDOG_USEC": "150000"})
        assert monitor.interval == pytest.approx(0.05)
        monitor.start()
        while answers:
            await asyncio.sleep(0.01)
        await monitor.stop()

    asyncio.run(run())
    sent = received(sock)
    assert sent[0] == "READY=1"
    assert sent[-1] == "STOPPING=1"
    feeds = [m for m in sent if m in ("WATCHDOG=1",) or m.startswith("STATUS=")]
    assert feeds[:5] == ["STATUS=ok", "WATCHDOG=1", "WATCHDOG=1",
                         "STATUS=unhealthy: store (no answer within 3 s)", "STATUS=ok"]


def test_the_watchdog_is_off_when_it_is_meant_for_another_process():
    monitor = HealthMonitor(None, env={"NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": "150000",
                                       "WATCHDOG_PID": str(os.getpid() + 1)})
    assert monitor.watchdog_seconds is None
    assert monitor.interval == 5.0


def test_the_collector_is_down_when_its_dead_letter_thread_stopped():
    from streamanon.service.deadletters import KafkaDeadLetters
    from streamanon.service.health import collector_health

    class Collector:  # a running loop and worker, so only the dead letters can fail
        def __init__(self, letters: KafkaDeadLetters) -> None:
            self.dead_letters = letters

    worker = worker_pool(1)

    async def check(letters: KafkaDeadLetters) -> PartHealth:
        collector = Collector(letters)
        collector._task = asyncio.create_task(asyncio.sleep(60))
        collector.worker = SimpleNamespace(pool=worker)  # as an ingest.IngestWorker
        try:
            return collector_health(collector, None)
        finally:
            collector._task.cancel()

    try:
        worker.submit(os.getpid).result(timeout=60)  # the worker process runs
        letters = KafkaDeadLetters(producer=None)
        assert asyncio.run(check(letters)).ok
        letters.close()  # its thread ends
        assert asyncio.run(check(letters)) == PartHealth(False, "the dead-letter thread stopped")
    finally:
        worker.shutdown()
