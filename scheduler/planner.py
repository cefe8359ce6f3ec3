"""When to start the base run: the data ratio nu (Rebollo-Monedero et al. 2018, sections III-B
and IV; design spec §4).

Times are relative to ``t_ref``, the one-shot ("traditional") run time on all n records.
``nu = n_+ / n`` is the fraction left to the incremental stage, ``tau_0`` and ``tau_+`` are the
relative run times of the base and incremental stages, and ``tau_-`` is the head start: the
time between the base snapshot and the close. The relative time gain over the one-shot run is

    dtau = min(tau_- + 1 - tau_0, 1) - tau_+

because the release is out ``max(tau_0 - tau_-, 0) + tau_+`` after close instead of ``1``.

The *closed forms* for quadratic base and incremental costs (``tau_0 = (1 - nu)^2``,
``tau_+ = nu^2``) and uniform arrivals (``tau_- = s nu`` with ``s`` the arrival coefficient)
live in :mod:`scheduler.closed_forms`; they reproduce the paper's numbers. The *general planner*
(:func:`plan_optimal`, :func:`plan_deadline`) solves the same problems numerically for any cost
models and any arrival forecast, and agrees with the closed forms in their special case.
Beyond the paper, a deadline plan can be made against an upper bound of the stages' times
(``margin_factor``, from the cost model's prediction interval in :mod:`scheduler.live`) so
that the deadline holds when the runs are slower than predicted; the plan records the margin.
All functions are pure.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy.optimize import brentq, minimize_scalar

from scheduler.closed_forms import InfeasibleDeadlineWarning

# ---------------------------------------------------------------------------------------------
# General planner: any cost models, any arrival forecast.
# ---------------------------------------------------------------------------------------------

BaseCost = Callable[[float], float]
"""Seconds to run the base engine on n records."""
IncrementalCost = Callable[[float, float], float]
"""Seconds to run the incremental stage given n_0 base records and n_+ new records."""
HeadStart = Callable[[float], float]
"""Seconds before close at which all but a fraction nu of the final records have arrived."""
Overhead = Callable[[float], float]
"""Seconds after close that are not compute but grow with the late records, by nu (nu = 0: the
release made whole at close)."""


def release_after_close(head_start: Any, base_seconds: Any, incremental_seconds: Any) -> Any:
    """Seconds from close to release: ``max(t_0 - head_start, 0) + t_+``.

    The base snapshot is taken ``head_start`` seconds before close and its run takes
    ``base_seconds``; the incremental stage starts once that run is done and the survey has
    closed, and takes ``incremental_seconds`` (paper 001, sec. III-B: the release is out
    ``max(tau_0 - tau_-, 0) + tau_+`` after close). Elementwise on arrays, so the simulations
    evaluate every candidate snapshot at once.
    """
    return np.maximum(np.subtract(base_seconds, head_start), 0.0) + incremental_seconds


@dataclass(frozen=True)
class Plan:
    """A schedule: how much to leave to the incremental stage and when to start the base run.

    Seconds are absolute; ``head_start`` is how long before close the base snapshot is taken.
    ``finish_after_close`` is the predicted time from close to release (the cost models' point
    prediction); ``margin_seconds`` is how much later it would be with the stages at the upper
    bound the plan was made against (``margin_factor`` of :func:`plan_deadline`), so
    ``latest_finish`` is what a deadline plan keeps within the deadline.

    ``refine_seconds`` is the anytime refinement planned after the incremental stage
    (:func:`scheduler.live.plan`; 0 when off); it is part of ``finish_after_close``. ``engine``
    and ``expected_delta`` are set when the plan chose the base engine
    (:mod:`scheduler.choice`): the engine, and its expected information loss relative to
    one-shot MDAV at close, less one (negative is better); ``stage`` the incremental stage
    the plan was made for when the planner chose it.

    ``overhead_seconds`` is the part of the release steps (loading, gate and table, files,
    publishing) that grows with the records the base release did not cover, which the plan
    weighed (``overhead`` of :func:`plan_optimal`); it is part of ``finish_after_close``. The
    fixed part of the steps is not (:func:`scheduler.live.release_overhead`).
    ``nu_limit`` is the largest ratio the plan's quality bound allowed (1: no bound).
    ``safety`` is how many times its predicted time the base run was planned to survive and
    still end before the close (:func:`plan_latest_safe`; 1: none).
    """

    mode: str  # "optimal", "deadline" or "one-shot"
    nu: float
    n_total: float
    t_ref: float
    head_start: float
    base_seconds: float
    incremental_seconds: float
    critical_ratio: float | None = None
    arrival_coefficient: float | None = None
    deadline: float | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)
    margin_seconds: float = 0.0
    refine_seconds: float = 0.0
    engine: str | None = None
    expected_delta: float | None = None
    stage: str | None = None
    overhead_seconds: float = 0.0
    nu_limit: float = 1.0
    safety: float = 1.0

    @property
    def n_base(self) -> int:
        return round((1.0 - self.nu) * self.n_total)

    @property
    def n_increment(self) -> int:
        return round(self.n_total) - self.n_base

    @property
    def compute_after_close(self) -> float:
        """The stages' part of ``finish_after_close``: the base run's overrun and the
        incremental stage, without the refinement."""
        return float(release_after_close(self.head_start, self.base_seconds,
                                         self.incremental_seconds))

    @property
    def finish_after_close(self) -> float:
        return self.compute_after_close + self.refine_seconds + self.overhead_seconds

    @property
    def latest_finish(self) -> float:
        """The upper bound of the time from close to release: the prediction plus the margin."""
        return self.finish_after_close + self.margin_seconds

    @property
    def relative_gain(self) -> float:
        """dtau: the fraction of the one-shot time saved after close."""
        return 1.0 - self.compute_after_close / self.t_ref if self.t_ref > 0 else 0.0

    @property
    def meets_deadline(self) -> bool | None:
        if self.deadline is None:
            return None
        return self.latest_finish <= self.deadline * (1 + 1e-9)


@dataclass(frozen=True)
class _Problem:
    """dtau and its parts as functions of nu, relative to t_ref."""

    n: float
    t_ref: float
    base_cost: BaseCost
    incremental_cost: IncrementalCost
    head_start: HeadStart
    nu_max: float
    max_head_start: float | None
    overhead: Overhead | None = None

    def tau_0(self, nu: float) -> float:
        return self.base_cost((1.0 - nu) * self.n) / self.t_ref

    def tau_plus(self, nu: float) -> float:
        if nu <= 0:
            return 0.0
        return self.incremental_cost((1.0 - nu) * self.n, nu * self.n) / self.t_ref

    def tau_minus(self, nu: float) -> float:
        seconds = self.head_start(nu)
        if self.max_head_start is not None:
            seconds = min(seconds, self.max_head_start)  # the snapshot cannot be in the past
        return seconds / self.t_ref

    def extra(self, nu: float) -> float:
        return 0.0 if self.overhead is None else self.overhead(nu) / self.t_ref

    def finish(self, nu: float) -> float:
        return (max(self.tau_0(nu) - self.tau_minus(nu), 0.0) + self.tau_plus(nu)
                + self.extra(nu))

    def gain(self, nu: float) -> float:
        return 1.0 - self.finish(nu)

    def grid(self) -> np.ndarray:
        # linear for the bulk, geometric near 0 where slow arrivals put nu*
        hi = self.nu_max
        if hi <= 0:
            return np.zeros(1)
        lin = np.linspace(0.0, hi, 2049)
        geo = hi * np.geomspace(1e-7, 1.0, 600)
        return np.unique(np.concatenate([lin, geo]))

    def critical(self) -> float | None:
        """nu_- numerically: tau_- = tau_0."""

        def g(nu: float) -> float:
            return self.tau_minus(nu) - self.tau_0(nu)

        xs = self.grid()
        values = np.array([g(x) for x in xs])
        crossing = np.flatnonzero((values[:-1] < 0) & (values[1:] >= 0))
        if crossing.size == 0:
            return None
        i = crossing[0]
        return float(brentq(g, xs[i], xs[i + 1], xtol=1e-14, rtol=1e-13))


def _maximise(f: Callable[[float], float], xs: np.ndarray) -> float:
    """Argmax of ``f`` over [xs[0], xs[-1]]: best grid point, then Brent on its bracket."""
    values = np.array([f(x) for x in xs])
    i = int(np.argmax(values))
    lo, hi = xs[max(i - 1, 0)], xs[min(i + 1, len(xs) - 1)]
    best, best_value = float(xs[i]), float(values[i])
    if hi > lo:
        res = minimize_scalar(lambda x: -f(x), bounds=(lo, hi), method="bounded",
                              options={"xatol": 1e-13})
        if -res.fun >= best_value:
            best = float(res.x)
    return best


def _problem(
    n_total: float,
    base_cost: BaseCost,
    incremental_cost: IncrementalCost,
    head_start: HeadStart,
    k: int,
    max_head_start: float | None,
    nu_limit: float = 1.0,
    overhead: Overhead | None = None,
) -> tuple[_Problem | None, list[str]]:
    notes: list[str] = []
    n = float(n_total)
    if n < 3 * k:
        notes.append(f"{n:.0f} records is fewer than 3k = {3 * k}: run one-shot at close")
        return None, notes
    t_ref = float(base_cost(n))
    if not t_ref > 0:
        raise ValueError("the base cost model must give a positive time for n records")
    nu_max = 1.0 - 2.0 * k / n  # keep at least 2k records in the base snapshot
    if nu_limit < nu_max:
        nu_max = max(float(nu_limit), 0.0)
        notes.append(f"the quality bound limits nu to {nu_max:.4g}")
    if max_head_start is not None:
        if max_head_start <= 0:
            notes.append("the close time has passed: run one-shot now")
            return None, notes
        if head_start(0.0) >= max_head_start:
            nu_max = 0.0
            notes.append("no more arrivals expected: the base run can start now on everything")
        elif head_start(nu_max) > max_head_start:
            limit = brentq(lambda nu: head_start(nu) - max_head_start, 0.0, nu_max, xtol=1e-14)
            nu_max = float(limit)
            notes.append(
                "the base snapshot cannot be taken in the past: nu is limited to "
                f"{nu_max:.4g} (snapshot now)"
            )
    problem = _Problem(n, t_ref, base_cost, incremental_cost, head_start, nu_max,
                       max_head_start, overhead)
    return problem, notes


def _one_shot(n_total: float, base_cost: BaseCost, notes: list[str], mode: str = "one-shot",
              deadline: float | None = None, margin_factor: float = 1.0,
              overhead: Overhead | None = None, nu_limit: float = 1.0) -> Plan:
    t_ref = float(base_cost(float(n_total))) if n_total > 0 else 0.0
    return Plan(mode=mode, nu=0.0, n_total=float(n_total), t_ref=t_ref, head_start=0.0,
                base_seconds=t_ref, incremental_seconds=0.0, deadline=deadline,
                warnings=tuple(notes), margin_seconds=(margin_factor - 1.0) * t_ref,
                overhead_seconds=0.0 if overhead is None else float(overhead(0.0)),
                nu_limit=nu_limit)


def _make_plan(p: _Problem, nu: float, mode: str, notes: list[str],
               deadline: float | None = None, s: float | None = None,
               margin_factor: float = 1.0, nu_limit: float = 1.0) -> Plan:
    head = p.tau_minus(nu) * p.t_ref
    base = p.tau_0(nu) * p.t_ref
    incremental = p.tau_plus(nu) * p.t_ref
    margin = float(release_after_close(head, margin_factor * base, margin_factor * incremental)
                   - release_after_close(head, base, incremental))
    return Plan(
        mode=mode,
        nu=nu,
        n_total=p.n,
        t_ref=p.t_ref,
        head_start=head,
        base_seconds=base,
        incremental_seconds=incremental,
        critical_ratio=p.critical(),
        arrival_coefficient=s,
        deadline=deadline,
        warnings=tuple(notes),
        margin_seconds=margin,
        overhead_seconds=p.extra(nu) * p.t_ref,
        nu_limit=nu_limit,
    )


def _note_floor(notes: list[str], asked: float, floor: float, nu: float) -> None:
    """Say when the survey's ``min_nu`` (``asked``) was cut to ``floor`` by the quality bound
    or the time left, or holds the plan's ratio ``nu`` up."""
    if asked > floor:
        notes.append(f"the survey's min_nu {asked:.4g} is cut to {floor:.4g} by the "
                     "quality bound or the time left")
    elif floor > 0 and nu <= floor * (1 + 1e-9):
        notes.append(f"the survey's min_nu keeps nu at {floor:.4g}")


def _check_margin(margin_factor: float) -> float:
    f = float(margin_factor)
    if not (f >= 1.0 and math.isfinite(f)):
        raise ValueError(f"margin_factor must be a finite number >= 1, got {margin_factor!r}")
    return f


def plan_optimal(
    n_total: float,
    base_cost: BaseCost,
    incremental_cost: IncrementalCost,
    head_start: HeadStart,
    *,
    k: int,
    max_head_start: float | None = None,
    arrival_coefficient: float | None = None,
    margin_factor: float = 1.0,
    nu_limit: float = 1.0,
    overhead: Overhead | None = None,
    solve_margin: float = 1.0,
    nu_floor: float = 0.0,
) -> Plan:
    """nu* for any cost models and arrival forecast: the ratio with the earliest release.

    Parameters
    ----------
    n_total
        Expected number of records at close.
    base_cost
        ``t_0(n)``, seconds of the base engine on n records; ``t_ref = t_0(n_total)``.
    incremental_cost
        ``t_+(n_0, n_+)``, seconds of the incremental stage.
    head_start
        Seconds before close at which all but a fraction ``nu`` of the records have arrived.
    k
        Anonymity parameter; fewer than 3k records means one-shot, and the base snapshot keeps
        at least 2k records.
    max_head_start
        Seconds left until close, if the snapshot cannot be taken earlier than now.
    arrival_coefficient
        Recorded in the plan for reporting; not used in the solve.
    margin_factor
        The upper bound of the stages' times relative to the cost models (see
        :func:`plan_deadline`). nu* is solved on the predictions themselves; the plan records
        how much later the release would be at the bound (``Plan.margin_seconds``).
    nu_limit
        The largest ratio allowed (a quality bound, :class:`scheduler.quality.QualityBound`);
        the earliest release is sought below it.
    overhead
        Seconds after close that grow with the late records, by nu (nu = 0: the release made
        whole at close); weighed with the compute and recorded in ``Plan.overhead_seconds``.
        With it, nu = 0 (one-shot at close) competes with the two-stage plans on the whole
        time after close.
    solve_margin
        Solve with both stages this many times slower than the cost models predict (>= 1),
        and report the plan's times as predicted. The earliest release puts the base run's
        end exactly at the close (nu_-), so a base run a little slower than predicted holds
        the release back by the difference; solved at a margin, the base run ends before the
        close even that much slower, for a few more late records. 1: the paper's nu*.
    nu_floor
        The smallest ratio allowed (the survey's ``min_nu``): the earliest release is sought
        above it, one-shot at close (nu = 0) included only without a floor. The floor is cut
        to ``nu_limit`` and the time left when above them; the plan's warnings say when the
        floor holds the ratio up or was cut. 0: no floor.
    """
    factor = _check_margin(margin_factor)
    slower = _check_margin(solve_margin)
    problem, notes = _problem(n_total, base_cost, incremental_cost, head_start, k,
                              max_head_start, nu_limit, overhead)
    if problem is None:
        return _one_shot(n_total, base_cost, notes, margin_factor=factor, overhead=overhead,
                         nu_limit=nu_limit)
    solved = problem if slower == 1.0 else replace(
        problem, base_cost=lambda n: slower * base_cost(n),
        incremental_cost=lambda n0, n1: slower * incremental_cost(n0, n1))
    floor = min(max(float(nu_floor), 0.0), solved.nu_max)
    grid = solved.grid()
    nu = _maximise(solved.gain, np.unique(np.append(grid[grid >= floor], floor)))
    kink = solved.critical()  # the optimum often sits exactly on nu_-: solve it there too
    if kink is not None and floor <= kink <= solved.nu_max \
            and solved.gain(kink) >= solved.gain(nu):
        nu = kink
    _note_floor(notes, nu_floor, floor, nu)
    return replace(_make_plan(problem, nu, "optimal", notes, s=arrival_coefficient,
                              margin_factor=factor, nu_limit=nu_limit), safety=slower)


#: The default plan releases one-shot at close unless its two-stage release, at the upper
#: bound of both stages, is at least this many times sooner than the one-shot release at the
#: same bound (:func:`plan_latest_safe`): a two-stage release costs a base run, an incremental
#: stage and its loss, and a plan that is only a little sooner on the models' word may be
#: slower in fact (a demo's release came 8.59 s after close against a one-shot of 8.1 s).
CLEARLY_SOONER = 1.5


def plan_latest_safe(
    n_total: float,
    base_cost: BaseCost,
    incremental_cost: IncrementalCost,
    head_start: HeadStart,
    *,
    k: int,
    safety: float = 1.0,
    max_head_start: float | None = None,
    arrival_coefficient: float | None = None,
    margin_factor: float = 1.0,
    nu_limit: float = 1.0,
    overhead: Overhead | None = None,
    nu_floor: float = 0.0,
    clearly_sooner: float = CLEARLY_SOONER,
    common_seconds: float = 0.0,
    base_steps: float = 0.0,
) -> Plan:
    """The default plan: the latest base snapshot whose base run ends before the close at
    ``safety`` times its predicted time, then the quality bound, then the one-shot check.

    1. ``nu`` is the smallest ratio (the latest snapshot) at which ``safety * t_0`` (the base
       run with its own steps) fits in the head start: the base run ends before the close at
       the upper bound of its time, and every record after the snapshot is left to the
       incremental stage. Room under the quality bound is never spent on a larger increment:
       a larger one makes the release later whenever the stage's model under-predicts.
    2. When that ratio is above ``nu_limit`` (the quality bound), the plan takes the bound:
       the base run then ends after the close at its upper bound, and the plan's warnings say
       that the bound, not the schedule, holds the release back (and by how much).
    3. Without a floor, the release at the upper bound of both stages
       (``release_after_close`` at ``safety`` times each, plus the late records' steps) is
       compared with the one-shot release at close at the same bound: unless it is
       ``clearly_sooner`` times sooner, the plan is one-shot at close, and says why.

    ``common_seconds`` are the release's steps after close that are the same either way
    (the fixed part of the release overhead): they count in both sides of the comparison.
    ``base_steps`` is the part of ``base_cost(n_total)`` that is the base run's own steps
    (snapshot, checkpoint, base release), which a one-shot release at close does not run.
    A plan with nothing late (no more arrivals expected: the base run starts now on every
    record) is kept: it releases no later than one-shot at close.
    ``nu_floor`` (the survey's ``min_nu``) is the smallest ratio allowed, as in
    :func:`plan_optimal`; the other parameters are :func:`plan_optimal`'s. The plan's times
    are the predictions; ``margin_factor`` sets ``Plan.margin_seconds`` as there.
    """
    factor = _check_margin(margin_factor)
    safe = _check_margin(safety)
    problem, notes = _problem(n_total, base_cost, incremental_cost, head_start, k,
                              max_head_start, nu_limit, overhead)
    if problem is None:
        return _one_shot(n_total, base_cost, notes, margin_factor=factor, overhead=overhead,
                         nu_limit=nu_limit)
    floor = min(max(float(nu_floor), 0.0), problem.nu_max)
    nu = _earliest_safe(problem, safe, floor, problem.nu_max)
    # the bound is said below when it holds the plan back, not whenever it exists
    notes = [note for note in notes if not note.startswith("the quality bound limits nu")]
    if nu is None:  # the base run overruns the close at every ratio allowed
        nu = problem.nu_max
        if problem.nu_max < nu_limit - 1e-12 or nu_limit >= 1.0:
            notes.append(f"the base run cannot end before the close at {safe:.3g} times its "
                         f"predicted time: nu = {nu:.4g}, the latest snapshot there is time for")
        else:
            over = safe * problem.tau_0(nu) * problem.t_ref - problem.tau_minus(nu) * problem.t_ref
            wider = replace(problem, nu_max=1.0 - 2.0 * k / problem.n)
            schedule = _earliest_safe(wider, safe, nu, wider.nu_max)
            notes.append(
                f"the quality bound, not the schedule, holds the release back: at nu = "
                f"{nu:.4g}, the most the bound allows, the base run ends {over:.3g} s after "
                "the close at its upper bound"
                + ("" if schedule is None else
                   f"; it would end before the close from nu = {schedule:.4g}"))
    _note_floor(notes, nu_floor, floor, nu)
    plan = replace(_make_plan(problem, nu, "optimal", notes, s=arrival_coefficient,
                              margin_factor=factor, nu_limit=nu_limit), safety=safe)
    if floor > 0 or plan.n_increment <= 0:
        return plan
    head = plan.head_start
    two_stage = float(release_after_close(head, safe * plan.base_seconds,
                                          safe * plan.incremental_seconds)
                      ) + plan.overhead_seconds + common_seconds
    one_shot = (safe * (problem.t_ref - base_steps) + base_steps
                + problem.extra(0.0) * problem.t_ref + common_seconds)
    if two_stage * clearly_sooner > one_shot:
        reason = (f"the two-stage release (nu = {nu:.4g}) is not clearly sooner than one-shot "
                  f"at close: {two_stage:.3g} s against {one_shot:.3g} s after close with the "
                  f"stages {safe:.3g} times their prediction (at least {clearly_sooner:g}x "
                  "sooner is asked): one-shot at close")
        return _one_shot(n_total, base_cost, [*notes, reason], margin_factor=factor,
                         overhead=overhead, nu_limit=nu_limit)
    return plan


def _earliest_safe(p: _Problem, safety: float, lo: float, hi: float) -> float | None:
    """The smallest nu in [lo, hi] at which the base run, ``safety`` times its prediction,
    ends before the close (``safety t_0 <= head start``), or None. The head start grows with
    nu and the base run shrinks, so the first crossing on the grid is bracketed and solved."""

    def room(nu: float) -> float:
        return p.tau_minus(nu) - safety * p.tau_0(nu)

    if room(lo) >= 0:
        return lo
    if hi <= lo or room(hi) < 0:
        return None
    xs = p.grid()
    xs = np.unique(np.concatenate([[lo], xs[(xs > lo) & (xs < hi)], [hi]]))
    values = np.array([room(x) for x in xs])
    i = int(np.flatnonzero(values >= 0)[0])
    return float(brentq(room, xs[i - 1], xs[i], xtol=1e-14, rtol=1e-13))


def _tolerated_slowdown(p: _Problem, nu: float, deadline: float) -> float:
    """The largest factor on both stages' predicted times with which the release at ``nu``
    is still out ``deadline`` seconds after close.

    With both stages ``x`` times slower the release is out ``max(x t_0 - h, 0) + x t_+``
    after close (``h`` the head start), which grows with ``x``: it reaches the deadline at
    ``x = deadline / t_+`` while the base run ends before close (``x t_0 <= h``), else at
    ``x = (deadline + h) / (t_0 + t_+)``. The overhead that grows with the late records is
    taken off the deadline first.
    """
    deadline = deadline - p.extra(nu) * p.t_ref
    base = p.tau_0(nu) * p.t_ref
    incremental = p.tau_plus(nu) * p.t_ref
    head = p.tau_minus(nu) * p.t_ref
    if incremental > 0 and deadline * base <= head * incremental:
        return deadline / incremental
    total = base + incremental
    return (deadline + head) / total if total > 0 else math.inf


def plan_deadline(
    n_total: float,
    base_cost: BaseCost,
    incremental_cost: IncrementalCost,
    head_start: HeadStart,
    deadline: float,
    *,
    k: int,
    max_head_start: float | None = None,
    arrival_coefficient: float | None = None,
    warn: bool = True,
    margin_factor: float = 1.0,
    overhead: Overhead | None = None,
) -> Plan:
    """nu_end: the smallest ratio whose release is out ``deadline`` seconds after close.

    The smallest ratio keeps the distortion closest to the one-shot release. If the one-shot
    run itself fits (``t_ref <= deadline``) the plan is one-shot; if even nu* misses the
    deadline, the plan uses nu* and says so in ``Plan.warnings``, and with ``warn`` an
    :class:`~scheduler.closed_forms.InfeasibleDeadlineWarning` is issued too. Callers that
    read ``Plan.warnings`` (:func:`scheduler.live.plan`) pass ``warn=False``: the
    process-wide warnings filter is not a thread-safe way to silence it.

    With ``margin_factor`` > 1 the plan is made against both stages' times multiplied by it
    (an upper bound of the cost models' prediction, :func:`scheduler.live.margin_factor`):
    the release at that bound, ``Plan.latest_finish``, meets the deadline, and the plan's
    times stay the predictions, the difference being ``Plan.margin_seconds``. When no ratio
    meets the deadline at the bound but some meets it as predicted, the plan takes the ratio
    that tolerates the largest slow-down of both stages and says so.

    ``overhead`` (seconds after close that grow with the late records, by nu) counts against
    the deadline with the compute (:func:`plan_optimal`).
    """
    factor = _check_margin(margin_factor)
    problem, notes = _problem(n_total, base_cost, incremental_cost, head_start, k,
                              max_head_start, overhead=overhead)
    if problem is None:
        return _one_shot(n_total, base_cost, notes, deadline=deadline, margin_factor=factor,
                         overhead=overhead)
    bound = "" if factor == 1.0 else f" with the stages {factor:.3g} times the prediction"
    if deadline >= factor * problem.t_ref + problem.extra(0.0) * problem.t_ref:
        notes.append(f"the one-shot run meets the deadline{bound}: no distortion cost")
        return _one_shot(n_total, base_cost, notes, deadline=deadline, margin_factor=factor,
                         overhead=overhead)

    def excess(nu: float) -> float:
        return float(release_after_close(problem.tau_minus(nu) * problem.t_ref,
                                         factor * problem.tau_0(nu) * problem.t_ref,
                                         factor * problem.tau_plus(nu) * problem.t_ref)
                     ) + problem.extra(nu) * problem.t_ref - deadline

    xs = problem.grid()
    values = np.array([excess(x) for x in xs])
    ok = np.flatnonzero(values <= 0)
    if ok.size == 0:
        best = plan_optimal(n_total, base_cost, incremental_cost, head_start, k=k,
                            max_head_start=max_head_start,
                            arrival_coefficient=arrival_coefficient, overhead=overhead)
        if factor > 1.0 and best.finish_after_close <= deadline:
            nu = _maximise(lambda x: _tolerated_slowdown(problem, x, deadline), xs)
            slack = _tolerated_slowdown(problem, nu, deadline)
            message = (f"the deadline of {deadline:.4g} s after close cannot be met{bound}: "
                       f"nu = {nu:.4g} meets it with the stages up to {slack:.3g} times the "
                       "prediction, the most any ratio allows")
            return _make_plan(problem, nu, "deadline", [*notes, message], deadline=deadline,
                              s=arrival_coefficient, margin_factor=factor)
        message = (
            f"the deadline of {deadline:.0f} s after close cannot be met: the earliest release "
            f"is {best.finish_after_close:.0f} s after close, at nu* = {best.nu:.4g}; using nu*"
        )
        if warn:
            warnings.warn(message, InfeasibleDeadlineWarning, stacklevel=2)
        return _make_plan(problem, best.nu, "optimal", [*notes, message], deadline=deadline,
                          s=arrival_coefficient, margin_factor=factor)
    i = int(ok[0])
    nu = float(xs[0]) if i == 0 else float(brentq(excess, xs[i - 1], xs[i], xtol=1e-14,
                                                  rtol=1e-13))
    return _make_plan(problem, nu, "deadline", notes, deadline=deadline, s=arrival_coefficient,
                      margin_factor=factor)
