"""The base engine the planner chooses: the quality engine (ONA*) when it fits, else MDAV.

A survey configured with ``engine = "auto"`` leaves the choice to the planner (issue 18,
point 3). Each candidate engine has its own cost model; :func:`choose` plans the survey with
each (:func:`scheduler.live.plan`, same forecast, deadline and refinement), estimates each
plan's information loss (:func:`expected_delta`), and takes the one with the least expected
loss among those that *fit*:

- with a deadline, a plan fits when its upper bound meets it (``Plan.meets_deadline``);
- without one, when its predicted compute after close is within :data:`SLACK_FACTOR`
  times, or :data:`SLACK_SECONDS` more than, the earliest any candidate offers (predictions,
  as nu* is solved on them; the refinement left out, it is the same for all): the quality
  engine may cost a few seconds after close, not minutes.

When no plan fits, the earliest release wins. The plan returned carries ``engine`` and
``expected_delta``.

The quality model is empirical, from this repository's measurements (README "Choosing between
2MDAV and NN-split-end" and "Anytime refinement"): the one-shot loss of each engine relative
to MDAV (:data:`ONE_SHOT_LOSS`, Gaussian and census-like data, k = 10), and the loss each
incremental stage adds at a ratio nu over an MDAV base (:data:`STAGE_DELTA`, Gaussian
50,000 x 15, k = 10), mixed as :func:`expected_delta` says. It ranks the candidates; it
does not predict a survey's IL to the percent (delta grows as m falls: at m = 5 NN-split-end
adds 4.7 % at nu = 0.1 where the table says 2.1 %). The refinement, which only lowers the
loss, is not in it.

Everything here is pure: numbers in, numbers out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from scheduler.live import DEADLINE_QUANTILE, Forecast, plan
from scheduler.overhead import DEFAULT_OVERHEAD, ReleaseOverhead
from scheduler.planner import BaseCost, IncrementalCost, Plan

#: What ``engine = "auto"`` chooses from, quality first.
AUTO_ENGINES = ("ona_star", "mdav")

#: One-shot information loss relative to MDAV's on the same records (measured: ONA* -13.6 %
#: on Gaussian 50,000 x 15 and -14.9 % on census-like 50,000 x 13, k = 10; README "Anytime
#: refinement"). An engine missing here counts as MDAV.
ONE_SHOT_LOSS: Mapping[str, float] = {"mdav": 1.0, "ona_star": 0.86}

#: The loss an incremental stage adds over its base engine's one-shot loss, by nu, over an
#: MDAV base (m = 15, k = 10, 50,000 Gaussian records; README "Choosing between 2MDAV and
#: NN-split-end"); linear in between. ``nn_split_mid`` is taken as ``nn_split_end`` and
#: ``nn_inertial`` as ``nn`` (they measured the same there).
_NU = (0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 0.9, 1.0)
_SPLIT_END = (0.0, 0.0021, 0.0104, 0.0210, 0.0469, 0.0718, 0.0847, 0.0796, 0.0894, 0.1182,
              0.1182)
_NN = (0.0, 0.0021, 0.0104, 0.0210, 0.0470, 0.0748, 0.1081, 0.1478, 0.2589, 0.5044, 0.5044)
STAGE_DELTA: Mapping[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "two_stage": (_NU, (0.0, 0.0098, 0.0309, 0.0485, 0.0740, 0.0860, 0.0945, 0.0978, 0.0875,
                        0.0489, 0.0489)),
    "nn_split_end": (_NU, _SPLIT_END),
    "nn_split_mid": (_NU, _SPLIT_END),
    "nn": (_NU, _NN),
    "nn_inertial": (_NU, _NN),
}

#: Without a deadline, a plan fits when its release after close is within this factor of the
#: earliest candidate's, or within :data:`SLACK_SECONDS` more.
SLACK_FACTOR = 1.5
SLACK_SECONDS = 5.0


def expected_delta(engine: str, stage: str, nu: float) -> float:
    """The expected information loss of a release (``engine`` on the base, ``stage`` on the
    fraction ``nu`` that came later) relative to one-shot MDAV on all records, less one.

    A mixture: the base records keep their engine's one-shot loss, the late ones MDAV's, and
    the stage adds its measured loss at ``nu``. Over an MDAV base it is the measured curve
    itself; over an ONA* base it gives -10.5 % at nu = 0.1 (measured -10.3 % on Gaussian,
    -11.0 % on census-like) and, as nu nears 1, what NN-split-end alone gives whatever the
    base (measured +11.6 % at nu = 0.993, 200,000 x 15)."""
    nu = min(max(nu, 0.0), 1.0)
    xs, ys = STAGE_DELTA.get(stage, STAGE_DELTA["two_stage"])
    return ONE_SHOT_LOSS.get(engine, 1.0) * (1.0 - nu) + nu + float(np.interp(nu, xs, ys)) - 1.0


@dataclass(frozen=True)
class Option:
    """A candidate base engine with its cost models."""

    engine: str
    base_cost: BaseCost
    incremental_cost: IncrementalCost


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


def _fits(plans: Sequence[Plan], deadline: float | None) -> list[bool]:
    if deadline is not None:
        return [bool(p.meets_deadline) for p in plans]
    # predictions, as nu* is solved on them; the compute's alone: the refinement is the same
    # for every candidate and would widen the slack
    earliest = min(p.compute_after_close for p in plans)
    bound = max(SLACK_FACTOR * earliest, earliest + SLACK_SECONDS)
    return [p.compute_after_close <= bound for p in plans]


def choose(arrivals: Forecast, options: Sequence[Option], *, k: int, stage: str,
           deadline: float | None = None, seconds_to_close: float | None = None,
           overhead: bool = True, overhead_model: ReleaseOverhead = DEFAULT_OVERHEAD,
           quantile: float | None = DEADLINE_QUANTILE, refine: str | float = "off") -> Choice:
    """Plan with each of ``options`` (in order of preference) and choose one (module doc).

    The keyword arguments are :func:`scheduler.live.plan`'s; ``stage`` is the survey's
    incremental stage, for the quality model.
    """
    if not options:
        raise ValueError("no candidate engine to choose from")
    plans = []
    for option in options:
        p = plan(arrivals, option.base_cost, option.incremental_cost, k=k, deadline=deadline,
                 seconds_to_close=seconds_to_close, overhead=overhead,
                 overhead_model=overhead_model, quantile=quantile, refine=refine)
        plans.append(replace(p, engine=option.engine,
                             expected_delta=expected_delta(option.engine, stage, p.nu)))
    fits = _fits(plans, deadline)
    if any(fits):
        best = min((i for i, ok in enumerate(fits) if ok),
                   key=lambda i: (plans[i].expected_delta, i))
        bound = "meets the deadline" if deadline is not None else "releases in time"
        reason = (f"{plans[best].engine} {bound} with the least expected information loss "
                  f"({plans[best].expected_delta:+.1%} against one-shot MDAV)")
    else:
        best = min(range(len(plans)), key=lambda i: (plans[i].latest_finish, i))
        reason = (f"no engine meets the deadline: {plans[best].engine} releases earliest "
                  f"({plans[best].latest_finish:.3g} s after close)")
    others = "; ".join(
        f"{p.engine}: nu {p.nu:.3g}, release {p.latest_finish:.3g} s after close, expected "
        f"{p.expected_delta:+.1%}{'' if ok else ', does not fit'}"
        for i, (p, ok) in enumerate(zip(plans, fits, strict=True)) if i != best)
    if others:
        reason = f"{reason}; {others}"
    return Choice(plan=plans[best], candidates=tuple(plans), fits=tuple(fits), reason=reason)
