"""One plan request: the service's planner and ``streamanon simulate``'s prediction build the
same :class:`scheduler.choice.PlanRequest` from the same survey configuration and plan it with
:func:`scheduler.choice.plan_survey`, so they give the same plan, ``incremental = "auto"``
and ``engine = "auto"`` included."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

import streamanon.service.planning as planning
from scheduler.arrivals import CumulativeForecast
from scheduler.choice import Option, PlanRequest
from scheduler.profiles import resolve
from streamanon.service.config import parse_config
from streamanon.service.engine_traits import engine_traits
from streamanon.service.planning import SurveyPlanner, plan_request
from streamanon.simulation.simulate import predict, service_config, simulated_request
from tests.service.lifecycle_helpers import running_survey

N, M, K = 40_000, 15, 10
OPEN = 600.0  # seconds the survey is open


def _survey(tmp_path, **settings):
    raw = service_config("127.0.0.1:9092", tmp_path, n=N, m=M, k=K,
                         close=datetime.now(timezone.utc) + timedelta(seconds=OPEN),
                         http="127.0.0.1:0", **settings)
    config = parse_config(raw, {}, require_secrets=False)
    return config, config.surveys[0]


@pytest.mark.parametrize("settings", [
    {"engine": "mdav", "incremental": "auto"},
    {"engine": "ona_star", "incremental": "auto", "objective": "earliest"},
    {"engine": "auto", "incremental": "auto"},
    {"engine": "auto", "incremental": "two_stage", "min_nu": 0.05},
    {"engine": "mdav", "incremental": "nn_split_end", "deadline": 30.0},
])
def test_the_service_and_the_simulation_plan_a_survey_alike(settings, tmp_path, monkeypatch):
    config, sc = _survey(tmp_path, **settings)
    request = simulated_request(k=K, **settings)
    assert request == plan_request(sc)  # one request from one configuration
    assert isinstance(request, PlanRequest)

    # the service's planner, on provisional models (nothing timed), on an idle machine
    monkeypatch.setattr(planning, "machine_load", lambda: (0.0, 2))
    survey = running_survey(config, sc)
    planner = SurveyPlanner(config, lambda sid, here: here)
    models, options = planner.models_for(sc, measure=False)
    planner.adopt(survey, models, options, measured=False)
    profile = resolve("uniform", OPEN)
    grid = np.linspace(0.0, 1.0, 2001)  # the prediction's forecast: the profile, exact
    forecast = CumulativeForecast.piecewise(grid * OPEN - OPEN, profile.cumulative(grid) * N)
    plan, _ = planner._plan_for(survey, forecast, OPEN)

    # the simulation's prediction, with the same candidates (or the survey's one engine)
    candidates = options if options is not None else [
        Option(engine_traits(sc.engine), *models)]
    predicted = predict(profile, N, OPEN, request, candidates)

    assert predicted["nu"] == pytest.approx(plan.nu, rel=1e-12, abs=1e-12)
    assert predicted["mode"] == plan.mode
    assert predicted["stage"] == plan.stage
    if sc.engine == "auto":
        assert predicted["engine"] == plan.engine is not None
    assert predicted["finish_after_close_seconds"] == pytest.approx(plan.finish_after_close)
    if settings.get("incremental") == "auto":
        assert plan.stage in ("nn_split_end", "two_stage")  # the stage is the planner's
