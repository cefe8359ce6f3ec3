"""The long-running service: its wiring (design spec §6). :class:`Service` starts and stops
what the surveys share (the collector, the store and its thread, the planner jobs, the compute
process, the lease) and hands it to each :class:`~streamanon.service.survey.Survey` as one
:class:`~streamanon.service.survey.ServiceParts`; each survey recovers from its stored state,
starts its base run at the planned moment, closes and releases
(:mod:`~streamanon.service.closing`, :mod:`~streamanon.service.releasing`). What it plans with
is its :class:`~streamanon.service.planning.SurveyPlanner`; what it shows is built by
:mod:`~streamanon.service.status`.

One asyncio event loop runs the collector, the HTTP server and the close sequence; the planner
jobs run on an APScheduler background scheduler; the base engine and the incremental stage run
in a separate process (``ProcessPoolExecutor``), so ingest keeps flowing during a base run; all
store calls go through one worker thread.

Per survey (:class:`~streamanon.service.survey.Survey` owns each one's state and makes its
moves; :class:`Service` keeps what the surveys share)::

    OPEN --(planner trigger, or POST /base)--> BASE_RUNNING --> BASE_DONE
      |                                                          |
      +--------------(close: time, CLI/HTTP, control msg)-------+--> CLOSING --> RELEASED

Close (:mod:`~streamanon.service.closing`): stop accepting (later messages are dead-lettered
``closed``), drain what was sent before, wait for a running base run, then release
(:mod:`~streamanon.service.releasing`): run the incremental stage on the records after the
base snapshot (or one engine run on everything when there is no usable base, or when the
deadline leaves time for it), apply the k-anonymity gate, shuffle, publish.

Restart after a crash resumes from the stored state: a finished checkpoint is reused, an
interrupted base run is re-planned (it fires at once when its moment has passed), a release
that was written but not fully published is re-published from the same files, and a released
survey is never released again.

Several instances on one PostgreSQL store (:mod:`~streamanon.service.leadership`): every one
collects; the one holding the lifecycle lease plans, runs the base run, closes and releases; a
follower that takes the lease over resumes as a restart does (:meth:`Service.take_over`);
:class:`Service` is the coordinator's :class:`~streamanon.service.leadership.LeaderHost`.

It may import the core, the scheduler and the rest of the shell; of the shell only
``simulate`` imports it (and the command line).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from concurrent.futures import Executor, ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any

import numpy as np

from scheduler.arrivals import ArrivalEstimator
from scheduler.jobs import PlanningJob
from scheduler.planner import Plan
from streamanon.errors import describe_error, withheld
from streamanon.incremental.run import TwoStageRun
from streamanon.metrics import distortion, fit_and_standardise
from streamanon.service.base_run import read_ahead_seconds
from streamanon.service.collector import KafkaCollector
from streamanon.service.config import Config
from streamanon.service.control import ControlRejected, ControlVerifier
from streamanon.service.deadletters import KafkaDeadLetters
from streamanon.service.health import (
    PartHealth,
    broker_health,
    busy_store,
    collector_health,
    pool_health,
    producer_health,
    store_health,
)
from streamanon.service.ingest import SurveyIngest
from streamanon.service.leadership import (
    Coordination,
    Coordinator,
    instance_name,
    lease_key,
    single_instance,
)
from streamanon.service.planning import SurveyPlanner
from streamanon.service.processes import worker_pool
from streamanon.service.publisher import ReleasePublisher
from streamanon.service.releasing import Releaser
from streamanon.service.reports import ServiceStatus
from streamanon.service.states import OPEN, RELEASED
from streamanon.service.status import STATUS_WAIT_SECONDS as STATUS_WAIT
from streamanon.service.status import never_read, read_stored, survey_status, within
from streamanon.service.store import (
    PostgresStore,
    ReleaseRow,
    SQLiteStore,
    Store,
    StoreUnavailable,
    SurveyState,
    open_store,
)
from streamanon.service.survey import ServiceParts, Survey
from streamanon.service.telemetry import Telemetry
from streamanon.service.validation import Validator
from streamanon.tuples import row_hashes

log = logging.getLogger(__name__)

#: How long a command that found the store down waits before it tries again: the first wait,
#: then doubling up to the second.
COMMAND_RETRY_SECONDS = (1.0, 30.0)


async def _as_taken(ends: dict[int, int]) -> dict[int, int]:
    """A follower's end offsets, kept as its closure and not stored (the leader's are)."""
    return ends


def warm_up_compute() -> bool:
    """Load the kernels (the refinement's and the NN stages' blocked search too) in the
    compute process before they are needed: a kernel is loaded from numba's cache at its first
    call, which would otherwise be the close's. A function of the module, so that it pickles
    to the compute process."""
    Z = np.random.default_rng(0).standard_normal((60, 2))
    TwoStageRun(5, "mdav", "nn_split_end", refine=1.0).run(Z, 40)
    TwoStageRun(5, "mdav", "nn_split_end", incremental_params={"index": "blocks"}).run(Z, 40)
    return True


def warm_up_release() -> bool:
    """Load the kernels the release runs in this process (the standardisation, the loss's
    cell means and sums of squares, the row hashes of repeated keys and of the gate: 0.3 s at
    their first call, even from numba's cache) before a close needs them."""
    fit_and_standardise(np.array([[0.0, 1.0], [1.0, 0.0]]))
    distortion(np.array([[0.0], [1.0]]), np.array([0, 1]))
    row_hashes(np.zeros((1, 1)))
    return True


class Service:
    """Everything one deployment runs. ``await start()``, then ``await closed(survey)``.

    The engines run in ``compute_pool`` (default: ``compute_workers`` spawned processes)."""

    _store_job_since: float | None = None  # the store thread's operation, and last failure
    _store_failed_at: float | None = None

    def __init__(self, config: Config, *, store: Store | None = None,
                 compute_workers: int = 1, compute_pool: Executor | None = None) -> None:
        self.config = config
        self.store = store or open_store(config.store.url)
        self.control_verifier = ControlVerifier(config.http_token)
        self._store_thread = ThreadPoolExecutor(1, thread_name_prefix="store")
        self._pool = compute_pool or worker_pool(compute_workers)
        self.surveys: dict[str, Survey] = {}
        self.survey_planner = SurveyPlanner(config, self.counted)
        #: what every survey's moves use of the service (the releaser and the collector
        #: join it in start())
        self.parts = ServiceParts(config, self.store, self._in_store, self._pool,
                                  self.survey_planner)
        self.producer: Any = None  # librdkafka (kafka_clients.ServiceProducer): dead letters
        self.release_producer: Any = None  # librdkafka: releases (ReleasePublisher)
        self._releaser: Releaser | None = None  # made in start(), with the release producer
        self.collector: KafkaCollector | None = None
        self.scheduler: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Future] = set()
        self._measuring: dict[str, asyncio.Task] = {}  # cost models measured after start
        # the last stored state and release read for each survey, and the last health: what
        # the status shows while the store does not answer
        self._known: dict[str, tuple[SurveyState, ReleaseRow | None]] = {}
        self._last_health: dict[str, PartHealth] = {}
        self.started_at = time.time()
        self.telemetry = Telemetry()
        self._instance_lock: Any = None  # a SQLite store's lock: one instance only

    @property
    def coordinator(self) -> Coordinator | None:
        """The lifecycle lease when several instances share a PostgreSQL store
        (:mod:`.leadership`), else None. It is the surveys' (``parts``): one place, so that
        a survey and the service cannot disagree on who leads."""
        return self.parts.coordinator

    @coordinator.setter
    def coordinator(self, coordinator: Coordinator | None) -> None:
        self.parts.coordinator = coordinator

    @property
    def leading(self) -> bool:
        """Whether this instance runs the lifecycle (plan, base run, close, release)."""
        return self.parts.leading

    # -- start and stop ------------------------------------------------------------------------
    async def start(self) -> None:
        from apscheduler.schedulers.background import BackgroundScheduler

        from streamanon.service.broker import ensure_topics
        from streamanon.service.kafka_clients import KafkaSettings, producer

        self.loop = asyncio.get_running_loop()
        cfg = self.config
        await self._claim()
        kafka = KafkaSettings.from_config(cfg)  # brokers and security, for every client
        await self._in_store(lambda: ensure_topics(kafka, self._topics(),
                                                   configs=cfg.topic_configs(),
                                                   replicas=cfg.topic_replicas()))
        self.producer = producer(kafka, {"linger.ms": 20, "batch.size": 512 * 1024, "acks": "all",
                                         "enable.idempotence": cfg.kafka.idempotent_producers})
        self.release_producer = ReleasePublisher(cfg)
        self._releaser = self.parts.releaser = Releaser(
            cfg, self.store, self._in_store, self._pool, self.release_producer, self.telemetry)
        # kernels load (compile, on a fresh clone) ahead of any compute; start goes on
        self._background(self.loop.run_in_executor(self._pool, warm_up_compute),
                         "warming the compute kernels")
        self._background(self.loop.run_in_executor(None, warm_up_release),
                         "warming the release's kernels")
        for sc in cfg.surveys:
            await self._in_store(self.store.ensure_survey, sc.id)
            ingest = SurveyIngest(sc, Validator(
                sc, cfg.hmac_key, max_message_bytes=cfg.kafka.max_message_bytes))
            estimator = ArrivalEstimator(cfg.planner.arrival_bin_seconds,
                                         cfg.planner.arrival_bins)
            survey = self.surveys[sc.id] = Survey(sc, ingest, estimator, self.parts)
            # stored models or provisional ones: calibrating is not on the start path
            self.survey_planner.load_models(survey, measure=False)
        # The collector exists before recovery: a close taken up again reads the partitions'
        # offsets through it at once, while its consumer is still joining the group.
        self.collector = self.parts.collector = KafkaCollector(
            cfg, {sid: survey.ingest for sid, survey in self.surveys.items()},
            KafkaDeadLetters(self.producer), on_stored=self._on_stored,
            on_control=self._on_control, on_restart=self.telemetry.count_restart)
        await self._recover()
        if self.coordinator is not None and not self.leading:
            await self.coordinator.follow()  # closes under way, before a message is read
        await self.collector.start()
        for sc in cfg.surveys:
            self._measuring[sc.id] = self._background(
                self.survey_planner.measure(self.surveys[sc.id], self._pool),
                f"survey {sc.id}: measuring its cost models")
        self.scheduler = BackgroundScheduler(timezone=timezone.utc)
        self.scheduler.start()
        if self.leading:
            await self._start_planners()
        if self.coordinator is not None:
            self.coordinator.start()
        log.info("service started: %d survey(s)", len(self.surveys))

    async def _claim(self) -> None:
        """Whether this instance runs the lifecycle: on SQLite it is the only one (the store
        is locked for it); on PostgreSQL, if it holds the lease (:mod:`.leadership`)."""
        if isinstance(self.store, SQLiteStore):
            self._instance_lock = single_instance(self.store.path)
        elif isinstance(self.store, PostgresStore):
            cfg = self.config
            coordination = await asyncio.to_thread(
                Coordination, cfg.store.url, instance_name(),
                key=lease_key(cfg.kafka.group_id), http=cfg.http.bind)
            self.coordinator = Coordinator(self, coordination)
            await self.coordinator.acquire()

    async def _start_planners(self) -> None:
        cfg = self.config
        for sid, survey in self.surveys.items():
            state = (await self._in_store(self.store.survey_state, sid)).state
            if state == RELEASED or survey.ingest.closed_at is not None:
                continue
            survey.start_planning(PlanningJob(
                self.scheduler, survey_id=sid, close_at=survey.config.close_at,
                plan=lambda now, survey=survey: self.survey_planner.plan(survey, now),
                on_base_start=lambda plan, survey=survey: self._threadsafe(
                    survey.planned_base(plan)),
                on_close=lambda sid=sid: self._threadsafe(self.close(sid)),
                interval_seconds=cfg.planner.interval_seconds,
                ready=lambda now, survey=survey: self.survey_planner.forecast_ready(survey, now),
                on_base_soon=lambda plan, survey=survey: self._threadsafe(
                    survey.read_ahead_soon()),
                soon_seconds=read_ahead_seconds(cfg.planner.interval_seconds)),
                base_started=state != OPEN)

    async def stop(self) -> None:
        if self.coordinator is not None:
            await self.coordinator.halt()
        if self.scheduler is not None:
            self.scheduler.shutdown(wait=False)
        for measuring in self._measuring.values():  # and the calibration's reach
            measuring.cancel()
        for survey in self.surveys.values():
            await survey.stop_tasks()
        if self.collector is not None:
            await self.collector.stop()
        if self.producer is not None:
            self.producer.flush()
            self.producer.close()
        if self.release_producer is not None:
            await asyncio.to_thread(self.release_producer.close)
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self.coordinator is not None:
            await self.coordinator.leave()
        self._store_thread.shutdown(wait=True)
        self.store.close()
        if self._instance_lock is not None:
            self._instance_lock.close()

    def _topics(self) -> dict[str, int]:
        """Every topic with its partitions; a release is one partition, so it stays in order
        and its manifest comes last."""
        parts = self.config.kafka.partitions
        names = {self.config.control_topic: 1}
        for sc in self.config.surveys:
            names[self.config.topic(sc.id, "responses")] = parts
            names[self.config.topic(sc.id, "deadletter")] = parts
            names[self.config.topic(sc.id, "release")] = 1
        return names

    async def survey_state(self, sid: str) -> SurveyState:
        """The survey's state as stored."""
        return await self._in_store(self.store.survey_state, sid)

    async def load_release(self, sid: str) -> ReleaseRow | None:
        """The survey's release as stored (written or published), or None before one."""
        return await self._in_store(self.store.load_release, sid)

    async def _in_store(self, fn: Any, *args: Any) -> Any:
        assert self.loop is not None
        return await self.loop.run_in_executor(self._store_thread, self._store_job, fn, *args)

    def _store_job(self, fn: Any, *args: Any) -> Any:
        """``fn`` in the store thread; when it started and failed: busy or down (health)."""
        self._store_job_since = time.monotonic()
        try:
            return fn(*args)
        except Exception:
            self._store_failed_at = time.monotonic()
            raise
        finally:
            self._store_job_since = None

    async def _in_loop_thread(self, fn: Any, *args: Any) -> Any:
        assert self.loop is not None
        return await self.loop.run_in_executor(None, fn, *args)

    async def measured(self, sid: str) -> None:
        """Wait until survey ``sid`` is planned with cost models measured on this machine."""
        task = self._measuring.get(sid)
        if task is not None:
            await self.survey_planner.wait_measured(self.surveys[sid], task)

    def _background(self, coro: Any, what: str) -> asyncio.Task:
        """Run ``coro`` beside the service; if it fails, the failure is logged with ``what``
        it was (a survey and a step), never left for the garbage collector to mention."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

        def report(done: asyncio.Future) -> None:
            if not done.cancelled() and done.exception() is not None:
                exc = done.exception()
                log.error("%s failed: %s", what, describe_error(exc), exc_info=withheld(exc))

        task.add_done_callback(report)
        return task

    def _apply_command(self, command: str, sid: str) -> asyncio.Task:
        """Carry out a verified control command, trying again while the store is down (one
        log line when it starts waiting, one when it is through); the collector commits the
        message only when this is done, so a restart meanwhile reads it again."""

        async def apply() -> None:
            wait, waited = COMMAND_RETRY_SECONDS[0], False
            while True:
                try:
                    if command == "close":
                        await self.close(sid)
                    else:
                        await self.start_base(sid, None)
                except StoreUnavailable:
                    if not waited:
                        log.warning("survey %s: the %s command waits for the store, which "
                                    "cannot be reached; trying again", sid, command)
                    waited = True
                    await asyncio.sleep(wait)
                    wait = min(2 * wait, COMMAND_RETRY_SECONDS[1])
                    continue
                if waited:
                    log.info("survey %s: the %s command is recorded, the store is back", sid,
                             command)
                return

        return self._background(apply(), f"survey {sid}: the {command} command")

    def _threadsafe(self, coro: Any) -> None:
        assert self.loop is not None
        asyncio.run_coroutine_threadsafe(coro, self.loop)

    # -- recovery ------------------------------------------------------------------------------
    async def _recover(self) -> None:
        for survey in self.surveys.values():
            await survey.recover()
            if self.leading:
                await survey.resume()

    # -- leadership (the LeaderHost a leadership.Coordinator drives) ---------------------------
    async def take_over(self) -> None:
        """This follower took the lifecycle lease (its holder died or stopped): carry on
        from the stored state as a restart would."""
        cfg = self.config.planner
        for sid, survey in self.surveys.items():
            times = await self._in_store(self.store.arrival_times, sid)
            estimator = ArrivalEstimator(cfg.arrival_bin_seconds, cfg.arrival_bins)
            estimator.observe(times)
            await survey.take_lead(estimator)
        await self._start_planners()

    async def step_down(self) -> None:
        """The lease was lost (its connection cut): stop every lifecycle task at once; the
        new leader carries them on from the store."""
        for survey in self.surveys.values():
            await survey.step_down()

    def observe_shared(self, sid: str, new_records: int) -> None:
        """Records stored by every instance since the last count (the leader's view of the
        arrivals when several instances collect)."""
        survey = self.surveys[sid]
        with survey.lock:
            survey.estimator.observe([time.time()] * new_records)

    def counted(self, sid: str, here: int) -> int:
        """Every instance's count of the survey's stored records (the leader's, read from the
        store each poll), or ``here``, this instance's, when it runs alone."""
        if self.coordinator is None:
            return here
        return self.coordinator.stored.get(sid, here)

    async def close_marks(self, sid: str) -> dict[int, int] | None:
        """The survey's close marks as stored (the leader's end offsets), or None before."""
        return await self._in_store(self.store.close_marks, sid)

    async def take_closure(self, sid: str, closed_at: float) -> dict[int, int]:
        """Close the survey on this instance at its partitions' current end offsets, which
        are not stored (a follower's own closure until the leader's marks are)."""
        assert self.collector is not None  # made in start()
        return await self.collector.take_close(sid, closed_at, _as_taken)

    # -- the collector's callbacks -----------------------------------------------------------
    def _on_stored(self, sid: str, arrival_times: list[float]) -> None:
        survey = self.surveys[sid]
        with survey.lock:
            if self.coordinator is None:  # else the store's count says (observe_shared)
                survey.estimator.observe(arrival_times)
            survey.history.add(time.time(), survey.ingest.stored)

    def _on_control(self, raw: bytes | None) -> asyncio.Task | None:
        """A signed control message (:mod:`streamanon.service.control`): close or start the
        base run."""
        try:
            command, sid = self.control_verifier.verify(raw)
        except ControlRejected as exc:
            log.warning("control message ignored: %s", exc.reason)
            return None
        if sid not in self.surveys:
            log.warning("control message ignored: unknown survey")
            return None
        return self._apply_command(command, sid)

    # -- the surveys' moves (survey.py) --------------------------------------------------------
    def set_close_time(self, sid: str, close_at: datetime) -> None:
        """Move a survey's scheduled close (and with it every plan)."""
        self.surveys[sid].set_close_time(close_at)

    async def start_base(self, sid: str, plan: Plan | None) -> bool:
        """Take the base snapshot now and run the base engine on it (:meth:`.Survey.start_base`)."""
        return await self.surveys[sid].start_base(plan)

    async def close(self, sid: str) -> None:
        """Close the survey (idempotent; :meth:`.Survey.request_close`)."""
        await self.surveys[sid].request_close()

    async def closed(self, sid: str, timeout: float | None = None) -> None:
        """Wait until the survey's release is published."""
        await self.surveys[sid].closed(timeout)

    # -- status (status.py) -------------------------------------------------------------------
    async def status(self, wait: float = STATUS_WAIT) -> ServiceStatus:
        """What the dashboard, ``/api/status`` and ``/metrics`` show: states, counts, plans,
        timings, the health of each part. Counts and times only, never a data value. It
        waits ``wait`` seconds at most for the store: then the stored part of each survey
        is the last one read, and the status says so (:func:`.status.within`)."""
        now = time.time()
        parts, unreachable = await within(wait, self.health(), read_stored(
            list(self.surveys), self._in_store, self.store, self._known), self._last_health)
        surveys = []
        for sid, survey in self.surveys.items():
            st, release = self._known.get(sid) or (never_read(sid), None)
            with survey.lock:
                pace = survey.estimator.pace(now)
                arrivals = list(survey.history.points)
                model = (survey.plans.models or (None, None))[0]
                measured = not survey.plans.provisional
            surveys.append(survey_status(
                survey, st, release, model, pace=pace, arrivals=arrivals, now=now,
                measured=measured, stored=None if
                self.coordinator is None else self.coordinator.survey_counts.get(sid)))
        return ServiceStatus(surveys=surveys, health=parts, started_at=self.started_at,
                             now=now, stale=bool(unreachable), unreachable=unreachable)

    async def health(self) -> dict[str, PartHealth]:
        """Each part's health (``streamanon.service.health``): collector, compute, store,
        publisher, broker. A part found down is logged and counted once per outage."""
        ping = (self._in_store(self.store.survey_state, next(iter(self.surveys)))
                if self.surveys else asyncio.sleep(0))
        asked, broker = time.monotonic(), asyncio.ensure_future(broker_health(
            self.release_producer))
        store = busy_store(await store_health(ping, writes_refused=getattr(
            self.collector, "store_paused", False)), asked, self._store_job_since,
            self._store_failed_at)
        brokers = await broker
        # the other parts after the wait, with no await before they are recorded: a part
        # restarted in place meanwhile (and counted then) is not seen down from before
        parts = {"collector": collector_health(self.collector, self.producer),
                 "compute": pool_health(self._pool, "compute process"),
                 "store": store, "publisher": producer_health(self.release_producer),
                 "broker": brokers}
        back = [n for n, p in parts.items() if p.ok and not self.telemetry.parts_up.get(n, True)]
        for name in self.telemetry.observe_health(parts):
            log.error("%s is down: %s (/healthz answers 503)", name, parts[name].detail)
        for name in back:  # the end of an outage: one line (the clients' errors are held)
            log.warning("%s is up again (%s)", name, parts[name].detail)
        self._last_health = parts
        return parts

    def check_token(self, presented: str) -> bool:
        return bool(self.config.http_token) and hmac.compare_digest(
            presented.encode(), self.config.http_token.encode())


async def serve(config: Config, *, stop: asyncio.Event | None = None,
                on_ready: Any = None) -> None:
    """Run the service and its HTTP server until ``stop`` is set (or SIGINT, SIGTERM or
    SIGHUP: each stops the service gracefully)."""
    import signal

    from streamanon.service.web import start_http

    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
    service = Service(config)
    runner = None
    try:
        await service.start()
        runner = await start_http(service, config.http.host, config.http.port)
        log.info("HTTP on http://%s", config.http.bind)
        if on_ready is not None:
            on_ready(service)
        await stop.wait()
    finally:
        if runner is not None:
            await runner.cleanup()
        await service.stop()
