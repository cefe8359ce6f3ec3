"""The live planning policy: what the service decides every few seconds (design spec §6, step 4).

:mod:`scheduler.planner` solves for nu given cost models and a forecast; this module is the
policy around it that the service, the APScheduler jobs, ``streamanon simulate``, the
``streamanon plan`` command and ``simulations/sweep.py`` share, so that each of them plans
exactly as the service does:

- :func:`forecast`: the arrivals still to come, from the measured pace and the survey's
  ``expected_records``;
- :func:`release_overhead` and :func:`compute_budget`: the part of a deadline that the compute
  may use, the rest being kept for draining, the k-anonymity gate, the files and publishing
  (the per-step model of :mod:`scheduler.overhead`);
- :func:`margin_factor`: the safety margin, the upper bound of the compute's time relative to
  the cost model's prediction (its prediction interval, :meth:`PowerLaw.upper
  <scheduler.cost_model.PowerLaw.upper>`);
- :func:`plan`: with a :class:`~scheduler.quality.QualityBound` (the service's default
  objective, ``objective = "balanced"``), the latest base snapshot whose base run ends before
  the close at the upper bound of its time, within the ratios whose expected loss stays within
  the bound, or one-shot at close when that is not clearly sooner
  (:func:`~scheduler.planner.plan_latest_safe`); without one, nu* (the earliest release); with
  a deadline,
  nu_end against that upper bound. Every objective weighs the release steps that grow with
  the late records (:meth:`ReleaseOverhead.late_part
  <scheduler.overhead.ReleaseOverhead.late_part>`), so a one-shot run at close competes with
  the two-stage plans on the whole time after close. It returns a
  :class:`~scheduler.planner.Plan` whose ``margin_seconds`` is the margin kept and whose
  ``warnings`` say what could not be met;
- :func:`forecast_ready`: whether enough arrivals have been seen to act on a plan;
- :func:`base_moment`: when the base snapshot is taken for a plan.

Everything here is pure: numbers in, numbers out; no clock, no store, no service.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Protocol, TypeVar

from scheduler.arrivals import UniformForecast
from scheduler.overhead import DEFAULT_OVERHEAD, ReleaseOverhead, StepCost, spanned_records
from scheduler.planner import (
    BaseCost,
    IncrementalCost,
    Plan,
    plan_deadline,
    plan_latest_safe,
    plan_optimal,
)
from scheduler.quality import QualityBound

#: The upper quantile of the compute's time that a deadline plan keeps within the deadline.
DEADLINE_QUANTILE = 0.95

#: How much slower than its cost model a base run may be and still end before the close, in a
#: plan for the earliest release (at least; the cost model's own upper bound when wider): a
#: machine busier than at calibration slows it so (the demo's base run took 1.4 times its
#: prediction while other tests ran, and the close waited 2.3 s for it). The release then
#: waits for nothing, for a few more late records.
BUSY_FACTOR = 1.5


def load_slowdown(load: float, cores: int) -> float:
    """How many times slower than on an idle machine a base run goes while ``load`` other
    tasks are runnable (the load average) on ``cores`` cores: the engines' kernels run on
    every core and share them with those tasks, so ``1 + load / cores``. :func:`plan` keeps
    the base run's end before the close at this slow-down when it exceeds
    :data:`BUSY_FACTOR`."""
    if cores < 1 or not math.isfinite(load) or load < 0:
        raise ValueError(f"need a load >= 0 and cores >= 1, got {load!r} and {cores!r}")
    return 1.0 + load / cores

#: The refinement's seconds with ``refine = "auto"`` and no deadline: what
#: ``streamanon.refine.AUTO_SECONDS`` gives it (a test keeps the two equal).
AUTO_REFINE_SECONDS = 5.0

#: What a base run costs besides the engine: the snapshot read from the store, preparing it,
#: the checkpoint and the base release made before close (``base_steps_seconds`` of a release
#: report less its ``engine``). 0.1 s + 6 us a record, a little above every base run measured
#: on 2 cores with the snapshot read ahead: 0.16-0.29 s at 42,000-45,000 records (ONA*), 0.7-
#: 1.1 s at 170,000-190,000 and 5.15-5.38 s at 896,000 (MDAV). The plan keeps that much more
#: head start, so the release does not wait for it; an estimate too large takes the snapshot
#: earlier than it needs (0.5 s + 10 us, measured before the read ahead, put 200,000-record
#: surveys at s = 10 past the quality bound and so one-shot at close).
BASE_OVERHEAD = StepCost(0.1, 6e-6)

#: Complete arrival bins (:class:`scheduler.arrivals.ArrivalEstimator`) a forecast needs
#: before the base run may start on it (:func:`forecast_ready`).
MIN_FORECAST_BINS = 3

Moment = TypeVar("Moment", float, datetime)


class Forecast(Protocol):
    """What :func:`plan` needs of an arrival forecast (:mod:`scheduler.arrivals`)."""

    @property
    def total(self) -> float: ...

    def head_start(self, nu: float) -> float: ...

    def arrival_coefficient(self, t_ref: float) -> float: ...


def release_overhead(n: float, model: ReleaseOverhead = DEFAULT_OVERHEAD,
                     late: float = 0.0) -> float:
    """Seconds after close that are not compute, for a release of ``n`` records, ``late`` of
    them not in a base release made before close: the sum of ``model``'s steps (default
    :data:`scheduler.overhead.DEFAULT_OVERHEAD`, 0.7 s + 4.5 us per record). The expected
    time: what a plan predicts."""
    return model(n, late)


#: A deadline keeps free this many times the modelled overhead: the model is the middle of
#: the measured releases (:data:`scheduler.overhead.MEASURED_RELEASES`, which took up to 1.45
#: times it), and a deadline is met only if the steps after the compute fit in what is left.
DEADLINE_RESERVE = 1.5


def deadline_reserve(n: float, model: ReleaseOverhead = DEFAULT_OVERHEAD,
                     late: float = 0.0) -> float:
    """Seconds of a deadline kept free for the steps after the compute:
    :data:`DEADLINE_RESERVE` times :func:`release_overhead`."""
    return DEADLINE_RESERVE * release_overhead(n, model, late)


def compute_budget(deadline: float, n: float,
                   model: ReleaseOverhead = DEFAULT_OVERHEAD) -> float:
    """The part of a deadline the compute may use: the deadline less
    :func:`deadline_reserve`."""
    return max(deadline - deadline_reserve(n, model), 0.0)


def margin_factor(base_cost: BaseCost, n: float,
                  quantile: float | None = DEADLINE_QUANTILE) -> float:
    """The upper bound of the compute's time for ``n`` records, relative to the prediction:
    ``base_cost.upper(n, quantile) / base_cost(n)``.

    The interval is the base engine's (:meth:`scheduler.cost_model.PowerLaw.upper`): the
    calibration fit's residual, widened away from the calibrated sizes, and the scatter of the
    real runs whose measured contention scales the model. The incremental stage runs in the
    same process on the same cores, so the same factor bounds it. 1 (no margin) with
    ``quantile`` None or a cost model without an interval (a plain function).
    """
    upper = getattr(base_cost, "upper", None)
    predicted = base_cost(n)
    if quantile is None or upper is None or not predicted > 0:
        return 1.0
    return max(upper(n, quantile) / predicted, 1.0)


def forecast_ready(complete_bins: int, seconds_to_close: float, bin_seconds: float,
                   min_bins: int = MIN_FORECAST_BINS) -> bool:
    """Whether a plan may be acted on: the pace has been measured over ``min_bins`` complete
    arrival bins, or the close is nearer than that much time (waiting longer would cost more
    than a rough forecast).

    In the first seconds of a survey the pace is a handful of records over a fraction of a
    bin: a plan on it may put the base snapshot "now" on almost nothing (a plan at +0.8 s
    once left 99.8 % of a million records to the incremental stage). The plan is still made
    and shown; only the base run waits."""
    return complete_bins >= min_bins or seconds_to_close <= min_bins * bin_seconds


def snapshot_ready(plan: Plan | None, received: float, seconds_to_close: float) -> bool:
    """Whether the base snapshot may be taken now for ``plan``: it holds the records the plan
    counts on (``plan.n_base``); or waiting longer would leave the base run no time to end by
    the close (``plan.base_seconds``) and the records late so far are within the plan's
    quality bound (``plan.nu_limit``). When they are not, the snapshot is never taken: the
    release is made one-shot at close rather than with more late records than the bound.

    The moment comes from the pace (:func:`base_moment`); when arrivals speed up towards the
    close (a rush before the deadline), the records at that moment fall short of the plan and
    more come late than the quality bound allows (a run with such a rush had 39 % late where
    13 % were planned). Counting keeps the late records to the plan."""
    if plan is None or plan.nu <= 0 or received >= plan.n_base:
        return True
    late = 1.0 - received / plan.n_total if plan.n_total > 0 else 1.0
    return seconds_to_close <= plan.base_seconds and late <= plan.nu_limit


def forecast(received: int, pace: float, seconds_to_close: float,
             expected_records: int | None) -> UniformForecast:
    """The live forecast: the measured ``pace`` until close, and as the total the survey's
    ``expected_records`` when given (at least what has arrived), else what has arrived plus
    the pace until close.

    Extrapolating the pace overshoots during an invitation burst (and undershoots in a lull),
    so an operator's expected total wins when there is one. With no pace measured yet, the
    pace is the one that would bring the expected total by close.
    """
    expected = float(expected_records or 0)
    if pace == 0 and expected > received and seconds_to_close > 0:
        pace = (expected - received) / seconds_to_close
    extrapolated = UniformForecast.from_current(received, pace, seconds_to_close)
    if expected > 0 and pace > 0:
        return UniformForecast(total=max(expected, float(received)), pace=pace)
    return extrapolated


def plan(arrivals: Forecast, base_cost: BaseCost, incremental_cost: IncrementalCost, *,
         k: int, deadline: float | None = None, seconds_to_close: float | None = None,
         overhead: bool = True, overhead_model: ReleaseOverhead = DEFAULT_OVERHEAD,
         quantile: float | None = DEADLINE_QUANTILE, refine: str | float = "off",
         quality: QualityBound | None = None, slowdown: float = 1.0,
         min_nu: float = 0.0) -> Plan:
    """The plan for the records ``arrivals`` expects: the latest safe base snapshot within
    the ``quality`` bound (:func:`~scheduler.planner.plan_latest_safe`), nu* without one, or
    nu_end under a ``deadline``.

    Parameters
    ----------
    arrivals
        The forecast: :func:`forecast` live, or any :mod:`scheduler.arrivals` forecast (a
        profile's expected curve, a uniform pace from an arrival coefficient).
    base_cost, incremental_cost
        The cost models (:mod:`scheduler.cost_model`); ``t_ref = base_cost(total)``.
    k
        Anonymity parameter.
    deadline
        Seconds allowed from close to release, or None for the earliest release.
    seconds_to_close
        Time left until close: the base snapshot cannot be taken before now. None: no limit
        (a plan made before the survey opens).
    overhead
        Keep the release overhead free of the deadline (:func:`compute_budget`) and weigh the
        part of it that grows with the late records in every objective, as the service does.
        False plans the compute alone, for callers whose release is the compute alone (the
        paper's closed forms, the sweep's release model).
    overhead_model
        The release overhead by step (:mod:`scheduler.overhead`); default the documented
        :data:`~scheduler.overhead.DEFAULT_OVERHEAD`, or one fitted on measured releases.
    quantile
        The deadline is met by this upper quantile of the compute's time
        (:func:`margin_factor` at the expected total), not by its prediction; the margin
        kept is ``Plan.margin_seconds``. Without a deadline the earliest release is solved
        with the stages at that bound, and at least :data:`BUSY_FACTOR` times slower than
        predicted (``plan_optimal``'s ``solve_margin``), so that the base run ends before the
        close. None plans against the prediction itself (the paper's nu*).

    refine
        The survey's anytime refinement after the incremental stage (``"off"``, ``"auto"`` or
        seconds; ``streamanon.refine``), planned as ``Plan.refine_seconds``: with a deadline,
        seconds are taken from the compute's budget when the deadline still holds without
        them (else the compute keeps the budget and the refinement gets what is left), and
        ``"auto"`` gets all that the compute's upper bound leaves; without a deadline,
        ``"auto"`` is :data:`AUTO_REFINE_SECONDS`. The refinement stops at the deadline less
        the overhead whatever it was planned, so it never makes the plan miss it.
    quality
        Without a deadline: the latest snapshot whose base run ends before the close at
        the safety factor (the bound's ratio when that is later, ``Plan.nu_limit``: the
        largest whose expected loss is within this bound of the same engine's one-shot
        release), one-shot at close when not 1.5 times sooner. None: the earliest release
        whatever the loss (the paper's nu*). A deadline plan already
        takes the smallest ratio that meets the deadline.
    slowdown
        Without a deadline: how much slower than its cost model the machine is expected to
        run the base run now (:func:`load_slowdown` of the measured load); the base run's end
        is kept before the close at this slow-down too, when it exceeds the margin.
    min_nu
        Without a deadline: the smallest ratio the plan may take (the survey's ``min_nu``), a
        base run started at least that early whatever the cost model says (within the
        quality bound and the time left; no one-shot at close then); 0: none. A
        deadline plan takes no floor (it would trade the deadline for it): ValueError.

    Notes
    -----
    An infeasible deadline falls back to nu* and says so in ``Plan.warnings``; no Python
    warning is issued, so callers need no process-wide warnings filter.
    """
    if not 0.0 <= min_nu < 1.0:
        raise ValueError(f"min_nu must be in [0, 1), got {min_nu!r}")
    if min_nu > 0 and deadline is not None:
        raise ValueError("min_nu applies to the plans without a deadline; a deadline plan "
                         "takes the smallest ratio that meets the deadline")
    total = max(arrivals.total, 1.0)

    def late_overhead(nu: float) -> float:  # nu = 0: the release is made whole at close
        if nu <= 0:  # no base run, so none of its own overhead either; a scheduled close's
            # records are read ahead of it
            return (overhead_model.late_part(total, read_ahead=seconds_to_close is not None)
                    - BASE_OVERHEAD(total))
        return overhead_model.late_part(nu * total, spanned=spanned_records(
            incremental_cost, (1.0 - nu) * total, nu * total))

    def with_base_steps(n: float) -> float:  # the base run's own steps beside the engine
        return base_cost(n) + BASE_OVERHEAD(n)

    base = with_base_steps if overhead else base_cost

    margin = margin_factor(base_cost, total, quantile)
    kwargs = dict(k=k, arrival_coefficient=arrivals.arrival_coefficient(base(total)),
                  max_head_start=None if seconds_to_close is None else max(seconds_to_close, 0.0),
                  margin_factor=margin,
                  overhead=late_overhead if overhead else None)
    if deadline is None:
        safety = 1.0 if quantile is None else max(margin, BUSY_FACTOR, slowdown)
        if quality is None:  # the earliest release whatever the loss: nu*
            chosen = plan_optimal(total, base, incremental_cost, arrivals.head_start,
                                  solve_margin=safety, nu_floor=min_nu, **kwargs)
        else:  # the default: the latest safe snapshot within the quality bound
            chosen = plan_latest_safe(total, base, incremental_cost, arrivals.head_start,
                                      nu_limit=quality.max_ratio(), safety=safety,
                                      nu_floor=min_nu, common_seconds=release_overhead(
                                          total, overhead_model) if overhead else 0.0,
                                      base_steps=BASE_OVERHEAD(total) if overhead else 0.0,
                                      **kwargs)
        seconds = 0.0 if refine == "off" else (
            AUTO_REFINE_SECONDS if refine == "auto" else float(refine))
        return replace(chosen, refine_seconds=seconds)
    budget = compute_budget(deadline, total, overhead_model) if overhead else deadline
    chosen = None
    if refine not in ("off", "auto") and float(refine) < budget:  # the compute without them
        chosen = plan_deadline(total, base, incremental_cost, arrivals.head_start,
                               budget - float(refine), warn=False, **kwargs)
        if not chosen.meets_deadline:
            chosen = None
    if chosen is None:
        chosen = plan_deadline(total, base, incremental_cost, arrivals.head_start, budget,
                               warn=False, **kwargs)
    if refine == "off":
        return chosen
    left = max(budget - chosen.latest_finish, 0.0)
    seconds = left if refine == "auto" else min(float(refine), left)
    return replace(chosen, refine_seconds=seconds, deadline=budget)


#: :func:`window_warning`: a plan whose release is predicted more than this many seconds after
#: close is warned of when the survey opens.
LATE_RELEASE_SECONDS = 60.0


def window_warning(engine: str, base_cost: BaseCost, plan: Plan, open_seconds: float | None,
                   alternatives: Mapping[str, BaseCost] | None = None) -> str | None:
    """What to tell the operator when a survey opens with ``plan`` (made for ``engine`` with
    the cost model ``base_cost``): None when the release will be out in time, else one
    sentence. It warns when the engine's one-shot run on the expected records takes longer
    than the survey is open (``open_seconds``; then the base run cannot be done before the
    close at any snapshot) or when the plan's release is predicted more than
    :data:`LATE_RELEASE_SECONDS` after close, and names the fastest of ``alternatives``
    (engine -> cost model) whose one-shot run takes less than a minute and less than
    ``engine``'s, if any. ``open_seconds`` is the whole window (not the time left: near the
    close every engine's run is longer than that)."""
    n = plan.n_total
    one_shot = float(base_cost(n))
    after = plan.latest_finish
    problems = []
    if open_seconds is not None and one_shot > open_seconds:
        problems.append(f"{engine}'s one-shot run on {n:,.0f} records takes about "
                        f"{one_shot:.0f} s by its cost model, longer than the "
                        f"{open_seconds:.0f} s the survey is open")
    if after > LATE_RELEASE_SECONDS:
        problems.append(f"the plan ({engine}, nu = {plan.nu:.3g}) predicts the release "
                        f"{after:.0f} s after close")
    if not problems:
        return None
    faster = sorted((float(cost(n)), name) for name, cost in (alternatives or {}).items()
                    if name != engine and float(cost(n)) < one_shot)
    advice = next((f"; engine = \"{name}\" would run one-shot in about {t:.1f} s"
                   for t, name in faster if t < LATE_RELEASE_SECONDS), "")
    return "; ".join(problems) + advice


def base_moment(plan: Plan, now: Moment, close: Moment | None) -> Moment | None:
    """When to take the base snapshot for ``plan``: ``close - head_start`` (in the past when
    the snapshot is overdue: take it at once), ``now`` when no more arrivals are expected, or
    None when the plan is one-shot at close. Moments are datetimes or seconds, both alike."""
    if plan.mode == "one-shot" or close is None:
        return None
    if math.isinf(plan.head_start):
        return now
    if plan.nu <= 0 and plan.head_start <= 0:
        return None
    if isinstance(close, datetime):
        return close - timedelta(seconds=plan.head_start)
    return close - plan.head_start
