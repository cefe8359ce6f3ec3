"""An engine's traits live on its registry entry: a new engine is one module that registers
itself, and the service, the planner and the warm-up read its facts from there (mixed data,
the one-shot loss against MDAV, the provisional cost model, whether ``engine = "auto"`` may
choose it, the warm-up parameters). The toy engine here is registered for each test alone."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from scheduler.cost_model import PowerLaw
from scheduler.quality import expected_delta
from scheduler.traits import EngineTraits
from streamanon.engines import available_engines, register, unregister
from streamanon.mixed import mixed_engines
from streamanon.service.config import parse_config
from streamanon.service.engine_traits import (
    auto_engine_names,
    engine_traits,
    provisional_model,
    stage_traits,
)
from streamanon.service.planning import SurveyPlanner
from streamanon.simulation.simulate import service_config
from tests.service.lifecycle_helpers import running_survey

TOY = "toy_quality"
#: The toy's traits: better than ONA* (0.86) and its own cost model, far from MDAV's.
TOY_LOSS, TOY_COST = 0.7, (2.0e-8, 1.5)
M, K = 15, 10


def _toy(X: np.ndarray, k: int) -> np.ndarray:
    n = len(X)
    return np.minimum(np.arange(n) // k, n // k - 1)


@pytest.fixture
def toy():
    register(TOY, summary="cells of k in input order (a test's engine)", source="this test",
             mixed=True, one_shot_loss=TOY_LOSS, cost_model=TOY_COST, auto=True,
             warmup=lambda X: {})(_toy)
    try:
        yield TOY
    finally:
        unregister(TOY)
    assert TOY not in {e.name for e in available_engines()}


def test_the_declared_engines_keep_the_facts_the_tables_held():
    """The traits moved from the tables onto the entries unchanged."""
    assert mixed_engines() == {"mdav", "mdav_star", "ona_star", "mona", "mona_2d", "pca_mdav",
                               "pca_mdav_proximal", "tclose_merge", "tclose_kfirst",
                               "tclose_tfirst"}
    assert auto_engine_names() == ("ona_star", "mdav")
    assert engine_traits("mdav").one_shot_loss == 1.0
    assert engine_traits("ona_star").one_shot_loss == 0.86
    assert provisional_model("mdav", 15, 10) == PowerLaw.quadratic(35.58, 1_000_000)
    assert provisional_model("ona_star", 15, 10) == PowerLaw(a=1.0e-7, b=1.78)
    # an engine that declares no cost model is planned with MDAV's until calibrated
    assert provisional_model("mondrian", 30, 5) == provisional_model("mdav", 30, 5)


def test_a_new_engine_is_read_with_its_own_traits(toy):
    traits = engine_traits(toy)
    assert traits == EngineTraits(toy, TOY_LOSS, auto=True,
                                  provisional_cost=PowerLaw(a=TOY_COST[0], b=TOY_COST[1]))
    assert toy in mixed_engines()
    assert auto_engine_names() == (toy, "ona_star", "mdav")  # quality first
    # its own loss, not MDAV's (an engine missing from the old table counted as MDAV: 0)
    assert expected_delta(traits, stage_traits("nn_split_end"), 0.0) == pytest.approx(
        TOY_LOSS - 1)
    model = provisional_model(toy, 30, 5)
    assert (model.a, model.b) == pytest.approx((TOY_COST[0] * 2 * 2, TOY_COST[1]))
    assert model != provisional_model("mdav", 30, 5)


def test_the_planner_plans_a_new_engine_with_its_own_traits(toy, tmp_path):
    """``engine = "auto"``: the service's planner makes the toy a candidate with its own
    provisional cost model, and prices and chooses it by its own one-shot loss."""
    from scheduler import live

    raw = service_config("127.0.0.1:9092", tmp_path, n=20_000, m=M, k=K,
                         close=datetime.now(timezone.utc) + timedelta(hours=1),
                         http="127.0.0.1:0", engine="auto", incremental="nn_split_end")
    config = parse_config(raw, {}, require_secrets=False)
    sc = config.surveys[0]
    survey = running_survey(config, sc)
    planner = SurveyPlanner(config, lambda sid, here: here)
    models, options = planner.models_for(sc, measure=False)
    assert options is not None
    by_name = {o.engine.name: o for o in options}
    assert set(by_name) == {toy, "ona_star", "mdav"}
    assert by_name[toy].engine.one_shot_loss == TOY_LOSS
    assert (by_name[toy].base_cost.a, by_name[toy].base_cost.b) == pytest.approx(TOY_COST)
    planner.adopt(survey, models, options, measured=False)

    plan, choice = planner._plan_for(survey, live.forecast(2_000, 5.0, 3600.0, 20_000), 3600.0)
    assert choice is not None and plan.engine == toy, choice.reason
    # priced by its traits: a stand-in with MDAV's loss would be priced 0.3 higher
    assert plan.expected_delta == pytest.approx(
        expected_delta(EngineTraits(toy, TOY_LOSS), stage_traits("nn_split_end"), plan.nu))
    assert plan.expected_delta < expected_delta(EngineTraits(toy), stage_traits("nn_split_end"),
                                                plan.nu) - 0.29


def test_the_warmup_runs_an_engine_with_its_declared_parameters():
    import streamanon.warmup as warmup

    seen = []
    register("toy_needs_labels", summary="needs labels", source="this test",
             parameters={"labels": "one per record; required"}, per_record=("labels",),
             warmup=lambda X: {"labels": np.zeros(len(X), dtype=np.int64)})(
        lambda X, k, labels: seen.append(len(labels)) or _toy(X, k))
    try:
        warmup._engines(("toy_needs_labels",))
    finally:
        unregister("toy_needs_labels")
    assert seen == [warmup.N]
