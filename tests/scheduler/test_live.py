"""scheduler.live: the one live planning policy (forecast, overhead, plan, base moment)."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from scheduler import live
from scheduler.arrivals import UniformForecast
from scheduler.cost_model import PowerLaw, TwoStageCost
from scheduler.planner import (
    Plan,
    deadline_ratio,
    optimal_ratio,
    plan_deadline,
    plan_optimal,
)

N, K, T_REF = 200_000, 10, 7200.0
QUADRATIC = PowerLaw.quadratic(T_REF, N)
PAPER = UniformForecast.from_arrival_coefficient(N, 5.0, T_REF)  # 10 h survey, t_ref = 2 h


def test_release_overhead_is_kept_out_of_the_compute_budget():
    assert live.release_overhead(200_000) == pytest.approx(9.0)
    assert live.compute_budget(12.0, 200_000) == pytest.approx(3.0)
    assert live.compute_budget(5.0, 200_000) == 0.0


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
    """SPEC 4: s = 5 gives nu* = 0.1459; a 1 h deadline (tau_end = 0.5) gives nu_end = 0.0729
    when the deadline is the compute's alone."""
    inc = TwoStageCost(QUADRATIC)
    best = live.plan(PAPER, QUADRATIC, inc, k=K, overhead=False)
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
    assert plan == plan_deadline(N, QUADRATIC, inc, PAPER.head_start, budget, k=K,
                                 arrival_coefficient=plan.arrival_coefficient)


def test_without_a_deadline_it_is_the_optimal_plan_within_the_time_left():
    inc = TwoStageCost(QUADRATIC)
    plan = live.plan(PAPER, QUADRATIC, inc, k=K, seconds_to_close=600.0)
    assert plan == plan_optimal(N, QUADRATIC, inc, PAPER.head_start, k=K, max_head_start=600.0,
                                arrival_coefficient=plan.arrival_coefficient)
    assert plan.head_start <= 600.0


def test_a_past_close_plans_one_shot_now():
    plan = live.plan(PAPER, QUADRATIC, TwoStageCost(QUADRATIC), k=K, seconds_to_close=-5.0)
    assert plan.mode == "one-shot" and "close time has passed" in plan.warnings[0]


@pytest.mark.filterwarnings("error")  # any Python warning fails the test
def test_an_infeasible_deadline_is_reported_in_the_plan_not_as_a_python_warning():
    plan = live.plan(PAPER, QUADRATIC, TwoStageCost(QUADRATIC), k=K, deadline=10.0)
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


def test_the_scheduler_package_imports_nothing_from_streamanon():
    """SPEC 2: the scheduler imports nothing from the service (nor the numerical core)."""
    code = ("import sys, scheduler.live, scheduler.jobs, scheduler.cost_model, "
            "scheduler.profiles, scheduler.durations; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'streamanon'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
