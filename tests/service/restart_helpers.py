"""Driving a service through kills and restarts: phase lines in its log, frozen helper
processes, the collector group, the release topic. Used by test_restart_*.py and
test_crash_safety.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from simulations.common import cpu_seconds
from streamanon.service.publisher import release_message
from tests.service import conftest
from tests.service.conftest import REPO, ServiceProcess
from tests.service.kafka_helpers import consumer, record_of

# A schema with a long free-text answer: the release files take a while to write and the
# release several producer batches to publish, so a kill can land inside either.
SCHEMA = """
[surveys.schema]
respondent_id = { role = "identifier", type = "str" }
age = { role = "quasi_identifier", type = "int", min = 16, max = 110 }
income = { role = "quasi_identifier", type = "float", min = 0 }
height = { role = "quasi_identifier", type = "float" }
ticket = { role = "confidential", type = "int" }
essay = { role = "confidential", type = "str" }
"""


def write_config(tmp: Path, bootstrap: str, *, k: int = 5) -> tuple[Path, dict[str, str]]:
    """A service configuration with survey ``s`` and the schema above, and the service's
    default session timeout (these services are killed while their collectors join)."""
    return conftest.write_config(tmp, bootstrap, survey="s", k=k, schema=SCHEMA,
                                 session_timeout_ms=30_000)


def response(i: int, essay_bytes: int = 1500, **override: Any) -> bytes:
    body = {"respondent_id": f"R{i:06d}", "age": 18 + (i * 7) % 70,
            "income": 20000.0 + (i * 7919) % 50000, "height": 150.0 + (i * 31) % 45,
            "ticket": i, "essay": (f"answer {i} " * (essay_bytes // 8 + 1))[:essay_bytes]}
    body.update(override)
    return json.dumps(body).encode()


class Restartable(ServiceProcess):
    """A service process that is killed and started again, read through its log."""

    def __init__(self, config: Path, env: dict[str, str], log: Path) -> None:
        super().__init__(config, env, log)
        self.group = config.read_text().split('group_id = "')[1].split('"')[0]
        self.store_path = Path(config.read_text().split('url = "sqlite:///')[1].split('"')[0])
        self.log_start = 0

    def launch(self) -> None:
        """Start the process without waiting for its HTTP server; its log lines count from
        here."""
        self.log_start = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "streamanon", "serve", "--config", str(self.config)],
                env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)

    def start(self, timeout: float = 180) -> None:
        self.log_start = self.log.stat().st_size if self.log.exists() else 0
        super().start(timeout)

    def lines(self) -> str:
        """The log of the current process."""
        with open(self.log, "rb") as fh:
            fh.seek(self.log_start)
            return fh.read().decode(errors="replace")

    def wait_line(self, pattern: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        while time.monotonic() < deadline:
            if regex.search(self.lines()):
                return
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"service exited: {self.lines()[-3000:]}")
            time.sleep(0.005)
        raise TimeoutError(f"no log line {pattern!r} in {timeout} s (the collector group: "
                           f"{describe_group(self.bootstrap, self.group)}): "
                           f"{self.lines()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL the service; its helper processes die with it (and are killed here too, in
        case they were frozen)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        children = helper_processes(self.proc.pid)
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def step_until(self, done: Any, step: float = 0.003, timeout: float = 30) -> None:
        """Stop the service (SIGSTOP) and let it run in short steps until ``done()``: a phase
        that takes a few tens of milliseconds can then be caught in its middle. It is left
        stopped (kill it).

        ``timeout`` bounds the CPU seconds the service's process gets meanwhile, not the wall
        clock: on a loaded machine a 3 ms step may give it almost nothing (a suite beside a
        busy loop and benchmarks once got it too few steps in 30 s of wall clock to reach
        its publish), so the wall clock is only capped at 20 times ``timeout``."""
        assert self.proc is not None
        pid = self.proc.pid
        cpu_at_start = cpu_seconds(pid)
        wall_deadline = time.monotonic() + 20 * timeout
        os.kill(pid, signal.SIGSTOP)
        while not done():
            if (cpu_seconds(pid) - cpu_at_start > timeout
                    or time.monotonic() > wall_deadline):
                raise TimeoutError(f"the service did not get there (in "
                                   f"{cpu_seconds(pid) - cpu_at_start:.1f} s of its CPU)")
            os.kill(self.proc.pid, signal.SIGCONT)
            time.sleep(step)
            os.kill(self.proc.pid, signal.SIGSTOP)

    def pause(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def freeze_helpers(self) -> None:
        """SIGSTOP the ingest worker and the compute process: nothing is stored or computed
        until the service is killed."""
        assert self.proc is not None
        for pid in helper_processes(self.proc.pid):
            os.kill(pid, signal.SIGSTOP)

    def evict(self) -> None:
        """Remove the members a killed service left in the collector group, as the broker
        does once their session times out (30 s): the next start then joins at once."""
        evict_group(self.bootstrap, self.group)

    @property
    def bootstrap(self) -> str:
        return self.config.read_text().split('bootstrap_servers = "')[1].split('"')[0]

    def store(self, sql: str, params: tuple = ()) -> list[tuple]:
        with sqlite3.connect(f"file:{self.store_path}?mode=ro", uri=True) as db:
            return db.execute(sql, params).fetchall()

    def release_row(self) -> tuple[str, str] | None:
        rows = self.store("SELECT release_id, status FROM releases WHERE survey = 's'")
        return rows[0] if rows else None

    def state(self) -> str:
        return self.store("SELECT state FROM surveys WHERE id = 's'")[0][0]


def helper_processes(pid: int) -> list[int]:
    """The service's worker processes (ingest worker, compute pool), not its resource
    tracker."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            try:
                cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            except OSError:
                continue
            if b"spawn_main" in cmdline:
                found.append(child)
    return found


def describe_group(bootstrap: str, group: str) -> str:
    """The group's state and members as the broker describes them (for a failure message)."""
    async def run() -> str:
        from aiokafka.admin import AIOKafkaAdminClient

        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            answers = await admin.describe_consumer_groups([group])
            return "; ".join(f"state {g[2]!r}, {len(g[5])} member(s) {[m[0] for m in g[5]]}"
                             for answer in answers for g in answer.groups)
        finally:
            await admin.close()

    try:
        return asyncio.run(run())
    except Exception as exc:  # a description, not a check
        return f"not described ({type(exc).__name__})"


#: The group states in which the embedded broker (Tansu) takes a LeaveGroup sent for a dead
#: member. A group still forming with its leader chosen is described as "Unknown"; there the
#: LeaveGroup is answered without error but the member stays (measured: sent again for 10 s,
#: the members were all still listed), and the broker's session timeout removes it: the next
#: member waits about 54 s (1.8 times the 30 s session) for its partitions either way.
EVICTABLE_STATES = ("Stable", "Assigning", "Empty")


def evict_group(bootstrap: str, group: str, timeout: float = 10) -> list[str]:
    """Send LeaveGroup for every member of ``group`` until it has none, unless the group is
    in a state where that does not take (:data:`EVICTABLE_STATES`): its members are then left
    to the broker's session timeout."""
    async def run() -> list[str]:
        from aiokafka.admin import AIOKafkaAdminClient
        from aiokafka.protocol.group import LeaveGroupRequest

        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        evicted: list[str] = []
        try:
            node = await admin.find_coordinator(group)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                described = [g for answer in await admin.describe_consumer_groups([group])
                             for g in answer.groups]
                members = [member[0] for g in described for member in g[5]]
                if not members or any(g[2] not in EVICTABLE_STATES for g in described):
                    break
                for member in members:  # no public API: LeaveGroup on the member's behalf
                    await admin._send_request_to_node(node, LeaveGroupRequest(group, member))
                evicted += members
                await asyncio.sleep(0.1)
            return evicted
        finally:
            await admin.close()

    return asyncio.run(run())


@contextlib.contextmanager
def watching(bootstrap: str, topic: str, since: int | None = None) -> Iterator[Any]:
    """Yields ``arrived()``: whether ``topic`` (partition 0) has received a message since the
    block began, or past offset ``since`` when given (a watermark read before the producer
    was started: what it sent before the block counts too)."""
    reader = consumer(bootstrap, {"fetch.wait.max.ms": 2})
    tp = TopicPartition(topic, 0)
    start = high_watermark(bootstrap, topic) if since is None else since
    reader.assign([TopicPartition(topic, 0, start)])
    while reader.get_watermark_offsets(tp, cached=True)[1] < 0:  # connected, and fetching
        reader.consume(1, 0.05)
    try:
        yield lambda: any(m.error() is None for m in reader.consume(1, 0.002))
    finally:
        reader.close()


def high_watermark(bootstrap: str, topic: str, partition: int = 0) -> int:
    """How many messages ``topic`` holds, from a fetch (the embedded broker's ListOffsets
    answer does not match its log)."""
    reader = consumer(bootstrap, {"fetch.wait.max.ms": 50, "max.partition.fetch.bytes": 1024})
    try:
        tp = TopicPartition(topic, partition)
        reader.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        while (high := reader.get_watermark_offsets(tp, cached=True)[1]) < 0:
            reader.consume(1, 0.05)
        return int(high)
    finally:
        reader.close()


def read_all(bootstrap: str, topic: str, partition: int = 0, timeout: float = 60) -> list[Any]:
    """Every message of one partition, in order."""
    end = high_watermark(bootstrap, topic, partition)
    reader = consumer(bootstrap, {"max.partition.fetch.bytes": 8 * 1024 * 1024})
    try:
        reader.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(out) < end and time.monotonic() < deadline:
            out.extend(record_of(m) for m in reader.consume(500, 0.5) if m.error() is None)
        return out
    finally:
        reader.close()


def runs(messages: list[Any]) -> list[dict[str, Any]]:
    """The release topic cut into runs: each manifest with the records sent since the one
    before, and a last run without a manifest if the topic ends in records."""
    out: list[dict[str, Any]] = []
    records: list[Any] = []
    for msg in messages:
        meta = release_message(msg.key, msg.headers)
        if meta.kind == "record":
            records.append((meta, msg.value))
        else:
            out.append({"manifest": json.loads(msg.value), "records": records})
            records = []
    if records:
        out.append({"manifest": None, "records": records})
    return out


def complete_run(run: dict[str, Any]) -> list[bytes]:
    """The records a consumer takes for a manifest: the last ``count`` before it, which must
    carry its release id and the indices 0 to count - 1 in order."""
    manifest = run["manifest"]
    taken = run["records"][len(run["records"]) - manifest["count"]:]
    assert len(taken) == manifest["count"]
    assert [m.release_id for m, _ in taken] == [manifest["release_id"]] * len(taken)
    assert [m.index for m, _ in taken] == list(range(len(taken)))
    return [value for _, value in taken]


@pytest.fixture
def restartable(tmp_path: Path, broker: Any):
    """Makes :class:`Restartable` services (the schema above); stops them at the end."""
    yield from conftest.services(tmp_path, broker, Restartable, write_config)
