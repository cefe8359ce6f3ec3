"""Is each part of the service working? ``/healthz``, the metrics and the systemd watchdog ask.

The service has four parts that can die while the process lives on: the **collector** (its
consumer loop, the ingest worker process that validates and stores, the dead-letter producer),
the **compute** process that runs the engines, the **store**, and the **publisher** (the release
producer). A dead process pool, a stopped task or a store that fails or does not answer is
reported as down with a fixed description; an exception's message is never shown, since it may
carry a response value (only its type is named).

The collector restarts its own ingest worker process in place when it dies (a kill, a crash on a
corrupt batch) and hands it the same batches again; each restart counts as a failure of the
collector (``streamanon_component_failures``). While the store refuses writes (full disk, lost
connection) the collector pauses ingest and retries, and the store is reported down until it
takes writes again. Any other part that is down stays down until the service restarts, which
``/healthz`` (Docker's ``HEALTHCHECK``) and the systemd watchdog make happen.
:class:`HealthMonitor` checks every few seconds and speaks systemd's notification protocol
(``sd_notify(3)``: ``READY=1``, ``WATCHDOG=1`` only while every part is healthy, ``STATUS=``,
``STOPPING=1``) with one datagram on ``$NOTIFY_SOCKET``; outside systemd it is silent.
The parts' shutdown helpers live here too (:func:`cancel_task`, :func:`stop_consumer`).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing.connection
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

PARTS = ("collector", "compute", "store", "publisher")
STORE_TIMEOUT_SECONDS = 3.0
CHECK_SECONDS = 5.0


@dataclass(frozen=True)
class PartHealth:
    """One part's state: ``ok``, and a fixed ``detail`` (never an exception message)."""

    ok: bool
    detail: str


RUNNING = PartHealth(True, "running")


async def cancel_task(task: asyncio.Task | None) -> None:
    """Cancel ``task`` and wait until it has ended, cancelling again as often as needed:
    before Python 3.12, ``asyncio.wait_for`` swallows a cancellation that lands just as the
    awaited call finishes, and a task cancelled once would run on (and a shutdown hang)."""
    while task is not None and not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.1)


async def stop_consumer(consumer: Any) -> None:
    """``consumer.stop()`` of an aiokafka consumer, which raises CancelledError when its
    fetcher had a fetch request pending (in its retry back-off after a broker restart):
    ``Fetcher.close`` cancels that task and awaits it (aio-libs/aiokafka#647), and the stop
    then skips closing the consumer's client, which is closed here instead. A cancellation
    of the caller itself is passed on."""
    try:
        await consumer.stop()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        # Python 3.10 cannot tell the two apart: there the cancellation is passed on
        if task is not None and getattr(task, "cancelling", lambda: 1)():
            raise
        log.info("the Kafka consumer's stop ended with its own cancelled fetch; closing "
                 "its connections")
        client = getattr(consumer, "_client", None)
        if client is not None:
            await client.close()


def pool_health(pool: Executor | None, process: str) -> PartHealth:
    """A process pool is down once one of its processes has exited (the pool is then broken
    for good: every later task fails); other executors are taken as running."""
    if pool is None:
        return PartHealth(False, "not started")
    if not isinstance(pool, ProcessPoolExecutor):
        return RUNNING
    # ProcessPoolExecutor has no public state: its manager thread sets _broken when a process
    # dies; the sentinels cover the moment before it notices.
    if getattr(pool, "_broken", False):
        return PartHealth(False, f"the {process} exited")
    processes = getattr(pool, "_processes", None)
    if processes is None:
        return PartHealth(False, "shut down")
    try:
        sentinels = [p.sentinel for p in list(processes.values())]
        exited = multiprocessing.connection.wait(sentinels, timeout=0) if sentinels else []
    except (ValueError, OSError):
        exited = [None]
    return PartHealth(False, f"the {process} exited") if exited else RUNNING


def task_health(task: asyncio.Task | None, what: str) -> PartHealth:
    """An asyncio task that should run for the service's lifetime."""
    if task is None:
        return PartHealth(False, "not started")
    if not task.done():
        return RUNNING
    if task.cancelled():
        return PartHealth(False, f"the {what} was cancelled")
    exc = task.exception()
    return PartHealth(False, f"the {what} stopped"
                      + (f" ({type(exc).__name__})" if exc is not None else ""))


def collector_health(collector: Any, dead_letters: Any) -> PartHealth:
    """The consumer loop, the ingest worker process and the dead-letter producer
    (:class:`~.kafka_clients.ServiceProducer`: open, its polling thread running)."""
    if collector is None:
        return PartHealth(False, "not started")
    worker = getattr(collector, "worker", None)  # an ingest.IngestWorker
    for health in (task_health(getattr(collector, "_task", None), "consumer loop"),
                   pool_health(getattr(worker, "pool", None), "ingest worker process")):
        if not health.ok:
            return health
    letters = getattr(collector, "dead_letters", None)
    if letters is not None and not getattr(letters, "alive", True):
        return PartHealth(False, "the dead-letter thread stopped")
    if dead_letters is not None and not getattr(dead_letters, "alive", True):
        return PartHealth(False, "the dead-letter producer stopped")
    return RUNNING


def producer_health(producer: Any) -> PartHealth:
    """The release producer (:class:`~streamanon.service.publisher.ReleasePublisher`, or an
    aiokafka producer): started, not closed, an aiokafka send loop running. A broker that is
    away is not a failure of the producer: it reconnects."""
    if producer is None:
        return PartHealth(False, "not started")
    if getattr(producer, "_closed", False) or getattr(producer, "closed", False):
        return PartHealth(False, "the release producer was closed")
    sender = getattr(producer, "_sender", None)
    task = getattr(sender, "sender_task", None)
    if task is not None and task.done():
        return PartHealth(False, "the release producer's send loop stopped")
    return RUNNING


#: Seconds the broker may take to answer a metadata request before it counts as down.
BROKER_TIMEOUT_SECONDS = 2.0


async def broker_health(producer: Any, timeout: float = BROKER_TIMEOUT_SECONDS) -> PartHealth:
    """The brokers answer a metadata request of the release producer within ``timeout``
    seconds (``producer.answering(timeout)``, :class:`~.publisher.ReleasePublisher`). The
    clients reconnect by themselves; this says whether there is anything to reconnect to
    (a dead broker left /healthz at 200 while 1,250 client errors went to the log)."""
    answering = getattr(producer, "answering", None)
    if answering is None:
        return PartHealth(False, "not started")
    try:
        await asyncio.wait_for(asyncio.to_thread(answering, timeout), timeout + 1.0)
    except Exception as exc:  # any failure to get the metadata means no broker to talk to
        return PartHealth(False, f"no answer within {timeout:g} s ({type(exc).__name__})")
    return PartHealth(True, "answering")


async def store_health(query: Awaitable[Any], timeout: float = STORE_TIMEOUT_SECONDS, *,
                       writes_refused: bool = False) -> PartHealth:
    """The store answers a small query within ``timeout`` seconds. A store busy for longer
    (its one worker thread loading a large survey) counts as down for that while, and so does
    one that answers reads but refuses writes (``writes_refused``: a full disk, say, seen by
    the collector)."""
    try:
        await asyncio.wait_for(query, timeout)
    except asyncio.TimeoutError:
        return PartHealth(False, f"no answer within {timeout:g} s")
    except Exception as exc:  # any failure of the store means it is down
        return PartHealth(False, f"a query failed ({type(exc).__name__})")
    if writes_refused:
        return PartHealth(False, "it refuses writes; ingest is paused until it takes them")
    return PartHealth(True, "answering")


#: Seconds one store operation may run before a store that does not answer meanwhile is
#: down rather than busy (loading a million-record survey at close takes about 5 s; a
#: connection that hangs for ever must not look busy for ever).
STORE_BUSY_LIMIT_SECONDS = 300.0


def busy_store(health: PartHealth, asked: float, running_since: float | None,
               failed_at: float | None, *, now: float | None = None,
               limit: float = STORE_BUSY_LIMIT_SECONDS) -> PartHealth:
    """A store that did not answer the health query in time because one operation started
    before the query (``running_since``, monotonic, before ``asked``) is still running, with
    no failure since, is busy: healthy, and says so. At the close of a 1,000,000-record
    survey /healthz said 503 "store is down" and the release went out seconds later: an
    orchestrator would have restarted a healthy service mid-release."""
    if health.ok or not health.detail.startswith("no answer") or running_since is None:
        return health
    now = time.monotonic() if now is None else now
    if (running_since <= asked and now - running_since < limit
            and (failed_at is None or failed_at < running_since)):
        return PartHealth(True, f"busy: one operation has run for {now - running_since:.0f} s "
                                "and the health query waits behind it")
    return health


#: The parts outside the service's process tree: readiness only. A restart does not bring a
#: broker back, so the liveness answer (``/livez``, the systemd watchdog) leaves it out; a
#: broker outage then makes the service unready (``/healthz`` 503), never restarted in a loop.
EXTERNAL_PARTS = frozenset({"broker"})


def liveness(parts: Mapping[str, PartHealth]) -> dict[str, PartHealth]:
    """The parts a restart of the service may repair: all but :data:`EXTERNAL_PARTS`."""
    return {name: part for name, part in parts.items() if name not in EXTERNAL_PARTS}


def summary(parts: Mapping[str, PartHealth]) -> tuple[bool, str]:
    """(all healthy, text): ``ok``, or ``unhealthy: a, b`` and one line per part that is down."""
    down = {name: part for name, part in parts.items() if not part.ok}
    if not down:
        return True, "ok\n"
    return False, (f"unhealthy: {', '.join(down)}\n"
                   + "".join(f"{name}: {part.detail}\n" for name, part in down.items()))


# -- systemd --------------------------------------------------------------------------------


def sd_notify(message: str, env: Mapping[str, str] = os.environ) -> bool:
    """Send ``message`` to systemd's notification socket; False when there is none (not run
    by systemd, or nobody listens). ``@name`` is an abstract socket (``sd_notify(3)``)."""
    address = env.get("NOTIFY_SOCKET", "")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(address)
            sock.sendall(message.encode())
    except OSError:
        return False
    return True


def watchdog_seconds(env: Mapping[str, str] = os.environ) -> float | None:
    """``WatchdogSec=`` of the unit (``$WATCHDOG_USEC``), if it is meant for this process."""
    usec, pid = env.get("WATCHDOG_USEC", ""), env.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0 or (pid and pid != str(os.getpid())):
        return None
    return int(usec) / 1e6


class HealthMonitor:
    """Checks the service's health every ``CHECK_SECONDS`` (or a third of ``WatchdogSec``
    when shorter) and tells systemd: ``READY=1`` at start, ``WATCHDOG=1`` after each check
    that found every part healthy but the external ones (:func:`liveness`), ``STATUS=`` when
    the state changes, ``STOPPING=1`` at stop. A check that fails or hangs is a failed check:
    the watchdog then expires and systemd restarts the service (a blocked event loop stops
    the pings the same way)."""

    def __init__(self, check: Callable[[], Awaitable[Mapping[str, PartHealth]]] | None, *,
                 env: Mapping[str, str] = os.environ) -> None:
        self.check = check
        self.env = env
        self.watchdog_seconds = watchdog_seconds(env)
        self.interval = (min(CHECK_SECONDS, self.watchdog_seconds / 3)
                         if self.watchdog_seconds else CHECK_SECONDS)
        self._task: asyncio.Task | None = None
        self._status: str | None = None

    def start(self) -> None:
        sd_notify("READY=1", self.env)
        self._task = asyncio.create_task(self._run(), name="health-monitor")

    async def stop(self) -> None:
        sd_notify("STOPPING=1", self.env)
        await cancel_task(self._task)

    async def _run(self) -> None:
        while True:
            try:
                ok, text = summary(liveness(await asyncio.wait_for(self.check(),
                                                                   self.interval * 2)))
            except asyncio.TimeoutError:
                ok, text = False, "unhealthy: the health check did not finish\n"
            except Exception as exc:  # the monitor must outlive any one failed check
                log.error("health check failed (%s)", type(exc).__name__)
                ok, text = False, "unhealthy: the health check failed\n"
            status = "ok" if ok else _one_line(text)
            if status != self._status:
                sd_notify(f"STATUS={status}", self.env)
                self._status = status
            if ok and self.watchdog_seconds:
                sd_notify("WATCHDOG=1", self.env)
            await asyncio.sleep(self.interval)


def _one_line(text: str) -> str:
    """``unhealthy: a (detail); b (detail)`` from :func:`summary`'s text."""
    lines = text.splitlines()
    details = [line.partition(": ") for line in lines[1:]]
    return "unhealthy: " + "; ".join(f"{name} ({detail})" for name, _, detail in details) \
        if details else lines[0]
