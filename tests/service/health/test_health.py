"""``/healthz`` tells the truth (issue 13): with every part running it answers 200 ``ok``; when
the compute process dies it answers 503 and names the part, while a dead ingest worker is
replaced by the collector at once; the metrics count each part's failures, restarts included;
and the systemd watchdog is fed only while every part is healthy.

The service runs as ``streamanon serve`` in a child process, with ``NOTIFY_SOCKET`` and
``WATCHDOG_USEC`` set as systemd would set them for ``Type=notify`` and ``WatchdogSec=``. Its
helper processes are found in ``/proc``: the ingest worker is the child that holds the store
file open, the compute process the other ``multiprocessing`` child.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

WATCHDOG_SECONDS = 1.5


def children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry))
    return out


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def _open_files(pid: int) -> set[str]:
    files = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            files.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return files


def helper_processes(service_pid: int, store: Path) -> dict[str, int]:
    """{"ingest": pid, "compute": pid}: the service's multiprocessing workers."""
    found = {}
    for pid in children(service_pid):
        if "spawn_main" not in _cmdline(pid):
            continue  # the resource tracker
        found["ingest" if str(store) in _open_files(pid) else "compute"] = pid
    assert set(found) == {"ingest", "compute"}, found
    return found


def healthz(http: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"{http}/healthz", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def wait_for_healthz(http: str, predicate, timeout: float = 20) -> tuple[int, str]:
    deadline = time.monotonic() + timeout
    while True:
        answer = healthz(http)
        if predicate(*answer) or time.monotonic() > deadline:
            return answer
        time.sleep(0.1)


def metric(http: str, name: str, component: str) -> float:
    with urllib.request.urlopen(f"{http}/metrics", timeout=10) as r:
        text = r.read().decode()
    match = re.search(rf'^{name}{{component="{component}"}} (\S+)$', text, re.M)
    assert match, f"{name}{{component={component!r}}} not in /metrics"
    return float(match.group(1))


def notifications(sock: socket.socket) -> list[str]:
    """Every datagram received so far, without waiting."""
    out = []
    while True:
        try:
            out.append(sock.recv(4096).decode())
        except BlockingIOError:
            return out


@pytest.fixture
def notify_socket():
    """An abstract Unix datagram socket standing in for systemd's notification socket."""
    name = f"streamanon-test-{secrets.token_hex(6)}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.setblocking(False)
    yield "@" + name, sock
    sock.close()


def test_healthz_names_each_dead_part_and_the_watchdog_stops(service_factory, tmp_path,
                                                             notify_socket):
    address, sock = notify_socket
    svc = service_factory()
    svc.env = {**svc.env, "NOTIFY_SOCKET": address,
               "WATCHDOG_USEC": str(int(WATCHDOG_SECONDS * 1e6))}
    svc.start()
    assert healthz(svc.http) == (200, "ok\n")
    parts = ("collector", "compute", "store", "publisher", "broker")
    for part in parts:
        assert metric(svc.http, "streamanon_component_up", part) == 1
        assert metric(svc.http, "streamanon_component_failures_total", part) == 0
    assert all(p["ok"] for p in svc.status()["health"].values())

    time.sleep(WATCHDOG_SECONDS)
    sent = notifications(sock)
    assert "READY=1" in sent
    assert sent.count("WATCHDOG=1") >= 2  # fed at least every WatchdogSec / 2 while healthy

    store = tmp_path / "store" / "streamanon.db"
    helpers = helper_processes(svc.proc.pid, store)
    os.kill(helpers["ingest"], signal.SIGKILL)
    # the collector starts a new ingest worker: one failure counted, and healthy again
    deadline = time.monotonic() + 20
    while metric(svc.http, "streamanon_component_failures_total", "collector") < 1:
        assert time.monotonic() < deadline, "the ingest worker was not restarted"
        time.sleep(0.1)
    assert wait_for_healthz(svc.http, lambda code, body: code == 200) == (200, "ok\n")
    assert metric(svc.http, "streamanon_component_up", "collector") == 1
    while True:  # a new ingest worker, holding the store open
        with contextlib.suppress(AssertionError):
            if helper_processes(svc.proc.pid, store)["ingest"] != helpers["ingest"]:
                break
        assert time.monotonic() < deadline, "no new ingest worker"
        time.sleep(0.1)

    os.kill(helpers["compute"], signal.SIGKILL)  # not restarted in place
    code, body = wait_for_healthz(svc.http, lambda code, body: code == 503)
    assert code == 503, body
    assert body.startswith("unhealthy: compute\n"), body
    assert "collector" not in body and "store" not in body and "publisher" not in body
    assert metric(svc.http, "streamanon_component_up", "compute") == 0
    assert metric(svc.http, "streamanon_component_failures_total", "compute") == 1
    assert metric(svc.http, "streamanon_component_failures_total", "collector") == 1  # once
    health = svc.status()["health"]
    assert {name for name, p in health.items() if not p["ok"]} == {"compute"}

    time.sleep(WATCHDOG_SECONDS)  # a ping sent just before the check may still arrive
    notifications(sock)
    time.sleep(2 * WATCHDOG_SECONDS)
    assert "WATCHDOG=1" not in notifications(sock)  # systemd would now restart the service

    svc.stop()
    assert "STOPPING=1" in notifications(sock)
    log = svc.log.read_text()
    assert re.search(r"ERROR .*the ingest worker process exited; started a new one", log), \
        log[-2000:]
    assert re.search(r"ERROR .*compute is down", log), log[-2000:]
