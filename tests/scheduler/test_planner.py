"""Closed forms of paper 001 (sec. IV-B, IV-C) and the general planner that generalises them."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from scheduler.arrivals import CumulativeForecast, UniformForecast
from scheduler.closed_forms import (
    ARRIVAL_THRESHOLD,
    InfeasibleDeadlineWarning,
    critical_ratio,
    critical_ratio_approx,
    deadline_feasible,
    deadline_ratio,
    deadline_ratio_approx,
    head_start,
    min_relative_deadline,
    optimal_gain,
    optimal_ratio,
    relative_gain,
)
from scheduler.cost_model import NearestNeighbourCost, PowerLaw, TwoStageCost
from scheduler.planner import plan_deadline, plan_optimal, release_after_close

# ---------------------------------------------------------------- closed forms, paper's numbers


def test_threshold_is_0_3094():
    assert round(ARRIVAL_THRESHOLD, 4) == 0.3094
    assert ARRIVAL_THRESHOLD == pytest.approx(2 * (2 / math.sqrt(3) - 1), abs=1e-15)


def test_at_the_threshold_nu_star_is_one_over_root_three_and_gain_two_thirds():
    assert optimal_ratio(ARRIVAL_THRESHOLD) == pytest.approx(1 / math.sqrt(3), abs=1e-12)
    assert critical_ratio(ARRIVAL_THRESHOLD) == pytest.approx(1 / math.sqrt(3), abs=1e-12)
    assert optimal_gain(ARRIVAL_THRESHOLD) == pytest.approx(2 / 3, abs=1e-12)


def test_fast_arrivals_limit_is_one_half():
    assert optimal_ratio(0) == 0.5
    assert optimal_gain(0) == 0.5


def test_worked_example_s5():
    """Paper 001, Figs. 24-25: 10 h survey, t_ref = 2 h, so s = 5."""
    t_ref = 2 * 3600
    nu = optimal_ratio(5)
    assert round(nu, 4) == 0.1459
    assert head_start(5, nu, t_ref) / t_ref == pytest.approx(0.7295, abs=1e-4)
    assert head_start(5, nu, t_ref) / 60 == pytest.approx(87.5, abs=0.05)  # 1 h 27.5 min
    assert round(nu**2 * t_ref) == 153  # incremental stage, seconds
    assert round(deadline_ratio(5, 0.5), 4) == 0.0729  # 1 h deadline


def test_optimal_gain_matches_the_fig11_form_above_the_threshold():
    # the Fig. 11 form cancels digits for large s (2 + s - root), hence rel = 1e-9
    for s in (0.31, 1.0, 5.0, 40.0, 900.0):
        root = math.sqrt(s * (4 + s))
        assert optimal_gain(s) == pytest.approx(root * (2 + s - root) / 2, rel=1e-9)


def test_critical_ratio_solves_tau0_equals_tau_minus():
    for s in (0.01, 0.3, 2.0, 5.0, 77.0):
        nu = critical_ratio(s)
        assert (1 - nu) ** 2 == pytest.approx(s * nu, rel=1e-12)


def test_optimal_ratio_is_the_argmax_of_the_gain():
    for s in (0.0, 0.2, ARRIVAL_THRESHOLD, 1.0, 5.0, 50.0):
        nus = np.linspace(0, 0.99, 99_001)
        gains = np.array([relative_gain(x, s) for x in nus])
        assert optimal_ratio(s) == pytest.approx(nus[gains.argmax()], abs=2e-5)
        assert gains.max() <= optimal_gain(s) + 1e-12  # nothing on the grid beats it
        assert relative_gain(optimal_ratio(s), s) == pytest.approx(optimal_gain(s), abs=1e-12)


def test_deadline_ratio_meets_the_deadline_exactly():
    for s in (0.5, 5.0, 30.0):
        for tau_end in np.linspace(min_relative_deadline(s) + 1e-6, 0.99, 7):
            nu = deadline_ratio(s, tau_end)
            finish = max((1 - nu) ** 2 - s * nu, 0) + nu**2
            assert finish == pytest.approx(tau_end, abs=1e-9)
            assert nu <= optimal_ratio(s) + 1e-12


def test_min_relative_deadline_is_one_minus_optimal_gain():
    assert min_relative_deadline(5) == pytest.approx(critical_ratio(5) ** 2)
    assert min_relative_deadline(0.1) == pytest.approx(1 - 2.1**2 / 8)


def test_deadline_without_pressure_is_one_shot():
    assert deadline_ratio(5, 1.0) == 0.0
    assert deadline_ratio(5, 3.0) == 0.0


def test_infeasible_deadline_warns_and_uses_nu_star():
    with pytest.warns(InfeasibleDeadlineWarning, match="cannot be met"):
        nu = deadline_ratio(5, 0.001)
    assert nu == optimal_ratio(5)


def test_strong_approximation_of_nu_minus():
    """nu_- ~= 1/(2+s) in the paper's strong sense: f - g -> 0 and 1/f - 1/g -> 0.

    From nu^2 - (2+s) nu + 1 = 0: nu - 1/(2+s) = nu^2/(2+s) and 1/nu - (2+s) = -nu exactly.
    """
    previous = (math.inf, math.inf)
    for s in (10.0, 100.0, 1000.0, 1e5):
        nu, approx = critical_ratio(s), critical_ratio_approx(s)
        assert nu - approx == pytest.approx(nu**2 / (2 + s), rel=1e-6)
        assert 1 / nu - 1 / approx == pytest.approx(-nu, rel=1e-6, abs=1e-9)
        errors = (abs(nu - approx), abs(1 / nu - 1 / approx))
        assert errors[0] < previous[0] and errors[1] < previous[1]
        previous = errors
    assert previous[0] < 1e-14 and previous[1] < 1e-4


@pytest.mark.parametrize("tau_end", [0.1, 0.5, 0.9])
def test_strong_approximation_of_nu_end(tau_end):
    """nu_end ~= (1 - tau_end)/(2+s): from 2 nu^2 - (2+s) nu + (1 - tau_end) = 0,
    nu - approx = 2 nu^2/(2+s) and 1/nu - 1/approx = -2 nu/(1 - tau_end)."""
    previous = (math.inf, math.inf)
    for s in (10.0, 100.0, 1000.0, 1e5):
        nu, approx = deadline_ratio(s, tau_end), deadline_ratio_approx(s, tau_end)
        assert nu - approx == pytest.approx(2 * nu**2 / (2 + s), rel=1e-6)
        # abs: 1/nu is ~1e6 at s = 1e5, so the difference carries ~1e-10 of rounding
        assert 1 / nu - 1 / approx == pytest.approx(-2 * nu / (1 - tau_end), rel=1e-6, abs=1e-9)
        errors = (abs(nu - approx), abs(1 / nu - 1 / approx))
        assert errors[0] < previous[0] and errors[1] < previous[1]
        previous = errors


def test_negative_arrival_coefficient_is_rejected():
    with pytest.raises(ValueError, match="arrival_coefficient"):
        optimal_ratio(-1)


# ----------------------------------------------------------------------------- general planner

N, K, T_REF = 1_000_000, 10, 7200.0
QUADRATIC = PowerLaw.quadratic(T_REF, N)


def _uniform(s: float) -> UniformForecast:
    return UniformForecast.from_arrival_coefficient(N, s, T_REF)


@pytest.mark.parametrize(
    "s", [0.0, 1e-3, 0.1, 0.2, ARRIVAL_THRESHOLD, 0.31, 0.5, 1, 2, 5, 10, 37, 100, 333, 1000]
)
def test_general_planner_equals_closed_form_for_quadratic_uniform(s):
    plan = plan_optimal(N, QUADRATIC, TwoStageCost(QUADRATIC), _uniform(s).head_start, k=K)
    assert plan.nu == pytest.approx(optimal_ratio(s), abs=1e-6)
    assert plan.relative_gain == pytest.approx(optimal_gain(s), abs=1e-6)
    if s > 0:
        assert plan.critical_ratio == pytest.approx(critical_ratio(s), abs=1e-6)


def test_general_planner_equals_closed_form_across_random_s():
    rng = np.random.default_rng(0)
    for s in np.concatenate([rng.uniform(0, 1000, 15), rng.uniform(0, 1, 10)]):
        plan = plan_optimal(N, QUADRATIC, TwoStageCost(QUADRATIC), _uniform(s).head_start, k=K)
        assert plan.nu == pytest.approx(optimal_ratio(s), abs=1e-6)


@pytest.mark.parametrize("s", [0.5, 2, 5, 20, 100, 1000])
@pytest.mark.parametrize("fraction", [0.05, 0.5, 0.95])
def test_general_deadline_equals_closed_form(s, fraction):
    tau_min = min_relative_deadline(s)
    tau_end = tau_min + fraction * (1 - tau_min)
    plan = plan_deadline(N, QUADRATIC, TwoStageCost(QUADRATIC), _uniform(s).head_start,
                         tau_end * T_REF, k=K)
    assert plan.mode == "deadline"
    assert plan.nu == pytest.approx(deadline_ratio(s, tau_end), abs=1e-6)
    assert plan.meets_deadline


def test_worked_example_through_the_general_planner():
    plan = plan_optimal(N, QUADRATIC, TwoStageCost(QUADRATIC), _uniform(5).head_start, k=K)
    assert round(plan.nu, 4) == 0.1459
    assert plan.head_start / 60 == pytest.approx(87.5, abs=0.05)
    assert round(plan.incremental_seconds) == 153
    assert round(plan.finish_after_close) == 153  # the base run ends exactly at close
    deadline = plan_deadline(N, QUADRATIC, TwoStageCost(QUADRATIC), _uniform(5).head_start,
                             3600, k=K)
    assert round(deadline.nu, 4) == 0.0729
    assert deadline.finish_after_close == pytest.approx(3600, rel=1e-9)


def test_deadline_without_pressure_runs_one_shot():
    plan = plan_deadline(N, QUADRATIC, TwoStageCost(QUADRATIC), _uniform(5).head_start,
                         T_REF * 1.5, k=K)
    assert (plan.mode, plan.nu) == ("one-shot", 0.0)
    assert plan.finish_after_close == T_REF


def test_infeasible_deadline_warns_and_plans_nu_star():
    with pytest.warns(InfeasibleDeadlineWarning, match="cannot be met"):
        plan = plan_deadline(N, QUADRATIC, TwoStageCost(QUADRATIC), _uniform(5).head_start,
                             10.0, k=K)
    assert plan.nu == pytest.approx(optimal_ratio(5), abs=1e-6)
    assert plan.meets_deadline is False
    assert any("cannot be met" in w for w in plan.warnings)


def test_fewer_than_3k_records_is_one_shot():
    plan = plan_optimal(25, QUADRATIC, TwoStageCost(QUADRATIC), _uniform(5).head_start, k=10)
    assert plan.mode == "one-shot" and plan.nu == 0
    assert "fewer than 3k" in plan.warnings[0]


def test_close_time_passed_is_one_shot_now():
    plan = plan_optimal(N, QUADRATIC, TwoStageCost(QUADRATIC), _uniform(5).head_start, k=K,
                        max_head_start=0.0)
    assert plan.mode == "one-shot"
    assert "passed" in plan.warnings[0]


def test_zero_arrival_rate_starts_the_base_run_now_on_everything():
    forecast = UniformForecast.from_current(received=N, pace=0.0, seconds_to_close=3600)
    plan = plan_optimal(forecast.total, QUADRATIC, TwoStageCost(QUADRATIC),
                        forecast.head_start, k=K, max_head_start=3600)
    assert plan.nu == 0.0
    assert plan.head_start == 3600  # snapshot now: everything has arrived
    assert plan.finish_after_close == pytest.approx(T_REF - 3600)


def test_snapshot_cannot_be_in_the_past():
    """Half an hour before close, a plan that wanted an 87.5 min head start starts now."""
    plan = plan_optimal(N, QUADRATIC, TwoStageCost(QUADRATIC), _uniform(5).head_start, k=K,
                        max_head_start=1800)
    assert plan.head_start <= 1800 + 1e-6
    assert plan.nu <= 1800 / (5 * T_REF) + 1e-9


@pytest.mark.parametrize("s", [0.1, 5.0])
def test_fitted_power_law_plan_is_the_earliest_release(s):
    """With a sub-quadratic engine (b = 1.5) no ratio on a fine grid finishes earlier."""
    sub = PowerLaw(a=T_REF / N**1.5, b=1.5)
    plan = plan_optimal(N, sub, TwoStageCost(sub), _uniform(s).head_start, k=K)
    assert plan.nu != pytest.approx(optimal_ratio(s), abs=1e-3)
    for nu in np.linspace(0.0, 0.99, 9901):
        hs = _uniform(s).head_start(nu)
        finish = max(sub((1 - nu) * N) - hs, 0) + sub(nu * N)
        assert finish >= plan.finish_after_close - 1e-6


def test_nearest_neighbour_incremental_cost():
    nn = NearestNeighbourCost(c=1e-9, k=K)
    plan = plan_optimal(N, QUADRATIC, nn, _uniform(5).head_start, k=K)
    assert plan.incremental_seconds == pytest.approx(
        1e-9 * (1 - plan.nu) * N * plan.nu * N / K)
    assert plan.finish_after_close < QUADRATIC(N)


def test_cumulative_forecast_front_loaded():
    """Most records arrive early: the last records trickle in, so head starts are long."""
    hours = np.linspace(0, 10, 101) * 3600
    counts = N * (1 - np.exp(-hours / 7200)) / (1 - math.exp(-5))
    forecast = CumulativeForecast.piecewise(hours, counts)
    plan = plan_optimal(forecast.total, QUADRATIC, TwoStageCost(QUADRATIC),
                        forecast.head_start, k=K)
    uniform = plan_optimal(N, QUADRATIC, TwoStageCost(QUADRATIC), _uniform(5).head_start, k=K)
    assert plan.nu < uniform.nu
    assert plan.finish_after_close < uniform.finish_after_close


def test_cumulative_forecast_from_a_callable():
    forecast = CumulativeForecast(count=lambda t: N * t / 36000, start=0.0, close=36000.0)
    uniform = _uniform(5)
    for nu in (0.01, 0.1, 0.5):
        assert forecast.head_start(nu) == pytest.approx(uniform.head_start(nu), rel=1e-6)


def test_infeasible_warning_is_a_warning_not_an_error():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InfeasibleDeadlineWarning):
            deadline_ratio(5, 0.0)


def test_deadline_feasible_says_beforehand_what_deadline_ratio_would_warn_about():
    assert deadline_feasible(5, 0.5) and deadline_feasible(5, 3.0)
    assert deadline_feasible(5, min_relative_deadline(5))
    assert not deadline_feasible(5, 0.001)


@pytest.mark.filterwarnings("error")
def test_without_warn_an_infeasible_deadline_issues_no_python_warning():
    assert deadline_ratio(5, 0.001, warn=False) == optimal_ratio(5)
    plan = plan_deadline(N, QUADRATIC, TwoStageCost(QUADRATIC), _uniform(5).head_start, 10.0,
                         k=K, warn=False)
    assert plan.meets_deadline is False and any("cannot be met" in w for w in plan.warnings)


def test_release_after_close_waits_for_the_base_run_and_works_on_arrays():
    assert release_after_close(600.0, 500.0, 20.0) == 20.0  # base done before close
    assert release_after_close(600.0, 900.0, 20.0) == 320.0  # base runs 300 s past close
    np.testing.assert_array_equal(
        release_after_close(np.array([600.0, 100.0]), np.array([500.0, 900.0]), 1.0),
        [1.0, 801.0])
    plan = plan_optimal(N, QUADRATIC, TwoStageCost(QUADRATIC), _uniform(5).head_start, k=K)
    assert plan.finish_after_close == release_after_close(
        plan.head_start, plan.base_seconds, plan.incremental_seconds)


# ---------------------------------------------------------------- safety margin (margin_factor)


def _deadline_plan(deadline: float, factor: float, s: float = 5.0, **kwargs):
    return plan_deadline(N, QUADRATIC, TwoStageCost(QUADRATIC), _uniform(s).head_start,
                         deadline, k=K, margin_factor=factor, **kwargs)


@pytest.mark.parametrize("factor", [1.05, 1.2, 1.5])
def test_a_margin_leaves_less_compute_after_close_so_the_upper_bound_meets_the_deadline(factor):
    plain = _deadline_plan(3600.0, 1.0)
    safe = _deadline_plan(3600.0, factor)
    assert safe.mode == "deadline" and safe.meets_deadline
    assert safe.latest_finish == pytest.approx(3600.0, rel=1e-9)  # the bound aims at it
    assert safe.finish_after_close < plain.finish_after_close == pytest.approx(3600.0)
    assert safe.nu > plain.nu  # more is left to the increment, the base starts earlier
    # the plan's times are the predictions; the margin is the bound's extra time
    hs, t0, tp = safe.head_start, safe.base_seconds, safe.incremental_seconds
    assert t0 == pytest.approx(QUADRATIC((1 - safe.nu) * N))
    assert tp == pytest.approx(QUADRATIC(safe.nu * N))
    assert safe.margin_seconds == pytest.approx(
        release_after_close(hs, factor * t0, factor * tp) - release_after_close(hs, t0, tp))


def test_the_margin_grows_with_the_factor_and_is_zero_without_one():
    plans = [_deadline_plan(3600.0, f) for f in (1.0, 1.1, 1.2, 1.3)]
    assert plans[0].margin_seconds == 0.0
    assert plans[0] == plan_deadline(N, QUADRATIC, TwoStageCost(QUADRATIC),
                                     _uniform(5).head_start, 3600.0, k=K)
    margins = [p.margin_seconds for p in plans]
    assert margins == sorted(margins) and len(set(margins)) == 4
    assert [p.nu for p in plans] == sorted(p.nu for p in plans)


def test_one_shot_only_when_the_upper_bound_of_the_one_shot_run_fits():
    assert _deadline_plan(1.1 * T_REF, 1.0).mode == "one-shot"
    two_stage = _deadline_plan(1.1 * T_REF, 1.2)
    assert two_stage.mode == "deadline" and two_stage.nu > 0
    assert two_stage.latest_finish == pytest.approx(1.1 * T_REF)
    one_shot = _deadline_plan(1.3 * T_REF, 1.2)
    assert one_shot.mode == "one-shot"
    assert one_shot.margin_seconds == pytest.approx(0.2 * T_REF)


def test_when_the_bound_cannot_be_met_the_plan_tolerates_the_largest_slowdown():
    """A deadline the prediction meets but the bound does not: the ratio chosen still meets
    it with both stages x times slower, and no other ratio does at that x."""
    s = 5.0
    earliest = plan_optimal(N, QUADRATIC, TwoStageCost(QUADRATIC), _uniform(s).head_start,
                            k=K).finish_after_close
    deadline = 1.1 * earliest
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not a Python warning: the deadline holds as predicted
        plan = _deadline_plan(deadline, 1.5, s)
    assert plan.mode == "deadline" and plan.finish_after_close <= deadline
    assert plan.meets_deadline is False and plan.latest_finish > deadline
    assert any("cannot be met with the stages 1.5 times" in w for w in plan.warnings)

    def release(nu: float, x: float) -> float:
        hs = _uniform(s).head_start(nu)
        return float(release_after_close(hs, x * QUADRATIC((1 - nu) * N), x * QUADRATIC(nu * N)))

    lo, hi = 1.0, 1.5  # the slow-down the plan tolerates, by bisection
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if release(plan.nu, mid) <= deadline else (lo, mid)
    assert lo > 1.01  # it does tolerate some slow-down
    for nu in np.linspace(0.0, 0.5, 501):
        assert release(nu, lo * 1.001) >= deadline * (1 - 1e-6)


def test_without_a_deadline_the_margin_is_recorded_and_nu_star_unchanged():
    plain = plan_optimal(N, QUADRATIC, TwoStageCost(QUADRATIC), _uniform(5).head_start, k=K)
    safe = plan_optimal(N, QUADRATIC, TwoStageCost(QUADRATIC), _uniform(5).head_start, k=K,
                        margin_factor=1.2)
    assert safe.nu == plain.nu and safe.finish_after_close == plain.finish_after_close
    assert safe.margin_seconds > 0 and safe.meets_deadline is None


@pytest.mark.parametrize("factor", [0.9, float("nan"), float("inf")])
def test_a_margin_factor_below_one_is_refused(factor):
    with pytest.raises(ValueError, match="margin_factor"):
        _deadline_plan(3600.0, factor)
