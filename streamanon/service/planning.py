"""The planning of a running service's surveys: cost models, engine choice, the base-run moment.

:class:`SurveyPlanner` holds each survey's cost models (stored, or provisional until they are
measured after start in the compute process, :meth:`SurveyPlanner.measure`; the base run's
time goes back into them), makes the live plan the planner jobs
(:class:`scheduler.jobs.PlanningJob`) act on (:func:`scheduler.live.plan`), says when the arrivals
are enough to act on it, and with ``engine = "auto"`` or ``incremental = "auto"`` chooses
between the candidates (:func:`scheduler.choice.choose`). The :class:`~.lifecycle.Service`
owns one and calls it; it runs no engine on records and touches no broker and no store (the
cost models are a file of their own).

It imports the scheduler, the core's engine registry and stages, and the service's
configuration and runtime state.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from datetime import datetime, timezone
from typing import Any

from scheduler import live
from scheduler.choice import AUTO_STAGES, Choice, Option, PlanRequest, plan_survey
from scheduler.cost_model import (
    CostModelStore,
    PowerLaw,
    Timing,
    calibrate,
    incremental_cost_model,
    stage_cost_model,
    time_engine,
)
from scheduler.overhead import DEFAULT_OVERHEAD
from scheduler.planner import Plan
from scheduler.quality import expected_delta
from streamanon.service.config import Config, SurveyConfig
from streamanon.service.engine_traits import auto_engine_names, engine_traits, provisional_model
from streamanon.service.machine import load_meter, machine_load
from streamanon.service.runtime import RunningSurvey

log = logging.getLogger(__name__)


#: :meth:`SurveyPlanner.extend`: calibrate up to within this factor of the planned base run,
#: with timings of at most this share of the time left before the base start.
EXTEND_REACH = 2.0
EXTEND_SHARE = 0.25


class SurveyPlanner:
    """The plans of a service's surveys and the cost models they are made with.

    ``surveys`` are the service's own; what the planner keeps of each is its
    :class:`~.runtime.PlanState` (``survey.plans``: the cost models in use, the candidates, the
    work share), read and written under the survey's lock (the planner jobs call :meth:`plan`
    and :meth:`forecast_ready` from their thread; the loop reads what they write).
    ``counted(survey, here)`` is every instance's count of the survey's stored records, given
    this instance's ``here`` (with several instances the leader plans with the store's count)."""

    def __init__(self, config: Config, surveys: dict[str, RunningSurvey],
                 counted: Callable[[str, int], int]) -> None:
        self.config = config
        self.cost_models = CostModelStore(config.planner.cost_models)
        #: The release steps after close as this machine ran them (the recorded releases'
        #: close steps scale the default model; :meth:`CostModelStore.release_overhead`).
        self.overhead = DEFAULT_OVERHEAD  # until load_models reads the recorded releases
        self.surveys = surveys
        self._counted = counted

    def observe_base(self, sc: SurveyConfig, n: int, seconds: float,
                     work: int | None = None) -> None:
        """A base run of ``n`` records took ``seconds``, its engine running on ``work`` of
        them (default all; fewer where repeated keys were collapsed): a sample of the
        engine's cost model at ``work`` records (with the survey's engine parameters), and
        the survey's work share. Blocking: it writes the cost model file."""
        from streamanon.engines import model_parameters

        work = n if work is None else work
        self.surveys[sc.id].plans.work_share = min(work / n, 1.0) if n else 1.0
        if work < 2 * sc.k:  # the engine hardly ran: no sample of its cost
            return
        self.cost_models.observe(sc.engine, len(sc.quasi_identifiers), sc.k, work, seconds,
                                 model_parameters(sc.engine, sc.engine_params))

    def observe_work_share(self, sid: str, share: float) -> None:
        """The records read so far show that the base engine would run on ``share`` of them
        (repeated keys: the rare tuples' respondents): the next plans price it so."""
        if abs(self.surveys[sid].plans.work_share - share) > 0.01:
            log.info("survey %s: the base engine would run on %.1f %% of the records (repeated "
                     "keys); planned so", sid, 100 * share, extra={"survey": sid})
        self.surveys[sid].plans.work_share = min(max(float(share), 0.0), 1.0)

    def load_models(self, sc: SurveyConfig, *, measure: bool = True) -> None:
        """The base cost model (stored, or calibrated now) and the incremental one; with
        ``engine = "auto"``, those of every candidate (the engines whose traits say ``auto``),
        MDAV's in use until the planner chooses; with ``incremental = "auto"``, an incremental
        model for every candidate stage (:data:`scheduler.choice.AUTO_STAGES`) after each.

        With ``measure`` False nothing is timed: a base model not stored and every
        incremental model are provisional (:func:`provisional_model`) and the survey is
        listed in :attr:`provisional` until :meth:`adopt` takes the measured ones
        (:func:`measured_models`, which the service runs in its compute process)."""
        if sc.engine == "auto":
            self.surveys[sc.id].auto_engine = True
        self.overhead = self.cost_models.release_overhead()
        self.adopt(sc.id, *self.models_for(sc, measure=measure), measured=measure)

    def adopt(self, sid: str, models: tuple[PowerLaw, Any], options: list[Option] | None,
              *, measured: bool = True) -> None:
        """Plan survey ``sid`` with ``models`` (and the candidates ``options``) from now on;
        an engine ``engine = "auto"`` has chosen keeps its own models."""
        survey = self.surveys[sid]
        with survey.lock:
            if options is not None:
                survey.plans.options = options
            chosen = survey.auto_engine and survey.config.engine != "auto"
            survey.plans.models = (self._option_models(sid, survey.config.engine) if chosen
                               and survey.config.engine in {o.engine.name for o in options or []}
                               else models)
            survey.plans.provisional = not measured

    async def measure(self, sc: SurveyConfig, pool: Executor) -> None:
        """Calibrate the engines whose models are not stored and time the incremental stages,
        in ``pool`` (the compute process: bounded by ``planner.calibration_seconds`` an
        engine), then plan with them; until then the survey is planned with the stored or
        provisional ones, and says so."""
        plans = self.surveys[sc.id].plans
        if plans.provisional:
            log.info("survey %s: planning with stored and provisional cost models until they "
                     "are measured on this machine", sc.id)
            started = time.perf_counter()
            models, options = await asyncio.get_running_loop().run_in_executor(
                pool, measured_models, self.config, sc)
            self.adopt(sc.id, models, options)
            log.info("survey %s: cost models measured in %.1f s; the planner uses them from "
                     "now", sc.id, time.perf_counter() - started)
        plans.measured.set()
        await self.extend(sc, pool)

    async def wait_measured(self, sid: str, task: asyncio.Future) -> None:
        """Until survey ``sid`` is planned with measured models (:meth:`measure`, run as
        ``task``; its failure is raised here)."""
        waiter = asyncio.ensure_future(self.surveys[sid].plans.measured.wait())
        await asyncio.wait({waiter, task}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if task.done() and not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]

    async def extend(self, sc: SurveyConfig, pool: Executor) -> None:
        """While the survey is open and its base run not started, time its engine at twice
        the largest calibrated size as long as the planned base run is more than
        :data:`EXTEND_REACH` times larger, and the timing is predicted to take at most
        :data:`EXTEND_SHARE` of the time left before the planned base start; each timing is
        a calibration sample (:meth:`CostModelStore.extend`), and the models are refitted.
        An engine's exponent grows with n, so a model calibrated on small sizes under-predicts
        a large base run; this brings the calibration to the base run's size while the
        compute process has nothing else to do."""
        loop = asyncio.get_running_loop()
        while (step := self._next_extension(sc)) is not None:
            engine, n, selects = step
            timing = await loop.run_in_executor(pool, timed_at, sc, engine, n)
            seconds = timing.seconds
            self.cost_models.extend(engine, len(sc.quasi_identifiers), sc.k, n, seconds,
                                    selects, slowdown=timing.slowdown)
            models, options = await loop.run_in_executor(pool, measured_models,
                                                         self.config, sc)
            self.adopt(sc.id, models, options)
            log.info("survey %s: %s timed on %d records (%.1f s) for a base run of about %d; "
                     "the cost model is refitted", sc.id, engine, n, seconds,
                     self._base_size(sc.id), extra={"survey": sc.id})

    def _base_size(self, sid: str) -> int:
        plan = self.surveys[sid].last_plan
        return 0 if plan is None else int(plan.n_total * (1.0 - plan.nu))

    def _next_extension(self, sc: SurveyConfig) -> tuple[str, int, dict[str, Any]] | None:
        """(engine, size, model parameters) of the next timing, or None: enough, or no time."""
        from streamanon.engines import model_parameters

        survey = self.surveys.get(sc.id)
        plan = None if survey is None else survey.last_plan
        close_at = sc.close_at
        if survey is None or plan is None or close_at is None or survey.base_task is not None \
                or survey.ingest.closed_at is not None or plan.mode == "one-shot":
            return None
        engine = survey.config.engine if survey.config.engine != "auto" else plan.engine
        if engine is None or engine == "auto":
            return None
        selects = model_parameters(engine, sc.engine_params if engine == sc.engine else {})
        m = len(sc.quasi_identifiers)
        largest = self.cost_models.largest_calibrated(engine, m, sc.k, selects)
        model = self.cost_models.get(engine, m, sc.k, selects)
        n = 2 * largest
        left = (close_at - datetime.now(timezone.utc)).total_seconds() - plan.head_start
        if not largest or model is None or largest * EXTEND_REACH >= self._base_size(sc.id) \
                or model(n) > EXTEND_SHARE * left:
            return None
        return engine, n, selects

    def models_for(self, sc: SurveyConfig, *, measure: bool = True,
                   ) -> tuple[tuple[PowerLaw, Any], list[Option] | None]:
        """The models :meth:`load_models` plans ``sc`` with, and the candidates (None when
        there is no choice to make). Blocking when ``measure``: it times the engines."""
        stages = AUTO_STAGES if sc.incremental == "auto" else (None,)

        def models(engine: str, **kwargs: Any) -> tuple[PowerLaw, Any]:
            return self._engine_models(sc, engine, measure=measure, **kwargs)

        if sc.engine != "auto":
            first = models(sc.engine, stage=stages[0])
            if sc.incremental != "auto":
                return first, None
            traits = engine_traits(sc.engine)
            return first, [Option(traits, *(first if stage == stages[0] else models(
                sc.engine, stage=stage, base=first[0])), stage=stage) for stage in stages]
        # NN-split-end splits with MDAV after either
        mdav = models("mdav", stage=stages[0])
        options = []
        for engine in auto_engine_names():
            first = mdav if engine == "mdav" else models(engine, split=mdav[0],
                                                         stage=stages[0])
            for stage in stages:
                these = first if stage == stages[0] else models(
                    engine, split=mdav[0], stage=stage, base=first[0])
                options.append(Option(engine_traits(engine), *these, stage=stage))
        return mdav, options

    def stage_models(self, sid: str) -> dict[str, Any]:
        """``incremental = "auto"``: the candidate stages' cost models after the survey's
        (chosen) engine, in order of preference; empty otherwise."""
        survey = self.surveys[sid]
        if survey.config.incremental != "auto":
            return {}
        engine = survey.config.engine if survey.config.engine != "auto" else "mdav"
        return {o.stage: o.incremental_cost for o in self.surveys[sid].plans.options or []
                if o.engine.name == engine and o.stage is not None}

    def _engine_models(self, sc: SurveyConfig, engine: str,
                       split: PowerLaw | None = None, stage: str | None = None,
                       base: PowerLaw | None = None, *,
                       measure: bool = True) -> tuple[PowerLaw, Any]:
        from streamanon.engines import get_engine, model_parameters, run_engine
        from streamanon.incremental import run_stage

        m = len(sc.quasi_identifiers)
        params = sc.engine_params if engine == sc.engine else {}  # "auto" takes none
        selects = model_parameters(engine, params)
        stage = stage or sc.incremental
        base = base or self.cost_models.get(engine, m, sc.k, selects)
        if base is None and not measure:
            base = provisional_model(engine, m, sc.k)
        elif base is None:
            log.info("calibrating %s%s at m = %d, k = %d", engine,
                     f" with {selects}" if selects else "", m, sc.k)
            result = calibrate(functools.partial(get_engine(engine).function, **params), m,
                               sc.k, budget_seconds=self.config.planner.calibration_seconds,
                               meter=load_meter)
            base = self.cost_models.put(engine, m, sc.k, result, selects)
        if not measure:
            return base, provisional_incremental(stage, base, sc.k, split)
        return base, incremental_cost_model(
            stage, base, m, sc.k, partition=functools.partial(run_engine, "mdav"),
            run_stage=functools.partial(run_stage, stage, **(sc.incremental_params or {})),
            split=split)

    def _option_models(self, sid: str, engine: str) -> tuple[PowerLaw, Any]:
        option = next(o for o in self.surveys[sid].plans.options or [] if o.engine.name == engine)
        return option.base_cost, option.incremental_cost

    def resolve_engine(self, sid: str, engine: str, why: str,
                       expected: float | None = None) -> None:
        """``engine = "auto"``: run ``engine`` from now on (its cost models too)."""
        survey = self.surveys[sid]
        if not survey.auto_engine or survey.config.engine == engine:
            return
        known = engine in {o.engine.name for o in survey.plans.options or []}
        if not known:  # stored by a run under another configuration: it stays that run's engine
            log.warning("survey %s: the stored run used %s, which engine = \"auto\" does not "
                        "choose; it is kept (planned with MDAV's cost model)", sid, engine)
        with survey.lock:
            if known:
                survey.plans.models = self._option_models(sid, engine)
            survey.config = survey.config.model_copy(update={"engine": engine})
            survey.ingest.config = survey.config
        survey.engine_choice = {"configured": "auto", "chosen": engine, "reason": why,
                            "expected_delta": expected}
        log.info("survey %s: base engine %s (%s)", sid, engine, why)

    def unresolve_engine(self, sid: str) -> None:
        """``engine = "auto"`` with no stored base run (it failed, or never ran): the choice
        is open again (the planner's next base run, or the one-shot run at close)."""
        survey = self.surveys[sid]
        if survey.auto_engine and survey.config.engine != "auto":
            with survey.lock:
                survey.config = survey.config.model_copy(update={"engine": "auto"})
                survey.ingest.config = survey.config
                survey.plans.models = self._option_models(sid, "mdav")
            survey.engine_choice = None
            log.info("survey %s: no base run stored: the base engine will be chosen again", sid)

    def forecast_ready(self, sid: str, now: datetime) -> bool:
        """Whether the survey's arrivals so far are enough to act on its plan: the pace has
        been measured (:func:`scheduler.live.forecast_ready`), and the plan's base snapshot
        has its records (:func:`scheduler.live.snapshot_ready`)."""
        survey = self.surveys[sid]
        close = survey.config.close_at
        t = now.timestamp()
        left = (close.timestamp() - t) if close else 0.0
        with survey.lock:
            bins = survey.estimator.complete_bins(t)
            width = survey.estimator.bin_seconds
            plan, received = survey.last_plan, survey.ingest.stored
        received = self._counted(sid, received)
        return (live.forecast_ready(bins, left, width)
                and live.snapshot_ready(plan, received, left))

    def plan(self, sid: str, now: datetime) -> Plan:
        """The survey's plan at ``now`` from its arrivals so far (the planner jobs' call),
        kept as its latest plan with the choice it made."""
        survey = self.surveys[sid]
        sc = survey.config
        t = now.timestamp()
        close = sc.close_at.timestamp() if sc.close_at else t
        with survey.lock:
            pace = survey.estimator.pace(t)
            received = survey.ingest.stored
            measured = live.forecast_ready(survey.estimator.complete_bins(t), close - t,
                                           survey.estimator.bin_seconds)
        received = self._counted(sid, received)  # every instance's, not only this one's
        arrivals = live.forecast(received, pace, close - t, sc.expected_records)
        plan, choice = self._plan_for(sid, arrivals, close - t)
        with survey.lock:  # the plan and its choice together (the loop reads both)
            survey.last_plan = plan
            if choice is not None:
                survey.choice = choice
        # said once the pace is measured (a plan on the first seconds' handful of records
        # may be one-shot and late where the measured pace leaves time for a base run)
        if survey.plans.first_plan is None:
            survey.plans.first_plan = t
        first = survey.plans.first_plan
        if survey.window_warning is None and sc.close_at is not None and (
                measured or sc.expected_records):
            self._warn_of_window(sid, plan, close - first)
        return plan

    def _warn_of_window(self, sid: str, plan: Plan, window: float) -> None:
        """Say once, as soon as a plan made before the base run shows it, that the survey's
        release will be late: its engine's one-shot run is longer than the ``window`` (from
        this service's first plan of the survey to the close), or the plan releases more than
        a minute after close (:func:`scheduler.live.window_warning`), with the engine stored
        here that would run one-shot in seconds."""
        survey = self.surveys[sid]
        sc = survey.config
        if survey.base_task is not None or survey.ingest.closed_at is not None:
            return
        engine = plan.engine or sc.engine
        if engine == "auto":
            return
        base = (self._option_models(sid, engine)[0]
                if engine in {o.engine.name for o in survey.plans.options or []}
                else survey.plans.models[0])
        m = len(sc.quasi_identifiers)
        others = {name: model for name in auto_engine_names() if name != engine
                  and (model := self.cost_models.get(name, m, sc.k)) is not None}
        warning = live.window_warning(engine, base, plan, window, others)
        if warning is not None:
            survey.window_warning = warning
            log.warning("survey %s: %s", sid, warning, extra={"survey": sid})

    def _plan_for(self, sid: str, arrivals: Any,
                  seconds_to_close: float) -> tuple[Plan, Choice | None]:
        """The plan for the forecast ``arrivals``; with ``engine = "auto"`` not chosen yet,
        the planner's choice of engine too."""
        survey = self.surveys[sid]
        sc = survey.config
        slowdown = live.load_slowdown(*machine_load())
        if sc.engine == "auto" or sc.incremental == "auto":  # the planner's: the candidates
            options = self._at_work_share(sid, survey.plans.options or [])
        else:
            base, incremental = survey.plans.models
            options = [Option(engine_traits(sc.engine),
                              base.on_work_share(survey.plans.work_share), incremental)]
        plan, choice = plan_survey(plan_request(sc), arrivals, options,
                                   seconds_to_close=seconds_to_close, slowdown=slowdown,
                                   overhead_model=self.overhead)
        if sc.engine != "auto":  # the stage's choice, or none: no engine choice to keep
            choice = None
        if survey.auto_engine and sc.incremental != "auto" and sc.engine != "auto":
            # chosen: the plans go on saying which engine, and its quality
            plan = dataclasses.replace(plan, engine=sc.engine, expected_delta=expected_delta(
                engine_traits(sc.engine), sc.incremental, plan.nu))
        return plan, choice

    def _at_work_share(self, sid: str, options: list[Option]) -> list[Option]:
        """The candidates with their base engines priced at the survey's work share."""
        share = self.surveys[sid].plans.work_share
        return [dataclasses.replace(o, base_cost=o.base_cost.on_work_share(share))
                if share < 1 and isinstance(o.base_cost, PowerLaw) else o for o in options]

    def choose_now(self, sid: str, plan: Plan | None = None, *,
                   one_shot_records: int | None = None) -> None:
        """``engine = "auto"`` still open when the base run starts or the survey closes: the
        choice of ``plan`` (the base trigger's), else of the latest plan, else planned now; or,
        with ``one_shot_records``, the choice between the one-shot runs on that many records
        at close.

        A survey that closes on command has no close time to plan against: its plans, and
        so its choice, are between the one-shot runs on the records stored."""
        survey = self.surveys[sid]
        if not survey.auto_engine or survey.config.engine != "auto":
            return
        with survey.lock:
            latest, choice = survey.last_plan, survey.choice
            n = survey.ingest.stored
        plan = None if one_shot_records is not None else plan or latest
        if plan is None or plan.engine is None:
            n = self._counted(sid, n)
            if one_shot_records is not None:
                n = one_shot_records
            plan, choice = self._plan_for(sid, live.forecast(n, 0.0, 0.0, None), 0.0)
        assert plan.engine is not None
        reason = choice.reason if choice is not None and choice.plan is plan else (
            f"planned: {plan.engine}, expected {plan.expected_delta:+.1%} against one-shot MDAV"
            if plan.expected_delta is not None else "planned")
        self.resolve_engine(sid, plan.engine, reason, plan.expected_delta)


def plan_request(sc: SurveyConfig) -> PlanRequest:
    """What survey ``sc`` asks of the planner (:class:`scheduler.choice.PlanRequest`), from its
    configuration: the one request the service's planner, ``streamanon simulate``'s
    prediction and the demo plan with."""
    return PlanRequest(k=sc.k, engine=sc.engine, stage=sc.incremental, deadline=sc.deadline,
                       refine=sc.refine,
                       max_delta=None if sc.objective == "earliest" else sc.max_delta,
                       min_nu=sc.min_nu)


# -- models made without timing anything, and the measured ones --------------------------------

# The base cost models assumed until an engine is calibrated on this machine are the engines'
# own (their registry entries' ``cost_model``: :func:`.engine_traits.provisional_model`).
# Provisional: a survey is planned with them only while its measured models are made (seconds
# to minutes after start).

#: ``c`` of the nearest-neighbour stages' model until it is timed (``NearestNeighbourCost``:
#: ``c n_0 n_+ / k`` seconds): as timed on the reference machine.
PROVISIONAL_NN_C = 6.5e-9


def provisional_incremental(stage: str, base: PowerLaw, k: int,
                            split: PowerLaw | None) -> Any:
    """The incremental cost model of ``stage`` before the stage is timed."""
    return stage_cost_model(stage, base, k, PROVISIONAL_NN_C * base.contention, split)


def timed_at(sc: SurveyConfig, engine: str, n: int) -> Timing:
    """``engine`` (with the survey's parameters when it is the survey's engine) timed on
    ``n`` Gaussian records of the survey's width, with the machine's other load meanwhile: a
    calibration sample (:meth:`SurveyPlanner.extend`). Run in the compute process."""
    from streamanon.engines import get_engine

    params = sc.engine_params if engine == sc.engine else {}
    return time_engine(functools.partial(get_engine(engine).function, **params),
                       len(sc.quasi_identifiers), sc.k, n, meter=load_meter)


def measured_models(config: Config, sc: SurveyConfig,
                    ) -> tuple[tuple[PowerLaw, Any], list[Option] | None]:
    """The models of ``sc`` calibrated where none is stored (and stored) and the incremental
    stages timed: :meth:`SurveyPlanner.models_for` with ``measure``. Run in the compute
    process (module level, so it pickles): the engines hold the interpreter while they run,
    and the service's event loop must not wait for them."""
    planner = SurveyPlanner(config, {}, lambda sid, here: here)
    return planner.models_for(sc, measure=True)
