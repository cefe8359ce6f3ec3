"""The fault suite: store and broker faults driven from outside the service, each checked for
every acknowledged response released exactly once.

    python -m simulations.faults                          # every scenario, 5,000 responses each
    python -m simulations.faults --n 2000 --scenarios a,d # a quick look at two

One ``streamanon serve`` process (started as an operator starts it) on a private PostgreSQL
server (``simulations/postgres.py``), reached through a TCP proxy that can cut the link
(``simulations/tcp_proxy.py``), and the embedded broker's binary started as a process of its
own, so that SIGKILL hits it. A librdkafka client (confluent-kafka) plays the platform: it
sends the responses, the signed control message, and reads the release topic back. Each
scenario has a survey of its own in the one service; its ``--n`` responses (a respondent id,
two float quasi-identifiers, a numbered ticket) are sent, then:

a  the store is stopped, a close is asked over HTTP: it must be answered 503 with Retry-After
   while the store is down; the store comes back and the client, waiting as Retry-After says,
   asks again until it is answered 202;
b  the store is stopped, the close is sent as a signed message on the control topic: it must
   not be committed while the store is down, and must be applied once it is back;
c  the PostgreSQL server is SIGKILLed (with its backends) while the release is being published
   (the service held with SIGSTOP when the first release record is on the topic), then started
   again;
d  the broker is SIGKILLed mid-ingest and a new, empty one started on the same address; the
   platform recreates its topics and sends every response again, as an outbox would, and
   de-duplication by identity must keep each once;
e  the broker is SIGKILLed mid-publish (as in c) and replaced by an empty one: the release
   topic is gone, and the service must still end with the complete release on the new broker;
f  the proxy stops forwarding to the store mid-ingest (nothing is closed, as in a network
   cut), then forwards again.

Each survey is then closed (a, b: by the command under test) and its release read back from
the release topic as a consumer takes it (the records before the last manifest) and from the
release file. Reported per scenario: responses sent (acknowledged by the broker), stored,
released, lost (sent and not released), duplicated (released more than once, on the topic or
in the file), and the time to recover: from the end of the fault (the store or the broker
back, the link restored) until the interrupted work went on (a: the close answered 202; b: the
close recorded; c, e: the release complete; d: every response stored; f: ingest storing
again). The exit status is 1 when a scenario lost or duplicated a response or did not release.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow.parquet as pq

from simulations.tcp_proxy import CuttableProxy
from streamanon.service.broker import EmbeddedBroker, ensure_topics, free_port
from streamanon.service.control import sign
from streamanon.service.publisher import release_message

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = {
    "a": "store down at close (HTTP)",
    "b": "store down at close (control topic)",
    "c": "store killed mid-publish",
    "d": "broker replaced mid-ingest",
    "e": "broker replaced mid-publish",
    "f": "network cut to the store mid-ingest",
}
OUTAGE_SECONDS = 1.5


class ScenarioFailed(Exception):
    """A scenario's expectation that did not hold (the message says which)."""


@dataclass
class Outcome:
    scenario: str
    sent: int = 0
    stored: int = 0
    released: int = 0
    lost: int = 0
    duplicated: int = 0
    recover: float | None = None
    failure: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.failure is None and self.lost == 0 and self.duplicated == 0


class _Quiet:
    def log(self, *args: Any) -> None:  # librdkafka's disconnect notices: the faults we made
        pass


_QUIET = _Quiet()


# -- the rig: one service, started as an operator starts it, and its HTTP API -----------------

SURVEY_SCHEMA = """
[surveys.schema]
respondent_id = { role = "identifier" }
x = { role = "quasi_identifier", type = "float" }
y = { role = "quasi_identifier", type = "float" }
ticket = { role = "confidential", type = "int" }
"""


@dataclass(kw_only=True)
class ServiceRig:
    """One ``streamanon serve`` process with a survey per scenario, in ``workdir``; the
    brokers and the store are the subclass's (:attr:`bootstrap`, :meth:`config_text`)."""

    workdir: Path
    surveys: list[str]
    prefix: str = field(default_factory=lambda: f"f{secrets.token_hex(3)}")
    port: int = field(default_factory=free_port)
    token: str = field(default_factory=lambda: secrets.token_hex(32))
    proc: subprocess.Popen | None = None

    @property
    def log(self) -> Path:
        return self.workdir / "service.log"

    @property
    def bootstrap(self) -> str:
        raise NotImplementedError

    def topic(self, sid: str, kind: str) -> str:
        return f"{self.prefix}.{sid}.{kind}"

    def log_tail(self, chars: int = 3000) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return text[-chars:]

    def surveys_text(self, engine: str = "mdav") -> str:
        return "".join(f"""
[[surveys]]
id = "{sid}"
close = "on-command"
k = 3
engine = "{engine}"
incremental = "nn_split_end"
""" + SURVEY_SCHEMA for sid in self.surveys)

    def store_url(self) -> str:
        raise NotImplementedError

    def kafka_extra(self) -> str:
        """More ``[kafka]`` lines of this rig's brokers."""
        return ""

    def config_text(self) -> str:
        return f"""
[kafka]
bootstrap_servers = "{self.bootstrap}"
topic_prefix = "{self.prefix}"
group_id = "{self.prefix}-collector"
partitions = 2
session_timeout_ms = 10000
{self.kafka_extra()}
[store]
url = "{self.store_url()}"

[output]
directory = "{self.workdir / 'out'}"

[http]
bind = "127.0.0.1:{self.port}"

[planner]
interval_seconds = 3600
calibration_seconds = 0.5
cost_models = "{self.workdir / 'models.json'}"
""" + self.surveys_text()

    def start_service(self, timeout: float = 120) -> None:
        config = self.workdir / "streamanon.toml"
        config.write_text(self.config_text())
        env = {**os.environ, "STREAMANON_HMAC_KEY": secrets.token_hex(32),
               "STREAMANON_HTTP_TOKEN": self.token,
               "STREAMANON_DATA_DIR": str(self.workdir / "data")}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "streamanon", "serve", "--config", str(config)],
                env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        wait_until(lambda: self.http_status() is not None, timeout, "the service to serve",
                   self)

    def http_status(self) -> dict | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/status",
                                        timeout=5) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop_service(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGCONT)  # a scenario that failed may have held it
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def survey_status(self, sid: str) -> dict[str, Any]:
        status = self.http_status()
        if status is None:
            raise ScenarioFailed("the service's /api/status did not answer")
        return next(s for s in status["surveys"] if s["id"] == sid)

    def stored(self, sid: str) -> int:
        """The survey's stored responses, as the service's status tells."""
        return int(self.survey_status(sid)["stored"])

    def state(self, sid: str) -> tuple[str, Any]:
        """The survey's state, and whether a close was asked, as the status tells."""
        status = self.survey_status(sid)
        return status["state"], status.get("close_requested_at") or (
            status["state"] in ("CLOSING", "RELEASED") or None)

    def post(self, path: str) -> tuple[int, dict[str, str]]:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method="POST",
                                     headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, dict(r.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers)


# -- this suite's rig: one PostgreSQL server, one proxy, one broker (replaced) -----------------

@dataclass(kw_only=True)
class Rig(ServiceRig):
    pg: Any  # simulations.postgres.PostgresServer
    proxy: CuttableProxy
    broker: EmbeddedBroker
    db: str = ""  # the database's URL, straight to the server (not through the proxy)

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def store_url(self) -> str:
        name = urlparse(self.db).path
        return f"postgresql://streamanon@127.0.0.1:{self.proxy.port}{name}"

    def kafka_extra(self) -> str:
        # the replaced broker is empty and knows no producer id: an idempotent producer's
        # sends would stall for their timeout (60 s, measured) before a new one took over
        return "idempotent_producers = false\n"

    # -- the store, read straight from the server --------------------------------------------
    def sql(self, query: str, *params: Any) -> list[tuple]:
        import psycopg

        with psycopg.connect(self.db, autocommit=True, connect_timeout=5) as conn:
            return conn.execute(query, params).fetchall()

    def stored(self, sid: str) -> int:
        return int(self.sql("SELECT COUNT(*) FROM records WHERE survey = %s", sid)[0][0])

    def state(self, sid: str) -> tuple[str, float | None]:
        rows = self.sql("SELECT state, close_requested_at FROM surveys WHERE id = %s", sid)
        return rows[0] if rows else ("", None)

    def kill_postgres(self) -> None:
        """SIGKILL the postmaster and every backend, as a machine's OOM killer or a crash
        would: the next start recovers from the write-ahead log."""
        data = Path(self.pg.pg_ctl[self.pg.pg_ctl.index("-D") + 1])
        postmaster = int((data / "postmaster.pid").read_text().split()[0])
        os.kill(postmaster, signal.SIGSTOP)  # no new backend between the listing and the kill
        pids = [postmaster, *children(postmaster)]
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in pids:  # gone before it starts again on the same data
            while Path(f"/proc/{pid}").exists() and zombie_or_alive(pid):
                time.sleep(0.01)

    def start_postgres(self, timeout: float = 30) -> None:
        """Start the server again (same data, same port); a start refused while the killed
        server's processes are still being reaped is tried again."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.pg.start()
                return
            except subprocess.CalledProcessError as exc:
                if time.monotonic() > deadline:
                    log = Path(self.pg.start_options[self.pg.start_options.index("-l") + 1])
                    raise ScenarioFailed(
                        f"PostgreSQL did not start again: {exc.stderr or exc.stdout}; its log "
                        f"ends: {log.read_text(errors='replace')[-1500:]}") from None
                time.sleep(0.5)

    # -- the broker ----------------------------------------------------------------------------
    def kill_broker(self) -> None:
        """SIGKILL the broker: its topics, messages and groups are gone with it (memory)."""
        if self.broker.process is not None:
            self.broker.process.kill()
            self.broker.process.wait()
            self.broker.process = None

    def new_broker(self) -> None:
        """A new, empty broker on the killed one's address."""
        self.broker = EmbeddedBroker(port=self.broker.port)
        self.broker.start()

    def platform_topics(self) -> None:
        """The responses topics and the control topic, as the platform (or whoever set the
        cluster up) makes them; the release and dead-letter topics are the service's."""
        ensure_topics(self.bootstrap, {self.topic(s, "responses"): 2 for s in self.surveys}
                      | {f"{self.prefix}.control": 1})


def children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with suppress(OSError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


def zombie_or_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_until(condition: Callable[[], Any], timeout: float, what: str, rig: ServiceRig,
               step: float = 0.05) -> Any:
    """``condition()`` once it is true; ScenarioFailed after ``timeout`` seconds, or at once
    when the service has exited."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = condition()
        except Exception:
            value = None
        if value:
            return value
        if rig.proc is not None and rig.proc.poll() is not None:
            raise ScenarioFailed(f"the service exited (code {rig.proc.returncode}) while "
                                 f"waiting for {what}")
        if time.monotonic() > deadline:
            raise ScenarioFailed(f"no {what} within {timeout:.0f} s")
        time.sleep(step)


# -- the platform: sending, and reading the release back -------------------------------------

def responses(sid: str, n: int) -> list[tuple[bytes, bytes]]:
    out = []
    for i in range(n):
        rid = f"{sid}-{i:07d}"
        body = {"respondent_id": rid, "x": (i * 7919 % 1000) / 10.0,
                "y": (i * 104729 % 997) / 7.0, "ticket": i}
        out.append((rid.encode(), json.dumps(body).encode()))
    return out


def producer(bootstrap: str, timeout_ms: int = 30_000, idempotent: bool = False) -> Any:
    """The platform's producer (``idempotent``: a send retried after a leader change is
    written once, as a replicated cluster allows; a replaced in-memory broker would not know
    the producer)."""
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                     "message.timeout.ms": timeout_ms, "enable.idempotence": idempotent,
                     "logger": _QUIET})


def send(bootstrap: str, topic: str, messages: list[tuple[bytes, bytes]],
         idempotent: bool = False) -> set[bytes]:
    """Every message, produced and flushed; the keys the broker acknowledged."""
    acked: set[bytes] = set()

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked.add(msg.key())

    p = producer(bootstrap, idempotent=idempotent)
    for key, value in messages:
        p.produce(topic, value, key=key, on_delivery=delivered)
        p.poll(0)
    p.flush(60)
    return acked


class SlowSender(threading.Thread):
    """The platform sending in bursts (a tenth of the responses every 0.2 s) until all are
    sent or it is stopped; ``acked`` holds what the broker acknowledged.

    With ``hold_after``, the responses after the first ``hold_after`` wait for ``go``: a
    scenario that makes its fault mid-ingest sets it once the fault is on, so however fast the
    service stores, some responses are still to come (without the hold, a service that took
    all of them in one batch left nothing mid-ingest)."""

    def __init__(self, bootstrap: str, topic: str, messages: list[tuple[bytes, bytes]],
                 hold_after: int | None = None, *, timeout_ms: int = 5_000,
                 idempotent: bool = False, pause: float = 0.2) -> None:
        super().__init__(daemon=True)
        if hold_after is not None and not 0 < hold_after < len(messages):
            raise ValueError(f"hold_after must leave responses on both sides: {hold_after} of "
                             f"{len(messages)}")
        self.bootstrap, self.topic, self.messages = bootstrap, topic, messages
        self.hold_after = hold_after
        self.timeout_ms, self.idempotent, self.pause = timeout_ms, idempotent, pause
        self.acked: set[bytes] = set()
        self.halt = threading.Event()
        self.go = threading.Event()

    def run(self) -> None:
        p = producer(self.bootstrap, timeout_ms=self.timeout_ms, idempotent=self.idempotent)

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                self.acked.add(msg.key())

        burst = max(1, len(self.messages) // 10)
        starts = list(range(0, len(self.messages), burst))
        if self.hold_after is not None:  # a burst boundary at the hold
            starts = sorted({*starts, self.hold_after})
        for start, end in zip(starts, [*starts[1:], len(self.messages)], strict=True):
            if self.hold_after is not None and start == self.hold_after:
                while not self.go.wait(0.1) and not self.halt.is_set():
                    p.poll(0)
            if self.halt.is_set():
                break
            for key, value in self.messages[start:end]:
                p.produce(self.topic, value, key=key, on_delivery=delivered)
            p.poll(0)
            self.halt.wait(self.pause)
        if self.halt.is_set():
            p.purge()
        p.flush(self.timeout_ms / 1000 + 5)


def read_topic(bootstrap: str, topic: str, timeout: float = 30) -> list[Any]:
    """Every message of partition 0 of ``topic``, in order."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{secrets.token_hex(4)}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "logger": _QUIET})
    try:
        _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(out) < high and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                out.append(msg)
        return out
    finally:
        c.close()


def taken_release(messages: list[Any]) -> list[int]:
    """The tickets of the release a consumer takes: the ``count`` records before the last
    manifest, which must carry its release id and the indices 0 to count - 1."""
    metas = [release_message(m.key(), m.headers()) for m in messages]
    kinds = [None if meta is None else meta.kind for meta in metas]
    last = max((i for i, kind in enumerate(kinds) if kind == "manifest"), default=None)
    if last is None:
        raise ScenarioFailed(f"the release topic holds no manifest ({len(messages)} messages)")
    manifest = json.loads(messages[last].value())
    count = int(manifest["count"])
    run = list(range(last - count, last))
    if (run[:1] and run[0] < 0) or any(kinds[i] != "record" for i in run):
        raise ScenarioFailed(f"the manifest counts {count} records; fewer precede it")
    if [metas[i].release_id for i in run] != [manifest["release_id"]] * count \
            or [metas[i].index for i in run] != list(range(count)):
        raise ScenarioFailed("the records before the manifest are not its release, in order")
    return [int(json.loads(messages[i].value())["ticket"]) for i in run]


def release_partitions(rig: ServiceRig, sid: str) -> int:
    from confluent_kafka.admin import AdminClient

    topic = rig.topic(sid, "release")
    meta = AdminClient({"bootstrap.servers": rig.bootstrap, "logger": _QUIET}).list_topics(
        topic, timeout=10)
    return len(meta.topics[topic].partitions)


def check_release(rig: ServiceRig, sid: str, sent: set[bytes], out: Outcome) -> None:
    """Read the survey's release back (topic and file) and count."""
    out.stored = rig.stored(sid)
    partitions = release_partitions(rig, sid)
    if partitions != 1:  # one partition keeps a release in order, its manifest last
        raise ScenarioFailed(f"the release topic has {partitions} partitions, not 1")
    tickets = taken_release(read_topic(rig.bootstrap, rig.topic(sid, "release")))
    files = sorted((rig.workdir / "out" / sid).glob("release*.parquet"))
    if not files:
        raise ScenarioFailed("no release file written")
    in_file = [int(t) for t in pq.read_table(files[-1], columns=["ticket"])["ticket"].to_pylist()]
    if sorted(in_file) != sorted(tickets):
        raise ScenarioFailed("the release file and the release topic differ")
    sent_tickets = {int(k.decode().rsplit("-", 1)[1]) for k in sent}
    counts = collections.Counter(tickets)
    out.sent = len(sent_tickets)
    out.released = len(tickets)
    out.duplicated = sum(c - 1 for c in counts.values())
    out.lost = len(sent_tickets - set(counts))


def wait_released(rig: ServiceRig, sid: str, timeout: float = 120) -> float:
    """Wait for the survey's state RELEASED in the store; when it was seen."""
    wait_until(lambda: rig.state(sid)[0] == "RELEASED", timeout, f"survey {sid} released",
               rig)
    return time.monotonic()


def ingest(rig: ServiceRig, sid: str, n: int) -> set[bytes]:
    """Send the survey's responses and wait until the service stored them all."""
    acked = send(rig.bootstrap, rig.topic(sid, "responses"), responses(sid, n))
    if len(acked) != n:
        raise ScenarioFailed(f"the broker acknowledged {len(acked)} of {n} responses")
    wait_until(lambda: rig.stored(sid) >= n, 60, f"{n} responses of {sid} stored", rig)
    return acked


def close_over_http(rig: ServiceRig, sid: str) -> None:
    code, _ = rig.post(f"/api/surveys/{sid}/close")
    if code != 202:
        raise ScenarioFailed(f"the close was answered {code}, not 202")


def release_on_topic(rig: ServiceRig, sid: str) -> int:
    """How many messages the survey's release topic holds (0 when it does not exist)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    c = Consumer({"bootstrap.servers": rig.bootstrap, "group.id": f"w-{secrets.token_hex(4)}",
                  "logger": _QUIET})
    try:
        return int(c.get_watermark_offsets(TopicPartition(rig.topic(sid, "release"), 0),
                                           timeout=5, cached=False)[1])
    except KafkaException:
        return 0
    finally:
        c.close()


@contextmanager
def held_mid_publish(rig: ServiceRig, sid: str, n: int) -> Iterator[int]:
    """Let the service run in steps of 2 ms (SIGSTOP, SIGCONT) until its release topic holds
    part of the release (some records, not the manifest: n + 1 messages), then hold it for
    the block; yields how many release messages were on the topic then. The service goes on
    (SIGCONT) after the block."""
    assert rig.proc is not None
    deadline = time.monotonic() + 120
    rig.proc.send_signal(signal.SIGSTOP)
    try:
        while (on_topic := release_on_topic(rig, sid)) == 0:
            if time.monotonic() > deadline:
                raise ScenarioFailed(f"no record of {sid}'s release on the topic in 120 s")
            rig.proc.send_signal(signal.SIGCONT)
            time.sleep(0.002)
            rig.proc.send_signal(signal.SIGSTOP)
        yield on_topic
    finally:
        rig.proc.send_signal(signal.SIGCONT)


# -- the scenarios ---------------------------------------------------------------------------

def store_down_close_http(rig: Rig, sid: str, n: int, out: Outcome) -> set[bytes]:
    sent = ingest(rig, sid, n)
    rig.pg.stop()
    code, headers = rig.post(f"/api/surveys/{sid}/close")
    retry_after = headers.get("Retry-After")
    if code != 503 or not retry_after:
        rig.pg.start()
        raise ScenarioFailed(f"a close while the store is down was answered {code} "
                             f"(Retry-After {retry_after!r}), not 503 with Retry-After")
    rig.pg.start()
    back = time.monotonic()
    answers = [code]
    while code != 202:  # the client does as Retry-After says
        time.sleep(float(retry_after or 1))
        code, headers = rig.post(f"/api/surveys/{sid}/close")
        answers.append(code)
        retry_after = headers.get("Retry-After")
        if code not in (202, 503) or time.monotonic() - back > 60:
            raise ScenarioFailed(f"the close was answered {answers} after the store came back")
    out.recover = time.monotonic() - back
    out.notes.append(f"close answered {answers}")
    wait_released(rig, sid)
    return sent


def control_committed(rig: Rig) -> int:
    """The collector group's committed offset on the control topic (-1001: none)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": rig.bootstrap, "group.id": f"{rig.prefix}-collector",
                  "enable.auto.commit": False, "logger": _QUIET})
    try:
        (tp,) = c.committed([TopicPartition(f"{rig.prefix}.control", 0)], timeout=10)
        return int(tp.offset)
    finally:
        c.close()


def store_down_close_control(rig: Rig, sid: str, n: int, out: Outcome) -> set[bytes]:
    sent = ingest(rig, sid, n)
    rig.pg.stop()
    offsets: list[int] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            offsets.append(msg.offset())

    p = producer(rig.bootstrap)
    p.produce(f"{rig.prefix}.control", sign("close", sid, rig.token), on_delivery=delivered)
    p.flush(30)
    if not offsets:
        rig.pg.start()
        raise ScenarioFailed("the broker did not acknowledge the control message")
    time.sleep(OUTAGE_SECONDS + 1)  # the service has read it, and the store is still down
    committed = control_committed(rig)
    rig.pg.start()
    back = time.monotonic()
    if committed > offsets[0]:
        raise ScenarioFailed(f"the control message (offset {offsets[0]}) was committed "
                             f"(to {committed}) while the store was down")
    wait_until(lambda: rig.state(sid)[1] is not None, 120, "the close recorded", rig)
    out.recover = time.monotonic() - back
    wait_released(rig, sid)
    wait_until(lambda: control_committed(rig) > offsets[0], 60,
               "the control message committed once applied", rig, step=0.5)
    return sent


def killed_mid_publish(rig: Rig, sid: str, n: int, out: Outcome,
                       kill: Callable[[], None]) -> set[bytes]:
    """``n`` responses in, the close, then ``kill`` (the store or the broker) while part of the
    release is on the topic, and the outage; the responses sent."""
    sent = ingest(rig, sid, n)
    close_over_http(rig, sid)
    with held_mid_publish(rig, sid, n) as on_topic:
        if rig.state(sid)[0] == "RELEASED":
            raise ScenarioFailed("the release was recorded before the kill: not mid-publish")
        kill()
    out.notes.append(f"killed with {on_topic} of {n + 1} release messages on the topic")
    time.sleep(OUTAGE_SECONDS)
    return sent


def store_killed_mid_publish(rig: Rig, sid: str, n: int, out: Outcome) -> set[bytes]:
    sent = killed_mid_publish(rig, sid, n, out, rig.kill_postgres)
    rig.start_postgres()
    back = time.monotonic()
    out.recover = wait_released(rig, sid) - back
    return sent


def first_half_stored(rig: ServiceRig, sid: str, messages: list[tuple[bytes, bytes]],
                      **options: Any) -> SlowSender:
    """The sender started with the second half held (until its ``go``), once a quarter of
    the responses is stored; stopped if that does not come. ``options``: more of
    :class:`SlowSender`'s."""
    n = len(messages)
    sender = SlowSender(rig.bootstrap, rig.topic(sid, "responses"), messages, hold_after=n // 2,
                        **options)
    sender.start()
    try:
        wait_until(lambda: rig.stored(sid) >= n // 4, 60, "a quarter of the responses stored",
                   rig)
    except BaseException:
        sender.halt.set()  # not left waiting at the hold
        raise
    return sender


def broker_replaced_mid_ingest(rig: ServiceRig, sid: str, n: int, out: Outcome) -> set[bytes]:
    messages = responses(sid, n)
    sender = first_half_stored(rig, sid, messages)
    at_kill = rig.stored(sid)
    sender.go.set()  # the second half is being sent when the broker dies
    rig.kill_broker()
    sender.halt.set()
    sender.join(30)
    time.sleep(OUTAGE_SECONDS)
    rig.new_broker()
    if at_kill >= n:
        raise ScenarioFailed("every response was stored before the kill: not mid-ingest")
    out.notes.append(f"{at_kill} of {n} stored at the kill, {len(sender.acked)} acknowledged")
    back = time.monotonic()
    rig.platform_topics()
    sent = send(rig.bootstrap, rig.topic(sid, "responses"), messages)  # the outbox, in full
    if len(sent) != n:
        raise ScenarioFailed(f"the new broker acknowledged {len(sent)} of {n} responses")
    wait_until(lambda: rig.stored(sid) >= n, 120, f"{n} responses stored after the replacement",
               rig)
    out.recover = time.monotonic() - back
    close_over_http(rig, sid)
    wait_released(rig, sid)
    return sent


def broker_replaced_mid_publish(rig: Rig, sid: str, n: int, out: Outcome) -> set[bytes]:
    rig.platform_topics()  # a broker replaced by an earlier scenario lost them
    sent = killed_mid_publish(rig, sid, n, out, rig.kill_broker)
    rig.new_broker()
    back = time.monotonic()
    rig.platform_topics()
    out.recover = wait_released(rig, sid, timeout=180) - back
    return sent


def network_cut_mid_ingest(rig: ServiceRig, sid: str, n: int, out: Outcome) -> set[bytes]:
    sender = first_half_stored(rig, sid, responses(sid, n))
    rig.proxy.cut()
    sender.go.set()  # the second half arrives while the store is out of reach
    time.sleep(OUTAGE_SECONDS)
    held = rig.stored(sid)
    rig.proxy.resume()
    back = time.monotonic()
    out.notes.append(f"{held} of {n} stored during the cut")
    if held >= n:
        raise ScenarioFailed("every response was stored before the cut: not mid-ingest")
    wait_until(lambda: rig.stored(sid) > held, 60, "ingest storing again after the cut", rig)
    out.recover = time.monotonic() - back
    sender.join(60)
    if len(sender.acked) != n:
        raise ScenarioFailed(f"the broker acknowledged {len(sender.acked)} of {n} responses")
    wait_until(lambda: rig.stored(sid) >= n, 60, f"{n} responses stored", rig)
    close_over_http(rig, sid)
    wait_released(rig, sid)
    return sender.acked


RUN: dict[str, Callable[[Rig, str, int, Outcome], set[bytes]]] = {
    "a": store_down_close_http, "b": store_down_close_control, "c": store_killed_mid_publish,
    "d": broker_replaced_mid_ingest, "e": broker_replaced_mid_publish,
    "f": network_cut_mid_ingest,
}


def run_scenario(rig: Rig, letter: str, n: int) -> Outcome:
    out = Outcome(f"{letter}: {SCENARIOS[letter]}")
    sid = letter
    log_start = rig.log.stat().st_size if rig.log.exists() else 0
    try:
        if not rig.alive():
            out.failure = "the service was not running at the start"
        else:
            checked(rig, RUN[letter], sid, n, out)
    finally:
        if rig.proc is not None and rig.proc.poll() is None:
            rig.proc.send_signal(signal.SIGCONT)
        rig.proxy.resume()
        with suppress(Exception):
            if not rig.pg.running():
                rig.start_postgres()
    return settled(rig, out, log_start)


def checked(rig: Any, scenario: Callable[..., set[bytes]], sid: str, n: int,
            out: Outcome) -> None:
    """Run ``scenario`` on survey ``sid`` and count its release into ``out``; whatever it
    raises is the scenario's failure (``out.failure``)."""
    try:
        sent = scenario(rig, sid, n, out)
        check_release(rig, sid, sent, out)
    except ScenarioFailed as exc:
        out.failure = str(exc)
    except Exception as exc:
        out.failure = f"{type(exc).__name__}: {exc}"


def settled(rig: ServiceRig, out: Outcome, log_start: int) -> Outcome:
    """``out`` failed also when it lost or duplicated a response; a failure prints the
    service's log since ``log_start`` (its last 3,000 characters) to stderr."""
    if out.failure is None and (out.lost or out.duplicated):
        out.failure = f"{out.lost} lost, {out.duplicated} duplicated"
    if out.failure is not None:
        with open(rig.log, "rb") as fh:
            fh.seek(log_start)
            tail = fh.read().decode(errors="replace")[-3000:]
        print(f"\nscenario {out.scenario} FAILED: {out.failure}\n"
              f"the service's log during it (last 3,000 characters):\n{tail}\n",
              file=sys.stderr)
    return out


def table(outcomes: list[Outcome]) -> str:
    head = ["scenario", "sent", "stored", "released", "lost", "duplicated",
            "time to recover (s)"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for o in outcomes:
        recover = "failed" if o.failure else f"{o.recover:.1f}"
        lines.append(f"| {o.scenario} | {o.sent:,} | {o.stored:,} | {o.released:,} | "
                     f"{o.lost:,} | {o.duplicated:,} | {recover} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m simulations.faults", description=__doc__.splitlines()[0],
        epilog=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=5000,
                        help="responses per scenario (default 5000; at least 100)")
    parser.add_argument("--log", type=Path, default=None,
                        help="copy the service's log to this file at the end")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help="the scenarios to run, comma-separated letters "
                             f"(default {','.join(SCENARIOS)})")
    args = parser.parse_args(argv)
    letters = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = [s for s in letters if s not in SCENARIOS]
    if unknown or not letters:
        parser.error(f"--scenarios: unknown {unknown or 'none given'}; letters of "
                     f"{','.join(SCENARIOS)}")
    if args.n < 100:
        parser.error("--n: at least 100 responses per scenario")
    args.scenarios = list(dict.fromkeys(letters))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from simulations.postgres import controlled_postgres_server, why_unavailable

    if why_unavailable():
        print(f"error: the fault suite needs PostgreSQL: {why_unavailable()}", file=sys.stderr)
        return 2
    outcomes = []
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="faults-") as tmp:
        pg = stack.enter_context(controlled_postgres_server())
        proxy = stack.enter_context(CuttableProxy(urlparse(pg.url).port or 5432))
        broker = EmbeddedBroker()
        broker.start()
        rig = Rig(pg=pg, proxy=proxy, broker=broker, workdir=Path(tmp),
                  surveys=args.scenarios)
        stack.callback(lambda: rig.broker.stop())
        stack.callback(rig.stop_service)
        import psycopg

        name = f"faults_{secrets.token_hex(4)}"
        with psycopg.connect(pg.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        rig.db = urlparse(pg.url)._replace(path=f"/{name}").geturl()
        started = time.monotonic()
        rig.start_service()
        print(f"set up and service started in {time.monotonic() - started:.1f} s",
              file=sys.stderr)
        for letter in args.scenarios:
            if not rig.alive():  # a scenario killed it: the next ones get a fresh start
                rig.start_service()
            started = time.monotonic()
            outcomes.append(run_scenario(rig, letter, args.n))
            print(f"{outcomes[-1].scenario}: {'ok' if outcomes[-1].ok else 'FAILED'} "
                  f"in {time.monotonic() - started:.1f} s "
                  f"({'; '.join(outcomes[-1].notes)})", file=sys.stderr)
        rig.stop_service()
        if args.log is not None:
            shutil.copyfile(rig.log, args.log)
    print(f"Fault suite: {args.n:,} responses per scenario, one service, "
          f"{os.cpu_count()} cores:\n")
    print(table(outcomes))
    failed = [o for o in outcomes if not o.ok]
    for o in failed:
        print(f"\n{o.scenario}: {o.failure}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
