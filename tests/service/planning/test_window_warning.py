"""The service says when a survey opens that its release will be late (issue 49): ONA* in a
window shorter than its one-shot run released 121 s after close, and nothing said so before."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone

from tests.service.lifecycle_helpers import planner_for, put_model

M, K, N = 3, 5, 100_000


def survey_planner(tmp_path, ona_seconds_at_40k: float):
    models = tmp_path / "cost_models.json"
    # MDAV: 4 s at 100,000 records; ONA*: as given at 40,000, quadratic
    put_model(models, "mdav", M, K, [(10_000, 0.04), (20_000, 0.16), (40_000, 0.64)])
    t = ona_seconds_at_40k
    put_model(models, "ona_star", M, K, [(10_000, t / 16), (20_000, t / 4), (40_000, t)])
    return planner_for(tmp_path, {"k": K, "engine": "ona_star", "incremental": "nn_split_end",
                                  "expected_records": N}, M, 90)


def test_a_window_shorter_than_the_engines_one_shot_run_is_logged_once(tmp_path, caplog):
    # ONA*: 100 s at 100,000 records, 90 s window
    planner, survey = survey_planner(tmp_path, 16.0)
    now = datetime.now(timezone.utc)
    with caplog.at_level(logging.WARNING, logger="streamanon.service.planning"):
        planner.plan(survey, now)
        planner.plan(survey, now + timedelta(seconds=2))
    warned = [r.getMessage() for r in caplog.records if "longer than" in r.getMessage()]
    assert len(warned) == 1
    assert "ona_star's one-shot run" in warned[0] and 'engine = "mdav"' in warned[0]
    assert survey.window_warning == warned[0].split(": ", 1)[1]


def test_nothing_is_said_when_the_release_will_be_in_time(tmp_path, caplog):
    planner, survey = survey_planner(tmp_path, 0.64)  # ONA* as fast as MDAV: 4 s
    with caplog.at_level(logging.WARNING, logger="streamanon.service.planning"):
        planner.plan(survey, datetime.now(timezone.utc))
    assert not [r for r in caplog.records if "longer than" in r.getMessage()
                or "after close" in r.getMessage()]
    assert survey.window_warning is None


def test_near_the_close_the_time_left_is_not_taken_for_the_window(tmp_path, caplog):
    """Plans go on until the base run starts: with 3 s left every engine's one-shot run is
    longer than the time left, which is not what the warning is about (the window is)."""
    planner, survey = survey_planner(tmp_path, 0.64)  # ONA* 4 s in a 90 s window
    now = datetime.now(timezone.utc)
    with caplog.at_level(logging.WARNING, logger="streamanon.service.planning"):
        planner.plan(survey, now)
        planner.plan(survey, now + timedelta(seconds=87))
    assert not [r for r in caplog.records if "longer than" in r.getMessage()]
    assert survey.window_warning is None


def test_only_a_faster_engine_is_named():
    from scheduler import live
    from scheduler.arrivals import UniformForecast

    def slow(n):
        return 2e-3 * n  # 200 s for 100,000

    plan = live.plan(UniformForecast(total=N, pace=N / 90.0), slow,
                     lambda n0, n1: 1.0, k=K, seconds_to_close=90.0)
    text = live.window_warning("ona_star", slow, plan, 90.0, {"mdav": lambda n: 3e-3 * n})
    assert "longer than" in text and "mdav" not in text


def test_without_an_expected_total_the_warning_waits_for_a_measured_pace(tmp_path, caplog):
    """A plan on the first seconds' handful of records can be one-shot and late where the
    measured pace leaves room for a base run (a million-record survey's first plan said 66 s
    after close): without ``expected_records`` the warning waits for three arrival bins."""
    models = tmp_path / "cost_models.json"
    t = 16.0  # ONA*: 100 s at 100,000 records, in a 90 s window
    put_model(models, "mdav", M, K, [(10_000, 0.04), (20_000, 0.16), (40_000, 0.64)])
    put_model(models, "ona_star", M, K, [(10_000, t / 16), (20_000, t / 4), (40_000, t)])
    planner, survey = planner_for(tmp_path, {"k": K, "engine": "ona_star",
                                             "incremental": "nn_split_end"}, M, 90)
    now = datetime.now(timezone.utc)
    start = now.timestamp()
    survey.ingest.stored = 5_000
    survey.estimator.observe([start + 0.5] * 5_000)  # one bin's arrivals
    with caplog.at_level(logging.WARNING, logger="streamanon.service.planning"):
        planner.plan(survey, now + timedelta(seconds=1))
        assert survey.window_warning is None  # one bin: not measured yet
        survey.ingest.stored = 20_000
        survey.estimator.observe([start + 1.5] * 5_000 + [start + 2.5] * 5_000
                             + [start + 3.5] * 5_000)
        planner.plan(survey, now + timedelta(seconds=4.2))
    assert survey.window_warning is not None and "longer than the 89 s" in survey.window_warning
