"""The live scheduler on a grid: arrival profiles x survey sizes x deadlines x cost models.

    python -m simulations.sweep            # full grid, about 6 minutes
    python -m simulations.sweep --quick    # a tiny grid, about 10 s
    python -m simulations.sweep --incremental two_stage --out DIR   # 2MDAV instead of NN-SE
    python -m simulations.sweep --no-margin   # plan against the prediction itself, as before

Every cell is a 10 h survey (``--quick``: the same 10 h, fewer cells) whose n responses arrive
along one profile of :data:`scheduler.profiles.PROFILES` (``Profile.times``, one draw per
seed). The planner sees only what it would see live and plans as the service does: an
:class:`~scheduler.arrivals.ArrivalEstimator` with the service defaults (median pace over
15 bins of 60 s) fed the arrivals up to each re-plan moment, then the service's own policy,
:func:`scheduler.live.forecast` (the survey's ``expected_records`` is n, as
``streamanon simulate`` configures it; ``--no-expected-records`` leaves it unset, so the
total is extrapolated from the pace) and :func:`scheduler.live.plan` (nu*, or nu_end for a
deadline met by the 95 % upper bound of the compute's time, the prediction interval of the
calibration fit: ``--quantile`` sets the quantile, ``--no-margin`` plans against the
prediction itself), with the time left to close. One difference, on purpose: the plan keeps no
release overhead free of the deadline (``overhead=False``), because the release modelled here
is the compute alone. It re-plans every 5 minutes of survey time (``--quick``: 20 minutes).
The base trigger follows :mod:`scheduler.jobs` (:func:`scheduler.live.base_moment`): the base
fires at the planned moment ``close - head_start`` if that comes before the next re-plan, at
once if it has already passed, never after close; a survey whose base never fired runs
one-shot at close.
The snapshot holds every record arrived by the firing moment, so the nu actually used is
whatever arrived after it.

Run times are the cost models, taken as the truth: base ``t_0(n_0) = a n_0^b`` from
:func:`scheduler.cost_model.calibrate` on our MDAV (m = 15, k = 10), the incremental NN-SE
(``nn_split_end``) stage ``c n_0 n_+ / k`` with c timed once on 20,000 + 2,000 records (as the
service fits it); with ``--incremental two_stage`` the increment costs ``t_0(n_+)`` (2MDAV).
The release is out ``max(t_0(n_0) - head_start, 0) + t_+(n_0, n_+)`` after close
(:func:`scheduler.planner.release_after_close`, with ``head_start = close - fire``), and a
deadline is met when that is <= the deadline (strictly; without a margin ``plan_deadline``
aims exactly at the deadline, so small forecast errors decide the side, and the summary counts
misses within 1 %). A deadline is *feasible* when some snapshot moment on the actual arrivals,
chosen in hindsight, meets it under the same cost models (:func:`earliest_release`); no plan
meets an infeasible one, so the share of deadlines met is given over all deadlines, over the
feasible ones and over those whose plan was *in time* (the plan that fired the base met the
deadline at its upper bound, margin and all; a deadline that is feasible only as predicted
gets the ratio that tolerates the largest slow-down, without the full margin).
For the cells run for real the CSV also recomputes the release with the real seconds of the
stages (times the model's scale factor) to show how far the models are from this machine.
Two cost models:

- ``measured``: the calibrated models as they are. Our MDAV is fast (seconds at 200,000
  records), so in a 10 h survey every deadline of 60 s or more is met by a one-shot run at
  close and the planner rightly returns one-shot; this is the control.
- ``slow``: the same models multiplied by one factor so that t_ref(200,000) = 2 h: the
  paper's running example (10 h survey, 2 h one-shot) with our exponents. This is where the
  schedule matters: t_ref is about 2.6 min, 20 min and 2 h for 10k, 50k and 200k records.

Distortion: delta = D_T / D_one_shot - 1 of the release at the nu actually used, measured with
a real :class:`~streamanon.incremental.run.TwoStageRun` (``mdav`` + the stage, k = 10)
on seeded i.i.d. Gaussian data of n x 15 (rows in arrival order; the snapshot is the first
n_0) for n <= 50,000. For larger n a delta(nu) curve measured the same way at n = 50,000
(seed 0) is interpolated linearly; the CSV's ``delta_source`` says which (``measured``,
``curve``, or ``none`` when n_+ = 0 and the release is the one-shot partition). For measured
cells the CSV also has the real base and incremental seconds on this machine.

Outputs: ``results/sweep.csv`` (one row per cell and seed), ``results/sweep.json`` (the shares
of deadlines met: overall, per deadline and per cost model, under the cost models and with the
real seconds, :func:`deadline_shares`), ``results/models.json`` (the cost models used;
``--models`` reuses them instead of calibrating, so that, e.g., a run with ``--no-margin`` and
one without differ in the planner alone), ``results/figures/sweep_heatmap.png`` (deadline-met
share and mean delta per profile x deadline, one panel per n and cost model) and a Markdown
summary on stdout. ``--quick`` writes to ``--out`` (default: a new temporary
folder) so a smoke run never overwrites the full results.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from scheduler import live
from scheduler.arrivals import ArrivalEstimator
from scheduler.cost_model import (
    NearestNeighbourCost,
    PowerLaw,
    TwoStageCost,
    calibrate,
    incremental_cost_model,
)
from scheduler.planner import IncrementalCost, Plan, release_after_close
from scheduler.profiles import PROFILES, resolve
from simulations.common import RESULTS, clock, gaussian, shown
from streamanon.engines import get_engine, run_engine
from streamanon.incremental import run_stage
from streamanon.incremental.run import TwoStageRun
from streamanon.metrics import distortion
from streamanon.service.engine_traits import stage_traits

COMMAND = "python -m simulations.sweep"
SURVEY_SECONDS = 10 * 3600.0
K = 10
M = 15
SLOW_T_REF = 2 * 3600.0  # the "slow" cost model: t_ref(SLOW_AT) = 2 h
SLOW_AT = 200_000
PACE_BIN_SECONDS = 60.0  # the service's estimator defaults (PlannerConfig)
PACE_BINS = 15
# up to nu = 0.999: with a nearest-neighbour stage the time-optimal plan can leave almost
# everything to the increment
CURVE_NUS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
             0.7, 0.9, 0.97, 0.99, 0.995, 0.999)


@dataclass(frozen=True)
class Grid:
    """The cells to simulate and how: every profile x n x deadline x seed x cost model."""

    profiles: tuple[str, ...]
    ns: tuple[int, ...]
    deadlines: tuple[float | None, ...]
    seeds: tuple[int, ...]
    costs: tuple[str, ...]
    replan_seconds: float
    measure_max_n: int  # real TwoStageRun up to here; the delta(nu) curve above
    calibration_seconds: float
    incremental: str = "nn_split_end"  # or "two_stage" (2MDAV)
    expected_records: bool = True  # the survey declares n as its expected_records
    quantile: float | None = live.DEADLINE_QUANTILE  # a deadline's margin; None: no margin


FULL = Grid(profiles=tuple(PROFILES), ns=(10_000, 50_000, 200_000), deadlines=(None, 60.0, 600.0),
            seeds=(0, 1, 2), costs=("measured", "slow"), replan_seconds=300.0,
            measure_max_n=50_000, calibration_seconds=4.0)
QUICK = Grid(profiles=("uniform", "front_loaded", "back_loaded"), ns=(2_000, 8_000),
             deadlines=(None, 60.0), seeds=(0,), costs=("slow",), replan_seconds=1200.0,
             measure_max_n=2_000, calibration_seconds=1.0)


@dataclass(frozen=True)
class CostModels:
    """The base and incremental cost models of one cost scenario, taken as the truth."""

    name: str
    base: PowerLaw
    incremental: IncrementalCost
    scale: float  # factor on this machine's seconds (1 for "measured")
    calibration: list[tuple[int, float]]

    def describe(self) -> str:
        inc = self.incremental
        plus = (f"{inc.c:.3g} n_0 n_+ / {inc.k}" if isinstance(inc, NearestNeighbourCost)
                else "t_0(n_+)")
        return f"t_0(n) = {self.base.a:.3g} n^{self.base.b:.3f}, t_+ = {plus}"


def cost_models(calibration_seconds: float, stage: str = "nn_split_end",
                saved: Mapping[str, Any] | None = None) -> dict[str, CostModels]:
    """The calibrated MDAV law and the incremental stage's model, as they are and scaled to
    the paper's 2 h.

    ``saved`` (the ``models.json`` an earlier sweep wrote, :func:`saved_models`) replaces the
    calibration and the stage's timing, so that two sweeps differ in the planner alone.
    """
    if saved is None:
        calibration = calibrate(get_engine("mdav").function, M, K,
                                budget_seconds=calibration_seconds, first_n=10_000)
        base, samples = calibration.model, calibration.samples
    else:
        base = PowerLaw.from_dict(saved["base"])
        samples = [(int(n), float(t)) for n, t in saved["calibration"]]
    factor = SLOW_T_REF / base(SLOW_AT)
    slow_base = replace(base, a=base.a * factor)  # the same fit, interval and all
    if stage_traits(stage).cost == "engine_on_increment":  # 2MDAV
        incremental: IncrementalCost = TwoStageCost(base)
        slow_incremental: IncrementalCost = TwoStageCost(slow_base)
    elif saved is not None and saved.get("c") is not None:
        incremental = NearestNeighbourCost(c=saved["c"], k=K, split=base)
        slow_incremental = NearestNeighbourCost(c=incremental.c * factor, k=K, split=slow_base)
    else:
        incremental = incremental_cost_model(  # as the service fits it
            stage_traits(stage), base, M, K, partition=functools.partial(run_engine, "mdav"),
            run_stage=functools.partial(run_stage, stage))
        slow_incremental = NearestNeighbourCost(c=incremental.c * factor, k=K, split=slow_base)
    return {
        "measured": CostModels("measured", base, incremental, 1.0, samples),
        "slow": CostModels("slow", slow_base, slow_incremental, factor, samples),
    }


def saved_models(models: dict[str, CostModels]) -> dict[str, Any]:
    """What :func:`cost_models` needs to use the same models again (``--models``): the
    calibrated base law, its samples and the nearest-neighbour stage's c (None for 2MDAV)."""
    measured = models["measured"]
    return {"base": measured.base.to_dict(), "calibration": measured.calibration,
            "c": getattr(measured.incremental, "c", None)}


# ---------------------------------------------------------------------------------------------
# The live schedule.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LiveOutcome:
    """What the live planner did on one survey and when the release came out."""

    fired_before_close: float | None  # seconds before close the base fired; None = one-shot
    n_base: int
    n_increment: int
    planned_nu: float
    predicted_release: float
    release_after_close: float
    replans: int
    margin_seconds: float = 0.0  # the margin of the plan that fired the base (or the last)
    planned_in_time: bool | None = None  # that plan's Plan.meets_deadline: margin and all

    @property
    def nu(self) -> float:
        return self.n_increment / (self.n_base + self.n_increment)


def live_plan(estimator: ArrivalEstimator, received: int, now: float, close: float,
              base: PowerLaw, incremental: IncrementalCost, deadline: float | None,
              expected_records: int | None = None,
              quantile: float | None = live.DEADLINE_QUANTILE) -> Plan:
    """The plan the service makes at ``now`` (``SurveyPlanner.plan`` in
    ``streamanon.service.planning``), on a release model without overhead; ``quantile`` is
    the deadline's margin (:func:`scheduler.live.plan`)."""
    arrivals = live.forecast(received, estimator.pace(now), close - now, expected_records)
    return live.plan(arrivals, base, incremental, k=K, deadline=deadline,
                     seconds_to_close=close - now, overhead=False, quantile=quantile)


def simulate_live(times: np.ndarray, close: float, base: PowerLaw,
                  incremental: IncrementalCost, deadline: float | None,
                  replan_seconds: float, expected_records: int | None = None,
                  quantile: float | None = live.DEADLINE_QUANTILE) -> LiveOutcome:
    """Re-plan every ``replan_seconds`` on the arrivals so far; fire the base like the jobs do.

    ``times`` are the sorted arrival moments in ``[0, close]``; ``expected_records`` is the
    survey's setting (None: unset); ``quantile`` the deadline's margin (None: none).
    """
    estimator = ArrivalEstimator(PACE_BIN_SECONDS, PACE_BINS)
    n = len(times)
    seen = 0
    replans = 0
    plan = None
    now = replan_seconds
    while now < close:
        upto = int(np.searchsorted(times, now, side="right"))
        estimator.observe(times[seen:upto])
        seen = upto
        plan = live_plan(estimator, seen, now, close, base, incremental, deadline,
                         expected_records, quantile)
        replans += 1
        fire = live.base_moment(plan, now, close)
        next_replan = min(now + replan_seconds, close)
        if fire is not None and fire < next_replan:
            fire = max(fire, now)
            n_base = int(np.searchsorted(times, fire, side="right"))
            if n_base >= 2 * K:  # as the service: a smaller snapshot waits for the close
                n_plus = n - n_base
                release = float(release_after_close(
                    close - fire, base(n_base), incremental(n_base, n_plus) if n_plus else 0.0))
                return LiveOutcome(close - fire, n_base, n_plus, plan.nu,
                                   plan.finish_after_close, release, replans,
                                   plan.margin_seconds, plan.meets_deadline)
        now += replan_seconds
    return LiveOutcome(None, n, 0, 0.0, base(n), base(n), replans,
                       0.0 if plan is None else plan.margin_seconds,
                       None if plan is None else plan.meets_deadline)


def earliest_release(times: np.ndarray, close: float, base: PowerLaw,
                     incremental: IncrementalCost, grid: int = 4000) -> float:
    """The earliest release after close any schedule could make on these arrivals, chosen in
    hindsight: the base snapshot right after one of the arrivals (at least 2k records) or
    none (one-shot at close), under the cost models.

    The snapshot sizes are scanned on a grid of about ``grid`` sizes (linear and geometric),
    then every size between the neighbours of the best few grid points.
    """
    n = len(times)

    def release(n_base: int) -> float:
        n_plus = n - n_base
        return float(release_after_close(close - times[n_base - 1], base(n_base),
                                         incremental(n_base, n_plus) if n_plus else 0.0))

    if n < 2 * K:
        return base(n)
    sizes = np.unique(np.concatenate([np.linspace(2 * K, n, grid // 2),
                                      np.geomspace(2 * K, n, grid // 2)]).astype(int))
    values = np.array([release(int(size)) for size in sizes])
    best = base(n)
    for i in np.argsort(values)[:3]:
        lo, hi = sizes[max(i - 1, 0)], sizes[min(i + 1, len(sizes) - 1)]
        best = min(best, min(release(int(size)) for size in range(lo, hi + 1)))
    return best


# ---------------------------------------------------------------------------------------------
# Distortion of the release actually made.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measured:
    """delta of the release made, and the real run seconds behind it when it was run."""

    delta: float
    source: str  # "measured", "curve" or "none" (n_+ = 0: the one-shot partition)
    base_seconds: float | None = None
    incremental_seconds: float | None = None


class DeltaMeter:
    """delta = D_T / D - 1 of mdav + ``stage`` on seeded n x 15 Gaussian data, cached."""

    def __init__(self, measure_max_n: int, stage: str = "nn_split_end") -> None:
        self.measure_max_n = measure_max_n
        self.runner = TwoStageRun(K, "mdav", stage)
        self._data: dict[tuple[int, int], tuple[np.ndarray, float, float]] = {}
        self._runs: dict[tuple[int, int, int], Measured] = {}
        self._curve: tuple[np.ndarray, np.ndarray] | None = None

    def data(self, n: int, seed: int) -> tuple[np.ndarray, float, float]:
        """Standardised records, one-shot distortion D and one-shot MDAV seconds."""
        if (n, seed) not in self._data:
            Z = gaussian(n, M, 10_000 + seed)
            self.runner.warm_up(Z)
            small = Z[: 4 * K]  # and the path of an increment smaller than k, compiled apart
            self.runner.run_increment(small, run_engine("mdav", small, K), Z[4 * K: 4 * K + 1])
            started = time.perf_counter()
            labels = run_engine("mdav", Z, K)
            seconds = time.perf_counter() - started
            self._data[(n, seed)] = (Z, distortion(Z, labels), seconds)
        return self._data[(n, seed)]

    def measure(self, n: int, seed: int, n_base: int) -> Measured:
        """A real two-stage run on the first ``n_base`` records and the rest."""
        key = (n, seed, n_base)
        if key not in self._runs:
            Z, d_one, t_one = self.data(n, seed)
            if n_base >= n:
                self._runs[key] = Measured(0.0, "none", t_one, 0.0)
            else:
                result = self.runner.run(Z, n_base)
                self._runs[key] = Measured(result.distortion / d_one - 1, "measured",
                                           result.base_seconds, result.incremental_seconds)
        return self._runs[key]

    @property
    def curve_measured(self) -> bool:
        return self._curve is not None

    def curve(self) -> tuple[np.ndarray, np.ndarray]:
        """delta(nu) at n = measure_max_n, seed 0 (0 at nu = 0); beyond its last point (a base
        of at least 2k records) delta is taken as flat."""
        if self._curve is None:
            n = self.measure_max_n
            nus = [0.0, *(nu for nu in CURVE_NUS if n - round(nu * n) >= 2 * K)]
            deltas = [0.0] + [self.measure(n, 0, n - round(nu * n)).delta for nu in nus[1:]]
            self._curve = (np.asarray(nus), np.asarray(deltas))
        return self._curve

    def delta(self, n: int, seed: int, n_base: int) -> Measured:
        if n <= self.measure_max_n:
            return self.measure(n, seed, n_base)
        if n_base >= n:
            return Measured(0.0, "none")
        nus, deltas = self.curve()
        return Measured(float(np.interp((n - n_base) / n, nus, deltas)), "curve")


# ---------------------------------------------------------------------------------------------
# The grid.
# ---------------------------------------------------------------------------------------------


@dataclass
class Row:
    """One cell and seed: what the planner did, the release, and its distortion."""

    cost: str
    profile: str
    n: int
    deadline: str
    seed: int
    t_ref: float
    fired_before_close: float | None
    planned_nu: float
    nu: float
    n_base: int
    n_increment: int
    predicted_release: float
    release_after_close: float
    deadline_met: bool | None
    delta: float
    delta_source: str
    base_seconds_measured: float | None
    incremental_seconds_measured: float | None
    release_with_measured_times: float | None
    deadline_met_with_measured_times: bool | None
    replans: int
    margin_seconds: float
    planned_in_time: bool | None
    earliest_release: float
    deadline_feasible: bool | None


def deadline_label(deadline: float | None) -> str:
    return "none" if deadline is None else f"{deadline:g} s"


def _seconds(label: str) -> float:
    return float(label.removesuffix(" s"))


def _met(release: float | None, deadline: float | None) -> bool | None:
    if release is None or deadline is None:
        return None
    return bool(release <= deadline)


def _release_with(measured: Measured, outcome: LiveOutcome, scale: float) -> float | None:
    """The release after close had the stages taken their real seconds (times ``scale``)."""
    if measured.base_seconds is None:
        return None
    base = scale * measured.base_seconds
    fired = outcome.fired_before_close
    if fired is None:  # one-shot at close
        return base
    return float(release_after_close(fired, base,
                                     scale * (measured.incremental_seconds or 0.0)))


def run_grid(grid: Grid, progress: Callable[[str], None] | None = None,
             saved: Mapping[str, Any] | None = None
             ) -> tuple[list[Row], dict[str, CostModels], DeltaMeter]:
    models = cost_models(grid.calibration_seconds, grid.incremental, saved)
    meter = DeltaMeter(grid.measure_max_n, grid.incremental)
    rows = []
    for cost in grid.costs:
        cm = models[cost]
        for name in grid.profiles:
            profile = resolve(name, SURVEY_SECONDS)
            for n in grid.ns:
                for seed in grid.seeds:
                    times = profile.times(n, SURVEY_SECONDS, seed=seed)
                    earliest = earliest_release(times, SURVEY_SECONDS, cm.base, cm.incremental)
                    for deadline in grid.deadlines:
                        outcome = simulate_live(times, SURVEY_SECONDS, cm.base,
                                                cm.incremental, deadline, grid.replan_seconds,
                                                n if grid.expected_records else None,
                                                grid.quantile)
                        measured = meter.delta(n, seed, outcome.n_base)
                        # the grid's hindsight optimum can miss by a hair what the planner did
                        best = min(earliest, outcome.release_after_close)
                        real = _release_with(measured, outcome, cm.scale)
                        rows.append(Row(
                            cost=cost, profile=name, n=n, deadline=deadline_label(deadline),
                            seed=seed, t_ref=cm.base(n),
                            fired_before_close=outcome.fired_before_close,
                            planned_nu=outcome.planned_nu, nu=outcome.nu, n_base=outcome.n_base,
                            n_increment=outcome.n_increment,
                            predicted_release=outcome.predicted_release,
                            release_after_close=outcome.release_after_close,
                            deadline_met=_met(outcome.release_after_close, deadline),
                            delta=measured.delta, delta_source=measured.source,
                            base_seconds_measured=measured.base_seconds,
                            incremental_seconds_measured=measured.incremental_seconds,
                            release_with_measured_times=real,
                            deadline_met_with_measured_times=_met(real, deadline),
                            replans=outcome.replans, margin_seconds=outcome.margin_seconds,
                            planned_in_time=outcome.planned_in_time,
                            earliest_release=best, deadline_feasible=_met(best, deadline)))
                if progress:
                    progress(f"{cost} {name} n={n}: done")
    return rows, models, meter


def write_csv(rows: list[Row], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(asdict(rows[0])))
        writer.writeheader()
        for row in rows:
            writer.writerow({key: ("" if value is None else value)
                             for key, value in asdict(row).items()})
    return path


def _cells(rows: list[Row], grid: Grid, cost: str, n: int):
    """profile x deadline matrices: met share (nan for no deadline), mean delta, mean nu,
    mean release."""
    shape = (len(grid.profiles), len(grid.deadlines))
    met, delta, nu, release = (np.full(shape, np.nan) for _ in range(4))
    for i, name in enumerate(grid.profiles):
        for j, deadline in enumerate(grid.deadlines):
            sel = [r for r in rows if r.cost == cost and r.n == n and r.profile == name
                   and r.deadline == deadline_label(deadline)]
            if deadline is not None:
                met[i, j] = np.mean([r.deadline_met for r in sel])
            delta[i, j] = np.mean([r.delta for r in sel])
            nu[i, j] = np.mean([r.nu for r in sel])
            release[i, j] = np.mean([r.release_after_close for r in sel])
    return met, delta, nu, release


def heatmap(rows: list[Row], grid: Grid, path: Path) -> Path:
    """Per cost model two rows of panels (deadline-met share, mean delta), one column per n;
    each panel is profile x deadline."""
    fig, axes = plt.subplots(2 * len(grid.costs), len(grid.ns),
                             figsize=(3.4 * len(grid.ns) + 1.2, 3.0 * 2 * len(grid.costs) + 0.6),
                             squeeze=False)
    xlabels = [deadline_label(d) for d in grid.deadlines]
    delta_max = max(1.0, 100 * max(r.delta for r in rows))
    for c, cost in enumerate(grid.costs):
        for col, n in enumerate(grid.ns):
            met, delta, _, _ = _cells(rows, grid, cost, n)
            for r, (values, cmap, vmax, fmt, title) in enumerate((
                    (met, "RdYlGn", 1.0, lambda v: f"{100 * v:.0f}%", "deadline met"),
                    (100 * delta, "Reds", delta_max, lambda v: f"{v:.2f}%", "mean delta"))):
                ax = axes[2 * c + r, col]
                ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=0, vmax=vmax,
                          aspect="auto")
                for (i, j), v in np.ndenumerate(values):
                    dark = not np.isnan(v) and (v / vmax > 0.6 if r else abs(v - 0.5) > 0.3)
                    ax.text(j, i, "n/a" if np.isnan(v) else fmt(v), ha="center",
                            va="center", fontsize=7, color="white" if dark else "black")
                ax.set_xticks(range(len(xlabels)), xlabels, fontsize=7)
                ax.set_yticks(range(len(grid.profiles)),
                              grid.profiles if col == 0 else [""] * len(grid.profiles),
                              fontsize=7)
                ax.set_title(f"{title}: {cost}, n = {n:,}", fontsize=8)
    for ax in axes[-1]:
        ax.set_xlabel("deadline after close", fontsize=7)
    fig.suptitle(f"Live planner, 10 h survey, {len(grid.seeds)} seed(s) per cell "
                 f"(mdav + {grid.incremental}, k = {K})", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def summary(rows: list[Row], grid: Grid, models: dict[str, CostModels],
            meter: DeltaMeter) -> list[str]:
    lines = []
    for cost in grid.costs:
        cm = models[cost]
        lines += ["", f"#### Cost model `{cost}`: {cm.describe()}"]
        for n in grid.ns:
            met, delta, nu, release = _cells(rows, grid, cost, n)
            sources = sorted({r.delta_source for r in rows if r.cost == cost and r.n == n})
            bound = live.margin_factor(cm.base, n, grid.quantile)
            lines += ["", f"n = {n:,}, t_ref = {clock(cm.base(n))}"
                          + ("" if grid.quantile is None else
                             f", {100 * grid.quantile:g} % upper bound {bound:.3g} x t_ref")
                          + f"; delta: {', '.join(sources)}", ""]
            header = "| profile |" + "".join(
                f" {deadline_label(d)}: met | nu | release | delta |" for d in grid.deadlines)
            lines += [header, "|---|" + "---:|---:|---:|---:|" * len(grid.deadlines)]
            for i, name in enumerate(grid.profiles):
                cells = []
                for j in range(len(grid.deadlines)):
                    share = "n/a" if np.isnan(met[i, j]) else f"{100 * met[i, j]:.0f} %"
                    cells.append(f" {share} | {100 * nu[i, j]:.3g} % | "
                                 f"{clock(release[i, j])} | {100 * delta[i, j]:.2f} % |")
                lines.append(f"| {name} |" + "".join(cells))
        lines += ["", *_model_check(rows, cost, cm.scale)]
    if meter.curve_measured:
        nus, deltas = meter.curve()
        lines += ["", f"delta(nu) curve used above n = {grid.measure_max_n:,} (measured at n = "
                      f"{grid.measure_max_n:,}, seed 0): "
                      + ", ".join(f"{nu:g} → {100 * d:.2f} %"
                                  for nu, d in zip(nus, deltas, strict=True))]
    return lines


def _share(rows: list[Row], met: Callable[[Row], bool | None]) -> dict[str, float | int | None]:
    """How many of ``rows`` have a deadline, how many met it (``met(row)``), and the share."""
    judged = [m for m in map(met, rows) if m is not None]
    return {"cells": len(judged), "met": int(sum(judged)),
            "share": sum(judged) / len(judged) if judged else None}


def deadline_shares(rows: list[Row]) -> dict[str, dict[str, dict[str, float | int | None]]]:
    """The share of deadlines met, overall (``"all"``), per deadline and per cost model.

    For each group: ``met`` under the cost models over every deadline, over the feasible ones
    (``feasible``, where a snapshot chosen in hindsight meets it) and over those whose plan
    kept its margin (``in_time``: the plan that fired met the deadline at its upper bound);
    ``measured`` and ``measured_in_time`` the same with the stages' real seconds (the cells
    run for real). Each is ``{"cells", "met", "share"}``.
    """
    with_deadline = [r for r in rows if r.deadline_met is not None]
    groups = {"all": with_deadline}
    for label in dict.fromkeys(r.deadline for r in with_deadline):
        groups[label] = [r for r in with_deadline if r.deadline == label]
    for cost in dict.fromkeys(r.cost for r in with_deadline):
        groups[f"cost {cost}"] = [r for r in with_deadline if r.cost == cost]
    return {name: {
        "met": _share(sel, lambda r: r.deadline_met),
        "feasible": _share([r for r in sel if r.deadline_feasible],
                           lambda r: r.deadline_met),
        "in_time": _share([r for r in sel if r.planned_in_time], lambda r: r.deadline_met),
        "measured": _share(sel, lambda r: r.deadline_met_with_measured_times),
        "measured_in_time": _share([r for r in sel if r.planned_in_time],
                                   lambda r: r.deadline_met_with_measured_times),
    } for name, sel in groups.items()}


def _percent(share: dict[str, float | int | None]) -> str:
    if share["share"] is None:
        return "n/a"
    return f"{100 * share['share']:.1f} % ({share['met']} of {share['cells']})"


def shares_table(shares: dict[str, dict[str, dict[str, float | int | None]]]) -> list[str]:
    """:func:`deadline_shares` as a Markdown table."""
    columns = ("met", "feasible", "in_time", "measured", "measured_in_time")
    lines = ["| deadlines | met | met, feasible ones | met, plan in time | real seconds: met "
             "| real seconds: met, plan in time |", "|---|" + "---:|" * len(columns)]
    for name, share in shares.items():
        lines.append(f"| {name} |" + "".join(f" {_percent(share[c])} |" for c in columns))
    return lines


def _model_check(rows: list[Row], cost: str, scale: float) -> list[str]:
    """Deadlines under the cost model against the run times measured on this machine."""
    sel = [r for r in rows if r.cost == cost]
    dl = [r for r in sel if r.deadline_met is not None]
    lines = []
    if dl:
        missed = [r for r in dl if not r.deadline_met]
        narrow = [r for r in missed if r.release_after_close <= 1.01 * _seconds(r.deadline)]
        worst = max(dl, key=lambda r: r.release_after_close / _seconds(r.deadline))
        lines.append(
            f"Deadlines met under the cost model: {len(dl) - len(missed)} of {len(dl)} "
            f"cell-seeds; {len(narrow)} of the {len(missed)} misses are within 1 % of the "
            f"deadline (plan_deadline aims exactly at it); the worst release is "
            f"{clock(worst.release_after_close)} for {worst.deadline} ({worst.profile}, "
            f"n = {worst.n:,}, seed {worst.seed}).")
    real = [r for r in sel if r.release_with_measured_times is not None]
    if real:
        gaps = [r.release_with_measured_times - r.release_after_close for r in real]
        worst = real[int(np.argmax(np.abs(gaps)))]
        real_dl = [r for r in real if r.deadline_met_with_measured_times is not None]
        lines.append(
            f"With the stages' real seconds on this machine (x {scale:.4g}) instead of the "
            f"cost model, for the {len(real)} cell-seeds run for real: release minus modelled "
            f"release median {np.median(gaps):+.3g} s; the largest gap is "
            f"{clock(worst.release_with_measured_times)} against "
            f"{clock(worst.release_after_close)} modelled ({worst.profile}, n = {worst.n:,}, "
            f"{worst.deadline}, nu = {100 * worst.nu:.3g} %)"
            + (f"; deadlines met {sum(r.deadline_met_with_measured_times for r in real_dl)} "
               f"of {len(real_dl)} (model: {sum(r.deadline_met for r in real_dl)})."
               if real_dl else "."))
    return lines


def report(quick: bool = False, out: Path | None = None,
           incremental: str = "nn_split_end", expected_records: bool = True,
           quantile: float | None = live.DEADLINE_QUANTILE, models: Path | None = None) -> str:
    """Run the grid, write the CSV, the JSON shares, the models used and the heatmap, return
    the Markdown summary. ``models``: a ``models.json`` of an earlier sweep to use instead of
    calibrating."""
    grid = replace(QUICK if quick else FULL, incremental=incremental,
                   expected_records=expected_records, quantile=quantile)
    if out is None:  # a smoke run never replaces the full run's results
        out = Path(tempfile.mkdtemp(prefix="sweep-quick-")) if quick else RESULTS
    started = time.perf_counter()
    saved = None if models is None else json.loads(Path(models).read_text())
    rows, used, meter = run_grid(grid, progress=lambda msg: print(msg, file=sys.stderr),
                                 saved=saved)
    elapsed = time.perf_counter() - started
    out.mkdir(parents=True, exist_ok=True)
    models_path = out / "models.json"
    models_path.write_text(json.dumps(saved_models(used), indent=2) + "\n")
    csv_path = write_csv(rows, out / "sweep.csv")
    png_path = heatmap(rows, grid, out / "figures" / "sweep_heatmap.png")
    shares = deadline_shares(rows)
    command = (f"{COMMAND}" + (" --quick" if quick else "")
               + ("" if incremental == "nn_split_end" else f" --incremental {incremental}")
               + ("" if expected_records else " --no-expected-records")
               + ("" if quantile == live.DEADLINE_QUANTILE else
                  " --no-margin" if quantile is None else f" --quantile {quantile:g}")
               + ("" if models is None else f" --models {models}"))
    json_path = out / "sweep.json"
    json_path.write_text(json.dumps({"command": command, "grid": asdict(grid),
                                     "deadlines_met": shares}, indent=2) + "\n")
    margin = ("no margin: the plan meets the deadline as predicted" if quantile is None else
              f"a deadline is met by the {100 * quantile:g} % upper bound of the compute's "
              "time (the calibration fit's prediction interval)")
    lines = [
        "### Live scheduler sweep: profiles x n x deadline",
        "",
        f"Command: `{command}`",
        "",
        f"10 h survey; profiles {', '.join(grid.profiles)}; n in "
        f"{', '.join(f'{n:,}' for n in grid.ns)}; deadlines "
        f"{', '.join(deadline_label(d) for d in grid.deadlines)}; seeds "
        f"{', '.join(map(str, grid.seeds))}; re-plan every {grid.replan_seconds / 60:g} min on "
        f"the arrivals so far (ArrivalEstimator, {PACE_BINS} bins of {PACE_BIN_SECONDS:g} s); "
        f"mdav base + {grid.incremental} increment, k = {K}; the service's plan "
        "(scheduler.live) with the survey's expected_records "
        + ("= n" if grid.expected_records else "unset (total extrapolated from the pace)")
        + f"; {margin}. Columns per deadline: share of seeds whose release met it, mean nu "
        "actually used, mean release after close, mean delta = D_T / D_one_shot - 1.",
        "",
        "MDAV calibration (m = 15, k = 10): "
        + ", ".join(f"{n:,} → {s:.3f} s" for n, s in used["measured"].calibration)
        + f"; the `slow` model multiplies every time by {used['slow'].scale:.4g}"
        + ("" if models is None else f" (models of an earlier sweep, `{models}`)") + ".",
        *summary(rows, grid, used, meter),
        "",
        "Share of deadlines met (cell-seeds): under the cost models, over every deadline, over "
        "the feasible ones (a snapshot chosen in hindsight meets them) and over those whose "
        "plan was in time (the plan that fired the base met the deadline at its upper bound, "
        "margin and all); then the same with the stages' real seconds, for the cells run "
        "for real:",
        "",
        *shares_table(shares),
        "",
        f"Run time: {elapsed:.1f} s. Wrote `{shown(csv_path)}` ({len(rows)} rows), "
        f"`{shown(json_path)}`, `{shown(models_path)}` and `{shown(png_path)}`.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="3 profiles, n in {2000, 8000}, deadlines none and 60 s, one seed")
    parser.add_argument("--incremental", choices=("nn_split_end", "two_stage"),
                        default="nn_split_end",
                        help="the incremental stage (default nn_split_end; two_stage is 2MDAV)")
    parser.add_argument("--no-expected-records", dest="expected_records", action="store_false",
                        help="leave the surveys' expected_records unset: the planner "
                             "extrapolates the total from the pace")
    margin = parser.add_mutually_exclusive_group()
    margin.add_argument("--quantile", type=float, default=live.DEADLINE_QUANTILE,
                        help="a deadline is met by this upper quantile of the compute's time "
                             f"(default {live.DEADLINE_QUANTILE:g})")
    margin.add_argument("--no-margin", dest="quantile", action="store_const", const=None,
                        help="plan against the cost models' prediction itself (no margin)")
    parser.add_argument("--models", type=Path, default=None,
                        help="the models.json of an earlier sweep: the same cost models "
                             "instead of a new calibration (to compare planners)")
    parser.add_argument("--out", type=Path, default=None,
                        help="results folder (default simulations/results; a temporary "
                             "folder with --quick)")
    args = parser.parse_args(argv)
    if args.quantile is not None and not 0 < args.quantile < 1:
        parser.error("--quantile must be in (0, 1)")
    print(report(quick=args.quick, out=args.out, incremental=args.incremental,
                 expected_records=args.expected_records, quantile=args.quantile,
                 models=args.models), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
