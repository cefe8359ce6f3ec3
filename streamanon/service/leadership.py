"""Several service instances on one survey: every instance collects, one runs the lifecycle.

Instances that share a PostgreSQL store and a Kafka consumer group split the response
partitions between them (the group does that) and each stores what it reads; de-duplication
holds across them, since a record's identity is unique in the shared ``records`` table. Exactly
one of them, the *leader*, plans, runs the base run, closes and releases. Leadership is a
session-level PostgreSQL advisory lock (:class:`Coordination`) held on a connection of its own,
outside the store's pool: when the leader dies its connection closes and the server frees the
lock at once (TCP keepalives on both sides bound the wait when a network cut leaves the
connection half open). The other instances, *followers*, try the lock every
``poll_seconds``; the one that gets it carries on exactly as a restarted service would
(:meth:`LeaderHost.take_over`: a finished checkpoint is reused, an interrupted base run
re-planned, a close completed, a released survey never released again).

What reaches a follower is handed to the leader through the store: a close (HTTP, control
topic) is stored as the survey's close request, which the leader's :class:`Coordinator`
notices within a poll and carries out; a control message asking for the base run is stored as a
request the leader takes. HTTP ``POST .../base`` on a follower answers 409 with the leader.

The close needs every instance: each judges the messages it reads. When a close is requested
the followers set a closure of their own at once, at their current end offsets (so a message
appended after that is dead-lettered ``closed`` and none is stored unjudged), and acknowledge it
in the store; the leader waits for the acknowledgements of every live instance before it reads
the close marks (:meth:`Coordinator.followers_closed`), so every message stored without a
closure lies below the marks. The followers then judge by the stored marks. The drain waits for
the group's committed offsets, whoever commits them, and every instance commits only after its
store has committed.

The base snapshot is a clean cut of the shared table: records get their ``seq`` when inserted,
and two instances' transactions may commit out of ``seq`` order, so the snapshot takes
``LOCK TABLE records IN SHARE MODE`` (it waits for the insert transactions in flight and holds
new ones back for that moment) before it reads the largest ``seq``
(:meth:`Coordination.snapshot_seq`).

A SQLite store takes one instance only: :func:`single_instance` refuses a second service on
the same file.

The :class:`Coordinator` drives the service it runs in through :class:`LeaderHost` (the
:class:`~.lifecycle.Service` is one), never through its private parts. It imports the store's
errors, the survey states and the closure; the service's modules only for their types.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol, TypeVar

from streamanon.errors import describe_error
from streamanon.service.runtime import RunningSurvey
from streamanon.service.states import CLOSING, RELEASED
from streamanon.service.store import StoreError, StoreUnavailable

if TYPE_CHECKING:
    from scheduler.planner import Plan
    from streamanon.service.store import SurveyState

log = logging.getLogger(__name__)
T = TypeVar("T")

POLL_SECONDS = 1.0  # how often a follower tries the lock and looks for closes
STALE_SECONDS = 5.0  # an instance whose heartbeat is older is taken for dead

_SCHEMA_LOCK = 727273  # held while the coordination tables are created (cf. the store's 727272)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS service_instances (
    name TEXT PRIMARY KEY, role TEXT NOT NULL, http TEXT NOT NULL,
    started_at DOUBLE PRECISION NOT NULL, heartbeat_at DOUBLE PRECISION NOT NULL);
CREATE TABLE IF NOT EXISTS service_requests (
    id BIGSERIAL PRIMARY KEY, survey TEXT NOT NULL, command TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL, instance TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS closure_acks (
    instance TEXT NOT NULL, survey TEXT NOT NULL, closed_at DOUBLE PRECISION NOT NULL,
    at DOUBLE PRECISION NOT NULL, PRIMARY KEY (instance, survey));
"""
_NOW = "EXTRACT(EPOCH FROM clock_timestamp())"  # the server's clock: one clock for every host


def instance_name() -> str:
    """This process's name among the instances: host and process id."""
    return f"{socket.gethostname()}:{os.getpid()}"


def lease_key(group_id: str) -> int:
    """The advisory lock of a deployment (signed 64 bits), from its consumer group: instances
    of one deployment share the group, other deployments on the same database do not."""
    digest = hashlib.blake2b(f"streamanon-lifecycle\0{group_id}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "big", signed=True)


def single_instance(store_path: Path) -> IO[str] | None:
    """Lock a SQLite store for this service (a file lock next to it, freed when the process
    ends however it ends); :class:`StoreError` when another service holds it. Returns the
    open lock file (close it to let go), or None for an in-memory store."""
    if str(store_path) == ":memory:":
        return None
    path = store_path.with_name(store_path.name + ".instance")
    old = os.umask(0o077)
    try:
        fh = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held for the service's life
    finally:
        os.umask(old)
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        holder = fh.read().strip() or "another process"
        fh.close()
        raise StoreError(
            f"the SQLite store {store_path} is in use by another service instance ({holder}); "
            "a SQLite store takes one instance: several collectors share a PostgreSQL store "
            "([store] url = \"postgresql://...\")") from None
    fh.seek(0)
    fh.truncate()
    fh.write(f"{instance_name()}\n")
    fh.flush()
    return fh


class Coordination:
    """The lease and the instances' shared notes, on one PostgreSQL connection of its own.

    Blocking calls (run them in a thread), serialised by a lock. A lost connection is made
    again at the next call; the lease does not survive it (the server freed the lock with
    the session), so :meth:`holds` is then False until :meth:`acquire` succeeds again."""

    def __init__(self, url: str, name: str, *, key: int, http: str = "",
                 timeout: float = 5.0) -> None:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict

        self.url, self.name, self.key, self.http = url, name, key, http
        self._lost = (psycopg.OperationalError, psycopg.InterfaceError)
        given = conninfo_to_dict(url)
        # The leader notices a cut connection (client keepalives and tcp_user_timeout, about
        # 10 s) before the server frees its lock (server keepalives, about 25 s): two leaders
        # never overlap. A killed process closes its socket: the lock is free at once.
        self._kwargs: dict[str, Any] = {
            key_: value for key_, value in (
                ("connect_timeout", max(2, round(timeout))), ("keepalives_idle", 5),
                ("keepalives_interval", 2), ("keepalives_count", 3),
                ("tcp_user_timeout", 10_000), ("application_name", f"streamanon {name}"),
                ("options", "-c tcp_keepalives_idle=10 -c tcp_keepalives_interval=5 "
                            "-c tcp_keepalives_count=3"))
            if key_ not in given}
        self._conn: Any = None
        self._held = False
        self._lock = threading.Lock()

        def create(conn: Any) -> None:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)

        self._do(create)

    def _do(self, op: Callable[[Any], T]) -> T:
        """``op(connection)``; a connection found cut is made again and ``op`` tried once more
        (the lease, if it was held, is gone with the old session)."""
        import psycopg

        with self._lock:
            while True:
                fresh = self._conn is None or self._conn.closed
                try:
                    if fresh:
                        self._held = False
                        self._conn = psycopg.connect(self.url, autocommit=True, **self._kwargs)
                    return op(self._conn)
                except self._lost as exc:
                    self._drop()
                    log.warning("coordination connection to PostgreSQL lost (%s)",
                                type(exc).__name__)
                    if fresh:
                        raise StoreUnavailable("cannot reach PostgreSQL for the lifecycle "
                                               "lease; tried again at the next poll") from None

    def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn, self._held = None, False

    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        def run(conn: Any) -> list[tuple[Any, ...]]:
            cur = conn.execute(sql, params)
            return cur.fetchall() if cur.description else []

        return self._do(run)

    # -- the lease -----------------------------------------------------------------------------
    def acquire(self) -> bool:
        """Take the lease if it is free; whether this instance holds it now."""
        def take(conn: Any) -> bool:
            if not self._held:
                self._held = bool(conn.execute("SELECT pg_try_advisory_lock(%s)",
                                               (self.key,)).fetchone()[0])
            return self._held

        return self._do(take)

    def holds(self) -> bool:
        """Whether the lease is still this instance's: its session answers (False once the
        connection is lost: the server has freed the lock, or will)."""
        if not self._held:
            return False
        try:
            self._rows("SELECT 1")
        except StoreUnavailable:
            return False
        return self._held

    def release(self) -> None:
        with self._lock:
            if self._held and self._conn is not None and not self._conn.closed:
                with contextlib.suppress(*self._lost):
                    self._conn.execute("SELECT pg_advisory_unlock(%s)", (self.key,))
            self._held = False

    # -- instances -----------------------------------------------------------------------------
    def heartbeat(self, role: str) -> None:
        self._rows(f"INSERT INTO service_instances (name, role, http, started_at, heartbeat_at) "
                   f"VALUES (%s, %s, %s, {_NOW}, {_NOW}) ON CONFLICT (name) DO UPDATE SET "
                   f"role = EXCLUDED.role, http = EXCLUDED.http, heartbeat_at = {_NOW}",
                   (self.name, role, self.http))

    def leave(self) -> None:
        """Forget this instance (a clean stop): the leader no longer waits for it."""
        self._rows("DELETE FROM service_instances WHERE name = %s", (self.name,))

    def live(self, stale_seconds: float = STALE_SECONDS) -> dict[str, tuple[str, str]]:
        """{name: (role, http)} of the instances heard from within ``stale_seconds``."""
        return {name: (role, http) for name, role, http in self._rows(
            f"SELECT name, role, http FROM service_instances WHERE heartbeat_at > {_NOW} - %s",
            (stale_seconds,))}

    # -- requests for the leader ---------------------------------------------------------------
    def request(self, survey: str, command: str) -> None:
        self._rows(f"INSERT INTO service_requests (survey, command, at, instance) "
                   f"VALUES (%s, %s, {_NOW}, %s)", (survey, command, self.name))

    def take_requests(self) -> list[tuple[str, str]]:
        """The requests left for the leader, oldest first, removed as they are returned."""
        return [(survey, command) for _, survey, command in sorted(self._rows(
            "DELETE FROM service_requests RETURNING id, survey, command"))]

    # -- closes --------------------------------------------------------------------------------
    def ack_closure(self, survey: str, closed_at: float) -> None:
        self._rows(f"INSERT INTO closure_acks (instance, survey, closed_at, at) "
                   f"VALUES (%s, %s, %s, {_NOW}) ON CONFLICT (instance, survey) DO UPDATE SET "
                   f"closed_at = EXCLUDED.closed_at, at = EXCLUDED.at",
                   (self.name, survey, closed_at))

    def acked(self, survey: str, closed_at: float) -> set[str]:
        """The instances that have set their closure of ``survey``'s close at ``closed_at``."""
        return {name for (name,) in self._rows(
            "SELECT instance FROM closure_acks WHERE survey = %s AND closed_at = %s",
            (survey, closed_at))}

    # -- the shared records table --------------------------------------------------------------
    def snapshot_seq(self, survey: str) -> int:
        """The largest ``seq`` of ``survey`` at a clean cut: every record with a smaller one is
        committed (see the module docstring)."""
        def cut(conn: Any) -> int:
            with conn.transaction():
                conn.execute("SET LOCAL lock_timeout = '60s'")
                conn.execute("LOCK TABLE records IN SHARE MODE")
                value = conn.execute("SELECT MAX(seq) FROM records WHERE survey = %s",
                                     (survey,)).fetchone()[0]
                return int(value) if value is not None else 0

        return self._do(cut)

    def count_after(self, survey: str, after: int, bound: int) -> tuple[int, int, int]:
        """Of ``survey``'s records with a ``seq`` above ``after``: how many have one at most
        ``bound``, how many in all, and the largest ``seq`` (``after`` when none). An index
        range on ``seq``, not a scan of the survey (see :class:`StoredCount`)."""
        below, total, top = self._rows(
            "SELECT COUNT(*) FILTER (WHERE seq <= %s), COUNT(*), COALESCE(MAX(seq), %s) "
            "FROM records WHERE survey = %s AND seq > %s", (bound, after, survey, after))[0]
        return int(below), int(total), int(top)

    def close(self) -> None:
        self.release()
        with self._lock:
            self._drop()


class StoredCount:
    """A survey's count of stored records, every instance's, read every poll without counting
    the whole survey again.

    The records below a *settled* ``seq`` are counted once; each poll counts only those above
    it (``count(after, bound)``: :meth:`Coordination.count_after`). Two instances' inserts can
    commit out of ``seq`` order, so a ``seq`` becomes settled only ``settle_seconds`` after a
    poll saw it as the largest: every insert transaction holding a smaller one has committed
    by then (the collector's transactions last well under a second). The count is what the
    leader's arrival estimate reads. A record committed later still than that is missed by
    the polls above the settled point until the next full count, every ``recount_seconds``
    (never out of any release).
    """

    def __init__(self, settle_seconds: float = 30.0, recount_seconds: float = 600.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settle_seconds = settle_seconds
        self.recount_seconds = recount_seconds
        self.clock = clock
        self.settled_seq = 0
        self.settled = 0
        self._tops: list[tuple[float, int]] = []  # (when, largest seq seen then), oldest first
        self._counted_from_start = clock()

    def update(self, count: Callable[[int, int], tuple[int, int, int]]) -> int:
        """The count now; ``count(after, bound)`` as :meth:`Coordination.count_after`. A
        failed ``count`` changes nothing."""
        now = self.clock()
        ripe = 0  # the tops seen settle_seconds or more before this query
        while ripe < len(self._tops) and now - self._tops[ripe][0] >= self.settle_seconds:
            ripe += 1
        bound = max([self.settled_seq, *(top for _, top in self._tops[:ripe])])
        recount = now - self._counted_from_start >= self.recount_seconds
        after, settled = (0, 0) if recount else (self.settled_seq, self.settled)
        below, total, top = count(after, bound)
        if recount:
            self._counted_from_start = now
        n = settled + total
        self.settled = settled + below
        self.settled_seq = bound
        del self._tops[:ripe]
        self._tops.append((self.clock(), top))  # seen when the query had run
        return n


class LeaderHost(Protocol):
    """What a :class:`Coordinator` needs of the service it runs in
    (:class:`~.lifecycle.Service`): the surveys' runtime state, their stored state, the
    lifecycle's entry points, and what to do when the lease is taken or lost."""

    @property
    def surveys(self) -> Mapping[str, RunningSurvey]: ...

    async def survey_state(self, sid: str) -> SurveyState:
        """The survey's state as stored."""
        ...

    async def close_marks(self, sid: str) -> dict[int, int] | None:
        """The survey's close marks as stored, or None before the leader took them."""
        ...

    async def take_closure(self, sid: str, closed_at: float) -> dict[int, int]:
        """Close the survey on this instance at its current end offsets, not stored; the
        offsets."""
        ...

    async def close(self, sid: str) -> None:
        """Close the survey (the close request stored, the close sequence started)."""
        ...

    async def start_base(self, sid: str, plan: Plan | None) -> bool:
        """Start the survey's base run now; whether it started."""
        ...

    def observe_shared(self, sid: str, new_records: int) -> None:
        """Records stored by every instance since the last count, for the arrival estimate."""
        ...

    async def take_over(self) -> None:
        """The lease was taken: carry every survey on from its stored state."""
        ...

    async def step_down(self) -> None:
        """The lease was lost: stop every lifecycle task at once."""
        ...


class Coordinator:
    """The lifecycle lease in a running service (its :class:`LeaderHost`): takes it when it
    can, hands over what reaches a follower, applies closes on followers, and steps down if the
    lease is lost. :attr:`stored` is the store's count of each survey (every instance's
    records), which the leader plans with."""

    def __init__(self, service: LeaderHost, coordination: Coordination, *,
                 poll_seconds: float = POLL_SECONDS,
                 stale_seconds: float = STALE_SECONDS) -> None:
        self.service = service
        self.coordination = coordination
        self.poll_seconds = poll_seconds
        self.stale_seconds = stale_seconds
        self.leading = False
        self.stored: dict[str, int] = {}
        #: Each survey's count as the last poll read it, leader or follower (the status's).
        self.survey_counts: dict[str, int] = {}
        self._counts: dict[str, StoredCount] = {}
        self.others: dict[str, tuple[str, str]] = {}  # live instances but this one
        self._closes_seen: set[str] = set()  # surveys whose close request the leader saw
        self._task: asyncio.Task | None = None

    @property
    def name(self) -> str:
        return self.coordination.name

    @property
    def role(self) -> str:
        return "leader" if self.leading else "follower"

    async def _call(self, fn: Any, *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)

    async def acquire(self) -> bool:
        """The first try, at start (before recovery)."""
        self.leading = await self._call(self.coordination.acquire)
        await self._call(self.coordination.heartbeat, self.role)
        log.info("instance %s: %s of the lifecycle", self.name, self.role)
        return self.leading

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="coordinator")

    async def halt(self) -> None:
        """Stop polling (the service is stopping); the lease is kept until :meth:`leave`."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def leave(self) -> None:
        """Let the lease go and forget this instance: another takes over at its next poll."""
        await self.halt()
        with contextlib.suppress(StoreError):
            await self._call(self.coordination.leave)
        await self._call(self.coordination.close)

    def leader(self) -> dict[str, str] | None:
        """The leader as last seen: name and HTTP address."""
        if self.leading:
            return {"name": self.name, "http": self.coordination.http}
        for name, (role, http) in self.others.items():
            if role == "leader":
                return {"name": name, "http": http}
        return None

    def describe(self) -> dict[str, Any]:
        """What ``/api/status`` says of the instances (names and addresses only)."""
        return {"name": self.name, "role": self.role, "leader": self.leader(),
                "instances": 1 + len(self.others)}

    async def _run(self) -> None:
        while True:
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database away: the next poll tries again
                log.warning("instance %s: coordination step failed (%s)", self.name,
                            describe_error(exc))
            await asyncio.sleep(self.poll_seconds)

    async def step(self) -> None:
        """One poll: the lease, the heartbeat, then the leader's or the follower's work."""
        c = self.coordination
        if self.leading and not await self._call(c.holds):
            self.leading = False
            log.error("instance %s: the lifecycle lease was lost (connection to PostgreSQL "
                      "cut); stepping down to follower", self.name)
            await self.service.step_down()
        if not self.leading and await self._call(c.acquire):
            self.leading = True
            log.warning("instance %s: took over the lifecycle lease", self.name)
            await self._call(c.heartbeat, self.role)
            await self.service.take_over()
        await self._call(c.heartbeat, self.role)
        live = await self._call(c.live, self.stale_seconds)
        live.pop(self.name, None)
        self.others = live
        if self.leading:
            await self._lead()
        else:
            await self.follow()

    async def _lead(self) -> None:
        """Carry out what other instances handed over; count every instance's records."""
        service = self.service
        for sid, command in await self._call(self.coordination.take_requests):
            if sid in service.surveys and command == "start_base":
                await service.start_base(sid, None)
        for sid, survey in service.surveys.items():
            st = await service.survey_state(sid)
            if st.close_requested_at is not None and sid not in self._closes_seen:
                self._closes_seen.add(sid)  # once: a close that failed is not retried here
                if (st.state != RELEASED and survey.close_task is None
                        and not survey.closed_event.is_set()):
                    log.info("survey %s: a close was requested through another instance", sid)
                    await service.close(sid)
            n = await self._count(sid)
            before = self.stored.get(sid)
            if before is not None and n > before:
                service.observe_shared(sid, n - before)
            self.stored[sid] = n

    async def _count(self, sid: str) -> int:
        """The survey's stored records, every instance's (:class:`StoredCount`); kept in
        :attr:`survey_counts` for the status."""
        counter = self._counts.setdefault(sid, StoredCount())
        n = await self._call(counter.update, partial(self.coordination.count_after, sid))
        self.survey_counts[sid] = n
        return n

    async def follow(self) -> None:
        """A follower's part of each survey's close: its own closure as soon as the close is
        requested, acknowledged; the leader's marks once they are stored (see the module
        docstring). And the survey's count, for the status."""
        service = self.service
        for sid, survey in service.surveys.items():
            await self._count(sid)
            st = await service.survey_state(sid)
            if st.close_requested_at is None:
                continue
            marks = await service.close_marks(sid)
            if not survey.closed_as_stored(st, marks, final=st.state in (CLOSING, RELEASED)):
                ends = await service.take_closure(sid, st.close_requested_at)
                log.info("survey %s: closed on this instance at end offsets %s; waiting for "
                         "the leader's close marks", sid, ends)
            await self._call(self.coordination.ack_closure, sid, st.close_requested_at)
            if st.state == RELEASED:
                survey.released()

    async def followers_closed(self, sid: str, closed_at: float) -> None:
        """Wait until every other live instance has set its closure of the close at
        ``closed_at`` (an instance silent for ``stale_seconds`` is taken for dead)."""
        started = time.monotonic()
        next_note = started + 30.0
        while True:
            live = await self._call(self.coordination.live, self.stale_seconds)
            live.pop(self.name, None)
            waiting = set(live) - await self._call(self.coordination.acked, sid, closed_at)
            if not waiting:
                return
            if time.monotonic() >= next_note:
                log.warning("survey %s: the close has waited %.0f s for instance(s) %s to "
                            "stop taking responses", sid, time.monotonic() - started,
                            ", ".join(sorted(waiting)))
                next_note += 30.0
            await asyncio.sleep(0.2)
