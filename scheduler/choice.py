"""The base engine and incremental stage the planner chooses: quality when it fits, else speed.

A survey configured with ``engine = "auto"`` leaves the choice of the base engine to the
planner (among the engines whose traits say ``auto``, :func:`scheduler.traits.auto_engines`:
ONA* when it fits, else MDAV), and one with ``incremental = "auto"`` (the default)
the choice of the incremental stage (among the stages whose traits give an ``auto_rank``,
:func:`scheduler.traits.auto_stages`: NN-split-end, the better quality, while its cost grows
with base cells times late records; 2MDAV, which costs only the late records, when that is
what keeps the release early: a million records, say). Each candidate (an engine and a stage,
each as its traits) has its own cost models; :func:`choose` plans the survey with each
(:func:`scheduler.live.plan`, same forecast, deadline and refinement), estimates each
plan's information loss (:func:`expected_delta`), and takes the one with the least expected
loss among those that *fit*:

- with a deadline, a plan fits when its upper bound meets it (``Plan.meets_deadline``);
- without one, when its predicted compute after close is within :data:`SLACK_FACTOR`
  times, or :data:`SLACK_SECONDS` more than, the earliest any candidate offers (predictions,
  as nu* is solved on them; the refinement left out, it is the same for all): the quality
  engine may cost a few seconds after close, not minutes.

When no plan fits, the earliest release wins. The plan returned carries ``engine`` and
``expected_delta``.

A survey's plan, whatever it leaves to the planner, is :func:`plan_survey` of its
:class:`PlanRequest` (the survey's planning settings, built once from its configuration):
the service's planner, ``streamanon simulate``'s prediction and ``streamanon plan`` call it,
so ``engine = "auto"`` and ``incremental = "auto"`` are handled in one place.

The quality model is :mod:`scheduler.quality`'s (:func:`expected_delta`, relative to one-shot
MDAV). The refinement, which only lowers the loss, is not in it. Each candidate's plan is made
with the survey's objective (``quality``, :func:`scheduler.live.plan`) for its own engine.

Everything here is pure: numbers in, numbers out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from scheduler.live import DEADLINE_QUANTILE, Forecast, plan
from scheduler.overhead import DEFAULT_OVERHEAD, ReleaseOverhead, spanned_records
from scheduler.planner import BaseCost, IncrementalCost, Plan
from scheduler.quality import (
    DEFAULT_MAX_DELTA,
    QualityBound,
    delta_against_one_shot,
    expected_delta,
)
from scheduler.traits import EngineTraits, StageTraits

#: Without a deadline, a plan fits when its release after close is within this factor of the
#: earliest candidate's, or within :data:`SLACK_SECONDS` more.
SLACK_FACTOR = 1.5
SLACK_SECONDS = 5.0


@dataclass(frozen=True)
class Option:
    """A candidate base engine (its traits; and incremental stage, its traits: None for the
    survey's) with its cost models."""

    engine: EngineTraits
    base_cost: BaseCost
    incremental_cost: IncrementalCost
    stage: StageTraits | None = None


@dataclass(frozen=True)
class Choice:
    """The chosen plan (``plan.engine`` is the engine), every candidate's plan, and why."""

    plan: Plan
    candidates: tuple[Plan, ...]
    fits: tuple[bool, ...]
    reason: str

    @property
    def engine(self) -> str:
        assert self.plan.engine is not None
        return self.plan.engine


@dataclass(frozen=True)
class PlanRequest:
    """What a survey asks of the planner, from its configuration: its ``k``, its base
    ``engine`` and incremental ``stage`` (a name, or ``"auto"`` for the planner's choice) with
    that stage's traits ``stage_traits`` (None with ``"auto"``: each candidate names its own),
    its ``deadline`` after close (seconds), its ``refine`` budget, the quality bound
    ``max_delta`` of its objective (None: ``objective = "earliest"``, the earliest release
    whatever the loss), its floor on the ratio ``min_nu``; whether the release steps after
    close are priced (``overhead``) and the deadline's ``quantile``. Built once by one
    function from a survey's configuration and passed to :func:`plan_survey` by every caller
    that plans a survey."""

    k: int
    engine: str
    stage: str
    stage_traits: StageTraits | None = None
    deadline: float | None = None
    refine: str | float = "off"
    max_delta: float | None = DEFAULT_MAX_DELTA
    min_nu: float = 0.0
    overhead: bool = True
    quantile: float | None = DEADLINE_QUANTILE

    def __post_init__(self) -> None:
        if self.stage == "auto":
            if self.stage_traits is not None:
                raise ValueError('stage "auto" takes no stage_traits: each candidate names '
                                 "its own")
        elif self.stage_traits is None or self.stage_traits.name != self.stage:
            raise ValueError(f"stage {self.stage!r} needs its traits (stage_traits), got "
                             f"{self.stage_traits!r}")


def plan_survey(request: PlanRequest, arrivals: Forecast, options: Sequence[Option], *,
                seconds_to_close: float | None = None, slowdown: float = 1.0,
                overhead_model: ReleaseOverhead = DEFAULT_OVERHEAD,
                ) -> tuple[Plan, Choice | None]:
    """The plan of a survey that asks ``request``, on the forecast ``arrivals``.

    ``options`` are the candidates with their cost models: every engine and stage the request
    leaves to the planner, or the one option of its engine when it names both (others are
    ignored). With ``engine = "auto"`` or ``incremental = "auto"`` the plan is
    :func:`choose`'s among the candidates of the request's engine (all of them for
    ``"auto"``), returned with the :class:`Choice`; otherwise it is
    :func:`scheduler.live.plan`'s with the request's quality bound for its engine and stage,
    and the choice is None. ``slowdown`` is the machine's expected slow-down of the base run
    (:func:`scheduler.live.load_slowdown`), ``overhead_model`` the release steps after close.
    """
    if request.engine != "auto":
        options = [o for o in options if o.engine.name == request.engine]
    if not options:
        raise ValueError(f"no candidate for engine {request.engine!r} to plan with")
    if request.engine == "auto" or request.stage == "auto":
        choice = choose(arrivals, options, k=request.k, stage=request.stage_traits,
                        deadline=request.deadline, seconds_to_close=seconds_to_close,
                        overhead=request.overhead, overhead_model=overhead_model,
                        quantile=request.quantile, refine=request.refine,
                        max_delta=request.max_delta, slowdown=slowdown, min_nu=request.min_nu)
        return choice.plan, choice
    option = options[0]
    quality = None if request.max_delta is None else QualityBound(
        option.engine, _own_stage(option, request.stage_traits), request.max_delta)
    return plan(arrivals, option.base_cost, option.incremental_cost, k=request.k,
                deadline=request.deadline, seconds_to_close=seconds_to_close,
                overhead=request.overhead, overhead_model=overhead_model,
                quantile=request.quantile, refine=request.refine, quality=quality,
                slowdown=slowdown, min_nu=request.min_nu), None


def _fits(plans: Sequence[Plan], deadline: float | None) -> list[bool]:
    if deadline is not None:
        return [bool(p.meets_deadline) for p in plans]
    # predictions, as nu* is solved on them; the compute's alone: the refinement is the same
    # for every candidate and would widen the slack
    def after_close(p: Plan) -> float:
        return p.compute_after_close + p.overhead_seconds

    earliest = min(after_close(p) for p in plans)
    bound = max(SLACK_FACTOR * earliest, earliest + SLACK_SECONDS)
    return [after_close(p) <= bound for p in plans]


def choose(arrivals: Forecast, options: Sequence[Option], *, k: int,
           stage: StageTraits | None,
           deadline: float | None = None, seconds_to_close: float | None = None,
           overhead: bool = True, overhead_model: ReleaseOverhead = DEFAULT_OVERHEAD,
           quantile: float | None = DEADLINE_QUANTILE, refine: str | float = "off",
           max_delta: float | None = DEFAULT_MAX_DELTA, slowdown: float = 1.0,
           min_nu: float = 0.0) -> Choice:
    """Plan with each of ``options`` (in order of preference) and choose one (module doc).

    The keyword arguments are :func:`scheduler.live.plan`'s; ``stage`` is the survey's
    incremental stage (its traits), for the quality model, unless an option names its own
    (None: every option must). ``max_delta`` is the quality bound of each candidate's plan
    (:class:`scheduler.quality.QualityBound` with its own engine and stage), None for the
    earliest release whatever the loss. The plan returned names its engine, and its stage
    when the option named one.
    """
    if not options:
        raise ValueError("no candidate engine to choose from")
    plans = []
    for option in options:
        own = _own_stage(option, stage)
        p = plan(arrivals, option.base_cost, option.incremental_cost, k=k, deadline=deadline,
                 seconds_to_close=seconds_to_close, overhead=overhead,
                 overhead_model=overhead_model, quantile=quantile, refine=refine,
                 slowdown=slowdown, min_nu=min_nu,
                 quality=None if max_delta is None else QualityBound(option.engine, own,
                                                                     max_delta))
        plans.append(replace(p, engine=option.engine.name,
                             stage=None if option.stage is None else option.stage.name,
                             expected_delta=expected_delta(option.engine, own, p.nu)))
    fits = _fits(plans, deadline)
    if any(fits):
        best = min((i for i, ok in enumerate(fits) if ok),
                   key=lambda i: (plans[i].expected_delta, i))
        bound = "meets the deadline" if deadline is not None else "releases in time"
        reason = (f"{_name(plans[best])} {bound} with the least expected information loss "
                  f"({plans[best].expected_delta:+.1%} against one-shot MDAV)")
    else:
        best = min(range(len(plans)), key=lambda i: (plans[i].latest_finish, i))
        noun = "candidate" if any(o.stage is not None for o in options) else "engine"
        reason = (f"no {noun} meets the deadline: {_name(plans[best])} releases earliest "
                  f"({plans[best].latest_finish:.3g} s after close)")
    others = "; ".join(
        f"{_name(p)}: nu {p.nu:.3g}, release {p.latest_finish:.3g} s after close, expected "
        f"{p.expected_delta:+.1%}{'' if ok else ', does not fit'}"
        for i, (p, ok) in enumerate(zip(plans, fits, strict=True)) if i != best)
    if others:
        reason = f"{reason}; {others}"
    return Choice(plan=plans[best], candidates=tuple(plans), fits=tuple(fits), reason=reason)


def _own_stage(option: Option, stage: StageTraits | None) -> StageTraits:
    """The stage ``option`` is planned with: its own, else the survey's ``stage``."""
    own = option.stage or stage
    if own is None:
        raise ValueError(f"no incremental stage for the candidate {option.engine.name}: the "
                         "request names none (stage \"auto\") and neither does the option")
    return own


def _name(p: Plan) -> str:
    return str(p.engine) if p.stage is None else f"{p.engine} + {p.stage}"


def choose_stage(n_base: float, n_late: float, options: Mapping[StageTraits, IncrementalCost],
                 *, engine: EngineTraits, overhead_model: ReleaseOverhead = DEFAULT_OVERHEAD,
                 max_delta: float | None = DEFAULT_MAX_DELTA) -> tuple[str, str]:
    """The incremental stage for ``n_late`` records after a base run on ``n_base``, at close:
    the candidates (each stage's traits -> its cost model, in order of preference) are timed
    by their models with the release steps the late records add, and the one with the least
    expected loss among those within the slack of the earliest (:data:`SLACK_FACTOR`,
    :data:`SLACK_SECONDS`, but at most a second more: at close the seconds are the
    release's own) is taken. Returns the stage's name and why.

    ``max_delta`` is the plan's quality bound (:class:`scheduler.quality.QualityBound`): the
    stages whose expected loss at this ratio is within it are the candidates when there are
    any, so the close keeps the bound the ratio was planned under (a faster stage over it
    would trade the loss the plan promised for seconds it did not ask for). None: every stage
    (``objective = "earliest"``)."""
    if not options:
        raise ValueError("no candidate stage to choose from")
    if not all(isinstance(stage, StageTraits) for stage in options):
        raise TypeError("the candidate stages are keyed by their traits (StageTraits), not by "
                        f"name: {list(options)!r}")
    nu = n_late / (n_base + n_late) if n_base + n_late > 0 else 0.0
    seconds = {stage: float(cost(n_base, n_late)) + overhead_model.late_part(
        n_late, spanned=spanned_records(cost, n_base, n_late)) for stage, cost in options.items()}
    within = [stage for stage in options if max_delta is None
              or delta_against_one_shot(engine, stage, nu) <= max_delta + 1e-12]
    candidates = within or list(options)
    earliest = min(seconds[stage] for stage in candidates)
    bound = max(SLACK_FACTOR * earliest, earliest + min(SLACK_SECONDS, 1.0))
    fits = [stage for stage in candidates if seconds[stage] <= bound]
    best = min(fits, key=lambda stage: (expected_delta(engine, stage, nu),
                                        list(options).index(stage)))
    others = ", ".join(f"{stage.name} {t:.3g} s" for stage, t in seconds.items()
                       if stage != best)
    bound_note = "" if max_delta is None else (
        f", within the {max_delta:+.0%} bound" if within else
        f" (no stage within the {max_delta:+.0%} bound at nu {nu:.3g})")
    return best.name, (
        f"{best.name}: {seconds[best]:.3g} s predicted for {n_late:,.0f} late records, "
        f"the least expected loss ({expected_delta(engine, best, nu):+.1%} against "
        f"one-shot MDAV) within the time of the earliest{bound_note}; {others}")
