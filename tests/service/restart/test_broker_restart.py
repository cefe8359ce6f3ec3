"""The broker killed and started again mid-ingest: the service reconnects and releases every
response once.

The embedded broker keeps everything in memory, so its restart loses every topic, message and
committed offset, as a new cluster would. The test plays the platform: it recreates the topics
and sends every response again (an outbox replayed in full, since it cannot tell which ones the
service had stored), and the service recognises what it stored before by content identity.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import sqlite3
import threading
import time
import urllib.request

from confluent_kafka import Producer

from streamanon.service.broker import EmbeddedBroker, ensure_topics, free_port
from tests.service.conftest import ServiceProcess, write_config
from tests.service.kafka_helpers import produce, read_topic, release_kind, response
from tests.service.restart_helpers import helper_processes

N = 4000


def send_slowly(bootstrap: str, topic: str, messages: list[tuple[bytes, bytes]],
                stop: threading.Event, gate: threading.Event) -> None:
    """A platform sending in small bursts until it is stopped or its broker goes away; the
    second half waits for ``gate``, so that responses are still to come when the test kills
    the broker, however long the service's collector took to join its group (a cold, loaded
    machine once took so long that all 4,000 were stored in its first batches)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "message.timeout.ms": 2000, "retries": 0})
    try:
        for start in range(0, len(messages), 100):
            if start == len(messages) // 2:
                producer.flush(2)
                gate.wait(120)
            if stop.is_set():
                return
            for key, value in messages[start:start + 100]:
                producer.produce(topic, key=key, value=value)
            producer.flush(2)
            time.sleep(0.1)
    except Exception:  # the broker was killed under it
        return
    finally:  # what the dead broker did not take is dropped, never sent to the next one
        producer.purge()
        producer.flush(2)


def healthz(svc: ServiceProcess) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"{svc.http}/healthz", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_a_broker_restart_mid_ingest_loses_nothing_and_stores_nothing_twice(subprocesses, tmp_path):
    port = free_port()
    broker = EmbeddedBroker(port=port)
    broker.start()
    config, env = write_config(tmp_path, broker.bootstrap, k=5)
    # the restarted broker knows no producer id: as configuration.md says, no idempotence
    env["STREAMANON_KAFKA_IDEMPOTENT_PRODUCERS"] = "false"
    svc = ServiceProcess(config, env, tmp_path / "service.log")
    second: EmbeddedBroker | None = None
    try:
        svc.start()
        prefix = svc.prefix
        topic = f"{prefix}.wellbeing.responses"
        messages = [(f"R{i:06d}".encode(), response(i)) for i in range(N)]
        stop, second_half = threading.Event(), threading.Event()
        platform = threading.Thread(target=send_slowly,
                                    args=(broker.bootstrap, topic, messages, stop, second_half))
        platform.start()
        svc.wait_for("wellbeing", lambda s: s["stored"] >= N // 4, timeout=60,
                     what="ingest under way")
        second_half.set()
        # hold the ingest worker, so that batches are in flight when the broker dies: their
        # commits meet the dead broker, then the restarted one, which knows no member
        assert svc.proc is not None
        helpers = helper_processes(svc.proc.pid)
        for pid in helpers:
            os.kill(pid, signal.SIGSTOP)
        time.sleep(0.5)
        at_kill = svc.survey("wellbeing")["stored"]
        assert broker.process is not None
        broker.process.kill()  # SIGKILL: no goodbye to any client
        broker.process.wait()
        for pid in helpers:
            os.kill(pid, signal.SIGCONT)
        stop.set()
        second_half.set()
        platform.join(timeout=30)
        assert at_kill < N, "not mid-ingest: make the platform slower"

        time.sleep(2.0)  # the service meets the broker's absence
        second = EmbeddedBroker(port=port)
        second.start()
        ensure_topics(second.bootstrap, {topic: 2, f"{prefix}.wellbeing.deadletter": 2,
                                         f"{prefix}.wellbeing.release": 1,
                                         f"{prefix}.control": 1})
        produce(second.bootstrap, topic, messages, {"acks": "all"})  # the outbox, in full

        svc.wait_for("wellbeing", lambda s: s["stored"] == N and s["received"] >= N,
                     timeout=90, what="every response stored")
        code, _ = svc.post("/api/surveys/wellbeing/close")
        assert code == 202
        status = svc.wait_for("wellbeing", lambda s: s["state"] == "RELEASED", timeout=90,
                              what="release")
        assert status["release"]["n"] == N
        assert status["dead_lettered"] == {}  # nothing turned away, nothing dropped
        assert status["redelivered"] >= at_kill  # what it had stored, recognised

        records = read_topic(second.bootstrap, f"{prefix}.wellbeing.release",
                             until=lambda out: any(release_kind(r) == "manifest"
                                                   for r in out))
        tickets = collections.Counter(json.loads(r.value)["ticket"] for r in records
                                      if release_kind(r) == "record")
        assert tickets == collections.Counter(range(N))  # each response exactly once
        store = tmp_path / "store" / "streamanon.db"
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
            rows, respondents = db.execute(
                "SELECT COUNT(*), COUNT(DISTINCT rid_hash) FROM records "
                "WHERE survey = 'wellbeing'").fetchone()
        assert rows == respondents == N

        assert healthz(svc) == (200, "ok\n")
        assert svc.proc is not None and svc.proc.poll() is None
        log = svc.log.read_text()
        assert "the collector stopped" not in log
        assert "not committed" in log  # in-flight batches met the restart
    finally:
        svc.stop()
        for b in (broker, second):
            if b is not None:
                b.stop()
