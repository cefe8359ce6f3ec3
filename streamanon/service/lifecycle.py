"""The long-running service: collector, store, planner, base run, close, release (design spec §6).

One asyncio event loop runs the collector, the HTTP server and the close sequence; the planner
jobs run on an APScheduler background scheduler; the base engine and the incremental stage run
in a separate process (``ProcessPoolExecutor``), so ingest keeps flowing during a base run; all
store calls go through one worker thread.

Per survey::

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
follower that takes the lease over resumes as a restart does (:meth:`Service._resume`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hmac
import logging
import math
import threading
import time
from concurrent.futures import Executor, ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any

import numpy as np

from scheduler import live
from scheduler.arrivals import ArrivalEstimator
from scheduler.choice import AUTO_ENGINES, AUTO_STAGES, Choice, Option, choose
from scheduler.cost_model import CostModelStore, PowerLaw, calibrate, incremental_cost_model
from scheduler.jobs import PlanningJob
from scheduler.planner import Plan
from scheduler.quality import expected_delta
from streamanon.errors import describe_error, withheld
from streamanon.incremental import base_is_usable
from streamanon.incremental.run import TwoStageRun
from streamanon.release import base_partition, prepare_stored
from streamanon.service.closing import close_survey
from streamanon.service.collector import KafkaCollector
from streamanon.service.config import Config, SurveyConfig
from streamanon.service.control import ControlRejected, ControlVerifier
from streamanon.service.deadletters import KafkaDeadLetters
from streamanon.service.health import (
    PartHealth,
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
from streamanon.service.processes import worker_pool
from streamanon.service.publisher import ReleasePublisher, records_frame
from streamanon.service.releasing import Releaser, release_run
from streamanon.service.reports import (
    PlanStatus,
    ProgressStatus,
    ReleaseReport,
    ReleaseStatus,
    ServiceStatus,
    SurveyStatus,
)
from streamanon.service.runtime import SurveyRuntime
from streamanon.service.store import (
    BASE_DONE,
    BASE_RUNNING,
    CLOSING,
    OPEN,
    RELEASED,
    Checkpoint,
    PostgresStore,
    ReleaseRow,
    SQLiteStore,
    Store,
    StoreError,
    SurveyState,
    open_store,
)
from streamanon.service.telemetry import Telemetry
from streamanon.service.validation import Closure, Validator

log = logging.getLogger(__name__)


# -- work done in the compute process (module level, so it pickles) -----------------------------


def warm_up_compute() -> bool:
    """Load the compiled kernels (the refinement's too) in the compute process before they
    are needed."""
    Z = np.random.default_rng(0).standard_normal((60, 2))
    TwoStageRun(5, "mdav", "nn_split_end", refine=1.0).run(Z, 40)
    return True


class Service:
    """Everything one deployment runs. ``await start()``, then ``await closed(survey)``.

    The engines run in ``compute_pool`` (default: ``compute_workers`` spawned processes)."""

    def __init__(self, config: Config, *, store: Store | None = None,
                 compute_workers: int = 1, compute_pool: Executor | None = None) -> None:
        self.config = config
        self.store = store or open_store(config.store.url)
        self.cost_models = CostModelStore(config.planner.cost_models)
        self.control_verifier = ControlVerifier(config.http_token)
        self._lock = threading.Lock()
        self._store_thread = ThreadPoolExecutor(1, thread_name_prefix="store")
        self._pool = compute_pool or worker_pool(compute_workers)
        self.surveys: dict[str, SurveyRuntime] = {}
        self.producer: Any = None  # kafka-python: dead letters, from the store thread
        self.release_producer: Any = None  # librdkafka: releases (ReleasePublisher)
        self._releaser: Releaser | None = None  # made in start(), with the release producer
        self.collector: KafkaCollector | None = None
        self.scheduler: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._models: dict[str, tuple[PowerLaw, Any]] = {}
        self._options: dict[str, list[Option]] = {}  # engine = "auto": the candidates
        self._tasks: set[asyncio.Future] = set()
        self.started_at = time.time()
        self.telemetry = Telemetry()
        # several instances on one PostgreSQL store: the lifecycle lease (leadership.py)
        self.coordinator: Coordinator | None = None
        self._instance_lock: Any = None  # a SQLite store's lock: one instance only

    @property
    def leading(self) -> bool:
        """Whether this instance runs the lifecycle (plan, base run, close, release)."""
        return self.coordinator is None or self.coordinator.leading

    # -- start and stop ------------------------------------------------------------------------
    async def start(self) -> None:
        from apscheduler.schedulers.background import BackgroundScheduler
        from kafka import KafkaProducer

        from streamanon.service.broker import ensure_topics

        self.loop = asyncio.get_running_loop()
        cfg = self.config
        await self._claim()
        kafka = cfg.kafka_options()  # brokers and security, for every client
        await self._in_store(lambda: ensure_topics(cfg.kafka.bootstrap_servers, self._topics(),
                                                   configs=cfg.topic_configs(), **kafka))
        self.producer = KafkaProducer(**kafka,
                                      linger_ms=20, batch_size=512 * 1024, acks="all")
        self.release_producer = ReleasePublisher(cfg)
        self._releaser = Releaser(cfg, self.store, self._in_store, self._pool,
                                  self.release_producer, self.telemetry)
        warm = self.loop.run_in_executor(self._pool, warm_up_compute)
        for sc in cfg.surveys:
            await self._in_store(self.store.ensure_survey, sc.id)
            ingest = SurveyIngest(sc, Validator(
                sc, cfg.hmac_key, max_message_bytes=cfg.kafka.max_message_bytes))
            estimator = ArrivalEstimator(cfg.planner.arrival_bin_seconds,
                                         cfg.planner.arrival_bins)
            self.surveys[sc.id] = SurveyRuntime(sc, ingest, estimator)
            await self._in_loop_thread(self._load_models, sc)
        # The collector exists before recovery: a close taken up again reads the partitions'
        # offsets through it at once, while its consumer is still joining the group.
        self.collector = KafkaCollector(
            cfg, {sid: rt.ingest for sid, rt in self.surveys.items()},
            KafkaDeadLetters(self.producer), on_stored=self._on_stored,
            on_control=self._on_control, on_restart=self.telemetry.count_restart)
        await self._recover()
        if self.coordinator is not None and not self.leading:
            await self.coordinator.follow()  # closes under way, before a message is read
        await self.collector.start()
        await warm
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
        for sid, rt in self.surveys.items():
            state = (await self._in_store(self.store.survey_state, sid)).state
            if state == RELEASED or rt.ingest.closed_at is not None:
                continue
            rt.planner = PlanningJob(
                self.scheduler, survey_id=sid, close_at=rt.config.close_at,
                plan=lambda now, sid=sid: self._plan(sid, now),
                on_base_start=lambda plan, sid=sid: self._threadsafe(self._planned_base(sid, plan)),
                on_close=lambda sid=sid: self._threadsafe(self.close(sid)),
                interval_seconds=cfg.planner.interval_seconds,
                ready=lambda now, sid=sid: self._forecast_ready(sid, now))
            rt.planner.base_started = state != OPEN
            rt.planner.start()

    async def _take_over(self) -> None:
        """This follower took the lifecycle lease (its holder died or stopped): carry on
        from the stored state as a restart would."""
        cfg = self.config.planner
        for sid, rt in self.surveys.items():
            times = await self._in_store(self.store.arrival_times, sid)
            estimator = ArrivalEstimator(cfg.arrival_bin_seconds, cfg.arrival_bins)
            estimator.observe(times)
            with self._lock:
                rt.estimator = estimator
            await self._resume(sid)
        await self._start_planners()

    async def _step_down(self) -> None:
        """The lease was lost (its connection cut): stop every lifecycle task at once; the
        new leader carries them on from the store."""
        for rt in self.surveys.values():
            if rt.planner is not None:
                rt.planner.stop()
                rt.planner = None
            for task in (rt.base_task, rt.close_task):
                if task is not None and not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
            rt.base_task = rt.close_task = None

    def _observe_shared(self, sid: str, new_records: int) -> None:
        """Records stored by every instance since the last count (the leader's view of the
        arrivals when several instances collect)."""
        with self._lock:
            self.surveys[sid].estimator.observe([time.time()] * new_records)

    async def stop(self) -> None:
        if self.coordinator is not None:
            await self.coordinator.halt()
        if self.scheduler is not None:
            self.scheduler.shutdown(wait=False)
        for rt in self.surveys.values():
            for task in (rt.base_task, rt.close_task):
                if task is not None and not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
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
        return await self.loop.run_in_executor(self._store_thread, fn, *args)

    async def _in_loop_thread(self, fn: Any, *args: Any) -> Any:
        assert self.loop is not None
        return await self.loop.run_in_executor(None, fn, *args)

    def _background(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _threadsafe(self, coro: Any) -> None:
        assert self.loop is not None
        asyncio.run_coroutine_threadsafe(coro, self.loop)

    # -- recovery ------------------------------------------------------------------------------
    async def _recover(self) -> None:
        for sid, rt in self.surveys.items():
            st = await self._in_store(self.store.survey_state, sid)
            times = await self._in_store(self.store.arrival_times, sid)
            rt.estimator.observe(times)
            rt.ingest.stored = rt.ingest.received = len(times)
            if len(times):
                rt.history.add(float(np.max(times)), len(times))
            rt.ingest.closed_at = st.close_requested_at
            marks = await self._in_store(self.store.close_marks, sid)
            if st.state == RELEASED or marks is not None:  # before the collector reads a message
                rt.ingest.closure = Closure(st.close_requested_at or 0.0, marks,
                                            final=st.state == RELEASED)
            if st.state == RELEASED:
                rt.closed_event.set()
            if self.leading:
                await self._resume(sid)

    async def _resume(self, sid: str) -> None:
        """The lifecycle of a survey from its stored state (at a start, or when a follower
        takes the lease over)."""
        rt = self.surveys[sid]
        if rt.auto_engine:  # the base run made before the restart chose its engine
            cp = await self._in_store(self.store.load_checkpoint, sid)
            if cp is not None:
                self._resolve_engine(sid, cp.engine, "the engine of the stored base run")
        st = await self._in_store(self.store.survey_state, sid)
        if st.state == BASE_RUNNING:
            cp = await self._in_store(self.store.load_checkpoint, sid)
            if cp is not None:
                await self._in_store(self.store.transition, sid, BASE_DONE,
                                     "checkpoint found after restart")
            else:
                await self._in_store(self.store.transition, sid, OPEN,
                                     "base run interrupted; re-planning")
                log.warning("survey %s: base run was interrupted; it will be re-planned", sid)
        st = await self._in_store(self.store.survey_state, sid)
        if st.state == CLOSING or (st.close_requested_at is not None
                                   and st.state in (OPEN, BASE_DONE)):
            rt.close_task = asyncio.create_task(self._close(sid), name=f"close-{sid}")

    # -- planning ------------------------------------------------------------------------------
    def _load_models(self, sc: SurveyConfig) -> None:
        """The base cost model (stored, or calibrated now) and the incremental one; with
        ``engine = "auto"``, those of every candidate (:data:`scheduler.choice.AUTO_ENGINES`),
        MDAV's in use until the planner chooses; with ``incremental = "auto"``, an incremental
        model for every candidate stage (:data:`scheduler.choice.AUTO_STAGES`) after each."""
        stages = AUTO_STAGES if sc.incremental == "auto" else (None,)
        if sc.engine != "auto":
            self._models[sc.id] = self._engine_models(sc, sc.engine, stage=stages[0])
            if sc.incremental == "auto":
                base = self._models[sc.id][0]
                self._options[sc.id] = [
                    Option(sc.engine, *(self._models[sc.id] if stage == stages[0] else
                                        self._engine_models(sc, sc.engine, stage=stage,
                                                            base=base)), stage=stage)
                    for stage in stages]
            return
        self.surveys[sc.id].auto_engine = True
        # NN-split-end splits with MDAV after either
        mdav = self._engine_models(sc, "mdav", stage=stages[0])
        options = []
        for engine in AUTO_ENGINES:
            first = mdav if engine == "mdav" else self._engine_models(
                sc, engine, split=mdav[0], stage=stages[0])
            for stage in stages:
                models = first if stage == stages[0] else self._engine_models(
                    sc, engine, split=mdav[0], stage=stage, base=first[0])
                options.append(Option(engine, *models, stage=stage))
        self._options[sc.id] = options
        self._models[sc.id] = mdav

    def _stage_models(self, sid: str) -> dict[str, Any]:
        """``incremental = "auto"``: the candidate stages' cost models after the survey's
        (chosen) engine, in order of preference; empty otherwise."""
        rt = self.surveys[sid]
        if rt.config.incremental != "auto":
            return {}
        engine = rt.config.engine if rt.config.engine != "auto" else "mdav"
        return {o.stage: o.incremental_cost for o in self._options.get(sid, [])
                if o.engine == engine and o.stage is not None}

    def _engine_models(self, sc: SurveyConfig, engine: str,
                       split: PowerLaw | None = None, stage: str | None = None,
                       base: PowerLaw | None = None) -> tuple[PowerLaw, Any]:
        from streamanon.engines import get_engine, model_parameters, run_engine
        from streamanon.incremental import run_stage

        m = len(sc.quasi_identifiers)
        params = sc.engine_params if engine == sc.engine else {}  # "auto" takes none
        selects = model_parameters(engine, params)
        stage = stage or sc.incremental
        base = base or self.cost_models.get(engine, m, sc.k, selects)
        if base is None:
            log.info("calibrating %s%s at m = %d, k = %d", engine,
                     f" with {selects}" if selects else "", m, sc.k)
            result = calibrate(functools.partial(get_engine(engine).function, **params), m,
                               sc.k, budget_seconds=self.config.planner.calibration_seconds)
            base = self.cost_models.put(engine, m, sc.k, result, selects)
        return base, incremental_cost_model(
            stage, base, m, sc.k, partition=functools.partial(run_engine, "mdav"),
            run_stage=functools.partial(run_stage, stage, **(sc.incremental_params or {})),
            split=split)

    def _option_models(self, sid: str, engine: str) -> tuple[PowerLaw, Any]:
        option = next(o for o in self._options[sid] if o.engine == engine)
        return option.base_cost, option.incremental_cost

    def _resolve_engine(self, sid: str, engine: str, why: str,
                        expected: float | None = None) -> None:
        """``engine = "auto"``: run ``engine`` from now on (its cost models too)."""
        rt = self.surveys[sid]
        if not rt.auto_engine or rt.config.engine == engine:
            return
        if engine in {o.engine for o in self._options[sid]}:
            self._models[sid] = self._option_models(sid, engine)
        else:  # stored by a run under another configuration: it stays that run's engine
            log.warning("survey %s: the stored run used %s, which engine = \"auto\" does not "
                        "choose; it is kept (planned with MDAV's cost model)", sid, engine)
        with self._lock:
            rt.config = rt.config.model_copy(update={"engine": engine})
            rt.ingest.config = rt.config
        rt.engine_choice = {"configured": "auto", "chosen": engine, "reason": why,
                            "expected_delta": expected}
        log.info("survey %s: base engine %s (%s)", sid, engine, why)

    def _unresolve_engine(self, sid: str) -> None:
        """``engine = "auto"`` with no stored base run (it failed, or never ran): the choice
        is open again (the planner's next base run, or the one-shot run at close)."""
        rt = self.surveys[sid]
        if rt.auto_engine and rt.config.engine != "auto":
            with self._lock:
                rt.config = rt.config.model_copy(update={"engine": "auto"})
                rt.ingest.config = rt.config
            self._models[sid] = self._option_models(sid, "mdav")
            rt.engine_choice = None
            log.info("survey %s: no base run stored: the base engine will be chosen again", sid)

    def _forecast_ready(self, sid: str, now: datetime) -> bool:
        """Whether the survey's arrivals so far are enough to act on its plan: the pace has
        been measured (:func:`scheduler.live.forecast_ready`), and the plan's base snapshot
        has its records (:func:`scheduler.live.snapshot_ready`)."""
        rt = self.surveys[sid]
        close = rt.config.close_at
        t = now.timestamp()
        left = (close.timestamp() - t) if close else 0.0
        with self._lock:
            bins = rt.estimator.complete_bins(t)
            width = rt.estimator.bin_seconds
            plan, received = rt.last_plan, rt.ingest.stored
        if self.coordinator is not None:
            received = self.coordinator.stored.get(sid, received)
        return (live.forecast_ready(bins, left, width)
                and live.snapshot_ready(plan, received, left))

    def _plan(self, sid: str, now: datetime) -> Plan:
        rt = self.surveys[sid]
        sc = rt.config
        t = now.timestamp()
        close = sc.close_at.timestamp() if sc.close_at else t
        with self._lock:
            pace = rt.estimator.pace(t)
            received = rt.ingest.stored
        if self.coordinator is not None:  # every instance's records, not only this one's
            received = self.coordinator.stored.get(sid, received)
        arrivals = live.forecast(received, pace, close - t, sc.expected_records)
        plan, choice = self._plan_for(sid, arrivals, close - t)
        with self._lock:  # the plan and its choice together (the loop reads both)
            rt.last_plan = plan
            if choice is not None:
                rt.choice = choice
        return plan

    def _plan_for(self, sid: str, arrivals: Any,
                  seconds_to_close: float) -> tuple[Plan, Choice | None]:
        """The plan for the forecast ``arrivals``; with ``engine = "auto"`` not chosen yet,
        the planner's choice of engine too."""
        rt = self.surveys[sid]
        sc = rt.config
        if rt.auto_engine and sc.engine == "auto":
            choice = choose(arrivals, self._options[sid], k=sc.k, stage=sc.incremental,
                            deadline=sc.deadline, seconds_to_close=seconds_to_close,
                            refine=sc.refine,
                            max_delta=None if sc.objective == "earliest" else sc.max_delta)
            return choice.plan, choice
        if sc.incremental == "auto":  # the stage is the planner's: every candidate's plan
            candidates = [o for o in self._options[sid] if o.engine == sc.engine]
            chosen = choose(arrivals, candidates, k=sc.k, stage=sc.incremental,
                            deadline=sc.deadline, seconds_to_close=seconds_to_close,
                            refine=sc.refine,
                            max_delta=None if sc.objective == "earliest" else sc.max_delta)
            return chosen.plan, None
        base, incremental = self._models[sid]
        plan = live.plan(arrivals, base, incremental, k=sc.k, deadline=sc.deadline,
                         seconds_to_close=seconds_to_close, refine=sc.refine,
                         quality=sc.quality())
        if rt.auto_engine:  # chosen: the plans go on saying which engine, and its quality
            plan = dataclasses.replace(plan, engine=sc.engine, expected_delta=expected_delta(
                sc.engine, sc.incremental, plan.nu))
        return plan, None

    def _choose_now(self, sid: str, plan: Plan | None = None, *,
                    one_shot_records: int | None = None) -> None:
        """``engine = "auto"`` still open when the base run starts or the survey closes: the
        choice of ``plan`` (the base trigger's), else of the latest plan, else planned now; or,
        with ``one_shot_records``, the choice between the one-shot runs on that many records
        at close.

        A survey that closes on command has no close time to plan against: its plans, and
        so its choice, are between the one-shot runs on the records stored."""
        rt = self.surveys[sid]
        if not rt.auto_engine or rt.config.engine != "auto":
            return
        with self._lock:
            latest, choice = rt.last_plan, rt.choice
            n = rt.ingest.stored
        plan = None if one_shot_records is not None else plan or latest
        if plan is None or plan.engine is None:
            if self.coordinator is not None:
                n = self.coordinator.stored.get(sid, n)
            if one_shot_records is not None:
                n = one_shot_records
            plan, choice = self._plan_for(sid, live.forecast(n, 0.0, 0.0, None), 0.0)
        assert plan.engine is not None
        reason = choice.reason if choice is not None and choice.plan is plan else (
            f"planned: {plan.engine}, expected {plan.expected_delta:+.1%} against one-shot MDAV"
            if plan.expected_delta is not None else "planned")
        self._resolve_engine(sid, plan.engine, reason, plan.expected_delta)

    def _on_stored(self, sid: str, arrival_times: list[float]) -> None:
        rt = self.surveys[sid]
        with self._lock:
            if self.coordinator is None:  # else the store's count says (_observe_shared)
                rt.estimator.observe(arrival_times)
            rt.history.add(time.time(), rt.ingest.stored)

    def _on_control(self, raw: bytes | None) -> None:
        """A signed control message (:mod:`streamanon.service.control`): close or start the
        base run."""
        try:
            command, sid = self.control_verifier.verify(raw)
        except ControlRejected as exc:
            log.warning("control message ignored: %s", exc.reason)
            return
        if sid not in self.surveys:
            log.warning("control message ignored: unknown survey")
            return
        if command == "close":
            self._background(self.close(sid))
        else:
            self._background(self.start_base(sid, None))

    # -- base run ------------------------------------------------------------------------------
    async def _planned_base(self, sid: str, plan: Plan) -> None:
        """The planner's trigger; if the snapshot is still too small, let it fire again."""
        if not await self.start_base(sid, plan):
            rt = self.surveys[sid]
            st = await self._in_store(self.store.survey_state, sid)
            if rt.planner is not None and st.state == OPEN and st.close_requested_at is None:
                rt.planner.base_started = False

    def set_close_time(self, sid: str, close_at: datetime) -> None:
        """Move a survey's scheduled close (and with it every plan)."""
        rt = self.surveys[sid]
        rt.config = rt.config.model_copy(update={"close": close_at})
        rt.ingest.config = rt.config
        if rt.planner is not None:
            rt.planner.reschedule_close(close_at)

    async def start_base(self, sid: str, plan: Plan | None) -> bool:
        """Take the base snapshot now and run the base engine on it, in the compute process."""
        rt = self.surveys[sid]
        if self.coordinator is not None and not self.coordinator.leading:
            await asyncio.to_thread(self.coordinator.coordination.request, sid, "start_base")
            log.info("survey %s: base run requested; handed to the leader", sid)
            return False
        if rt.base_task is not None:
            return False
        st = await self._in_store(self.store.survey_state, sid)
        if st.state != OPEN or st.close_requested_at is not None:
            return False
        if self.coordinator is not None:  # other instances insert too: a clean cut
            snapshot_seq = await asyncio.to_thread(self.coordinator.coordination.snapshot_seq,
                                                   sid)
        else:
            snapshot_seq = await self._in_store(self.store.max_seq, sid)
        n_base = await self._in_store(self.store.count, sid)
        if not base_is_usable(n_base, rt.config.k):
            log.info("survey %s: base snapshot of %d records is under 2k; one-shot at close",
                     sid, n_base)
            return False
        started = time.time()
        self._choose_now(sid, plan)
        try:
            await self._in_store(lambda: self.store.transition(
                sid, BASE_RUNNING, f"snapshot of {n_base} records", expect=[OPEN],
                base_started_at=started))
        except BaseException:
            self._unresolve_engine(sid)
            raise
        if rt.planner is not None:
            rt.planner.base_started = True
        rt.last_plan = plan or rt.last_plan
        rt.base_task = asyncio.create_task(self._base(sid, snapshot_seq, started),
                                           name=f"base-{sid}")
        return True

    async def _base(self, sid: str, snapshot_seq: int, started: float) -> None:
        from streamanon.engines import model_parameters

        rt = self.surveys[sid]
        sc = rt.config
        m = len(sc.quasi_identifiers)
        try:
            records = await self._in_store(
                lambda: self.store.load_records(sid, m, upto_seq=snapshot_seq))
            frame = records_frame(records, sc)
            prepared = prepare_stored(frame, sc.schema, sc.k)
            compute = self.config.compute
            if compute.cluster == "local":
                labels, seconds = await self.loop.run_in_executor(
                    self._pool, base_partition, release_run(sc), prepared)
            else:  # the compute process cuts the snapshot and is the cluster's client
                from streamanon.cluster import partitioned_base

                labels, seconds = await self.loop.run_in_executor(
                    self._pool, partitioned_base, release_run(sc), prepared, compute.cluster,
                    compute.part_size)
            scaling = prepared.scaling
            cp = Checkpoint(snapshot_seq=snapshot_seq, n_base=len(records), labels=labels,
                            mean=scaling.mean, scale=scaling.scale, engine=sc.engine,
                            seconds=seconds, started_at=started)
            await self._in_store(self.store.save_checkpoint, sid, cp)
            await self._in_store(self.store.transition, sid, BASE_DONE,
                                 f"base run took {seconds:.2f} s")
            rt.timings["base_seconds"] = seconds
            if self._releaser is not None:
                await self._releaser.prepare_base(rt, snapshot_seq, frame, labels)
            if compute.cluster == "local":  # a cluster's time is its parts' and workers'
                await self._in_store(self.cost_models.observe, sc.engine, m, sc.k,
                                     len(records), seconds,
                                     model_parameters(sc.engine, sc.engine_params))
            log.info("survey %s: base run on %d records done in %.2f s", sid, len(records),
                     seconds)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("survey %s: base run failed (%s); one-shot at close", sid,
                      describe_error(exc), exc_info=withheld(exc))
            await self._in_store(self.store.set_error, sid,
                                 f"base run failed: {describe_error(exc)}")
            with contextlib.suppress(StoreError):
                await self._in_store(self.store.transition, sid, OPEN, "base run failed")
            self._unresolve_engine(sid)
        finally:
            rt.base_task = None

    # -- close and release (closing.py, releasing.py) ------------------------------------------
    async def close(self, sid: str) -> None:
        """Close the survey (idempotent); returns once the close request is stored (a restart
        carries it on) and the close sequence has been started (on a follower: by the leader,
        which finds the stored request within a poll)."""
        rt = self.surveys[sid]
        st = await self._in_store(self.store.survey_state, sid)
        if st.state != RELEASED and st.close_requested_at is None:
            await self._in_store(self.store.request_close, sid, time.time())
        if not self.leading:  # stored: the leader carries it out (leadership.Coordinator)
            return
        if rt.close_task is None:
            rt.close_task = asyncio.create_task(self._close(sid), name=f"close-{sid}")

    async def closed(self, sid: str, timeout: float | None = None) -> None:
        """Wait until the survey's release is published."""
        await asyncio.wait_for(self.surveys[sid].closed_event.wait(), timeout)

    async def _close(self, sid: str) -> None:
        rt = self.surveys[sid]
        assert self.collector is not None and self._releaser is not None  # made in start()
        releaser = self._releaser
        cp = await self._in_store(self.store.load_checkpoint, sid)
        row = await self._in_store(self.store.load_release, sid)
        if row is not None:  # written before a restart: its engine, whatever comes next
            self._resolve_engine(sid, row.report["engine"], "the engine of the written release",
                                 (row.report.get("engine_choice") or {}).get("expected_delta"))
        elif cp is not None:
            self._resolve_engine(sid, cp.engine, "the engine of the base run")
        elif rt.auto_engine:  # between the one-shot runs, on every instance's records
            self._unresolve_engine(sid)
            self._choose_now(sid, one_shot_records=await self._in_store(self.store.count, sid))
        await close_survey(rt, store=self.store, in_store=self._in_store,
                           collector=self.collector,
                           release=lambda: releaser.release(rt, self._models[sid][0],
                                                            self._stage_models(sid)),
                           before_marks=None if self.coordinator is None
                           else self.coordinator.followers_closed)

    # -- status --------------------------------------------------------------------------------
    async def status(self) -> ServiceStatus:
        """What the dashboard, ``/api/status`` and ``/metrics`` show: states, counts, plans,
        timings, the health of each part. Counts and times only, never a data value."""
        health = await self.health()
        now = time.time()
        surveys = []
        for sid, rt in self.surveys.items():
            sc = rt.config
            st = await self._in_store(self.store.survey_state, sid)
            release = await self._in_store(self.store.load_release, sid)
            plan = rt.last_plan
            with self._lock:
                pace = rt.estimator.pace(now)
                arrivals = list(rt.history.points)
            close_at = sc.close_at.timestamp() if sc.close_at else None
            close_ref = st.close_requested_at or close_at
            deadline_at = (close_ref + sc.deadline
                           if close_ref is not None and sc.deadline is not None else None)
            base_at = rt.planner.base_at if rt.planner else None
            model = self._models.get(sid, (None, None))[0]
            published = release is not None and release.status == "published"
            surveys.append(SurveyStatus(
                id=sid, state=st.state, error=st.error, k=sc.k,
                engine=sc.engine, incremental=sc.incremental,
                received=rt.ingest.received, stored=rt.ingest.stored,
                redelivered=rt.ingest.redelivered,
                dead_lettered=dict(rt.ingest.rejected), releases=int(published),
                pace=pace, now=now,
                close_at=close_at, close_requested_at=st.close_requested_at,
                deadline_seconds=sc.deadline, deadline_at=deadline_at,
                base_at=base_at.timestamp() if base_at else None,
                base_started_at=st.base_started_at,
                arrival_coefficient=_finite(plan.arrival_coefficient) if plan else None,
                nu=plan.nu if plan else None,
                cost_model=None if model is None else (
                    "mdav" if sc.engine == "auto" else sc.engine, model.a, model.b),
                arrivals=arrivals,
                forecast=self._forecast_points(rt, now, close_at),
                progress=self._progress(rt, st, model, now),
                plan=None if plan is None else PlanStatus(
                    mode=plan.mode, nu=plan.nu, n_total=plan.n_total,
                    head_start_seconds=_finite(plan.head_start),
                    finish_after_close_seconds=plan.finish_after_close,
                    arrival_coefficient=_finite(plan.arrival_coefficient),
                    base_at=base_at.isoformat() if base_at else None,
                    refine_seconds=plan.refine_seconds, engine=plan.engine,
                    expected_delta=plan.expected_delta,
                    choice=None if rt.choice is None else rt.choice.reason,
                    stage=plan.stage),
                release=None if release is None else ReleaseStatus.of(
                    release.status, ReleaseReport.from_json(release.report)),
            ))
        return ServiceStatus(surveys=surveys, health=health, started_at=self.started_at,
                             now=now)

    async def health(self) -> dict[str, PartHealth]:
        """Each part's health (``streamanon.service.health``): collector, compute, store, publisher.
        A part found down is logged and counted once per outage."""
        ping = (self._in_store(self.store.survey_state, next(iter(self.surveys)))
                if self.surveys else asyncio.sleep(0))
        parts = {"collector": collector_health(self.collector, self.producer),
                 "compute": pool_health(self._pool, "compute process"),
                 "store": await store_health(ping, writes_refused=getattr(
                     self.collector, "store_paused", False)),
                 "publisher": producer_health(self.release_producer)}
        for name in self.telemetry.observe_health(parts):
            log.error("%s is down: %s (/healthz answers 503)", name, parts[name].detail)
        return parts

    def _forecast_points(self, rt: SurveyRuntime, now: float,
                         close_at: float | None) -> list[tuple[float, float]]:
        """The forecast arrival curve from now to the scheduled close (two points: uniform
        arrivals at the planned total), or nothing when there is no scheduled close."""
        plan = rt.last_plan
        if close_at is None or close_at <= now or plan is None or rt.ingest.closed_at:
            return []
        return [(now, float(rt.ingest.stored)), (close_at, float(max(plan.n_total,
                                                                    rt.ingest.stored)))]

    @staticmethod
    def _progress(rt: SurveyRuntime, st: Any, model: PowerLaw | None,
                  now: float) -> ProgressStatus | None:
        """The running stage: its start and the cost model's estimate of its length."""
        if st.state == BASE_RUNNING and st.base_started_at:
            n = rt.last_plan.n_total * (1 - rt.last_plan.nu) if rt.last_plan else rt.ingest.stored
            expected = model(max(n, 1)) if model is not None else None
            return ProgressStatus(stage="base", started_at=st.base_started_at,
                                  elapsed_seconds=now - st.base_started_at,
                                  expected_seconds=expected)
        if st.state == CLOSING and st.close_requested_at:
            plan = rt.last_plan
            return ProgressStatus(stage="release", started_at=st.close_requested_at,
                                  elapsed_seconds=now - st.close_requested_at,
                                  expected_seconds=plan.finish_after_close if plan else None,
                                  refine_seconds=plan.refine_seconds if plan else None)
        return None

    def check_token(self, presented: str) -> bool:
        return bool(self.config.http_token) and hmac.compare_digest(
            presented.encode(), self.config.http_token.encode())


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


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
