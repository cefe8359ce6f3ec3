"""An incremental stage's traits live on its registry entry (issue 61, point 2): a new stage is
one module that registers itself with its loss curve, its cost shape and whether
``incremental = "auto"`` may pick it, and the planner prices, plans and chooses it by those
and no table of its own. The toy stages here are registered for each test alone."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from scheduler import live
from scheduler.arrivals import UniformForecast
from scheduler.choice import Option, PlanRequest, choose_stage, plan_survey
from scheduler.cost_model import (
    STAGE_COSTS,
    NearestNeighbourCost,
    PowerLaw,
    TwoStageCost,
    stage_cost_model,
)
from scheduler.quality import QualityBound, expected_delta
from scheduler.traits import StageTraits
from streamanon import registry
from streamanon.engines import get_engine
from streamanon.errors import ParameterError
from streamanon.incremental import available_stages, get_stage, register_stage, unregister_stage
from streamanon.service.config import parse_config
from streamanon.service.engine_traits import (
    auto_stage_names,
    auto_stage_traits,
    engine_traits,
    stage_traits,
)
from streamanon.service.planning import PROVISIONAL_NN_C, plan_request, provisional_incremental
from streamanon.simulation.simulate import service_config

TOY = "toy_adjoin"
#: The toy's traits: a loss curve far below every registered stage's, adjoining without the
#: splitting engine's term, picked by ``incremental = "auto"`` after the two it picks today.
TOY_NU, TOY_LOSS = (0.0, 0.5, 1.0), (0.0, 0.001, 0.002)
TOY_RANK = 2
K = 10
MDAV_T = engine_traits("mdav")
C = 6.5e-9  # the nearest-neighbour stages' c as timed on the reference machine


def _toy(base: np.ndarray, base_labels: np.ndarray, increment: np.ndarray,
         k: int) -> np.ndarray:
    """Every late record joins the first base cell."""
    return np.concatenate([base_labels, np.zeros(len(increment), dtype=np.int64)])


@pytest.fixture
def toy():
    register_stage(TOY, summary="every late record to the first cell (a test's stage)",
                   source="this test", nu_grid=TOY_NU, added_loss=TOY_LOSS,
                   cost="nearest_neighbour", auto_rank=TOY_RANK)(_toy)
    try:
        yield TOY
    finally:
        unregister_stage(TOY)
    assert TOY not in {s.name for s in available_stages()}


def test_the_declared_stages_keep_the_facts_the_tables_held():
    """The loss curves, the cost shapes and the ``auto`` candidates moved from the planner's
    tables (``STAGE_DELTA``, ``AUTO_STAGES``, the cost model's name tests) onto the entries
    unchanged."""
    nu = (0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 0.9, 1.0)
    split_end = (0.0, 0.0021, 0.0104, 0.0210, 0.0469, 0.0718, 0.0847, 0.0796, 0.0894, 0.1182,
                 0.1182)
    adjoin = (0.0, 0.0021, 0.0104, 0.0210, 0.0470, 0.0748, 0.1081, 0.1478, 0.2589, 0.5044,
              0.5044)
    two_stage = (0.0, 0.0098, 0.0309, 0.0485, 0.0740, 0.0860, 0.0945, 0.0978, 0.0875, 0.0489,
                 0.0489)
    assert {s.name: s for s in auto_stage_traits()} == {
        "nn_split_end": StageTraits("nn_split_end", nu, split_end, "nearest_neighbour_split", 0),
        "two_stage": StageTraits("two_stage", nu, two_stage, "engine_on_increment", 1)}
    assert stage_traits("nn_split_mid") == StageTraits("nn_split_mid", nu, split_end,
                                                       "nearest_neighbour_split")
    assert stage_traits("nn") == StageTraits("nn", nu, adjoin, "nearest_neighbour")
    assert stage_traits("nn_inertial") == StageTraits("nn_inertial", nu, adjoin,
                                                      "nearest_neighbour")
    assert auto_stage_names() == ("nn_split_end", "two_stage")  # quality first


def test_the_two_floors_name_the_same_cost_shapes():
    """The core's copy (the stages declare it) and the scheduler's (the cost models read it)."""
    assert registry.STAGE_COSTS == STAGE_COSTS


def test_an_engine_entry_carries_no_stage_traits_and_a_stage_entry_no_engine_traits():
    mdav, nn = get_engine("mdav"), get_stage("nn")
    assert mdav.stage is None and mdav.engine is not None
    assert mdav.engine.one_shot_loss == 1.0
    assert nn.engine is None and nn.stage is not None
    with pytest.raises(AttributeError):  # no engine trait is read off a stage's entry
        _ = nn.one_shot_loss


def test_a_new_stage_is_read_with_its_own_traits(toy):
    traits = stage_traits(toy)
    assert traits == StageTraits(toy, TOY_NU, TOY_LOSS, "nearest_neighbour", TOY_RANK)
    assert auto_stage_names() == ("nn_split_end", "two_stage", toy)  # in its rank
    # its own loss curve: a stage missing from the old table counted as 2MDAV (+9.8 % here)
    assert expected_delta(MDAV_T, traits, 0.5) == pytest.approx(0.001)
    assert expected_delta(MDAV_T, traits, 0.25) == pytest.approx(0.0005)  # linear between
    # its own cost shape: adjoining alone, no splitting term even with a splitting engine
    mdav = PowerLaw.quadratic(4.8, 200_000)
    assert stage_cost_model(traits, mdav, K, C, split=mdav) == NearestNeighbourCost(C, K)
    assert provisional_incremental(toy, mdav, K, mdav) == NearestNeighbourCost(
        PROVISIONAL_NN_C, K)
    # as the registered ones are priced by theirs
    assert stage_cost_model(stage_traits("two_stage"), mdav, K, C) == TwoStageCost(mdav)
    assert stage_cost_model(stage_traits("nn_split_end"), mdav, K, C) == NearestNeighbourCost(
        C, K, split=mdav)


def test_a_stage_registered_without_auto_rank_is_never_picked(toy):
    register_stage("toy_manual", summary="as the toy, never picked by auto",
                   source="this test", nu_grid=TOY_NU, added_loss=TOY_LOSS,
                   cost="nearest_neighbour")(_toy)
    try:
        assert stage_traits("toy_manual").auto_rank is None
        assert "toy_manual" not in auto_stage_names()
    finally:
        unregister_stage("toy_manual")


def test_the_planner_plans_prices_and_chooses_a_new_stage_by_its_own_traits(toy, tmp_path):
    """``incremental = "auto"``: the survey's request and the candidates built from the
    registry (as the service builds them) make the toy a candidate, priced by its cost shape,
    planned under its own quality bound and chosen for its own loss curve."""
    n, open_seconds = 200_000, 700.0
    raw = service_config("127.0.0.1:9092", tmp_path, n=n, m=15, k=K,
                         close=datetime.now(timezone.utc) + timedelta(hours=1),
                         http="127.0.0.1:0", engine="mdav", incremental="auto")
    request = plan_request(parse_config(raw, {}, require_secrets=False).surveys[0])
    assert request.stage == "auto" and request.max_delta is not None
    mdav = PowerLaw.quadratic(4.8, n)
    options = [Option(MDAV_T, mdav, stage_cost_model(stage, mdav, K, C), stage)
               for stage in auto_stage_traits()]
    assert [o.stage.name for o in options] == ["nn_split_end", "two_stage", toy]
    assert options[-1].incremental_cost == NearestNeighbourCost(C, K)  # its shape, not split
    forecast = UniformForecast(total=n, pace=n / open_seconds)
    plan, choice = plan_survey(request, forecast, options, seconds_to_close=open_seconds)

    assert choice is not None and plan.stage == toy, choice.reason
    traits = stage_traits(toy)
    assert plan.expected_delta == pytest.approx(expected_delta(MDAV_T, traits, plan.nu))
    # planned as live.plan plans the toy's own cost model under the toy's own bound: a curve
    # of 2MDAV's would have cut the ratio to its bound's
    bound = QualityBound(MDAV_T, traits, request.max_delta)
    assert bound.max_ratio() == 1.0 > QualityBound(MDAV_T, stage_traits("two_stage"),
                                                   request.max_delta).max_ratio()
    alone = live.plan(forecast, mdav, NearestNeighbourCost(C, K), k=K, quality=bound,
                      seconds_to_close=open_seconds, refine=request.refine,
                      min_nu=request.min_nu)
    assert (plan.nu, plan.incremental_seconds, plan.nu_limit) == (
        alone.nu, alone.incremental_seconds, alone.nu_limit)


def test_at_close_a_new_stage_is_chosen_by_its_own_loss_curve(toy):
    """Priced alike, the candidates differ in their loss alone: the toy's curve is the least,
    and only its own curve makes it so (2MDAV's would tie and 2MDAV, preferred, would win)."""
    same = TwoStageCost(PowerLaw.quadratic(2.6, 200_000))
    stages = {stage: same for stage in auto_stage_traits()}
    chosen, why = choose_stage(150_000, 50_000, stages, engine=MDAV_T)
    assert chosen == toy and why.startswith(f"{toy}: ")
    assert f"({expected_delta(MDAV_T, stage_traits(toy), 0.25):+.1%} against" in why


def test_an_unregistered_stage_is_an_error_never_2mdav():
    with pytest.raises(ParameterError, match="unknown incremental stage 'nn_split_late'; "
                       "available incremental stages: nn, nn_inertial, nn_split_end, "
                       "nn_split_mid, two_stage"):
        stage_traits("nn_split_late")
    # a stage's name is not its traits: nothing in the planner takes one and guesses
    with pytest.raises(TypeError, match="StageTraits"):
        QualityBound(MDAV_T, "nn_split_late")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="StageTraits"):
        choose_stage(9_000, 1_000, {"nn_split_late": TwoStageCost(PowerLaw(1e-9, 2.0))},
                     engine=MDAV_T)
    with pytest.raises(ValueError, match="needs its traits"):
        PlanRequest(k=K, engine="mdav", stage="nn_split_late")


def test_a_stage_declares_traits_the_planner_can_use():
    for bad in (dict(cost="quadratic"), dict(nu_grid=(0.0, 1.0)),
                dict(nu_grid=(0.0, 0.5, 0.4)), dict(auto_rank=-1)):
        declared = dict(nu_grid=TOY_NU, added_loss=TOY_LOSS, cost="nearest_neighbour") | bad
        with pytest.raises(ValueError, match="toy_bad"):
            register_stage("toy_bad", summary="-", source="this test", **declared)(_toy)
    assert "toy_bad" not in {s.name for s in available_stages()}
