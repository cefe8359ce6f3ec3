"""The default plan keeps the promise: quality in the objective, the steps after close priced,
no commitment before the forecast is seen, one-shot when that is sooner (issue 28)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from scheduler import live
from scheduler.arrivals import ArrivalEstimator, UniformForecast
from scheduler.choice import Option, choose, choose_stage
from scheduler.cost_model import NearestNeighbourCost, PowerLaw, TwoStageCost
from scheduler.overhead import DEFAULT_OVERHEAD, ReleaseOverhead, StepCost
from scheduler.quality import DEFAULT_MAX_DELTA, QualityBound, delta_against_one_shot
from streamanon.service.engine_traits import auto_stage_traits, engine_traits, stage_traits

#: The engines as the planner sees them: their traits from the engine registry.
MDAV_T = engine_traits("mdav")
ONA_T = engine_traits("ona_star")
#: The stages as the planner sees them: their traits from the stage registry.
NNSE_T = stage_traits("nn_split_end")
TWO_T = stage_traits("two_stage")

K = 10
N = 1_000_000
OPEN = 700.0  # s = 19.7 with MDAV's 35.58 s, as in issue 28's run
#: MDAV on this machine: 35.58 s for a million records (the run issue 28 reports).
MDAV = PowerLaw.quadratic(35.58, N)
#: NN-split-end as calibrated here: adjoining costs c n_0 n_+ / k, splitting with MDAV.
NN = NearestNeighbourCost(c=6.5e-9, k=K, split=MDAV)
UNIFORM = UniformForecast(total=N, pace=N / OPEN)


def test_the_quality_bound_is_the_largest_ratio_within_the_loss_bound():
    for engine, stage in [(MDAV_T, NNSE_T), (ONA_T, NNSE_T), (MDAV_T, TWO_T)]:
        bound = QualityBound(engine, stage)
        nu = bound.max_ratio()
        assert 0 < nu < 1
        assert bound.delta(nu) == pytest.approx(DEFAULT_MAX_DELTA, abs=1e-6)
        assert bound.delta(0.9 * nu) < DEFAULT_MAX_DELTA < bound.delta(1.1 * nu)
    # against the same engine's one-shot: nothing late, nothing lost
    assert delta_against_one_shot(ONA_T, NNSE_T, 0.0) == pytest.approx(0.0)
    assert QualityBound(MDAV_T, NNSE_T, max_delta=1.0).max_ratio() == 1.0
    with pytest.raises(ValueError):
        QualityBound(MDAV_T, NNSE_T, max_delta=-0.1)


def test_at_a_million_the_default_plan_leaves_a_small_increment_where_the_earliest_one_did_not():
    """Issue 28: the time-only plan put 99.7 % of a million records in the incremental stage;
    with the quality bound and the late records priced it keeps most in the base run."""
    earliest = live.plan(UNIFORM, MDAV, NN, k=K, seconds_to_close=OPEN)
    assert earliest.nu > 0.9  # the degenerate plan is still what time alone chooses
    stage = TwoStageCost(MDAV)
    default = live.plan(UNIFORM, MDAV, stage, k=K, seconds_to_close=OPEN,
                        quality=QualityBound(MDAV_T, TWO_T))
    assert 0 < default.nu <= default.nu_limit < 0.25
    assert delta_against_one_shot(MDAV_T, TWO_T, default.nu) <= DEFAULT_MAX_DELTA
    # the late records' loading and gate are in the plan's time after close
    assert default.overhead_seconds == pytest.approx(
        DEFAULT_OVERHEAD.late_part(default.nu * N))
    # and the base run's own steps in its time: it ends by the close
    assert default.base_seconds == pytest.approx(
        MDAV(default.n_base) + live.BASE_OVERHEAD(default.n_base), rel=1e-6)
    assert default.compute_after_close < 1.0
    # NN's late records join base cells, whose members are gated again at close
    assert earliest.overhead_seconds == pytest.approx(DEFAULT_OVERHEAD.late_part(
        earliest.nu * N, spanned=NN.spanned(earliest.n_base, earliest.nu * N)))
    assert earliest.overhead_seconds > 9.0  # what made it look cheaper than it was


def test_the_default_chooses_2mdav_at_a_million_and_nn_split_end_where_it_is_cheap():
    options = [Option(MDAV_T, MDAV, NN, NNSE_T),
               Option(MDAV_T, MDAV, TwoStageCost(MDAV), TWO_T)]
    big = choose(UNIFORM, options, k=K, stage=None, seconds_to_close=OPEN)
    assert big.plan.stage == "two_stage"
    # the fixed release steps of a million records (4.2 s, publishing most) bound the gain
    assert big.plan.finish_after_close + live.release_overhead(N) < (
        MDAV(N) + DEFAULT_OVERHEAD(N, late=N)) / 4.5
    small_n = 50_000
    small = choose(UniformForecast(total=small_n, pace=small_n / OPEN),
                   [Option(MDAV_T, PowerLaw.quadratic(20.0, small_n), o.incremental_cost,
                           o.stage) for o in options], k=K, stage=None,
                   seconds_to_close=OPEN)
    assert small.plan.stage == "nn_split_end"  # cheap enough there: the better quality


def test_at_close_the_stage_is_chosen_for_the_real_counts():
    stages = {NNSE_T: NN, TWO_T: TwoStageCost(MDAV)}
    stage, why = choose_stage(950_000, 50_000, stages, engine=MDAV_T)
    assert stage == "two_stage" and "50,000 late records" in why
    stage, _ = choose_stage(9_000, 1_000, stages, engine=MDAV_T)
    assert stage == "nn_split_end"
    assert list(stages) == list(auto_stage_traits())


def test_at_close_the_stage_keeps_the_quality_bound_the_ratio_was_planned_under():
    """The default plan's run of MDAV at 200,000 (docs/benchmarks/default-plan.md): nu 0.18
    was planned with NN-split-end (+4.2 % expected), and at close 2MDAV, faster, was taken at
    +6.9 % expected; the release came out +6.8 % against its one-shot, over the +5 % bound."""
    mdav = PowerLaw.quadratic(4.8, 200_000)
    stages = {NNSE_T: NearestNeighbourCost(c=6.5e-9, k=K, split=mdav),
              TWO_T: TwoStageCost(mdav)}
    n_base, n_late = 164_113, 35_887
    nu = n_late / (n_base + n_late)
    assert delta_against_one_shot(MDAV_T, TWO_T, nu) > DEFAULT_MAX_DELTA
    assert delta_against_one_shot(MDAV_T, NNSE_T, nu) <= DEFAULT_MAX_DELTA
    stage, why = choose_stage(n_base, n_late, stages, engine=MDAV_T)
    assert stage == "nn_split_end" and "within the +5% bound" in why
    # objective = "earliest": no bound, the faster stage as before
    stage, _ = choose_stage(n_base, n_late, stages, engine=MDAV_T, max_delta=None)
    assert stage == "two_stage"


def test_a_short_one_shot_is_not_beaten_by_a_slower_two_stage_plan():
    """Where the one-shot compute is a second, the release steps decide: the plan is never
    slower after close than the one-shot release it would replace."""
    n = 200_000
    fast = PowerLaw.quadratic(0.5, n)
    slow_stage = NearestNeighbourCost(c=6.5e-9, k=K, split=fast)
    plan = live.plan(UniformForecast(total=n, pace=n / 60.0), fast, slow_stage, k=K,
                     seconds_to_close=60.0, quality=QualityBound(MDAV_T, NNSE_T))
    one_shot = fast(n) + DEFAULT_OVERHEAD.late_part(n)
    assert plan.finish_after_close <= one_shot + 1e-9


def test_a_fitted_overhead_recovers_the_late_record_part():
    truth = {"load": (0.1, 3e-7, 5e-6), "publish": (0.2, 5e-6, 0.0)}
    runs = [(n, late, {name: a + b * n + c * late for name, (a, b, c) in truth.items()})
            for n, late in [(200_000, 10_000), (200_000, 100_000), (200_000, 200_000),
                            (1_000_000, 50_000), (1_000_000, 1_000_000)]]
    model = ReleaseOverhead.fit(runs)
    for name, (a, b, c) in truth.items():
        step = model.steps[name]
        assert step.seconds == pytest.approx(a, abs=1e-6)
        assert step.per_record == pytest.approx(b, rel=1e-6, abs=1e-12)
        assert step.per_late_record == pytest.approx(c, rel=1e-6, abs=1e-12)
    again = ReleaseOverhead.from_dict(model.to_dict())
    assert again == model
    old = ReleaseOverhead.from_dict({"steps": {"load": [0.1, 1e-6]}, "runs": 1})
    assert old.steps["load"] == StepCost(0.1, 1e-6, 0.0)  # a model saved before the late part
    reports = [{"n": n, "n_increment": late, "spliced": late < n, "close_steps_seconds": steps}
               for n, late, steps in runs]
    assert ReleaseOverhead.from_reports(reports) == model


def test_the_forecast_is_ready_after_three_bins_or_near_the_close():
    assert not live.forecast_ready(0, 3600.0, 60.0)
    assert not live.forecast_ready(2, 3600.0, 60.0)
    assert live.forecast_ready(3, 3600.0, 60.0)
    assert live.forecast_ready(0, 100.0, 60.0)  # the close is nearer than three bins
    est = ArrivalEstimator(bin_seconds=10.0, bins=6)
    assert est.complete_bins(0.0) == 0
    est.observe([100.0, 101.0])
    assert est.complete_bins(105.0) == 0 and est.complete_bins(131.0) == 3


class _Scheduler:
    """Enough of APScheduler for the planner job: jobs are kept, never run by themselves."""

    def __init__(self) -> None:
        self.jobs: dict[str, object] = {}

    def add_job(self, func, trigger, **kw):
        self.jobs[kw["id"]] = (func, trigger, kw)

    def remove_job(self, job_id):
        self.jobs.pop(job_id, None)

    def get_job(self, job_id):
        return self.jobs.get(job_id)


def test_the_base_run_waits_until_the_forecast_is_ready():
    from scheduler.jobs import PlanningJob
    from scheduler.planner import Plan

    close = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)
    now = [close - timedelta(hours=1)]
    fired = []
    plan_now = Plan(mode="optimal", nu=0.99, n_total=1000.0, t_ref=10.0,
                    head_start=10_000.0, base_seconds=0.1, incremental_seconds=1.0)
    ready = [False]
    job = PlanningJob(_Scheduler(), survey_id="s", close_at=close, plan=lambda t: plan_now,
                  on_base_start=fired.append, on_close=lambda: None, clock=lambda: now[0],
                  interval_seconds=1.0, ready=lambda t: ready[0])
    job.start()  # the plan says "now", on a forecast of a handful of arrivals
    assert fired == [] and not job.base_started
    job.replan()
    assert fired == []
    ready[0] = True
    now[0] += timedelta(seconds=30)
    job.replan()
    assert fired == [plan_now] and job.base_started


def test_the_snapshot_waits_for_the_records_the_plan_counts_on():
    """A rush before the close: the moment from the pace comes before the planned base
    records have arrived; the snapshot waits for them unless the base run would then end
    after the close."""
    from scheduler.planner import Plan

    plan = Plan(mode="optimal", nu=0.1, n_total=200_000.0, t_ref=10.0, head_start=5.0,
                base_seconds=6.0, incremental_seconds=1.0)
    assert plan.n_base == 180_000
    assert not live.snapshot_ready(plan, 150_000, seconds_to_close=20.0)
    assert live.snapshot_ready(plan, 180_000, seconds_to_close=20.0)
    assert live.snapshot_ready(plan, 150_000, seconds_to_close=6.0)  # no time left to wait
    bounded = replace_nu(plan, 0.1, nu_limit=0.12)
    assert live.snapshot_ready(bounded, 178_000, seconds_to_close=6.0)
    # a rush left more late than the quality bound allows: no base run, one-shot at close
    assert not live.snapshot_ready(bounded, 150_000, seconds_to_close=6.0)
    assert not live.snapshot_ready(bounded, 150_000, seconds_to_close=0.5)
    assert live.snapshot_ready(None, 0, 100.0)
    assert live.snapshot_ready(replace_nu(plan, 0.0), 0, 100.0)


def replace_nu(plan, nu, **changes):
    from dataclasses import replace

    return replace(plan, nu=nu, **changes)


def test_at_close_many_late_records_after_a_rush_go_to_2mdav():
    """The counts of a run with a rush before the close: 78,546 late records after a base of
    121,454; NN-split-end's adjoining would cost seconds more than 2MDAV."""
    stages = {NNSE_T: NearestNeighbourCost(c=6.5e-9, k=K,
                                           split=PowerLaw.quadratic(2.6, 200_000)),
              TWO_T: TwoStageCost(PowerLaw.quadratic(2.6, 200_000))}
    stage, _ = choose_stage(121_454, 78_546, stages, engine=MDAV_T)
    assert stage == "two_stage"


def test_the_default_plan_ends_the_base_run_before_close_even_on_a_busier_machine():
    """The earliest release puts the base run's end exactly at the close: the demo's base
    run, 1.4 times slower than predicted while other tests ran, held its release back 2.3 s
    (a release predicted 6x sooner than one-shot came out 2x). The default plan keeps the
    base run's end before the close at live.BUSY_FACTOR times its prediction."""
    n, open_seconds = 30_000, 15.0
    ona = PowerLaw(a=1.0e-7, b=1.78)  # ONA* at m = 15, k = 10: 9 s for 30,000 records
    forecast = UniformForecast(total=n, pace=n / open_seconds)
    stage = NearestNeighbourCost(c=6.5e-9, k=K, split=ona)
    paper = live.plan(forecast, ona, stage, k=K, seconds_to_close=open_seconds, quantile=None)
    default = live.plan(forecast, ona, stage, k=K, seconds_to_close=open_seconds)
    assert 0 < paper.nu < default.nu < 1
    # nu*: the base run ends at the close; any slow-down is waited for after it
    assert paper.head_start == pytest.approx(paper.base_seconds, rel=1e-3)
    # the default: the base run ends before the close even BUSY_FACTOR times slower ...
    assert live.BUSY_FACTOR * default.base_seconds <= default.head_start * (1 + 1e-6)
    # ... so a base run 1.4 times slower holds the default release back by nothing, and
    # nu*'s by 40 % of its base run
    slow = 1.4

    def after_close(p):
        return max(slow * p.base_seconds - p.head_start, 0.0) + slow * p.incremental_seconds

    assert after_close(default) < after_close(paper)
    assert max(slow * default.base_seconds - default.head_start, 0.0) == 0.0
    assert after_close(paper) >= 0.4 * paper.base_seconds


def test_a_plan_made_on_a_loaded_machine_keeps_the_base_run_before_close_at_its_load():
    """CI, beside another test worker: the demo's base run, planned to end before the close
    at BUSY_FACTOR (1.5) times its prediction, ran about 2.4 times slower, the release waited
    4.2 s for it and came out 1.1x sooner than one-shot instead of 3x. A plan made while the
    machine runs ``load`` other tasks on ``cores`` cores keeps the base run's end before the
    close at :func:`live.load_slowdown` times its prediction (its kernels share every core
    with those tasks); on a quiet machine the floor BUSY_FACTOR stays."""
    assert live.load_slowdown(0.2, 2) == pytest.approx(1.1)
    assert live.load_slowdown(3.0, 2) == pytest.approx(2.5)
    assert live.load_slowdown(3.0, 8) == pytest.approx(1.375)
    n, open_seconds = 30_000, 60.0
    ona = PowerLaw(a=1.0e-7, b=1.78)
    forecast = UniformForecast(total=n, pace=n / open_seconds)
    stage = NearestNeighbourCost(c=6.5e-9, k=K, split=ona)
    quiet = live.plan(forecast, ona, stage, k=K, seconds_to_close=open_seconds,
                      slowdown=live.load_slowdown(0.2, 2))
    default = live.plan(forecast, ona, stage, k=K, seconds_to_close=open_seconds)
    loaded = live.plan(forecast, ona, stage, k=K, seconds_to_close=open_seconds,
                       slowdown=live.load_slowdown(3.0, 2))
    assert quiet == default  # below the floor the load changes nothing
    assert 0 < default.nu < loaded.nu < 1
    assert 2.5 * loaded.base_seconds <= loaded.head_start * (1 + 1e-6)
    slow = 2.4  # the CI run's slow-down: the loaded plan's release waits for nothing

    def waited(p):
        return max(slow * p.base_seconds - p.head_start, 0.0)

    assert waited(loaded) == 0.0 < waited(default)


def test_a_floor_on_the_ratio_keeps_the_increment_on_a_faster_machine():
    """``min_nu``: the plan's ratio is never below the floor (the optimum above it is kept),
    with the engine choice too; a floor over the quality bound is cut to the bound, and the
    plan says so."""
    stage = TwoStageCost(MDAV)
    fast = PowerLaw.quadratic(35.58 / 4.4, N)
    free = live.plan(UNIFORM, fast, TwoStageCost(fast), k=K, seconds_to_close=OPEN,
                     quality=QualityBound(MDAV_T, TWO_T))
    floor = 2 * free.nu
    held = live.plan(UNIFORM, fast, TwoStageCost(fast), k=K, seconds_to_close=OPEN,
                     quality=QualityBound(MDAV_T, TWO_T), min_nu=floor)
    assert held.nu == pytest.approx(floor)
    assert any("min_nu" in w for w in held.warnings)
    # a floor below the plan's own ratio changes nothing
    slow = live.plan(UNIFORM, MDAV, stage, k=K, seconds_to_close=OPEN,
                     quality=QualityBound(MDAV_T, TWO_T))
    assert live.plan(UNIFORM, MDAV, stage, k=K, seconds_to_close=OPEN,
                     quality=QualityBound(MDAV_T, TWO_T),
                     min_nu=slow.nu / 2).nu == pytest.approx(slow.nu)
    options = [Option(MDAV_T, fast, TwoStageCost(fast), TWO_T)]
    chosen = choose(UNIFORM, options, k=K, stage=None, seconds_to_close=OPEN, min_nu=floor)
    assert chosen.plan.nu == pytest.approx(floor)
    over = live.plan(UNIFORM, fast, TwoStageCost(fast), k=K, seconds_to_close=OPEN,
                     quality=QualityBound(MDAV_T, TWO_T), min_nu=0.9)
    assert over.nu == pytest.approx(over.nu_limit) and over.nu_limit < 0.9
    assert any("cut to" in w for w in over.warnings)
    with pytest.raises(ValueError, match="min_nu"):
        live.plan(UNIFORM, MDAV, stage, k=K, seconds_to_close=OPEN, min_nu=1.0)
    with pytest.raises(ValueError, match="deadline"):
        live.plan(UNIFORM, MDAV, stage, k=K, seconds_to_close=OPEN, deadline=30.0, min_nu=0.1)
