"""One survey in the running service: :class:`Survey` owns its state and makes its moves.

A survey's state is its configuration, its ingest (:class:`~.ingest.SurveyIngest`), its
arrival estimate, its planner job, what its base run and close left (timings, the base
release made before close, the records read ahead), and the running base-run and close tasks.
The planner job's thread and the event loop share it under the survey's own :attr:`Survey.lock`.

Its moves are methods: resume from the stored state (:meth:`Survey.resume`), start the base run
(:meth:`Survey.start_base`), read its records ahead (:meth:`Survey.read_ahead_soon`), close
(:meth:`Survey.request_close`) and release (the close sequence, :meth:`Survey.close_sequence`).
Every change of the stored state goes through :meth:`Survey.move`, which refuses a move
:data:`~.states.TRANSITIONS` does not allow (:class:`~.store.IllegalMove`, checked by the
store in the transaction that moves it). The steps themselves are
:mod:`.base_run`, :mod:`.closing` and :mod:`.releasing`: they take a survey and return their
results (or record them through its methods).

This module is the only one that writes a survey (``tests/test_survey_writes.py``): the
planner (:class:`~.planning.SurveyPlanner`), the steps and the lease hand what they decided
to its methods (:meth:`Survey.settle_engine`, :meth:`Survey.adopt_models`,
:meth:`Survey.keep_plan`, :meth:`Survey.closed_as_stored`, ...), which write what the planner
job's thread shares with the event loop under :attr:`Survey.lock`. The configuration is not
rewritten when an ``auto`` setting is settled: :attr:`Survey.chosen` keeps what was chosen,
and :attr:`Survey.engine` and :attr:`Survey.stage` read it first.

What every survey shares (the store and its thread, the compute pool, the planner's cost
models, the releaser, the collector, the lease) is the service's :class:`ServiceParts`, made
once by :class:`~.lifecycle.Service`. Nothing here needs a broker: a test drives a survey
through its states with a stand-in collector and releaser.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from scheduler.arrivals import ArrivalEstimator
from scheduler.jobs import PlanningJob
from scheduler.planner import Plan
from streamanon.incremental import base_is_usable
from streamanon.service.base_run import BaseRunResult, read_ahead, run_base
from streamanon.service.closing import close_survey
from streamanon.service.config import Config, SurveyConfig
from streamanon.service.ingest import SurveyIngest
from streamanon.service.runtime import (
    ArrivalHistory,
    Chosen,
    PlanState,
    ReadAhead,
    Settled,
    StoreCall,
)
from streamanon.service.states import BASE_DONE, BASE_RUNNING, CLOSING, OPEN, RELEASED
from streamanon.service.store import IllegalMove as IllegalMove  # raised by move
from streamanon.service.store import Store, SurveyState
from streamanon.service.validation import Closure

if TYPE_CHECKING:
    from streamanon.service.leadership import Coordinator
    from streamanon.service.planning import SurveyPlanner
    from streamanon.service.releasing import Releaser

log = logging.getLogger(__name__)


@dataclass
class ServiceParts:
    """What a survey's moves use of the service, shared by every survey: the store (its
    calls go through ``in_store``, the service's one store thread), the compute pool, the
    planner and its cost models, the releaser and the collector (made when the service
    starts), and the lease when several instances share the store."""

    config: Config
    store: Store
    in_store: StoreCall
    pool: Executor
    planner: SurveyPlanner
    releaser: Releaser | None = None
    collector: Any = None  # a KafkaCollector: take_close, drain
    coordinator: Coordinator | None = None

    @property
    def leading(self) -> bool:
        """Whether this instance runs the lifecycle (plan, base run, close, release)."""
        return self.coordinator is None or self.coordinator.leading


class Survey:
    """One survey's state in the running service, and its moves (see the module)."""

    def __init__(self, config: SurveyConfig, ingest: SurveyIngest, estimator: ArrivalEstimator,
                 parts: ServiceParts | None = None) -> None:
        self.config = config
        self.ingest = ingest
        self.estimator = estimator
        self.parts = parts
        #: Guards what the planner job's thread and the event loop share: the configuration
        #: (an engine chosen), the estimator, the latest plan and choice, the plan state.
        self.lock = threading.Lock()
        self.state: str | None = None  # as last read from the store or moved to here
        self.planner: PlanningJob | None = None
        self.last_plan: Plan | None = None
        self.base_task: asyncio.Task | None = None
        self.close_task: asyncio.Task | None = None
        self.closed_event = asyncio.Event()
        self.timings: dict[str, float] = {}
        self.base_steps: dict[str, float] = {}  # of the latest base run
        self.base_plan: Plan | None = None  # the plan the latest base run was started on
        self.read_ahead = ReadAhead()
        #: (snapshot seq, streamanon.splicing.BaseRelease): the base release made before close
        self.base_release: tuple[int, Any] | None = None
        self.history = ArrivalHistory()
        #: engine = "auto": the planner's latest choice (scheduler.choice.Choice), until
        #: :meth:`settle_engine` settles it
        self.choice: Any = None
        #: what the ``auto`` settings became (the configuration keeps "auto"): :attr:`engine`
        #: and :attr:`stage` read it first
        self.chosen = Chosen()
        #: said once when a plan shows the release will be late (scheduler.live.window_warning)
        self.window_warning: str | None = None
        self.plans = PlanState()  # what the planner keeps of it (planning.SurveyPlanner)

    @property
    def id(self) -> str:
        return self.config.id

    @property
    def auto_engine(self) -> bool:
        """``engine = "auto"``: the planner chooses the base engine."""
        return self.config.engine == "auto"

    @property
    def engine(self) -> str:
        """The base engine: the configured one, or the one ``engine = "auto"`` settled on
        (``"auto"`` until then)."""
        settled = self.chosen.engine  # one read: another thread may replace ``chosen``
        return settled.name if settled is not None else self.config.engine

    @property
    def stage(self) -> str:
        """The incremental stage: the configured one, or the one ``incremental = "auto"``
        settled on at close (``"auto"`` until then)."""
        settled = self.chosen.stage  # one read: another thread may replace ``chosen``
        return settled.name if settled is not None else self.config.incremental

    @property
    def engine_choice(self) -> dict[str, Any] | None:
        """What ``engine = "auto"`` chose and why, for the report (None until it chose)."""
        return self.chosen.engine_report()

    def settle_engine(self, engine: str, why: str, expected: float | None = None,
                      models: tuple[Any, Any] | None = None) -> None:
        """``engine = "auto"`` runs ``engine`` from now on, planned with ``models`` when
        given (the candidate's own cost models)."""
        with self.lock:
            self.chosen = replace(self.chosen, engine=Settled(engine, why, expected))
            if models is not None:
                self.plans.models = models

    def unsettle_engine(self, models: tuple[Any, Any]) -> None:
        """``engine = "auto"`` with no stored base run: the choice is open again, planned
        with ``models`` meanwhile."""
        with self.lock:
            self.chosen = replace(self.chosen, engine=None)
            self.plans.models = models

    def settle_stage(self, stage: str, why: str) -> None:
        """``incremental = "auto"`` runs ``stage`` at close (chosen for the real counts)."""
        with self.lock:
            self.chosen = replace(self.chosen, stage=Settled(stage, why))

    # -- what the planner hands over (planning.SurveyPlanner), kept under the lock ------------
    def adopt_models(self, models: tuple[Any, Any], options: list[Any] | None, *,
                     provisional: bool) -> None:
        """Plan with ``models`` (and the candidates ``options``, when given) from now on; an
        engine ``engine = "auto"`` has settled on keeps its own candidate's models."""
        with self.lock:
            if options is not None:
                self.plans.options = options
            settled = self.chosen.engine
            own = None if settled is None else next(
                (o for o in options or [] if o.engine.name == settled.name), None)
            self.plans.models = models if own is None else (own.base_cost, own.incremental_cost)
            self.plans.provisional = provisional

    def keep_plan(self, plan: Plan, choice: Any, at: float) -> float:
        """The planner's latest ``plan`` made at ``at`` (and its engine ``choice``, if any),
        kept together; returns when the survey was first planned here."""
        with self.lock:
            self.last_plan = plan
            if choice is not None:
                self.choice = choice
            if self.plans.first_plan is None:
                self.plans.first_plan = at
            return self.plans.first_plan

    def warn_of_window(self, warning: str) -> bool:
        """Keep the warning that the release will be late; False when one is kept already
        (it is said once)."""
        with self.lock:
            if self.window_warning is not None:
                return False
            self.window_warning = warning
            return True

    def observe_work_share(self, share: float) -> None:
        """The share of the records the base engine runs on (repeated keys collapsed)."""
        with self.lock:
            self.plans.work_share = share

    def _parts(self) -> ServiceParts:
        if self.parts is None:
            raise RuntimeError(f"survey {self.id}: not attached to a service")
        return self.parts

    # -- the stored state ----------------------------------------------------------------------
    async def stored_state(self) -> SurveyState:
        """The survey's state as stored (and kept as :attr:`state`)."""
        p = self._parts()
        st = await p.in_store(p.store.survey_state, self.id)
        self.state = st.state
        return st

    async def move(self, to: str, why: str, **fields: Any) -> SurveyState:
        """Move the stored state to ``to`` (with ``fields``, columns of the survey's row);
        :class:`~.store.IllegalMove` when :data:`.states.TRANSITIONS` does not allow it from
        the stored state (the store checks and moves in one transaction)."""
        p = self._parts()
        st = await p.in_store(lambda: p.store.transition(self.id, to, why, **fields))
        self.state = st.state
        return st

    # -- what the steps report back ------------------------------------------------------------
    def record(self, step: str, seconds: float) -> None:
        """A step's time (or moment) for the status and the release report."""
        self.timings[step] = seconds

    def released(self) -> None:
        """The release is published (or was before): :meth:`closed` returns."""
        self.base_release = None
        self.state = RELEASED
        self.closed_event.set()

    def base_release_used(self) -> None:
        """The release was computed with the base release: its memory can go."""
        self.base_release = None

    def closing(self, closed_at: float) -> None:
        """The close is stored: responses after it are dead-lettered; no more plans."""
        with self.lock:
            self.ingest.closed_at = closed_at
        self.record("closed_at", closed_at)
        if self.planner is not None:
            self.planner.closed = True
            self.planner.stop()

    def drained(self, closure: Closure, seconds: float) -> None:
        """The responses sent before the close are stored: the closure is final."""
        self.ingest.closure = closure
        self.record("drain", seconds)

    def base_finished(self, result: BaseRunResult) -> None:
        """What a base run left: its steps, its time and the base release it prepared."""
        self.base_steps = result.steps
        if result.seconds is not None:
            self.record("base_seconds", result.seconds)
        if result.base_release is not None:
            self.base_release = result.base_release
            self.record("prepare_base", result.prepare_seconds)
        self.base_task = None
        self.read_ahead.drop()

    # -- moves ---------------------------------------------------------------------------------
    async def recover(self) -> None:
        """The counts, arrival times and closure as stored, before the collector reads a
        message (at a start)."""
        p = self._parts()
        st = await self.stored_state()
        times = await p.in_store(p.store.arrival_times, self.id)
        self.estimator.observe(times)
        self.ingest.stored = self.ingest.received = len(times)
        if len(times):
            self.history.add(float(np.max(times)), len(times))
        marks = await p.in_store(p.store.close_marks, self.id)
        # before the collector reads a message; a released survey is closed for good
        self.closed_as_stored(st, marks, final=st.state == RELEASED, at_start=True)
        if st.state == RELEASED:
            self.released()

    def closed_as_stored(self, st: SurveyState, marks: Any, *, final: bool,
                         at_start: bool = False) -> bool:
        """The close as the store has it (``st``, the close ``marks``): the close time, and the
        closure of the stored marks (``final`` once the leader closes for good; at a start,
        a released survey's even without marks). Returns whether the survey holds a closure
        now: a follower without one takes its own (:meth:`~.leadership.Coordinator.follow`).
        Shared by :meth:`recover` and a follower's part of the close, each of which says
        :meth:`released` once it is done with a released survey."""
        with self.lock:
            self.ingest.closed_at = st.close_requested_at
            closure = self.ingest.closure
            if (marks is not None or (at_start and st.state == RELEASED)) and (
                    closure is None or closure.marks != marks or closure.final != final):
                self.ingest.closure = Closure(st.close_requested_at or 0.0, marks, final=final)
            return self.ingest.closure is not None

    # -- the lease (several instances: leadership.Coordinator) --------------------------------
    def start_planning(self, job: PlanningJob, *, base_started: bool) -> None:
        """Plan the survey with ``job`` (the leader's planner job) from now on."""
        self.planner = job
        job.base_started = base_started
        job.start()

    async def take_lead(self, estimator: ArrivalEstimator) -> None:
        """This instance took the lifecycle lease: the arrivals as every instance stored them
        (``estimator``), then the lifecycle from the stored state (:meth:`resume`)."""
        with self.lock:
            self.estimator = estimator
        await self.resume()

    async def step_down(self) -> None:
        """The lease was lost: no more plans, every lifecycle task stopped (the new leader
        carries them on from the store)."""
        if self.planner is not None:
            self.planner.stop()
            self.planner = None
        await self.stop_tasks()
        self.base_task = self.close_task = None

    async def resume(self) -> None:
        """The lifecycle from the stored state (at a start, or when a follower takes the
        lease over): an interrupted base run is kept (its checkpoint) or re-planned, a close
        under way goes on."""
        p = self._parts()
        if self.auto_engine:  # the base run made before the restart chose its engine
            cp = await p.in_store(p.store.load_checkpoint, self.id)
            if cp is not None:
                p.planner.resolve_engine(self, cp.engine, "the engine of the stored base run")
        st = await self.stored_state()
        if st.state == BASE_RUNNING:
            cp = await p.in_store(p.store.load_checkpoint, self.id)
            if cp is not None:
                await self.move(BASE_DONE, "checkpoint found after restart")
            else:
                await self.move(OPEN, "base run interrupted; re-planning")
                log.warning("survey %s: base run was interrupted; it will be re-planned",
                            self.id)
        st = await self.stored_state()
        if st.state == CLOSING or (st.close_requested_at is not None
                                   and st.state in (OPEN, BASE_DONE)):
            self._start_close()

    def set_close_time(self, close_at: datetime) -> None:
        """Move the scheduled close (and with it every plan)."""
        with self.lock:
            self.config = self.config.model_copy(update={"close": close_at})
            self.ingest.config = self.config
        if self.planner is not None:
            self.planner.reschedule_close(close_at)

    async def planned_base(self, plan: Plan) -> None:
        """The planner's trigger; if the snapshot is still too small, let it fire again."""
        if self.config.private:
            return  # a differentially private release has no base run: never again
        if not await self.start_base(plan):
            st = await self.stored_state()
            if self.planner is not None and st.state == OPEN and st.close_requested_at is None:
                self.planner.base_started = False

    async def start_base(self, plan: Plan | None) -> bool:
        """Take the base snapshot now and run the base engine on it, in the compute process;
        False when it does not start (one runs, the survey is closing, the snapshot is under
        2k records, or a follower handed the request to the leader)."""
        p = self._parts()
        if not p.leading:
            assert p.coordinator is not None
            await asyncio.to_thread(p.coordinator.coordination.request, self.id, "start_base")
            log.info("survey %s: base run requested; handed to the leader", self.id)
            return False
        if self.base_task is not None:
            return False
        if self.config.private:
            log.info("survey %s: no base run: its differentially private release is one sort "
                     "and one draw at close", self.id)
            return False
        st = await self.stored_state()
        if st.state != OPEN or st.close_requested_at is not None:
            return False
        snapshot_seq = await self.clean_cut()
        n_base = await p.in_store(p.store.count, self.id)
        if not base_is_usable(n_base, self.config.k):
            log.info("survey %s: base snapshot of %d records is under 2k; one-shot at close",
                     self.id, n_base)
            return False
        started = time.time()
        p.planner.choose_now(self, plan)
        try:
            await self.move(BASE_RUNNING, f"snapshot of {n_base} records",
                            base_started_at=started)
        except BaseException:
            p.planner.unresolve_engine(self)
            raise
        if self.planner is not None:
            self.planner.base_started = True
        with self.lock:
            self.last_plan = plan or self.last_plan
            self.base_plan = plan  # None for a base run started by command: no plan started it
        self.base_task = asyncio.create_task(self._base(snapshot_seq, started),
                                             name=f"base-{self.id}")
        return True

    async def _base(self, snapshot_seq: int, started: float) -> None:
        p = self._parts()
        result = BaseRunResult()  # filled as the run goes: a cancelled run leaves its steps
        try:
            await run_base(self, snapshot_seq, started, store=p.store, in_store=p.in_store,
                           pool=p.pool, compute=p.config.compute, planner=p.planner,
                           releaser=p.releaser, result=result)
        finally:
            self.base_finished(result)

    async def clean_cut(self) -> int:
        """The largest ``seq`` of the survey such that every record with a smaller one is
        stored."""
        p = self._parts()
        if p.coordinator is not None:  # other instances insert too: a clean cut
            return int(await asyncio.to_thread(p.coordinator.coordination.snapshot_seq,
                                               self.id))
        return int(await p.in_store(p.store.max_seq, self.id))

    async def read_ahead_soon(self) -> None:
        """The planner's base snapshot (or the close of a one-shot plan) is near: read its
        records ahead (:func:`~.base_run.read_ahead`)."""
        p = self._parts()

        async def still_open() -> bool:
            st = await self.stored_state()
            return (p.leading and st.state == OPEN and st.close_requested_at is None
                    and not (self.planner is not None and self.planner.base_started))

        await read_ahead(self, clean_cut=self.clean_cut, still_open=still_open,
                         store=p.store, in_store=p.in_store, once=p.coordinator is not None,
                         measured=lambda share: p.planner.observe_work_share(self, share))

    async def request_close(self) -> None:
        """Close the survey (idempotent); returns once the close request is stored (a restart
        carries it on) and the close sequence has been started (on a follower: by the leader,
        which finds the stored request within a poll)."""
        p = self._parts()
        st = await self.stored_state()
        if st.state != RELEASED and st.close_requested_at is None:
            await p.in_store(p.store.request_close, self.id, time.time())
        if not p.leading:  # stored: the leader carries it out (leadership.Coordinator)
            return self.read_ahead.drop()  # what the leader's release reads ahead is its own
        if self.close_task is None:
            self._start_close()

    def _start_close(self) -> None:
        self.close_task = asyncio.create_task(self.close_sequence(), name=f"close-{self.id}")

    async def closed(self, timeout: float | None = None) -> None:
        """Wait until the survey's release is published."""
        await asyncio.wait_for(self.closed_event.wait(), timeout)

    async def close_sequence(self) -> None:
        """The close and the release (:func:`.closing.close_survey`), with the engine of
        ``engine = "auto"`` settled first: that of a release written before a restart, of the
        base run, or chosen now between the one-shot runs on every instance's records."""
        p = self._parts()
        assert p.collector is not None and p.releaser is not None  # made when the service starts
        releaser, planner = p.releaser, p.planner
        cp = await p.in_store(p.store.load_checkpoint, self.id)
        row = await p.in_store(p.store.load_release, self.id)
        if row is not None:  # written before a restart: its engine, whatever comes next
            planner.resolve_engine(self, row.report["engine"],
                                   "the engine of the written release",
                                   (row.report.get("engine_choice") or {}).get("expected_delta"))
        elif cp is not None:
            planner.resolve_engine(self, cp.engine, "the engine of the base run")
        elif self.auto_engine:  # between the one-shot runs, on every instance's records
            planner.unresolve_engine(self)
            planner.choose_now(self,
                               one_shot_records=await p.in_store(p.store.count, self.id))
        try:
            await close_survey(
                self, store=p.store, in_store=p.in_store, collector=p.collector,
                release=lambda: releaser.release(self, self.plans.models[0],
                                                 planner.stage_models(self)),
                before_marks=None if p.coordinator is None
                else p.coordinator.followers_closed)
        finally:
            if not self.closed_event.is_set():  # failed: a new close request starts it again
                self.close_task = None

    async def stop_tasks(self) -> None:
        """Stop the read ahead, the base run and the close (the service stops, or this
        instance leads no more; the store has what they did)."""
        self.read_ahead.cancel()
        for task in (self.base_task, self.close_task):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

