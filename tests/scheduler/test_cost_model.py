from __future__ import annotations

import itertools
import json
import math
import time

import numpy as np
import pytest

from scheduler.cost_model import PRIOR_DOF, Calibration, CostModelStore, PowerLaw, calibrate
from streamanon.service.engine_traits import stage_traits


def test_power_law_fit_recovers_exponent():
    ns = np.array([1e3, 2e3, 4e3, 8e3, 16e3])
    model = PowerLaw.fit(ns, 3e-9 * ns**1.7)
    assert model.b == pytest.approx(1.7, abs=1e-9)
    assert model.a == pytest.approx(3e-9, rel=1e-6)
    assert model.residual == pytest.approx(0, abs=1e-9)
    assert model(1e6) == pytest.approx(3e-9 * 1e6**1.7, rel=1e-6)


def test_power_law_fit_needs_two_sizes():
    with pytest.raises(ValueError, match="two or more distinct sizes"):
        PowerLaw.fit([1000, 1000], [1.0, 1.1])


def test_quadratic_model_through_a_point():
    model = PowerLaw.quadratic(7200, 1e6)
    assert model(1e6) == pytest.approx(7200)
    assert model(5e5) == pytest.approx(1800)


class FakeClock:
    """Each engine call 'takes' 1e-8 n^2 seconds on this clock."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_calibrate_times_doubling_sizes_within_the_budget():
    clock = FakeClock()
    calls = []

    def engine(X, k):
        calls.append(len(X))
        clock.now += 1e-8 * len(X) ** 2

    result = calibrate(engine, m=5, k=10, budget_seconds=3.0, clock=clock)
    ns = [n for n, _ in result.samples]
    assert ns == sorted(ns) and all(b == 2 * a for a, b in itertools.pairwise(ns))
    assert len(ns) >= 3
    assert sum(t for _, t in result.samples) <= 3.0 + 1e-9
    assert result.model.b == pytest.approx(2.0, abs=1e-6)
    assert calls[0] < ns[0]  # warm-up call first, not timed


def test_calibrate_a_real_engine():
    """Timed by this process's CPU clock: the suite's neighbours (four workers, a JVM broker
    each) take wall-clock time from it, not CPU time. On the wall clock the fitted exponent
    fell below 0.5 twice in fresh-clone runs: b = 0.45 unmetered, then b = 0.43 with the
    service's load meter (its slow-down of 1.7 to 1.8 did not correct MDAV's parallel
    threads). Under three busy loops on two cores, four calibrations gave b from 1.21 to
    1.73 metered on the wall clock and 1.26 to 1.40 on the CPU clock."""
    from streamanon.engines.mdav import mdav

    result = calibrate(mdav, m=4, k=5, budget_seconds=1.0, clock=time.process_time)
    assert len(result.samples) >= 3
    assert 0.5 < result.model.b < 2.5
    assert result.model(10**6) > result.model(10**5) > 0


def test_store_persists_and_refines_with_real_runs(tmp_path):
    store = CostModelStore(tmp_path / "models.json")
    assert store.get("mdav", 15, 10) is None
    ns = [1000, 2000, 4000]
    fitted = store.put("mdav", 15, 10, calibrate_result(ns, b=2.0))
    assert fitted.b == pytest.approx(2.0)
    reloaded = CostModelStore(tmp_path / "models.json").get("mdav", 15, 10)
    assert reloaded == fitted
    # real runs on large n are slower than the calibration predicts: the fit moves
    before = reloaded(1e6)
    store.observe("mdav", 15, 10, 1_000_000, before * 3)
    after = store.get("mdav", 15, 10)
    assert after(1e6) > before
    kinds = [src for _, _, src in store.samples("mdav", 15, 10)]
    assert kinds.count("calibration") == 3 and kinds.count("run") == 1
    # a new calibration keeps the real runs
    store.put("mdav", 15, 10, calibrate_result(ns, b=2.0))
    assert [src for _, _, src in store.samples("mdav", 15, 10)].count("run") == 1
    assert json.loads((tmp_path / "models.json").read_text())  # valid JSON on disk


def test_store_keeps_only_recent_runs(tmp_path):
    store = CostModelStore(tmp_path / "m.json", max_runs=3)
    for n in (1000, 2000, 3000, 4000, 5000):
        store.observe("mdav", 3, 2, n, n * 1e-6)
    runs = [n for n, _, src in store.samples("mdav", 3, 2) if src == "run"]
    assert runs == [3000, 4000, 5000]


def test_store_reports_a_corrupt_file(tmp_path):
    path = tmp_path / "m.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="unreadable cost-model file"):
        CostModelStore(path).get("mdav", 1, 1)


def calibrate_result(ns, b):
    from scheduler.cost_model import Calibration

    samples = [(n, 1e-9 * n**b) for n in ns]
    return Calibration(model=PowerLaw.fit(*zip(*samples, strict=True)), samples=samples)


def test_store_timestamps_updates(tmp_path):
    store = CostModelStore(tmp_path / "m.json")
    before = time.time()
    store.observe("mdav", 3, 2, 100, 0.1)
    after = time.time()
    entry = json.loads((tmp_path / "m.json").read_text())["mdav|m=3|k=2"]
    assert before <= entry["updated"] <= after  # the moment of the update, not a speed


def test_nearest_neighbour_cost_counts_the_splitting_of_grown_cells():
    from scheduler.cost_model import NearestNeighbourCost

    engine = PowerLaw(a=1e-6, b=1.5)
    plain = NearestNeighbourCost(c=1e-8, k=10)
    split = NearestNeighbourCost(c=1e-8, k=10, split=engine)
    # a small increment grows no cell to 2k on average: no split term
    assert split(100_000, 5_000) == plain(100_000, 5_000)
    # a tiny base: its k-record cells receive everything and the splits cost about a
    # one-shot run, which the adjoin term alone would report as nearly free
    n0, n_plus = 100, 99_900
    cells, size = n0 / 10, (n0 + n_plus) / (n0 / 10)
    assert split(n0, n_plus) == pytest.approx(plain(n0, n_plus) + cells * engine(size))
    assert split(n0, n_plus) > 0.2 * engine(100_000) > 10 * plain(n0, n_plus)


def test_two_stage_costs_the_base_engine_on_the_increment_and_times_nothing():
    from scheduler.cost_model import TwoStageCost, incremental_cost_model

    def fail(*args: object) -> None:
        raise AssertionError("two_stage needs no timing run")

    engine = PowerLaw(a=1e-6, b=1.5)
    model = incremental_cost_model(stage_traits("two_stage"), engine, 5, 10, partition=fail,
                                   run_stage=fail)
    assert model == TwoStageCost(engine)


@pytest.mark.parametrize(("stage", "splits"), [("nn", False), ("nn_inertial", False),
                                              ("nn_split_mid", True), ("nn_split_end", True)])
def test_nearest_neighbour_stage_is_timed_once_on_synthetic_data(stage, splits):
    """c comes from the faster of two runs (the first also loads the kernels), on a base of
    max(20k, 20000) records labelled by the engine passed in and max(k, 2000) new ones."""
    from scheduler.cost_model import NearestNeighbourCost, incremental_cost_model

    engine = PowerLaw(a=1e-6, b=1.5)
    ticks = iter([0.0, 5.0, 10.0, 12.0])  # first run 5 s (compiling), second 2 s
    calls = []

    def partition(X: np.ndarray, k: int) -> np.ndarray:
        calls.append(("partition", X.shape, k))
        return np.arange(len(X)) // k

    def run_stage(base, labels, increment, k):
        calls.append(("stage", base.shape, labels.shape, increment.shape, k))

    model = incremental_cost_model(stage_traits(stage), engine, 4, 10, partition=partition,
                                   run_stage=run_stage, clock=lambda: next(ticks))
    assert calls == [("partition", (20_000, 4), 10)] + [
        ("stage", (20_000, 4), (20_000,), (2_000, 4), 10)] * 2
    assert model == NearestNeighbourCost(c=2.0 * 10 / (20_000 * 2_000), k=10,
                                         split=engine if splits else None)


# ------------------------------------------------------------- prediction interval, contention

CALIBRATION_NS = np.array([10_000, 20_000, 40_000, 80_000])


def noisy_fit(rng: np.random.Generator, sigma: float, ns=CALIBRATION_NS) -> PowerLaw:
    """A fit on timings of 2e-8 n^1.5 with log-normal noise of standard deviation sigma."""
    return PowerLaw.fit(ns, 2e-8 * ns**1.5 * np.exp(rng.normal(0.0, sigma, len(ns))))


@pytest.mark.parametrize("n", [30_000, 200_000, 1_000_000])  # inside and beyond the sizes
def test_the_upper_bound_covers_new_runs_at_the_stated_rate(n):
    """Fit on four noisy calibration timings, draw one new run at n: over many seeded
    repetitions the 95 % bound is above the new run at least 95 % of the time, also when n is
    far beyond the calibrated sizes (the interval widens there). The prior on the timing noise
    (PRIOR_NOISE, here the true noise) makes it a little conservative: at most 98 %."""
    rng = np.random.default_rng(17)
    sigma, trials = 0.1, 2500
    covered = 0
    for _ in range(trials):
        model = noisy_fit(rng, sigma)
        run = 2e-8 * n**1.5 * math.exp(rng.normal(0.0, sigma))
        covered += run <= model.upper(n, 0.95)
    # binomial standard deviation at 2500 trials: 0.0044
    assert 0.95 - 0.013 <= covered / trials <= 0.98


def test_a_point_estimate_alone_is_exceeded_half_the_time():
    """The control for the test above: without the margin, about half the runs are late."""
    rng = np.random.default_rng(18)
    late = sum(2e-8 * 200_000**1.5 * math.exp(rng.normal(0.0, 0.1)) > noisy_fit(rng, 0.1)(200_000)
               for _ in range(2000))
    assert late / 2000 == pytest.approx(0.5, abs=0.04)


def test_the_margin_grows_with_the_residual_spread():
    noise = np.array([0.3, -0.5, 0.4, -0.2])
    margins = []
    for scale in (0.0, 0.02, 0.05, 0.1, 0.2):
        model = PowerLaw.fit(CALIBRATION_NS, 2e-8 * CALIBRATION_NS**1.5 * np.exp(scale * noise))
        margins.append(model.upper(200_000) / model(200_000))
    # a perfect fit still has the prior's timing noise (PRIOR_NOISE) ...
    assert 1.0 < margins[0] < 1.5
    # ... and the fit's own residual widens it
    assert all(a < b for a, b in itertools.pairwise(margins))


def test_the_margin_grows_with_the_quantile_and_away_from_the_calibrated_sizes():
    model = noisy_fit(np.random.default_rng(3), 0.1)
    ratios = [model.upper(200_000, q) / model(200_000) for q in (0.6, 0.8, 0.95, 0.99)]
    assert 1.0 < ratios[0] and all(a < b for a, b in itertools.pairwise(ratios))
    centre = math.exp(model.log_n_mean)  # the geometric middle of the calibrated sizes
    spreads = [model.log_spread(n) for n in (centre, 2 * centre, 10 * centre, 100 * centre)]
    assert all(a < b for a, b in itertools.pairwise(spreads))
    assert model.log_spread(centre / 10) == pytest.approx(model.log_spread(10 * centre))


def test_a_model_without_spread_has_no_margin_and_the_quantile_is_checked():
    exact = PowerLaw.quadratic(7200.0, 1e6)
    assert exact.upper(1e6) == exact(1e6) == pytest.approx(7200.0)
    with pytest.raises(ValueError, match="quantile"):
        exact.upper(1e6, 1.0)


def test_a_model_file_written_before_the_fit_statistics_still_loads(tmp_path):
    """An entry with a, b and residual only: the interval is the residual with a normal
    quantile (no fit statistics, no contention)."""
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"mdav|m=15|k=10": {
        "a": 2e-8, "b": 1.5, "residual": 0.1, "engine": "mdav", "m": 15, "k": 10,
        "samples": [[10000, 0.02, "calibration"]], "updated": 0.0}}))
    model = CostModelStore(path).get("mdav", 15, 10)
    assert model == PowerLaw(a=2e-8, b=1.5, residual=0.1)
    assert model.points == 0 and model.contention == 1.0
    assert model.upper(1e6) / model(1e6) == pytest.approx(math.exp(1.6448536 * 0.1))


def test_a_model_round_trips_through_its_dict_and_the_store(tmp_path):
    model = noisy_fit(np.random.default_rng(4), 0.1).observed([(100_000, 3.0), (50_000, 1.0)])
    assert PowerLaw.from_dict(json.loads(json.dumps(model.to_dict()))) == model
    store = CostModelStore(tmp_path / "m.json")
    fitted = store.put("mdav", 15, 10, calibrate_result([1000, 2000, 4000, 8000], b=1.5))
    assert CostModelStore(tmp_path / "m.json").get("mdav", 15, 10) == fitted
    # fitted on the sizes within a factor 4 of the largest (PowerLaw.fit_upper)
    assert fitted.points == 3 and fitted.degrees_of_freedom == 1 + PRIOR_DOF


def test_the_fit_follows_the_largest_sizes_where_the_exponent_grows():
    """An engine whose exponent grows once its data leave the caches (1.2 below 50,000
    records, 2 above): fitted on the largest sizes, the model extrapolates 4x upward within
    10 %; fitted on every size it misses by more than a third."""
    def seconds(n):
        return 1e-6 * n**1.2 if n <= 50_000 else 1e-6 * 50_000**1.2 * (n / 50_000) ** 2

    ns = [2_000 * 2**i for i in range(8)]  # 2,000 .. 256,000
    ts = [seconds(n) for n in ns]
    upper, every = PowerLaw.fit_upper(ns, ts), PowerLaw.fit(ns, ts)
    assert upper(1_024_000) == pytest.approx(seconds(1_024_000), rel=0.10)
    assert every(1_024_000) < 0.66 * seconds(1_024_000)
    assert upper.points == 3  # 64,000 .. 256,000
    assert PowerLaw.fit_upper(ns[:2], ts[:2]).points == 2  # fewer sizes: every one


def test_observed_runs_scale_the_model_by_their_geometric_mean_ratio():
    model = PowerLaw.fit(CALIBRATION_NS, 2e-8 * CALIBRATION_NS**1.5)
    runs = [(200_000, 1.2 * model(200_000)), (100_000, 1.5 * model(100_000))]
    slow = model.observed(runs)
    assert slow.contention == pytest.approx(math.sqrt(1.2 * 1.5))
    assert slow(1e6) == pytest.approx(math.sqrt(1.8) * model(1e6))
    assert slow.b == model.b and slow.runs == 2
    assert slow.contention_spread == pytest.approx(np.std(np.log([1.2, 1.5]), ddof=1))
    assert model.observed([]) == model


def test_the_scatter_of_real_runs_widens_the_interval():
    model = noisy_fit(np.random.default_rng(5), 0.02)
    steady = model.observed([(100_000, 1.3 * model(100_000))] * 3)
    scattered = model.observed([(100_000, r * model(100_000)) for r in (1.05, 1.3, 1.6)])
    assert steady.contention_spread == 0.0 and scattered.contention_spread > 0.1
    n = 200_000
    assert scattered.upper(n) / scattered(n) > steady.upper(n) / steady(n) > 1.0


def test_the_store_fits_the_calibration_and_scales_it_by_the_runs_contention(tmp_path):
    store = CostModelStore(tmp_path / "m.json", contention_runs=2)
    calibration = store.put("mdav", 15, 10, calibrate_result([1000, 2000, 4000], b=1.5))
    store.observe("mdav", 15, 10, 50_000, 2.0 * calibration(50_000))
    model = store.get("mdav", 15, 10)
    assert model.b == pytest.approx(1.5) and model(1e6) == pytest.approx(2 * calibration(1e6))
    assert model.contention == pytest.approx(2.0) and model.runs == 1
    # only the most recent contention_runs runs count: the machine as it is now
    store.observe("mdav", 15, 10, 60_000, 1.5 * calibration(60_000))
    store.observe("mdav", 15, 10, 70_000, 1.5 * calibration(70_000))
    assert store.get("mdav", 15, 10).contention == pytest.approx(1.5)


def test_the_contention_measured_on_the_base_engine_applies_to_a_nearest_neighbour_stage():
    from scheduler.cost_model import incremental_cost_model

    def stage(engine: PowerLaw) -> object:
        ticks = iter([0.0, 5.0, 10.0, 12.0])
        return incremental_cost_model(stage_traits("nn"), engine, 4, 10,
                                      partition=lambda X, k: None,
                                      run_stage=lambda *args: None, clock=lambda: next(ticks))

    engine = PowerLaw.fit(CALIBRATION_NS, 2e-8 * CALIBRATION_NS**1.5)
    contended = engine.observed([(100_000, 1.4 * engine(100_000))])
    assert stage(contended).c == pytest.approx(1.4 * stage(engine).c)


def test_an_engine_with_other_parameters_has_its_own_model(tmp_path):
    """ONA* from MDAV with 6 rounds and the paper's ONA* (30 rounds from MDAV*) cost very
    different times: one model for both mispredicted the one run less often. A model is kept
    per engine and parameters; the same parameters in any order are the same model."""
    store = CostModelStore(tmp_path / "m.json")
    ns = [1000, 2000, 4000]
    paper = store.put("ona_star", 15, 10, calibrate_result(ns, b=2.0))
    quick = {"start": "mdav", "max_rounds": 6}
    assert store.get("ona_star", 15, 10, params=quick) is None
    fitted = store.put("ona_star", 15, 10, calibrate_result(ns, b=1.5), params=quick)
    assert fitted.b == pytest.approx(1.5)
    assert store.get("ona_star", 15, 10) == paper
    same = {"max_rounds": 6, "start": "mdav"}
    assert CostModelStore(tmp_path / "m.json").get("ona_star", 15, 10, params=same) == fitted
    store.observe("ona_star", 15, 10, 100_000, 5.0, params=same)
    assert [s for s in store.samples("ona_star", 15, 10, params=quick) if s[2] == "run"] == [
        (100_000, 5.0, "run")]
    assert all(src == "calibration" for _, _, src in store.samples("ona_star", 15, 10))
    # no parameters, or none given, is the key the store has always used (old files load)
    assert store.get("ona_star", 15, 10, params={}) == paper
    data = json.loads((tmp_path / "m.json").read_text())
    assert "ona_star|m=15|k=10" in data
    assert data[CostModelStore.key("ona_star", 15, 10, quick)]["params"] == quick


def test_three_calibrated_sizes_do_not_make_a_four_times_margin():
    """Issue 49: a demo's MDAV calibration on this machine (2,000 .. 256,000 records, the
    model fitted on the three largest) had a residual of 0.108 in log space and one degree of
    freedom; its 95 % bound at 200,000 records was 4.3 times the prediction (a t quantile of
    6.3), so the plan kept room for a base run four times slower than predicted and took its
    snapshot as early as the quality bound allowed. With the prior on timing noise the bound
    stays near what runs on this machine scatter (the measured MDAV runs of the benchmarks
    page: within 1.5x of a model calibrated at their size), and still widens far away."""
    samples = [(2000, 0.0128), (4000, 0.0261), (8000, 0.0499), (16000, 0.0949),
               (32000, 0.2144), (64000, 0.5926), (128000, 1.1885), (256000, 3.7687)]
    model = PowerLaw.fit_upper(*zip(*samples, strict=True))
    assert model.points == 3 and model.residual == pytest.approx(0.108, abs=0.001)
    near = model.upper(200_000) / model(200_000)
    far = model.upper(4_000_000) / model(4_000_000)
    assert 1.1 < near < 1.6
    assert far > near


def test_the_release_overhead_follows_the_releases_recorded_on_this_machine(tmp_path):
    """Issue 49: the default overhead, measured on another machine, predicted 1.46 s of steps
    after close for a 200,000-record release whose steps took 0.84 s here, so the plan missed
    by 46 %. Each release's close steps are kept in the cost-model file, and the planner's
    overhead is the default scaled step by step to them."""
    from scheduler.overhead import DEFAULT_OVERHEAD

    store = CostModelStore(tmp_path / "m.json", max_releases=2)
    assert store.release_overhead() == DEFAULT_OVERHEAD  # nothing recorded: the default
    steps = {"drain": 0.07, "wait_for_base": 0.0, "load": 0.03, "compute": 0.52,
             "gate_and_table": 0.33, "files": 0.10, "publish": 0.31}
    store.observe_release(200_000, 10_520, steps)
    here = store.release_overhead()
    assert here.runs == 1
    for name in ("drain", "load", "gate_and_table", "files", "publish"):
        assert here.step(name, 200_000, 10_520) == pytest.approx(steps[name])
        # the shape is the default's: only the scale is this machine's
        ratio = here.steps[name].per_record / max(DEFAULT_OVERHEAD.steps[name].per_record,
                                                  1e-300)
        assert ratio == pytest.approx(steps[name] / DEFAULT_OVERHEAD.step(
            name, 200_000, 10_520)) or DEFAULT_OVERHEAD.steps[name].per_record == 0
    assert sum(here.step(name, 200_000, 10_520) for name in steps) == pytest.approx(
        0.84, abs=1e-9)
    # a step the release did not time (compute_rest, recorded since issue 62) stays the
    # default's
    assert here.steps["compute_rest"] == DEFAULT_OVERHEAD.steps["compute_rest"]
    # a second release at another size: the geometric mean of the two ratios per step
    store.observe_release(1_000_000, 1_000_000, {"publish": 2 * DEFAULT_OVERHEAD.step(
        "publish", 1_000_000)})
    publish = store.release_overhead().step("publish", 200_000, 10_520)
    default = DEFAULT_OVERHEAD.step("publish", 200_000, 10_520)
    assert publish == pytest.approx(default * math.sqrt(0.31 / default * 2.0))
    # only the most recent max_releases are kept
    store.observe_release(50_000, 50_000, {"publish": 0.1})
    assert store.release_overhead().runs == 2
    # the engines' models in the same file are untouched
    calibration = store.put("mdav", 15, 10, calibrate_result([1000, 2000, 4000], b=1.5))
    store.observe_release(50_000, 50_000, {"publish": 0.1})
    assert store.get("mdav", 15, 10) == calibration


def test_a_calibration_timed_on_a_busy_machine_is_kept_as_the_quiet_machines():
    """Issue 49: a sample timed while the machine was busy (a demo's one-shot beside its own
    broker, a suite running) priced later plans on a quiet machine. Each timing keeps the
    slow-down its load meter measured, and the model is fitted on the timings over it."""
    from scheduler.cost_model import Timing, time_engine

    def engine(X, k):  # 1e-6 s a record, on a clock that the test advances
        clock.now += 1e-6 * len(X)

    class Clock:
        now = 0.0

        def __call__(self):
            return self.now

    clock = Clock()
    quiet = calibrate(engine, 3, 5, budget_seconds=0.05, clock=clock)
    busy = calibrate(engine, 3, 5, budget_seconds=0.05, clock=clock,
                     meter=lambda: lambda: 2.0)
    assert busy.slowdowns == [2.0] * len(busy.samples) and set(quiet.slowdowns) == {1.0}
    # the busy machine's timings, taken as twice as long, are halved back
    assert [t for _, t in busy.samples] == pytest.approx(
        [t / 2 for _, t in quiet.samples[:len(busy.samples)]])
    # a meter below 1 (nothing else ran) counts as quiet
    assert time_engine(engine, 3, 5, 1000, clock=clock, meter=lambda: lambda: 0.5) == Timing(
        pytest.approx(1e-3), 1.0)


def test_the_store_keeps_each_samples_slowdown_and_fits_the_quiet_timings(tmp_path):
    store = CostModelStore(tmp_path / "m.json")
    ns = [1000, 2000, 4000]
    busy = Calibration(PowerLaw.fit(ns, [1e-6 * n for n in ns]),
                       samples=[(n, 1e-6 * n) for n in ns], slowdowns=[1.0, 2.5, 1.0])
    model = store.put("mdav", 3, 5, busy)
    assert store.sample_slowdowns("mdav", 3, 5) == [1.0, 2.5, 1.0]
    assert model.b == pytest.approx(1.0)
    # a timing at 8,000 records taken at 1.6 times: kept as a quiet one
    model = store.extend("mdav", 3, 5, 8000, 1.6 * 8000e-6, slowdown=1.6)
    assert store.samples("mdav", 3, 5)[-1] == (8000, pytest.approx(8000e-6), "calibration")
    assert model.b == pytest.approx(1.0) and store.sample_slowdowns("mdav", 3, 5)[-1] == 1.6
    # a real run and a refit keep the slow-downs
    store.observe("mdav", 3, 5, 16000, 0.02)
    assert store.sample_slowdowns("mdav", 3, 5) == [1.0, 2.5, 1.0, 1.6, 1.0]


def test_a_model_file_with_three_numbers_a_sample_loads_them_as_quiet(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"mdav|m=3|k=5": {
        "a": 1e-6, "b": 1.0, "engine": "mdav", "m": 3, "k": 5,
        "samples": [[1000, 0.001, "calibration"], [2000, 0.002, "calibration"]],
        "updated": 0.0}}))
    store = CostModelStore(path)
    assert store.samples("mdav", 3, 5) == [(1000, 0.001, "calibration"),
                                           (2000, 0.002, "calibration")]
    assert store.sample_slowdowns("mdav", 3, 5) == [1.0, 1.0]


def test_writers_of_one_model_file_lose_nothing(tmp_path):
    """The service's release path, its planner and its compute process write the same file:
    each read, change and write holds the file's lock, so no write drops another's."""
    import threading

    path = tmp_path / "m.json"
    CostModelStore(path).put("mdav", 3, 5, calibrate_result([1000, 2000, 4000], b=1.5))

    def runs(first: int) -> None:
        store = CostModelStore(path)  # its own instance, as each writer has
        for i in range(25):
            store.observe("mdav", 3, 5, first + i, 0.01)

    writers = [threading.Thread(target=runs, args=(start,)) for start in (10_000, 20_000)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    observed = [n for n, _, src in CostModelStore(path).samples("mdav", 3, 5) if src == "run"]
    assert sorted(observed) == [*range(10_000, 10_025), *range(20_000, 20_025)]
