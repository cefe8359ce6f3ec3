"""scheduler.overhead: the release overhead by close step, its default and its fit."""

from __future__ import annotations

import json

import pytest

from scheduler.overhead import (
    COMPUTE_STEPS,
    DEFAULT_OVERHEAD,
    MEASURED_RELEASES,
    ReleaseOverhead,
    StepCost,
)


@pytest.mark.parametrize("n", [0, 1_000, 200_000, 1_000_000])
def test_the_default_totals_0_7_s_and_4_5_us_per_record(n):
    assert DEFAULT_OVERHEAD(n) == pytest.approx(0.70 + 4.53e-6 * n)
    assert set(DEFAULT_OVERHEAD.steps) == {"compute_rest", "drain", "load", "gate_and_table",
                                           "files", "publish"}
    assert DEFAULT_OVERHEAD.runs == 0


@pytest.mark.parametrize("n, late, steps", MEASURED_RELEASES)
def test_the_default_is_within_a_third_of_each_measured_release(n, late, steps):
    """The releases it follows, records keyed without headers (the default before them, fitted
    when each record carried three headers, was 93-124 % over the million-record ones), over
    the steps they timed (they did not time the compute step's part outside the engines)."""
    assert sum(DEFAULT_OVERHEAD.step(name, n, late) for name in steps) == pytest.approx(
        sum(steps.values()), rel=1 / 3)


def test_the_default_splits_the_per_record_part_as_measured_publish_first():
    timed = {name: step for name, step in DEFAULT_OVERHEAD.steps.items()
             if name != "compute_rest"}  # the measured releases' steps
    total = sum(step.per_record for step in timed.values())
    shares = {name: step.per_record / total for name, step in timed.items()}
    assert max(shares, key=shares.get) == "publish" and shares["publish"] > 0.55
    assert DEFAULT_OVERHEAD.step("publish", 200_000) == pytest.approx(0.2 + 2.2e-6 * 200_000)
    assert DEFAULT_OVERHEAD.step("compute", 200_000) == 0.0  # not overhead


def truth(n: float) -> dict[str, float]:
    """Close steps of a release of n records, each exactly a + b n."""
    return {"drain": 0.3 + 1e-6 * n, "wait_for_base": 0.5, "load": 0.1 + 5e-6 * n,
            "compute": 2.0 + 1e-5 * n, "gate_and_table": 0.05 + 2e-6 * n,
            "files": 0.2 + 3e-6 * n, "publish": 0.4 + 2e-5 * n}


def test_a_fit_on_releases_of_several_sizes_recovers_every_step():
    model = ReleaseOverhead.fit([(n, truth(n)) for n in (20_000, 200_000, 1_000_000)])
    assert model.runs == 3
    assert set(model.steps) == {"drain", "load", "gate_and_table", "files", "publish"}
    assert model.steps["publish"].seconds == pytest.approx(0.4)
    assert model.steps["publish"].per_record == pytest.approx(2e-5)
    overhead = {name: t for name, t in truth(500_000).items() if name not in COMPUTE_STEPS}
    assert model(500_000) == pytest.approx(sum(overhead.values()))


def test_at_one_size_the_fixed_part_is_the_priors_and_the_rest_is_per_record():
    model = ReleaseOverhead.fit([(200_000, {"publish": 2.2, "drain": 0.1})])
    publish = model.steps["publish"]
    assert publish.seconds == pytest.approx(DEFAULT_OVERHEAD.steps["publish"].seconds)  # prior
    assert publish(200_000) == pytest.approx(2.2)
    drain = model.steps["drain"]  # faster than the prior's fixed part alone: all fixed
    assert drain == StepCost(0.1, 0.0)


def test_a_step_the_close_path_no_longer_has_fits_to_nothing_and_a_new_one_counts():
    runs = [(n, {"drain": 0.3, "splice": 1e-6 * n, "publish": 1e-5 * n})
            for n in (10_000, 100_000)]
    model = ReleaseOverhead.fit(runs)
    assert "load" not in model.steps  # absent from every release: not a step any more
    assert model.step("splice", 50_000) == pytest.approx(0.05)
    mixed = ReleaseOverhead.fit([(10_000, {"load": 1.0}), (20_000, {"publish": 1.0})])
    assert mixed.step("load", 20_000) >= 0.0 and mixed.step("publish", 10_000) >= 0.0


def test_fitted_coefficients_are_never_negative():
    falling = StepCost.fit([1_000, 2_000, 3_000], [3.0, 2.0, 1.0])
    assert falling == StepCost(2.0, 0.0)
    steep = StepCost.fit([1_000, 2_000, 3_000], [0.0, 1.0, 2.0])  # intercept -1: through 0
    assert steep.seconds == 0.0 and steep.per_record > 0
    with pytest.raises(ValueError, match="at least one timing"):
        StepCost.fit([], [])


def test_no_measured_release_leaves_the_prior():
    assert ReleaseOverhead.fit([]) is DEFAULT_OVERHEAD
    prior = ReleaseOverhead({"publish": StepCost(1.0, 0.0)})
    assert ReleaseOverhead.from_reports([{"n": 10}], prior) is prior


def test_from_reports_reads_the_close_steps_where_the_service_writes_them():
    top = {"n": 200_000, "close_steps_seconds": truth(200_000)}  # report.json: top level
    nested = {"n": 20_000, "published": {"close_steps_seconds": truth(20_000)}}
    unpublished = {"n": 5_000}
    model = ReleaseOverhead.from_reports([top, nested, unpublished])
    assert model.runs == 2
    assert model == ReleaseOverhead.fit([(200_000, truth(200_000)), (20_000, truth(20_000))])


def test_a_fitted_overhead_round_trips_through_json():
    model = ReleaseOverhead.fit([(n, truth(n)) for n in (20_000, 200_000)])
    assert ReleaseOverhead.from_dict(json.loads(json.dumps(model.to_dict()))) == model


def test_the_gate_and_table_grows_with_the_records_the_late_ones_span(tmp_path):
    """At 200,000 records the gate and table after close took 0.39 s for 13,688 late records
    and 0.93 s for 28,416 (NN-split-end), and the plan, pricing the late records alone, said
    1.81 s where the release took 2.92 s: each late record that joins a base cell brings its
    members back to the gate. The step is priced by the records spanned, which a release
    records beside its close steps, and a one-shot release followed on its own cannot make a
    spliced one cheap."""
    from scheduler.cost_model import CostModelStore
    from scheduler.overhead import DEFAULT_OVERHEAD, SPANNED_STEPS

    gate = DEFAULT_OVERHEAD.steps["gate_and_table"]
    n, late, spanned = 200_000, 28_416, 167_000
    assert SPANNED_STEPS == ("gate_and_table",)
    assert DEFAULT_OVERHEAD.step("gate_and_table", n, late, spanned) == pytest.approx(
        gate(n, spanned))
    assert DEFAULT_OVERHEAD.step("load", n, late, spanned) == pytest.approx(
        DEFAULT_OVERHEAD.step("load", n, late))  # loading reads the late records only
    assert DEFAULT_OVERHEAD.late_part(late, spanned=spanned) - DEFAULT_OVERHEAD.late_part(
        late) == pytest.approx(gate.per_late_record * (spanned - late))
    # recorded with the span, a release is followed at it
    store = CostModelStore(tmp_path / "m.json")
    measured = {"gate_and_table": 0.93}
    store.observe_release(n, late, measured, spanned)
    followed = store.release_overhead()
    assert followed.step("gate_and_table", n, late, spanned) == pytest.approx(0.93)
    # an older file's release without one spans its late records
    old = CostModelStore(tmp_path / "old.json")
    old.observe_release(n, late, measured)
    assert old.release_overhead().step("gate_and_table", n, late) == pytest.approx(0.93)
