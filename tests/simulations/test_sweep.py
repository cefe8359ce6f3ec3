"""simulations/sweep.py: the quick grid writes every cell, its outcomes are consistent, and the
live simulation reproduces the paper's running example when arrivals are uniform."""

from __future__ import annotations

import csv
import itertools

import pytest

from scheduler.closed_forms import deadline_ratio, optimal_ratio
from scheduler.cost_model import PowerLaw, TwoStageCost
from scheduler.profiles import resolve
from simulations import sweep


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> tuple[str, list[dict[str, str]], object]:
    out = tmp_path_factory.mktemp("sweep")
    report = sweep.report(quick=True, out=out)
    with open(out / "sweep.csv") as fh:
        rows = list(csv.DictReader(fh))
    return report, rows, out


@pytest.mark.heavy
def test_csv_has_every_grid_cell_once(quick):
    _, rows, _ = quick
    grid = sweep.QUICK
    expected = set(itertools.product(grid.costs, grid.profiles, grid.ns,
                                     map(sweep.deadline_label, grid.deadlines), grid.seeds))
    got = [(r["cost"], r["profile"], int(r["n"]), r["deadline"], int(r["seed"])) for r in rows]
    assert len(got) == len(expected)
    assert set(got) == expected


@pytest.mark.heavy
def test_deadline_met_is_release_within_the_deadline(quick):
    _, rows, _ = quick
    for r in rows:
        release = float(r["release_after_close"])
        if r["deadline"] == "none":
            assert r["deadline_met"] == ""
        else:
            assert r["deadline_met"] == str(release <= float(r["deadline"].removesuffix(" s")))
        if r["release_with_measured_times"] and r["deadline"] != "none":
            assert r["deadline_met_with_measured_times"] == str(
                float(r["release_with_measured_times"]) <= float(r["deadline"][:-2]))


@pytest.mark.heavy
def test_rows_account_for_every_record_and_say_where_delta_comes_from(quick):
    _, rows, _ = quick
    for r in rows:
        n, n_base, n_inc = int(r["n"]), int(r["n_base"]), int(r["n_increment"])
        assert n_base + n_inc == n and n_base >= 2 * sweep.K
        assert float(r["nu"]) == pytest.approx(n_inc / n)
        if n_inc == 0:
            assert r["delta_source"] == "none" and float(r["delta"]) == 0.0
        elif n <= sweep.QUICK.measure_max_n:
            assert r["delta_source"] == "measured" and r["incremental_seconds_measured"]
        else:
            assert r["delta_source"] == "curve"
        if r["fired_before_close"] == "":  # never fired: one-shot at close, t_ref after it
            assert n_inc == 0
            assert float(r["release_after_close"]) == pytest.approx(float(r["t_ref"]))


@pytest.mark.heavy
def test_quick_report_and_heatmap(quick):
    report, rows, out = quick
    assert report.startswith("### Live scheduler sweep")
    assert "Command: `python -m simulations.sweep --quick`" in report
    assert f"({len(rows)} rows)" in report
    assert "delta(nu) curve used above n = 2,000" in report
    png = out / "figures" / "sweep_heatmap.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000


@pytest.fixture(scope="module")
def paper_example():
    """The paper's running example, live: 10 h of uniform arrivals, t_ref = 2 h, 2MDAV."""
    n = 20_000
    base = PowerLaw.quadratic(7200.0, n)
    times = resolve("uniform", sweep.SURVEY_SECONDS).times(n, sweep.SURVEY_SECONDS)
    return times, base, TwoStageCost(base)


def test_live_planner_on_uniform_arrivals_finds_the_paper_schedule(paper_example):
    times, base, inc = paper_example
    # the prediction itself, as the paper plans (the service keeps a margin for a busier
    # machine: test_default_plan)
    live = sweep.simulate_live(times, sweep.SURVEY_SECONDS, base, inc, None, 600.0,
                               quantile=None)
    assert live.nu == pytest.approx(optimal_ratio(5.0), abs=0.003)
    assert live.fired_before_close == pytest.approx(0.7295 * 7200, rel=0.01)
    assert live.release_after_close == pytest.approx(153.0, abs=10.0)  # not 2 h


def test_live_planner_lands_on_a_one_hour_deadline_within_a_tenth_of_a_percent(paper_example):
    """plan_deadline aims exactly at the deadline, so the pace estimate's error decides which
    side of it the release falls on; it is never far."""
    times, base, inc = paper_example
    live = sweep.simulate_live(times, sweep.SURVEY_SECONDS, base, inc, 3600.0, 600.0)
    assert live.nu == pytest.approx(deadline_ratio(5.0, 0.5), abs=0.002)
    assert live.release_after_close == pytest.approx(3600.0, rel=1e-3)


def test_a_deadline_the_one_shot_meets_runs_one_shot_at_close(paper_example):
    times, base, inc = paper_example
    live = sweep.simulate_live(times, sweep.SURVEY_SECONDS, base, inc, 7200.0, 1800.0)
    assert live.fired_before_close is None and live.nu == 0.0
    assert live.release_after_close == pytest.approx(7200.0)


def test_the_sweep_plans_with_the_services_policy_including_expected_records():
    """``live_plan`` is :func:`scheduler.live.plan` on :func:`scheduler.live.forecast`, so the
    survey's expected_records replaces the pace extrapolation, as in the service."""
    import numpy as np

    from scheduler import live
    from scheduler.arrivals import ArrivalEstimator

    estimator = ArrivalEstimator(sweep.PACE_BIN_SECONDS, sweep.PACE_BINS)
    estimator.observe(np.arange(0.0, 3600.0, 0.5))  # 2 per second for the first hour
    base = PowerLaw.quadratic(7200.0, 20_000)
    plans = {}
    for expected in (None, 20_000):
        plans[expected] = sweep.live_plan(estimator, 7200, 3600.0, sweep.SURVEY_SECONDS, base,
                                          TwoStageCost(base), 600.0, expected)
        forecast = live.forecast(7200, estimator.pace(3600.0), 32_400.0, expected)
        assert plans[expected] == live.plan(forecast, base, TwoStageCost(base), k=sweep.K,
                                            deadline=600.0, seconds_to_close=32_400.0,
                                            overhead=False)
    assert plans[None].n_total == 7200 + 2.0 * 32_400  # the pace extrapolated to close
    assert plans[20_000].n_total == 20_000


# ---------------------------------------------------------------- deadlines met, and the margin


@pytest.mark.heavy
def test_the_quick_report_gives_the_share_of_deadlines_met_in_its_table_and_its_json(quick):
    import json

    report, rows, out = quick
    data = json.loads((out / "sweep.json").read_text())
    assert data["command"] == "python -m simulations.sweep --quick"
    assert data["grid"]["quantile"] == 0.95
    shares = data["deadlines_met"]
    with_deadline = [r for r in rows if r["deadline"] != "none"]
    met = sum(r["deadline_met"] == "True" for r in with_deadline)
    assert shares["all"]["met"] == {"cells": len(with_deadline), "met": met,
                                    "share": met / len(with_deadline)}
    assert set(shares) == {"all", "60 s", "cost slow"}
    assert ("| deadlines | met | met, feasible ones | met, plan in time | real seconds: met "
            "| real seconds: met, plan in time |") in report
    assert f"| all | {100 * met / len(with_deadline):.1f} % ({met} of " in report
    in_time = [r for r in with_deadline if r["planned_in_time"] == "True"]
    assert shares["all"]["in_time"]["cells"] == len(in_time)


@pytest.mark.heavy
def test_a_sweep_can_reuse_the_models_of_an_earlier_one(quick, tmp_path):
    """models.json holds the calibrated law and the stage's c; cost_models on it gives the
    same models without timing anything."""
    import json

    _, _, out = quick
    saved = json.loads((out / "models.json").read_text())
    again = sweep.cost_models(1.0, saved=saved)
    assert json.loads(json.dumps(sweep.saved_models(again))) == saved
    assert again["slow"].base(sweep.SLOW_AT) == pytest.approx(sweep.SLOW_T_REF)


@pytest.mark.heavy
def test_a_met_deadline_is_feasible_and_the_earliest_release_is_no_later_than_the_plans(quick):
    _, rows, _ = quick
    for r in rows:
        assert float(r["earliest_release"]) <= float(r["release_after_close"]) + 1e-9
        if r["deadline"] == "none":
            assert r["deadline_feasible"] == ""
        else:
            assert r["deadline_feasible"] == str(
                float(r["earliest_release"]) <= float(r["deadline"][:-2]))
            assert r["deadline_met"] != "True" or r["deadline_feasible"] == "True"


def test_earliest_release_is_the_best_snapshot_in_hindsight():
    """On a small survey, against every snapshot size tried one by one."""
    from scheduler.planner import release_after_close

    n = 600
    times = resolve("back_loaded", sweep.SURVEY_SECONDS).times(n, sweep.SURVEY_SECONDS, seed=3)
    base = PowerLaw.quadratic(3600.0, n)
    inc = TwoStageCost(base)
    brute = min([base(n)] + [
        float(release_after_close(sweep.SURVEY_SECONDS - times[i - 1], base(i),
                                  inc(i, n - i) if i < n else 0.0))
        for i in range(2 * sweep.K, n + 1)])
    assert sweep.earliest_release(times, sweep.SURVEY_SECONDS, base, inc) == pytest.approx(brute)


def test_deadline_shares_count_every_group():
    def row(cost: str, deadline: str, met: bool | None, feasible: bool | None,
            real: bool | None) -> sweep.Row:
        return sweep.Row(cost, "uniform", 1000, deadline, 0, 1.0, None, 0.0, 0.0, 1000, 0,
                         1.0, 1.0, met, 0.0, "none", None, None, None, real, 1, 0.0,
                         feasible, 1.0, feasible)

    rows = [row("slow", "none", None, None, None), row("slow", "60 s", True, True, True),
            row("slow", "60 s", False, False, None), row("slow", "600 s", False, True, False),
            row("measured", "60 s", True, True, None)]
    shares = sweep.deadline_shares(rows)
    assert list(shares) == ["all", "60 s", "600 s", "cost slow", "cost measured"]
    assert shares["all"]["met"] == {"cells": 4, "met": 2, "share": 0.5}
    assert shares["all"]["feasible"] == {"cells": 3, "met": 2, "share": 2 / 3}
    assert shares["all"]["measured"] == {"cells": 2, "met": 1, "share": 0.5}
    assert shares["all"]["in_time"] == shares["all"]["feasible"]  # in time = feasible here
    assert shares["all"]["measured_in_time"] == {"cells": 2, "met": 1, "share": 0.5}
    assert shares["60 s"]["feasible"]["share"] == 1.0
    assert shares["cost slow"]["met"] == {"cells": 3, "met": 1, "share": 1 / 3}


def test_the_live_planner_keeps_a_margin_from_the_models_interval(paper_example):
    """With a fitted model (residual > 0) the base fires earlier and the release comes
    earlier than the deadline; --no-margin (quantile None) aims at the deadline itself."""
    import dataclasses

    times, base, _ = paper_example
    noisy = dataclasses.replace(base, residual=0.05, points=5, log_n_mean=9.0, log_n_ss=1.2)
    inc = TwoStageCost(noisy)
    safe = sweep.simulate_live(times, sweep.SURVEY_SECONDS, noisy, inc, 3600.0, 600.0)
    exact = sweep.simulate_live(times, sweep.SURVEY_SECONDS, noisy, inc, 3600.0, 600.0,
                                quantile=None)
    assert exact.margin_seconds == 0.0 and safe.margin_seconds > 0
    assert safe.planned_in_time and exact.planned_in_time
    assert safe.fired_before_close > exact.fired_before_close
    assert safe.release_after_close < 3600.0 * (1 - 0.05)
    assert safe.predicted_release + safe.margin_seconds == pytest.approx(3600.0, rel=1e-3)
