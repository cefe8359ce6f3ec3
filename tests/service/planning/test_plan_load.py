"""The service plans with the machine's measured load: a base run that shares the cores with
other tasks runs slower than its cost model, and the plan keeps its end before the close at
that slow-down (:func:`scheduler.live.load_slowdown`)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from scheduler import live
from streamanon.service import machine, planning
from tests.service.lifecycle_helpers import planner_for, put_model

M, K, N = 3, 5, 100_000


def survey_planner(tmp_path, stage: str):
    # 4 s at 100,000 records, quadratic
    put_model(tmp_path / "cost_models.json", "mdav", M, K,
              [(10_000, 0.04), (20_000, 0.16), (40_000, 0.64)])
    return planner_for(tmp_path, {"k": K, "engine": "mdav", "incremental": stage,
                                  "objective": "earliest", "expected_records": N}, M, 120)


@pytest.mark.parametrize("stage", ["nn_split_end", "auto"])
def test_the_plan_keeps_the_base_run_before_close_at_the_measured_load(tmp_path, monkeypatch,
                                                                       stage):
    now = datetime.now(timezone.utc)
    plans = {}
    for load in (0.1, 6.0):
        monkeypatch.setattr(planning, "machine_load", lambda load=load: (load, 2))
        planner, survey = survey_planner(tmp_path / str(load), stage)
        plans[load] = planner.plan(survey, now)
    quiet, loaded = plans[0.1], plans[6.0]
    assert live.BUSY_FACTOR * quiet.base_seconds <= quiet.head_start * (1 + 1e-6)
    assert quiet.nu < loaded.nu
    assert live.load_slowdown(6.0, 2) * loaded.base_seconds <= loaded.head_start * (1 + 1e-6)


def test_the_machine_load_is_the_load_average_over_the_usable_cores():
    load, cores = planning.machine_load()
    assert load >= 0 and 1 <= cores


def test_without_a_load_average_the_plan_is_made_as_on_a_quiet_machine(monkeypatch):
    def unavailable():
        raise OSError("no load average")

    monkeypatch.setattr(machine.os, "getloadavg", unavailable)
    load, cores = planning.machine_load()
    assert load == 0.0 and cores >= 1
    assert live.load_slowdown(load, cores) == 1.0


def test_the_plan_weighs_the_release_steps_as_this_machine_ran_them(tmp_path):
    """The close steps of the releases recorded in the cost-model file scale the overhead the
    planner weighs (issue 49: the default predicted 1.46 s of steps where 0.84 s were taken)."""
    from scheduler.cost_model import CostModelStore
    from scheduler.overhead import DEFAULT_OVERHEAD

    default, _ = survey_planner(tmp_path / "default", "nn_split_end")
    assert default.overhead == DEFAULT_OVERHEAD
    models = tmp_path / "here" / "cost_models.json"
    models.parent.mkdir()
    halved = {name: 0.5 * DEFAULT_OVERHEAD.step(name, N, 5_000)
              for name in DEFAULT_OVERHEAD.steps}
    CostModelStore(models).observe_release(N, 5_000, halved)
    here, survey = survey_planner(tmp_path / "here", "nn_split_end")
    now = datetime.now(timezone.utc)
    plan = here.plan(survey, now)
    assert here.overhead(N, 5_000) == pytest.approx(0.5 * DEFAULT_OVERHEAD(N, 5_000))
    stage = survey.plans.models[1]  # NN-split-end's late records span base cells
    assert plan.overhead_seconds == pytest.approx(0.5 * DEFAULT_OVERHEAD.late_part(
        plan.nu * N, spanned=stage.spanned(plan.n_total - plan.nu * N, plan.nu * N)), rel=1e-6)


def test_a_survey_of_repeated_keys_is_planned_as_the_small_problem_its_base_run_found(
        tmp_path, monkeypatch):
    """The base run's engine ran on 2 % of the records (the rare tuples' respondents): the
    engine's cost model is observed at that size, and the next plans price the base run at
    that share of the records, not at all of them (on a quiet machine: a busy one changes
    both plans, as the test above shows)."""
    from scheduler.cost_model import CostModelStore

    monkeypatch.setattr(planning, "machine_load", lambda: (0.1, 2))
    planner, survey = survey_planner(tmp_path, "two_stage")
    now = datetime.now(timezone.utc)
    before = planner.plan(survey, now)
    planner.observe_base(survey, "mdav", 50_000, 0.004, work=1_000)  # quadratic: 0.4 ms at 1,000
    assert survey.plans.work_share == pytest.approx(0.02)
    samples = CostModelStore(tmp_path / "cost_models.json").samples("mdav", M, K)
    assert [(n, src) for n, _, src in samples if src == "run"] == [(1_000, "run")]
    after = planner.plan(survey, now)
    # what is left is the base run's own steps (loading, preparing: per record)
    overhead = live.BASE_OVERHEAD(after.n_total * (1 - after.nu))
    assert after.base_seconds - overhead < (before.base_seconds - overhead) / 100


def test_the_share_read_ahead_prices_the_base_run_before_it_starts(tmp_path, monkeypatch):
    """The read ahead found that the engine would run on 2 % of the records: the plan
    before any base run prices it at that share, and postpones the snapshot accordingly."""
    monkeypatch.setattr(planning, "machine_load", lambda: (0.1, 2))
    planner, survey = survey_planner(tmp_path, "two_stage")
    now = datetime.now(timezone.utc)
    before = planner.plan(survey, now)
    planner.observe_work_share(survey, 0.02)
    after = planner.plan(survey, now)
    overhead = live.BASE_OVERHEAD(after.n_total * (1 - after.nu))
    assert after.base_seconds - overhead < (before.base_seconds - overhead) / 100
    assert after.nu < before.nu  # a later snapshot: fewer late records
