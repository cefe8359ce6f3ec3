"""``incremental = "auto"`` at close, through :meth:`Releaser.write` on a SQLite store without a
broker: the stage the decision at close chose (``scheduler.at_close``) is the one the release
runs and reports, it is settled on the survey (``Survey.stage``), and the configuration keeps
``"auto"`` (issue 61, point 3: no step rewrites a survey's configuration)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest

from streamanon.service.config import parse_config
from streamanon.service.engine_traits import stage_traits
from tests.service.lifecycle_helpers import releasing_survey, stored_rows

M, K, N_BASE, N_LATE = 2, 3, 40, 20



@pytest.fixture
def survey(tmp_path):
    close = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    config = parse_config({
        "planner": {"cost_models": str(tmp_path / "cost_models.json")},
        "output": {"directory": str(tmp_path / "releases")},
        "surveys": [{"id": "s", "k": K, "incremental": "auto", "close": close, "schema": {
            "rid": {"role": "identifier"},
            **{f"q{i}": {"role": "quasi_identifier", "type": "float"} for i in range(M)}}}]},
        {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32})
    sv, store, pool = releasing_survey(config, tmp_path / "s.db", stored_rows(N_BASE, M))
    yield sv
    pool.shutdown()
    store.close()


def write_after_a_base_run(survey, stages):
    """Run the base run on the first records, store the late ones, and write the release."""

    async def run():
        assert await survey.start_base(None)
        await survey.base_task
        survey.parts.store.insert_records("s", stored_rows(N_LATE, M, first=N_BASE))
        row, _ = await survey.parts.releaser.write(survey, survey.plans.models[0], stages)
        return row.report

    return asyncio.run(run())


def test_the_stage_chosen_at_close_is_run_reported_and_settled_on_the_survey(survey):
    """2MDAV is the second candidate: it is taken only because its cost model is far below
    NN-split-end's, so a release that ran the first candidate fails this."""
    stages = {stage_traits("nn_split_end"): lambda n0, n1: 500.0,
              stage_traits("two_stage"): lambda n0, n1: 0.01}
    report = write_after_a_base_run(survey, stages)
    assert report["mode"] == "two-stage" and report["n_base"] == N_BASE
    assert report["incremental"] == "two_stage"
    choice = report["incremental_choice"]
    assert choice["configured"] == "auto" and choice["chosen"] == "two_stage"
    assert choice["reason"].startswith("two_stage")
    assert survey.stage == "two_stage"
    assert survey.config.incremental == "auto"  # settled on the survey, not the configuration
    assert {"load", "compute", "gate_and_table", "files"} <= set(survey.timings)


def test_without_cost_models_the_first_candidate_is_taken_and_said_so(survey):
    report = write_after_a_base_run(survey, {})
    assert report["incremental"] == survey.stage == "nn_split_end"
    assert report["incremental_choice"]["reason"] == "no cost models to choose by"
    assert survey.config.incremental == "auto"


def test_a_second_attempt_at_the_release_chooses_the_stage_anew(survey):
    """A close that failed after its decision is tried again: the stage is chosen again for
    that attempt's counts and cost models, not kept from the first (the survey's settled
    stage is what the attempt ran)."""
    cheap_2mdav = {stage_traits("nn_split_end"): lambda n0, n1: 500.0,
                   stage_traits("two_stage"): lambda n0, n1: 0.01}
    cheap_split = {stage_traits("nn_split_end"): lambda n0, n1: 0.01,
                   stage_traits("two_stage"): lambda n0, n1: 500.0}
    first = write_after_a_base_run(survey, cheap_2mdav)

    async def again():
        row, _ = await survey.parts.releaser.write(survey, survey.plans.models[0], cheap_split)
        return row.report

    second = asyncio.run(again())
    assert first["incremental"] == "two_stage"
    assert second["incremental"] == survey.stage == "nn_split_end"
    assert second["incremental_choice"]["chosen"] == "nn_split_end"
