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
    planner = survey_planner(tmp_path, 16.0)  # ONA*: 100 s at 100,000 records, 90 s window
    now = datetime.now(timezone.utc)
    with caplog.at_level(logging.WARNING, logger="streamanon.service.planning"):
        planner.plan("s", now)
        planner.plan("s", now + timedelta(seconds=2))
    warned = [r.getMessage() for r in caplog.records if "longer than" in r.getMessage()]
    assert len(warned) == 1
    assert "ona_star's one-shot run" in warned[0] and 'engine = "mdav"' in warned[0]
    assert planner.surveys["s"].window_warning == warned[0].split(": ", 1)[1]


def test_nothing_is_said_when_the_release_will_be_in_time(tmp_path, caplog):
    planner = survey_planner(tmp_path, 0.64)  # ONA* as fast as MDAV: 4 s
    with caplog.at_level(logging.WARNING, logger="streamanon.service.planning"):
        planner.plan("s", datetime.now(timezone.utc))
    assert not [r for r in caplog.records if "longer than" in r.getMessage()
                or "after close" in r.getMessage()]
    assert planner.surveys["s"].window_warning is None
