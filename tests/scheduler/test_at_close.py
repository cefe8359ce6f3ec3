"""scheduler.at_close: the release's decision at close as a value (issue 61, point 3): one-shot
or two-stage, the stage of ``incremental = "auto"`` and why, and when the refinement ends."""

from __future__ import annotations

import dataclasses

import pytest

from scheduler import live
from scheduler.at_close import ONE_SHOT_SHARE, AutoStage, CloseDecision, decide_at_close
from scheduler.traits import EngineTraits
from streamanon.service.engine_traits import stage_traits

N, N_BASE = 100_000, 80_000
CLOSED_AT, NOW = 1_000.0, 1_005.0
MDAV = EngineTraits(name="mdav")


def slow(n: float) -> float:  # one run on everything: far over any deadline here
    return 1e-3 * n


def fast(n: float) -> float:
    return 1e-6 * n


def decide(**changes) -> CloseDecision:
    settings = dict(base_usable=True, stage="two_stage", deadline=None, closed_at=CLOSED_AT,
                    now=NOW, base_model=slow, refine=False, auto=None)
    settings.update(changes)
    n_base = settings.pop("n_base", N_BASE)
    return decide_at_close(N, n_base, **settings)


def test_a_usable_base_without_a_deadline_makes_a_two_stage_release_with_the_named_stage():
    decision = decide()
    assert decision.mode == "two-stage" and decision.two_stage
    assert decision.stage == "two_stage" and decision.stage_reason is None
    assert not decision.stage_chosen and decision.refine_until is None


def test_one_shot_when_the_deadline_leaves_time_for_one_run_on_everything():
    decision = decide(deadline=60.0, base_model=fast)
    assert decision.mode == "one-shot" and not decision.two_stage
    assert decision.stage is None and "fits the deadline" in decision.why
    assert decide(deadline=60.0, base_model=slow).two_stage  # the same deadline, a slow engine


def test_the_deadline_fit_keeps_a_share_of_the_compute_budget_free():
    budget = live.compute_budget(60.0, N)
    assert decide(deadline=60.0, base_model=lambda n: ONE_SHOT_SHARE * budget).mode == "one-shot"
    assert decide(deadline=60.0,
                  base_model=lambda n: ONE_SHOT_SHARE * budget * 1.01).mode == "two-stage"


def test_one_shot_when_the_base_is_not_usable_or_there_is_none():
    unusable = decide(base_usable=False)
    assert unusable.mode == "one-shot" and unusable.stage is None
    assert "not usable" in unusable.why
    none = decide(n_base=None, base_usable=False)
    assert none.mode == "one-shot" and none.why == "no base run"


def test_auto_without_cost_models_takes_the_first_candidate():
    decision = decide(stage="auto", auto=AutoStage(names=("nn_split_end", "two_stage")))
    assert decision.stage == "nn_split_end" and decision.stage_chosen
    assert decision.stage_reason == "no cost models to choose by"


@pytest.mark.parametrize("nn_seconds, chosen", [(0.5, "nn_split_end"), (500.0, "two_stage")])
def test_auto_chooses_the_stage_by_its_cost_models(nn_seconds, chosen):
    """NN-split-end loses less: it is taken while its time is within the slack of 2MDAV's;
    when it is far slower, 2MDAV is."""
    models = {stage_traits("nn_split_end"): lambda n0, n1: nn_seconds,
              stage_traits("two_stage"): lambda n0, n1: 0.4}
    decision = decide(stage="auto", auto=AutoStage(names=("nn_split_end", "two_stage"),
                                                   models=models, engine=MDAV, max_delta=None))
    assert decision.two_stage and decision.stage == chosen
    assert decision.stage_reason is not None and decision.stage_reason.startswith(chosen)


def test_auto_is_not_chosen_for_a_one_shot_release():
    decision = decide(stage="auto", base_usable=False,
                      auto=AutoStage(names=("nn_split_end", "two_stage")))
    assert decision.stage is None and not decision.stage_chosen


def test_auto_with_cost_models_needs_the_engine():
    with pytest.raises(ValueError, match="traits"):
        decide(stage="auto", auto=AutoStage(
            names=("two_stage",), models={stage_traits("two_stage"): lambda n0, n1: 0.1}))


def test_the_refinement_ends_at_the_deadline_less_the_reserve_for_the_late_records():
    two_stage = decide(deadline=60.0, refine=True)
    assert two_stage.two_stage
    assert two_stage.refine_until == pytest.approx(
        CLOSED_AT + 60.0 - live.deadline_reserve(N, late=N - N_BASE))
    one_shot = decide(deadline=60.0, refine=True, base_usable=False)
    assert one_shot.refine_until == pytest.approx(
        CLOSED_AT + 60.0 - live.deadline_reserve(N, late=N))
    assert one_shot.refine_until < two_stage.refine_until  # every record is late one-shot


def test_the_refinement_has_no_end_without_a_deadline_or_a_refinement():
    assert decide(refine=True).refine_until is None
    assert decide(deadline=60.0, refine=False).refine_until is None


def test_without_a_close_time_the_refinement_counts_from_now():
    decision = decide(deadline=60.0, refine=True, closed_at=None)
    assert decision.refine_until == pytest.approx(
        NOW + 60.0 - live.deadline_reserve(N, late=N - N_BASE))


def test_the_decision_is_a_frozen_value():
    with pytest.raises(dataclasses.FrozenInstanceError):
        decide().mode = "one-shot"  # type: ignore[misc]
