"""Several service instances on one PostgreSQL store: each collects, one runs the lifecycle.

The lease (streamanon.service.leadership) against a private PostgreSQL server, then two
``streamanon serve`` processes on that server and the embedded broker: both ingest, the leader
is SIGKILLed mid-survey, the follower takes the lease over and the survey is released exactly once
with every response. A follower's part in a close (its own closure, acknowledged before the
leader takes the marks) is tested with the real lease and a stand-in service.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from types import SimpleNamespace

import psycopg
import pytest

from simulations.postgres import controlled_postgres_server, why_unavailable
from streamanon.service.leadership import Coordination, Coordinator, lease_key, single_instance
from streamanon.service.store import StoreError, open_store
from streamanon.service.validation import Closure
from tests.service import conftest
from tests.service.conftest import REPO, ServiceProcess
from tests.service.kafka_helpers import (
    produce,
    read_release,
    read_topic,
    release_kind,
    response,
)
from tests.service.lifecycle_helpers import one_survey
from tests.service.restart_helpers import helper_processes
from tests.service.store.test_store import rows

_PG_REASON = why_unavailable()
HANG_GUARD = 30.0  # seconds: only to catch a wait that never ends, never a speed check
KEY = lease_key("test-group")


@pytest.fixture(scope="module")
def pg_server():
    if _PG_REASON:  # `make test` installs Debian's postgresql; never skip these silently
        pytest.fail(f"PostgreSQL tests cannot run: {_PG_REASON}")
    with controlled_postgres_server() as pg:
        open_store(pg.url).close()  # the store's tables, for the snapshot test
        # and the lease's, so that a test may empty them whichever test ran first (with
        # pytest-xdist a module's tests are spread over workers, each with its own server)
        coordination(pg, "setup").close()
        yield pg


def coordination(pg_server, name: str) -> Coordination:
    return Coordination(pg_server.url, name, key=KEY, http=f"127.0.0.1:{len(name)}")


def until(predicate, what: str, timeout: float = HANG_GUARD):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError(what)


# -- the lease -----------------------------------------------------------------------------------


def test_one_instance_holds_the_lease_until_it_lets_go(pg_server):
    a, b = coordination(pg_server, "a"), coordination(pg_server, "b")
    try:
        assert a.acquire() and a.holds()
        assert not b.acquire() and not b.holds()
        assert a.acquire()  # asking again keeps it
        a.release()
        assert b.acquire() and not a.acquire()
    finally:
        a.close()
        b.close()


def test_the_lease_of_a_killed_holder_is_taken_over(pg_server):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from streamanon.service.leadership import Coordination
        c = Coordination({pg_server.url!r}, "doomed", key={KEY})
        assert c.acquire()
        print("held", flush=True)
        time.sleep(600)
        """)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    b = coordination(pg_server, "b")
    try:
        assert holder.stdout.readline().strip() == "held"
        assert not b.acquire()
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        until(b.acquire, "the lease of a killed holder was not freed")
    finally:
        holder.kill()
        b.close()


def test_a_holder_whose_session_is_cut_knows_it_lost_the_lease(pg_server):
    a, b = coordination(pg_server, "a"), coordination(pg_server, "b")
    try:
        assert a.acquire()
        pg_server.terminate_backends()  # an administrator, a failover, a network cut
        assert not a.holds()
        assert b.acquire()
        assert not a.acquire()  # a new session of its own, but the lease is b's now
    finally:
        a.close()
        b.close()


def test_instances_hand_requests_and_closures_to_the_leader(pg_server):
    a, b = coordination(pg_server, "a"), coordination(pg_server, "b")
    try:
        a.heartbeat("leader")
        b.heartbeat("follower")
        live = a.live()
        assert live["a"] == ("leader", a.http) and live["b"] == ("follower", b.http)
        b.request("s", "start_base")
        b.request("t", "start_base")
        assert a.take_requests() == [("s", "start_base"), ("t", "start_base")]
        assert a.take_requests() == []
        b.ack_closure("s", 12.5)
        assert a.acked("s", 12.5) == {"b"} and a.acked("s", 13.0) == set()
        b.leave()
        assert "b" not in a.live()
        assert "a" not in a.live(stale_seconds=0.0)  # silent for longer than that: dead
    finally:
        a.close()
        b.close()


def test_the_base_snapshot_waits_for_inserts_in_flight(pg_server):
    """Two instances insert concurrently, so seq order need not be commit order: the snapshot
    takes a cut below which every record is committed."""
    store, other = open_store(pg_server.url), open_store(pg_server.url)
    c = coordination(pg_server, "leader")
    try:
        store.ensure_survey("snap")
        store.insert_records("snap", rows(5))
        inserted, finish = threading.Event(), threading.Event()

        def slow_transaction() -> None:
            with other.transaction():
                other.insert_records("snap", rows(8)[5:])
                inserted.set()
                finish.wait(HANG_GUARD)

        writer = threading.Thread(target=slow_transaction)
        writer.start()
        inserted.wait(HANG_GUARD)
        result: list[int] = []
        cut = threading.Thread(target=lambda: result.append(c.snapshot_seq("snap")))
        cut.start()
        cut.join(0.5)
        assert cut.is_alive()  # held back by the open insert transaction
        finish.set()
        writer.join()
        cut.join(HANG_GUARD)
        assert result == [store.max_seq("snap")]
        assert store.count("snap") == 8
    finally:
        c.close()
        store.close()
        other.close()


def test_records_are_stored_once_whichever_instance_reads_them(pg_server):
    a, b = open_store(pg_server.url), open_store(pg_server.url)
    try:
        a.ensure_survey("dedup")
        assert a.insert_records("dedup", rows(10)) == 10
        assert b.insert_records("dedup", rows(12)) == 2  # the first ten are known
        assert a.count("dedup") == 12
    finally:
        a.close()
        b.close()


def test_the_leader_counts_the_records_above_a_seq(pg_server):
    store = open_store(pg_server.url)
    c = coordination(pg_server, "counter")
    try:
        store.ensure_survey("tally")
        store.ensure_survey("other")
        store.insert_records("other", rows(4))
        store.insert_records("tally", rows(10))
        top = store.max_seq("tally")
        assert c.count_after("tally", 0, 0) == (0, 10, top)
        assert c.count_after("tally", 0, top - 3) == (7, 10, top)
        assert c.count_after("tally", top - 3, top) == (3, 3, top)
        assert c.count_after("tally", top, top) == (0, 0, top)  # nothing above: the seq given
    finally:
        c.close()
        store.close()


class StandIn:
    """A :class:`~streamanon.service.leadership.LeaderHost` for one survey ``s`` whose stored
    state the test sets in ``self.state``."""

    def __init__(self) -> None:
        self.state = {"state": "OPEN", "close": None, "marks": None}
        self.survey = one_survey()  # a survey of the service, not attached to one
        self.surveys = {"s": self.survey}
        self.calls: list[tuple[str, str]] = []

    async def take_closure(self, sid, closed_at):
        marks = {0: 7, 1: 9}  # the end offsets now
        self.survey.ingest.close_at_marks(Closure(closed_at, marks))
        return marks

    async def survey_state(self, sid):
        return SimpleNamespace(state=self.state["state"],
                               close_requested_at=self.state["close"])

    async def close_marks(self, sid):
        return self.state["marks"]

    async def close(self, sid):
        self.calls.append(("close", sid))

    async def start_base(self, sid, plan):
        self.calls.append(("start_base", sid))

    def observe_shared(self, sid, n):
        self.calls.append(("observed", n))

    async def take_over(self):
        self.calls.append(("take_over", ""))

    async def step_down(self):
        self.calls.append(("step_down", ""))


def test_a_follower_closes_before_the_leader_takes_the_marks(pg_server):
    pg_rows(pg_server.url, "DELETE FROM service_instances")
    lead, follow = StandIn(), StandIn()
    leader = Coordinator(lead, coordination(pg_server, "leader"))
    follower = Coordinator(follow, coordination(pg_server, "follower"))

    async def run() -> None:
        await leader.step()
        await follower.step()
        assert leader.leading and not follower.leading
        assert lead.calls == [("take_over", "")]
        assert follower.describe()["leader"] == {"name": "leader", "http": leader.coordination.http}
        lead.state["close"] = follow.state["close"] = 100.0  # a close, stored
        waiting = asyncio.create_task(leader.followers_closed("s", 100.0))
        await asyncio.sleep(0.5)
        assert not waiting.done()  # the follower still stores unjudged responses
        await follower.step()
        assert follow.survey.ingest.closure == Closure(100.0, {0: 7, 1: 9})  # its own end offsets
        await asyncio.wait_for(waiting, HANG_GUARD)
        follow.state["marks"] = {0: 8, 1: 9}  # the leader's, stored
        await follower.step()
        assert follow.survey.ingest.closure == Closure(100.0, {0: 8, 1: 9})
        follow.state["state"] = "RELEASED"
        await follower.step()
        assert follow.survey.ingest.closure.final and follow.survey.closed_event.is_set()

    try:
        asyncio.run(run())
    finally:
        leader.coordination.close()
        follower.coordination.close()


def test_the_leader_carries_out_what_reached_a_follower(pg_server):
    pg_rows(pg_server.url, "DELETE FROM service_instances")
    lead, follow = StandIn(), StandIn()
    leader = Coordinator(lead, coordination(pg_server, "leader"))
    follower = Coordinator(follow, coordination(pg_server, "follower"))

    async def run() -> None:
        await leader.step()
        await follower.step()
        follower.coordination.request("s", "start_base")  # a control message it consumed
        lead.state["close"] = 100.0  # a close it stored (HTTP or control message)
        await leader.step()
        await leader.step()
        assert lead.calls == [("take_over", ""), ("start_base", "s"), ("close", "s")]

    try:
        asyncio.run(run())
    finally:
        leader.coordination.close()
        follower.coordination.close()


def test_a_sqlite_store_takes_one_instance(tmp_path):
    path = tmp_path / "streamanon.db"
    first = single_instance(path)
    with pytest.raises(StoreError, match="several collectors share a PostgreSQL store"):
        single_instance(path)
    first.close()
    single_instance(path).close()


# -- two service processes -----------------------------------------------------------------------


class Instance(ServiceProcess):
    def launch(self) -> None:
        """Start the process; :meth:`ready` waits for its HTTP server (the instances join the
        group together: one rebalance, not one per instance)."""
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "streamanon", "serve", "--config", str(self.config)],
                env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)

    def ready(self, timeout: float = 120) -> Instance:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"service exited: {self.log.read_text()[-3000:]}")
            with contextlib.suppress(OSError):
                self.status()
                return self
            time.sleep(0.2)
        raise TimeoutError(f"service did not start: {self.log.read_text()[-3000:]}")

    def role(self) -> dict:
        return self.status()["instance"]

    def post(self, path: str, token: str | None = None) -> tuple[int, dict]:
        req = urllib.request.Request(f"{self.http}{path}", method="POST", headers={
            "Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")

    def kill(self) -> None:
        """SIGKILL the service and its helper processes (ingest worker, compute process)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        helpers = helper_processes(self.proc.pid)
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        for pid in helpers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def pg_rows(url: str, sql: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


def test_two_instances_collect_and_the_survivor_releases_once(pg_server, broker, tmp_path):
    config, env = conftest.write_config(tmp_path, broker.bootstrap, survey="s", k=5)
    text = config.read_text()
    text = text.replace(f'url = "sqlite:///{tmp_path / "store" / "streamanon.db"}"',
                        f'url = "{pg_server.url}"')
    assert pg_server.url in text
    bind = text.split('bind = "')[1].split('"')[0]
    made: list[Instance] = []

    def instance(name: str) -> Instance:
        path = tmp_path / f"{name}.toml"
        path.write_text(text.replace(bind, f"127.0.0.1:{conftest.free_port()}"))
        svc = Instance(path, env, tmp_path / f"{name}.log")
        made.append(svc)
        return svc

    first, second = instance("a"), instance("b")
    topic = f"{first.prefix}.s.responses"
    count = lambda: pg_rows(pg_server.url, "SELECT COUNT(*) FROM records WHERE survey = 's'")[0][0]  # noqa: E731
    try:
        first.launch()
        second.launch()
        first.ready(), second.ready()
        a, b = (first, second) if first.role()["role"] == "leader" else (second, first)
        assert a.role()["role"] == "leader"
        until(lambda: b.role()["instances"] == 2, "the instances did not see each other")
        assert b.role() == {"name": b.role()["name"], "role": "follower", "instances": 2,
                            "leader": a.role()["leader"]}

        # both ingest: the group gives each its partitions (sent until both have stored some;
        # an instance's count starts at the store's, then counts what it stores itself)
        sent = 0
        counted = {svc: svc.survey("s")["stored_here"] for svc in (a, b)}
        while not all(svc.survey("s")["stored_here"] > n for svc, n in counted.items()):
            produce(broker.bootstrap, topic,
                    [(f"R{i:06d}".encode(), response(i)) for i in range(sent, sent + 40)])
            sent += 40
            until(lambda n=sent: count() == n, "the first responses were not stored", 120)
            assert sent < 4000, "one instance never got a partition"
        produce(broker.bootstrap, topic, [(f"R{i:06d}".encode(), response(i))
                                          for i in range(sent - 10, sent)])  # sent again
        sent_before_kill = sent
        # each instance's status says the survey's count, from the shared store (it showed
        # the instance's own share: 30,000 of 60,000)
        for svc in (a, b):
            until(lambda svc=svc: svc.survey("s")["stored"] == sent,
                  "an instance's status does not say the survey's count", 30)

        # the base run: a follower points to the leader, the leader runs it
        code, body = b.post("/api/surveys/s/base")
        assert code == 409 and body["leader"]["name"] == a.role()["name"]
        assert a.post("/api/surveys/s/base")[0] == 202
        a.wait_for("s", lambda s: s["state"] == "BASE_DONE", what="the base run")

        # SIGKILL the lifecycle holder mid-survey; the follower takes the lease over
        a.kill()
        until(lambda: b.role()["role"] == "leader", "the follower did not take over", 60)
        # no eviction: the broker drops the killed member after its session timeout (10 s here)
        # and the survivor takes its partitions in an ordinary rebalance, as in production
        # (evicting the live member with it left it outside the group for good, twice in CI)
        more = [(f"R{i:06d}".encode(), response(i)) for i in range(sent, sent + 200)]
        produce(broker.bootstrap, topic, more)
        sent += len(more)
        until(lambda: count() == sent, "the survivor did not store the later responses", 240)

        # the close, on the new leader: it reuses the dead leader's checkpoint
        code, _ = b.post("/api/surveys/s/close")
        assert code == 202
        status = b.wait_for("s", lambda s: s["state"] == "RELEASED", timeout=120,
                            what="the release")
        assert pg_rows(pg_server.url, "SELECT COUNT(*) FROM transitions WHERE survey = 's' "
                                   "AND to_state = 'BASE_RUNNING'") == [(1,)]
        assert status["release"]["n"] == sent
        assert count() == sent
        assert sent > sent_before_kill

        _, bodies, manifest = read_release(broker.bootstrap, f"{b.prefix}.s.release")
        assert manifest["count"] == sent
        assert sorted(r["ticket"] for r in bodies) == list(range(sent))  # every response, once
        everything = read_topic(broker.bootstrap, f"{b.prefix}.s.release", timeout=10)
        assert sum(1 for m in everything
                   if release_kind(m) == "manifest") == 1
        assert pg_rows(pg_server.url, "SELECT COUNT(*) FROM transitions WHERE survey = 's' "
                                   "AND to_state = 'RELEASED'") == [(1,)]
        assert pg_rows(pg_server.url, "SELECT status FROM releases WHERE survey = 's'") \
            == [("published",)]
        dead = read_topic(broker.bootstrap, f"{b.prefix}.s.deadletter", timeout=3)
        assert dead == []  # every response was sent before the close
    finally:
        for svc in made:
            svc.stop()
