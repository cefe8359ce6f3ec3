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
from scheduler.choice import Choice, Option, PlanRequest, plan_survey
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
from scheduler.traits import StageTraits
from streamanon.service.config import Config, SurveyConfig
from streamanon.service.engine_traits import (
    auto_engine_names,
    auto_stage_names,
    engine_traits,
    provisional_model,
    stage_traits,
)
from streamanon.service.machine import load_meter, machine_load
from streamanon.service.runtime import RunningSurvey

log = logging.getLogger(__name__)


#: :meth:`SurveyPlanner.extend`: calibrate up to within this factor of the planned base run,
#: with timings of at most this share of the time left before the base start.
EXTEND_REACH = 2.0
EXTEND_SHARE = 0.25


class SurveyPlanner:
    """The plans of a service's surveys and the cost models they are made with.

    Each call takes the survey it plans (:class:`~.runtime.RunningSurvey`) and returns values
    (models, a plan and its choice) or hands them to the survey's own methods
    (``adopt_models``, ``keep_plan``, ``settle_engine``, ``observe_work_share``, ...), which
    write them under the survey's lock: the planner assigns no field of a survey. The planner
    jobs call :meth:`plan` and :meth:`forecast_ready` from their thread. ``counted(sid,
    here)`` is every instance's count of the survey's stored records, given this instance's
    ``here`` (with several instances the leader plans with the store's count)."""

    def __init__(self, config: Config, counted: Callable[[str, int], int]) -> None:
        self.config = config
        self.cost_models = CostModelStore(config.planner.cost_models)
        #: The release steps after close as this machine ran them (the recorded releases'
        #: close steps scale the default model; :meth:`CostModelStore.release_overhead`).
        self.overhead = DEFAULT_OVERHEAD  # until load_models reads the recorded releases
        self._counted = counted

    def observe_base(self, survey: RunningSurvey, engine: str, n: int, seconds: float,
                     work: int | None = None) -> None:
        """A base run of ``n`` records took ``seconds``, ``engine`` running on ``work`` of
        them (default all; fewer where repeated keys were collapsed): a sample of the
        engine's cost model at ``work`` records (with the survey's engine parameters), and
        the survey's work share. ``engine`` is the one the run started with (a close may
        have settled ``engine = "auto"`` anew meanwhile). Blocking: it writes the cost
        model file."""
        from streamanon.engines import model_parameters

        sc = survey.config
        work = n if work is None else work
        survey.observe_work_share(min(work / n, 1.0) if n else 1.0)
        if work < 2 * sc.k:  # the engine hardly ran: no sample of its cost
            return
        self.cost_models.observe(engine, len(sc.quasi_identifiers), sc.k, work, seconds,
                                 model_parameters(engine, sc.engine_params))

    def observe_work_share(self, survey: RunningSurvey, share: float) -> None:
        """The records read so far show that the base engine would run on ``share`` of them
        (repeated keys: the rare tuples' respondents): the next plans price it so."""
        if abs(survey.plans.work_share - share) > 0.01:
            log.info("survey %s: the base engine would run on %.1f %% of the records (repeated "
                     "keys); planned so", survey.id, 100 * share, extra={"survey": survey.id})
        survey.observe_work_share(min(max(float(share), 0.0), 1.0))

    def load_models(self, survey: RunningSurvey, *, measure: bool = True) -> None:
        """The base cost model (stored, or calibrated now) and the incremental one; with
        ``engine = "auto"``, those of every candidate (the engines whose traits say ``auto``),
        MDAV's in use until the planner chooses; with ``incremental = "auto"``, an incremental
        model for every candidate stage (:func:`.engine_traits.auto_stage_names`) after each.

        With ``measure`` False nothing is timed: a base model not stored and every
        incremental model are provisional (:func:`provisional_model`) and the survey is
        planned with them (``plans.provisional``) until :meth:`measure` takes the measured
        ones (:func:`measured_models`, which the service runs in its compute process)."""
        self.overhead = self.cost_models.release_overhead()
        self.adopt(survey, *self.models_for(survey.config, measure=measure), measured=measure)

    def adopt(self, survey: RunningSurvey, models: tuple[PowerLaw, Any],
              options: list[Option] | None, *, measured: bool = True) -> None:
        """Plan ``survey`` with ``models`` (and the candidates ``options``) from now on;
        an engine ``engine = "auto"`` has chosen keeps its own models
        (:meth:`~.survey.Survey.adopt_models`)."""
        survey.adopt_models(models, options, provisional=not measured)

    async def measure(self, survey: RunningSurvey, pool: Executor) -> None:
        """Calibrate the engines whose models are not stored and time the incremental stages,
        in ``pool`` (the compute process: bounded by ``planner.calibration_seconds`` an
        engine), then plan with them; until then the survey is planned with the stored or
        provisional ones, and says so."""
        sc = survey.config
        if survey.plans.provisional:
            log.info("survey %s: planning with stored and provisional cost models until they "
                     "are measured on this machine", sc.id)
            started = time.perf_counter()
            models, options = await asyncio.get_running_loop().run_in_executor(
                pool, measured_models, self.config, sc)
            self.adopt(survey, models, options)
            log.info("survey %s: cost models measured in %.1f s; the planner uses them from "
                     "now", sc.id, time.perf_counter() - started)
        survey.plans.measured.set()
        await self.extend(survey, pool)

    @staticmethod
    async def wait_measured(survey: RunningSurvey, task: asyncio.Future) -> None:
        """Until ``survey`` is planned with measured models (:meth:`measure`, run as
        ``task``; its failure is raised here)."""
        waiter = asyncio.ensure_future(survey.plans.measured.wait())
        await asyncio.wait({waiter, task}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if task.done() and not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]

    async def extend(self, survey: RunningSurvey, pool: Executor) -> None:
        """While the survey is open and its base run not started, time its engine at twice
        the largest calibrated size as long as the planned base run is more than
        :data:`EXTEND_REACH` times larger, and the timing is predicted to take at most
        :data:`EXTEND_SHARE` of the time left before the planned base start; each timing is
        a calibration sample (:meth:`CostModelStore.extend`), and the models are refitted.
        An engine's exponent grows with n, so a model calibrated on small sizes under-predicts
        a large base run; this brings the calibration to the base run's size while the
        compute process has nothing else to do."""
        sc = survey.config
        loop = asyncio.get_running_loop()
        while (step := self._next_extension(survey)) is not None:
            engine, n, selects = step
            timing = await loop.run_in_executor(pool, timed_at, sc, engine, n)
            seconds = timing.seconds
            self.cost_models.extend(engine, len(sc.quasi_identifiers), sc.k, n, seconds,
                                    selects, slowdown=timing.slowdown)
            models, options = await loop.run_in_executor(pool, measured_models,
                                                         self.config, sc)
            self.adopt(survey, models, options)
            log.info("survey %s: %s timed on %d records (%.1f s) for a base run of about %d; "
                     "the cost model is refitted", sc.id, engine, n, seconds,
                     _base_size(survey), extra={"survey": sc.id})

    def _next_extension(self, survey: RunningSurvey) -> tuple[str, int, dict[str, Any]] | None:
        """(engine, size, model parameters) of the next timing, or None: enough, or no time."""
        from streamanon.engines import model_parameters

        sc = survey.config
        plan = survey.last_plan
        close_at = sc.close_at
        if plan is None or close_at is None or survey.base_task is not None \
                or survey.ingest.closed_at is not None or plan.mode == "one-shot":
            return None
        engine = survey.engine if survey.engine != "auto" else plan.engine
        if engine is None or engine == "auto":
            return None
        selects = model_parameters(engine, sc.engine_params if engine == sc.engine else {})
        m = len(sc.quasi_identifiers)
        largest = self.cost_models.largest_calibrated(engine, m, sc.k, selects)
        model = self.cost_models.get(engine, m, sc.k, selects)
        n = 2 * largest
        left = (close_at - datetime.now(timezone.utc)).total_seconds() - plan.head_start
        if not largest or model is None or largest * EXTEND_REACH >= _base_size(survey) \
                or model(n) > EXTEND_SHARE * left:
            return None
        return engine, n, selects

    def models_for(self, sc: SurveyConfig, *, measure: bool = True,
                   ) -> tuple[tuple[PowerLaw, Any], list[Option] | None]:
        """The models :meth:`load_models` plans ``sc`` with, and the candidates (None when
        there is no choice to make). Blocking when ``measure``: it times the engines."""
        stages = auto_stage_names() if sc.incremental == "auto" else (None,)

        def models(engine: str, **kwargs: Any) -> tuple[PowerLaw, Any]:
            return self._engine_models(sc, engine, measure=measure, **kwargs)

        if sc.engine != "auto":
            first = models(sc.engine, stage=stages[0])
            if sc.incremental != "auto":
                return first, None
            traits = engine_traits(sc.engine)
            return first, [Option(traits, *(first if stage == stages[0] else models(
                sc.engine, stage=stage, base=first[0])), stage=stage_traits(stage))
                for stage in stages]
        # NN-split-end splits with MDAV after either
        mdav = models("mdav", stage=stages[0])
        options = []
        for engine in auto_engine_names():
            first = mdav if engine == "mdav" else models(engine, split=mdav[0],
                                                         stage=stages[0])
            for stage in stages:
                these = first if stage == stages[0] else models(
                    engine, split=mdav[0], stage=stage, base=first[0])
                options.append(Option(engine_traits(engine), *these,
                                      stage=None if stage is None else stage_traits(stage)))
        return mdav, options

    def stage_models(self, survey: RunningSurvey) -> dict[StageTraits, Any]:
        """``incremental = "auto"``: the candidate stages' cost models after the survey's
        (chosen) engine, in order of preference; empty otherwise."""
        if survey.config.incremental != "auto":
            return {}
        engine = survey.engine if survey.engine != "auto" else "mdav"
        return {o.stage: o.incremental_cost for o in survey.plans.options or []
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
            stage_traits(stage), base, m, sc.k, partition=functools.partial(run_engine, "mdav"),
            run_stage=functools.partial(run_stage, stage, **(sc.incremental_params or {})),
            split=split)

    def resolve_engine(self, survey: RunningSurvey, engine: str, why: str,
                       expected: float | None = None) -> None:
        """``engine = "auto"``: run ``engine`` from now on (its cost models too), settled by
        the survey (:meth:`~.survey.Survey.settle_engine`)."""
        if not survey.auto_engine or survey.engine == engine:
            return
        options = survey.plans.options or []
        known = engine in {o.engine.name for o in options}
        if not known:  # stored by a run under another configuration: it stays that run's engine
            log.warning("survey %s: the stored run used %s, which engine = \"auto\" does not "
                        "choose; it is kept (planned with MDAV's cost model)", survey.id, engine)
        survey.settle_engine(engine, why, expected,
                             models=option_models(options, engine) if known else None)
        log.info("survey %s: base engine %s (%s)", survey.id, engine, why)

    def unresolve_engine(self, survey: RunningSurvey) -> None:
        """``engine = "auto"`` with no stored base run (it failed, or never ran): the choice
        is open again (the planner's next base run, or the one-shot run at close)."""
        if survey.auto_engine and survey.engine != "auto":
            survey.unsettle_engine(option_models(survey.plans.options or [], "mdav"))
            log.info("survey %s: no base run stored: the base engine will be chosen again",
                     survey.id)

    def forecast_ready(self, survey: RunningSurvey, now: datetime) -> bool:
        """Whether the survey's arrivals so far are enough to act on its plan: the pace has
        been measured (:func:`scheduler.live.forecast_ready`), and the plan's base snapshot
        has its records (:func:`scheduler.live.snapshot_ready`)."""
        close = survey.config.close_at
        t = now.timestamp()
        left = (close.timestamp() - t) if close else 0.0
        with survey.lock:
            bins = survey.estimator.complete_bins(t)
            width = survey.estimator.bin_seconds
            plan, received = survey.last_plan, survey.ingest.stored
        received = self._counted(survey.id, received)
        return (live.forecast_ready(bins, left, width)
                and live.snapshot_ready(plan, received, left))

    def plan(self, survey: RunningSurvey, now: datetime) -> Plan:
        """The survey's plan at ``now`` from its arrivals so far (the planner jobs' call),
        kept as its latest plan with the choice it made (:meth:`~.survey.Survey.keep_plan`)."""
        sc = survey.config
        t = now.timestamp()
        close = sc.close_at.timestamp() if sc.close_at else t
        with survey.lock:
            pace = survey.estimator.pace(t)
            received = survey.ingest.stored
            measured = live.forecast_ready(survey.estimator.complete_bins(t), close - t,
                                           survey.estimator.bin_seconds)
        received = self._counted(survey.id, received)  # every instance's, not only this one's
        arrivals = live.forecast(received, pace, close - t, sc.expected_records)
        plan, choice = self._plan_for(survey, arrivals, close - t)
        first = survey.keep_plan(plan, choice, t)  # the plan and its choice together
        # said once the pace is measured (a plan on the first seconds' handful of records
        # may be one-shot and late where the measured pace leaves time for a base run)
        if survey.window_warning is None and sc.close_at is not None and (
                measured or sc.expected_records):
            self._warn_of_window(survey, plan, close - first)
        return plan

    def _warn_of_window(self, survey: RunningSurvey, plan: Plan, window: float) -> None:
        """Say once, as soon as a plan made before the base run shows it, that the survey's
        release will be late: its engine's one-shot run is longer than the ``window`` (from
        this service's first plan of the survey to the close), or the plan releases more than
        a minute after close (:func:`scheduler.live.window_warning`), with the engine stored
        here that would run one-shot in seconds."""
        sc = survey.config
        if survey.base_task is not None or survey.ingest.closed_at is not None:
            return
        engine = plan.engine or survey.engine
        if engine == "auto":
            return
        options = survey.plans.options or []
        base = (option_models(options, engine)[0]
                if engine in {o.engine.name for o in options} else survey.plans.models[0])
        m = len(sc.quasi_identifiers)
        others = {name: model for name in auto_engine_names() if name != engine
                  and (model := self.cost_models.get(name, m, sc.k)) is not None}
        warning = live.window_warning(engine, base, plan, window, others)
        if warning is not None and survey.warn_of_window(warning):
            log.warning("survey %s: %s", survey.id, warning, extra={"survey": survey.id})

    def _plan_for(self, survey: RunningSurvey, arrivals: Any,
                  seconds_to_close: float) -> tuple[Plan, Choice | None]:
        """The plan for the forecast ``arrivals``; with ``engine = "auto"`` not chosen yet,
        the planner's choice of engine too."""
        sc = survey.config
        with survey.lock:  # the engine and its models as one settle left them
            engine, models = survey.engine, survey.plans.models
            candidates, share = survey.plans.options or [], survey.plans.work_share
        slowdown = live.load_slowdown(*machine_load())
        if engine == "auto" or sc.incremental == "auto":  # the planner's: the candidates
            options = _at_work_share(candidates, share)
        else:
            base, incremental = models
            options = [Option(engine_traits(engine), base.on_work_share(share), incremental)]
        plan, choice = plan_survey(plan_request(sc, engine), arrivals, options,
                                   seconds_to_close=seconds_to_close, slowdown=slowdown,
                                   overhead_model=self.overhead)
        if engine != "auto":  # the stage's choice, or none: no engine choice to keep
            choice = None
        if survey.auto_engine and sc.incremental != "auto" and engine != "auto":
            # chosen: the plans go on saying which engine, and its quality
            plan = dataclasses.replace(plan, engine=engine, expected_delta=expected_delta(
                engine_traits(engine), stage_traits(sc.incremental), plan.nu))
        return plan, choice

    def choose_now(self, survey: RunningSurvey, plan: Plan | None = None, *,
                   one_shot_records: int | None = None) -> None:
        """``engine = "auto"`` still open when the base run starts or the survey closes: the
        choice of ``plan`` (the base trigger's), else of the latest plan, else planned now; or,
        with ``one_shot_records``, the choice between the one-shot runs on that many records
        at close.

        A survey that closes on command has no close time to plan against: its plans, and
        so its choice, are between the one-shot runs on the records stored."""
        if not survey.auto_engine or survey.engine != "auto":
            return
        with survey.lock:
            latest, choice = survey.last_plan, survey.choice
            n = survey.ingest.stored
        plan = None if one_shot_records is not None else plan or latest
        if plan is None or plan.engine is None:
            n = self._counted(survey.id, n)
            if one_shot_records is not None:
                n = one_shot_records
            plan, choice = self._plan_for(survey, live.forecast(n, 0.0, 0.0, None), 0.0)
        assert plan.engine is not None
        reason = choice.reason if choice is not None and choice.plan is plan else (
            f"planned: {plan.engine}, expected {plan.expected_delta:+.1%} against one-shot MDAV"
            if plan.expected_delta is not None else "planned")
        self.resolve_engine(survey, plan.engine, reason, plan.expected_delta)


def option_models(options: list[Option], engine: str) -> tuple[PowerLaw, Any]:
    """The cost models of ``engine``'s first candidate among ``options``."""
    option = next(o for o in options if o.engine.name == engine)
    return option.base_cost, option.incremental_cost


def _base_size(survey: RunningSurvey) -> int:
    """The records of the survey's planned base run (0 before a plan)."""
    plan = survey.last_plan
    return 0 if plan is None else int(plan.n_total * (1.0 - plan.nu))


def _at_work_share(options: list[Option], share: float) -> list[Option]:
    """The candidates with their base engines priced at the survey's work ``share``."""
    return [dataclasses.replace(o, base_cost=o.base_cost.on_work_share(share))
            if share < 1 and isinstance(o.base_cost, PowerLaw) else o for o in options]


def plan_request(sc: SurveyConfig, engine: str | None = None) -> PlanRequest:
    """What survey ``sc`` asks of the planner (:class:`scheduler.choice.PlanRequest`), from its
    configuration (with ``engine``, the engine ``engine = "auto"`` settled on): the one
    request the service's planner, ``streamanon simulate``'s prediction and the demo plan
    with."""
    return PlanRequest(k=sc.k, engine=engine or sc.engine, stage=sc.incremental,
                       stage_traits=None if sc.incremental == "auto"
                       else stage_traits(sc.incremental), deadline=sc.deadline, refine=sc.refine,
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
    """The incremental cost model of ``stage`` before the stage is timed (priced by its
    traits)."""
    return stage_cost_model(stage_traits(stage), base, k, PROVISIONAL_NN_C * base.contention,
                            split)


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
    planner = SurveyPlanner(config, lambda sid, here: here)
    return planner.models_for(sc, measure=True)
