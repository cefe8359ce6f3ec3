"""scheduler.live: the one live planning policy (forecast, overhead, plan, base moment)."""

from __future__ import annotations

import itertools
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from scheduler import live
from scheduler.arrivals import UniformForecast
from scheduler.closed_forms import deadline_ratio, optimal_ratio
from scheduler.cost_model import PowerLaw, TwoStageCost
from scheduler.overhead import DEFAULT_OVERHEAD, MEASURED_RELEASES
from scheduler.planner import Plan, plan_deadline, plan_optimal

N, K, T_REF = 200_000, 10, 7200.0
QUADRATIC = PowerLaw.quadratic(T_REF, N)
PAPER = UniformForecast.from_arrival_coefficient(N, 5.0, T_REF)  # 10 h survey, t_ref = 2 h


def test_release_overhead_is_kept_out_of_the_compute_budget():
    assert live.release_overhead(200_000) == pytest.approx(1.606)
    assert live.deadline_reserve(200_000) == pytest.approx(1.5 * 1.606)
    assert live.compute_budget(12.0, 200_000) == pytest.approx(12.0 - 1.5 * 1.606)
    assert live.compute_budget(2.0, 200_000) == 0.0


@pytest.mark.parametrize("n, late, steps", MEASURED_RELEASES)
def test_a_deadline_keeps_free_what_each_measured_release_took_after_its_compute(n, late,
                                                                                steps):
    """The overhead model is the middle of the measured releases; what a deadline keeps free
    for the steps after the compute is above every one of them."""
    assert live.deadline_reserve(n, late=late) >= sum(steps.values())


def test_a_fitted_overhead_model_replaces_the_default_in_the_budget():
    from scheduler.overhead import ReleaseOverhead

    fast = ReleaseOverhead.fit([(n, {"drain": 0.1, "publish": 1e-6 * n})
                                for n in (10_000, 200_000)])
    assert live.release_overhead(200_000, fast) == pytest.approx(0.3)
    assert live.compute_budget(12.0, 200_000, fast) == pytest.approx(12.0 - 1.5 * 0.3)
    inc = TwoStageCost(QUADRATIC)
    plan = live.plan(PAPER, QUADRATIC, inc, k=K, deadline=3600.0, overhead_model=fast)
    assert plan.deadline == pytest.approx(3600.0 - live.DEADLINE_RESERVE * fast(N))


def test_forecast_takes_the_expected_total_over_pace_extrapolation():
    # an invitation burst: 100 records/s now, 10 h left, 20,000 expected in all
    burst = live.forecast(5_000, 100.0, 36_000.0, 20_000)
    assert burst.total == 20_000 and burst.pace == 100.0
    assert live.forecast(5_000, 100.0, 36_000.0, None).total == 5_000 + 100.0 * 36_000
    # more than expected have come: what has arrived counts
    assert live.forecast(25_000, 1.0, 100.0, 20_000).total == 25_000
    # no pace yet: the pace that brings the expected total by close
    quiet = live.forecast(0, 0.0, 1_000.0, 20_000)
    assert quiet.pace == pytest.approx(20.0) and quiet.total == 20_000


def test_plan_reproduces_the_papers_running_example():
    """Design spec §4: s = 5 gives nu* = 0.1459; a 1 h deadline (tau_end = 0.5) gives
    nu_end = 0.0729 when the deadline is the compute's alone."""
    inc = TwoStageCost(QUADRATIC)
    # the prediction itself (quantile None): the default keeps a margin (test_default_plan)
    best = live.plan(PAPER, QUADRATIC, inc, k=K, overhead=False, quantile=None)
    assert best.nu == pytest.approx(optimal_ratio(5.0), abs=1e-6)
    assert best.arrival_coefficient == pytest.approx(5.0)
    end = live.plan(PAPER, QUADRATIC, inc, k=K, deadline=3600.0, overhead=False)
    assert end.nu == pytest.approx(deadline_ratio(5.0, 0.5), abs=1e-6)
    assert end.finish_after_close == pytest.approx(3600.0, rel=1e-9)


def test_a_deadline_keeps_the_release_overhead_free():
    inc = TwoStageCost(QUADRATIC)
    plan = live.plan(PAPER, QUADRATIC, inc, k=K, deadline=3600.0)
    budget = live.compute_budget(3600.0, N)
    assert plan.deadline == budget < 3600.0
    assert plan == plan_deadline(N, with_base_steps, inc, PAPER.head_start, budget, k=K,
                                 arrival_coefficient=plan.arrival_coefficient,
                                 overhead=late_overhead(N))


def with_base_steps(n):
    """The engine's model and the base run's own steps, as live.plan plans the base run."""
    return QUADRATIC(n) + live.BASE_OVERHEAD(n)


def late_overhead(n):
    """The default overhead's late-record part by nu, as live.plan weighs it."""
    return lambda nu: (DEFAULT_OVERHEAD.late_part(nu * n) if nu > 0
                       else DEFAULT_OVERHEAD.late_part(n) - live.BASE_OVERHEAD(n))


def test_without_a_deadline_it_is_the_optimal_plan_within_the_time_left():
    inc = TwoStageCost(QUADRATIC)
    plan = live.plan(PAPER, QUADRATIC, inc, k=K, seconds_to_close=600.0)
    assert plan == plan_optimal(N, with_base_steps, inc, PAPER.head_start, k=K,
                                max_head_start=600.0,
                                arrival_coefficient=plan.arrival_coefficient,
                                overhead=late_overhead(N), solve_margin=live.BUSY_FACTOR)
    assert plan.safety == live.BUSY_FACTOR
    assert plan.head_start <= 600.0
    assert plan.overhead_seconds == pytest.approx(DEFAULT_OVERHEAD.late_part(plan.nu * N))


def test_a_past_close_plans_one_shot_now():
    plan = live.plan(PAPER, QUADRATIC, TwoStageCost(QUADRATIC), k=K, seconds_to_close=-5.0)
    assert plan.mode == "one-shot" and "close time has passed" in plan.warnings[0]


@pytest.mark.filterwarnings("error")  # any Python warning fails the test
def test_an_infeasible_deadline_is_reported_in_the_plan_not_as_a_python_warning():
    plan = live.plan(PAPER, QUADRATIC, TwoStageCost(QUADRATIC), k=K, deadline=10.0,
                     overhead=False)
    assert plan.mode == "optimal" and plan.nu == pytest.approx(optimal_ratio(5.0), abs=1e-6)
    assert plan.meets_deadline is False
    assert any("cannot be met" in w for w in plan.warnings)


def _plan(mode: str = "optimal", nu: float = 0.1, head_start: float = 600.0) -> Plan:
    return Plan(mode=mode, nu=nu, n_total=1000.0, t_ref=100.0, head_start=head_start,
                base_seconds=80.0, incremental_seconds=1.0)


def test_base_moment_is_close_less_the_head_start_in_seconds_or_datetimes():
    close = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)
    now = close - timedelta(hours=1)
    assert live.base_moment(_plan(), 1000.0, 5000.0) == 4400.0
    assert live.base_moment(_plan(), now, close) == close - timedelta(seconds=600)


def test_base_moment_is_now_when_nothing_more_arrives_and_none_for_one_shot():
    assert live.base_moment(_plan(head_start=float("inf")), 1000.0, 5000.0) == 1000.0
    assert live.base_moment(_plan(mode="one-shot"), 1000.0, 5000.0) is None
    assert live.base_moment(_plan(nu=0.0, head_start=0.0), 1000.0, 5000.0) is None
    assert live.base_moment(_plan(), 1000.0, None) is None  # closes on command


def test_the_scheduler_package_imports_nothing_from_streamanon(subprocesses):
    """Design spec §2: the scheduler imports nothing from the service (nor the numerical core)."""
    code = ("import sys, scheduler.live, scheduler.jobs, scheduler.cost_model, "
            "scheduler.profiles; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'streamanon'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------- the deadline's safety margin


def fitted(sigma: float) -> PowerLaw:
    """The quadratic model with t_ref = 2 h at N, refitted on calibration timings that scatter
    around it by sigma in log space (the same scatter pattern for every sigma)."""
    ns = np.array([10_000, 20_000, 40_000, 80_000, 160_000])
    noise = np.array([0.5, -1.0, 0.8, -0.6, 0.3])
    return PowerLaw.fit(ns, QUADRATIC.a * ns**2.0 * np.exp(sigma * noise))


def test_margin_factor_is_the_models_upper_bound_relative_to_its_prediction():
    model = fitted(0.1)
    assert live.margin_factor(model, N) == pytest.approx(model.upper(N, 0.95) / model(N))
    assert live.margin_factor(model, N, 0.99) > live.margin_factor(model, N) > 1.0
    assert live.margin_factor(model, N, None) == 1.0
    assert live.margin_factor(QUADRATIC, N) == 1.0  # no residual, no interval
    assert live.margin_factor(lambda n: 1e-8 * n**2, N) == 1.0  # a plain function


def test_a_deadline_plan_keeps_the_upper_bound_within_the_budget():
    model = fitted(0.1)
    plan = live.plan(PAPER, model, TwoStageCost(model), k=K, deadline=3600.0)
    budget = live.compute_budget(3600.0, N)
    assert plan.margin_seconds > 0 and plan.meets_deadline
    assert plan.latest_finish == pytest.approx(budget, rel=1e-9)
    assert plan.finish_after_close < budget
    plain = live.plan(PAPER, model, TwoStageCost(model), k=K, deadline=3600.0, quantile=None)
    assert plain.margin_seconds == 0.0 and plain.finish_after_close == pytest.approx(budget)
    assert plain.nu < plan.nu


def test_the_margin_grows_with_the_calibration_residual():
    plans = [live.plan(PAPER, m, TwoStageCost(m), k=K, deadline=3600.0)
             for m in map(fitted, (0.0, 0.02, 0.05, 0.1))]
    assert plans[0].margin_seconds > 0  # a perfect fit keeps the prior's timing noise
    margins = [p.margin_seconds for p in plans]
    assert all(a < b for a, b in itertools.pairwise(margins))
    assert all(p.latest_finish == pytest.approx(live.compute_budget(3600.0, N)) for p in plans)


def test_measured_contention_moves_the_prediction_and_its_scatter_the_margin():
    model = fitted(0.02)
    steady = model.observed([(100_000, 1.4 * model(100_000))] * 3)
    scattered = model.observed([(100_000, r * model(100_000)) for r in (1.1, 1.4, 1.8)])
    plans = {name: live.plan(PAPER, m, TwoStageCost(m), k=K, deadline=3600.0)
             for name, m in (("calibrated", model), ("steady", steady),
                             ("scattered", scattered))}
    steps = live.BASE_OVERHEAD(N)  # the base run's own steps are not the engine's
    assert plans["steady"].t_ref - steps == pytest.approx(
        1.4 * (plans["calibrated"].t_ref - steps))
    assert (plans["steady"].margin_seconds / plans["steady"].finish_after_close
            < plans["scattered"].margin_seconds / plans["scattered"].finish_after_close)
    assert all(p.meets_deadline for p in plans.values())
