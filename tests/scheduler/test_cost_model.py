from __future__ import annotations

import itertools
import json
import time

import numpy as np
import pytest

from scheduler.cost_model import CostModelStore, PowerLaw, calibrate


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
    from streamanon.engines.mdav import mdav

    result = calibrate(mdav, m=4, k=5, budget_seconds=1.0)
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
    model = incremental_cost_model("two_stage", engine, 5, 10, partition=fail, run_stage=fail)
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

    model = incremental_cost_model(stage, engine, 4, 10, partition=partition,
                                   run_stage=run_stage, clock=lambda: next(ticks))
    assert calls == [("partition", (20_000, 4), 10)] + [
        ("stage", (20_000, 4), (20_000,), (2_000, 4), 10)] * 2
    assert model == NearestNeighbourCost(c=2.0 * 10 / (20_000 * 2_000), k=10,
                                         split=engine if splits else None)
