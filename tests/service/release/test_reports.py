"""The typed release report and status: the JSON documents they give, without a broker."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from streamanon.service.health import PartHealth
from streamanon.service.publisher import write_release_files, write_report
from streamanon.service.reports import (
    PlanStatus,
    ProgressStatus,
    Publication,
    ReleaseReport,
    ReleaseStatus,
    ServiceStatus,
    SurveyStatus,
)

# The keys of report.json, in order, as the service has always written them.
REPORT_KEYS = [
    "survey", "release_id", "n", "m", "k", "quasi_identifiers", "columns", "engine",
    "incremental", "mode", "nu", "n_base", "n_increment", "arrival_coefficient", "planned_nu",
    "predicted_seconds_after_close", "one_shot_estimate_seconds", "base_started_at",
    "closed_at", "base_seconds", "incremental_seconds", "compute_seconds_after_close",
    "distortion", "information_loss", "rejected", "files", "information_loss_by_type",
    "values_withheld", "values_imputed", "strata_merged", "privacy", "risk", "spliced",
    "engine_choice", "incremental_choice", "predicted_release_seconds", "base_steps_seconds",
    "base_plan", "read_ahead", "n_spanned", "differential_privacy"]
PUBLISHED_KEYS = ["released_at", "close_to_release_seconds", "close_steps_seconds"]

# The keys of /api/status that the dashboard (static/app.js), /metrics and the demo read.
STATUS_KEYS = ["surveys", "health", "started_at", "now", "stale", "unreachable"]
SURVEY_KEYS = [
    "id", "state", "error", "k", "engine", "incremental", "received", "stored", "stored_here",
    "redelivered", "dead_lettered", "dead_lettered_total", "dead_letters_unsent",
    "releases", "pace", "now", "close_at", "close_requested_at",
    "deadline_seconds", "deadline_at", "base_at", "base_started_at", "arrival_coefficient",
    "nu", "cost_model", "cost_model_measured", "arrivals", "forecast", "progress", "plan",
    "release", "withheld"]
PLAN_KEYS = ["mode", "nu", "n_total", "head_start_seconds", "finish_after_close_seconds",
             "arrival_coefficient", "base_at", "refine_seconds", "engine", "expected_delta",
             "choice", "stage"]
PROGRESS_KEYS = ["stage", "started_at", "elapsed_seconds", "expected_seconds", "refine_seconds"]
RELEASE_KEYS = [
    "status", "n", "k", "engine", "incremental", "mode", "nu", "n_base", "distortion",
    "information_loss", "close_to_release_seconds", "one_shot_estimate_seconds",
    "predicted_seconds_after_close", "base_seconds", "incremental_seconds", "released_at"]


def report(files: dict[str, str] | None = None) -> ReleaseReport:
    return ReleaseReport(
        survey="s1", release_id="abc", n=600, m=3, k=5, quasi_identifiers=["age", "income"],
        columns=[{"name": "age", "role": "quasi_identifier", "treatment": "microaggregated"}],
        engine="mdav", incremental="nn_split_end", mode="two-stage", nu=0.2, n_base=480,
        n_increment=120, arrival_coefficient=1.5, planned_nu=0.25,
        predicted_seconds_after_close=0.4, one_shot_estimate_seconds=2.0,
        base_started_at=1000.0, closed_at=1010.0, base_seconds=1.2, incremental_seconds=0.1,
        compute_seconds_after_close=0.3, distortion=0.05, information_loss=5.0,
        rejected={"invalid_json": 2}, files=files or {"parquet": "p", "report": "r"})


PUBLICATION = Publication(released_at=1011.0, close_to_release_seconds=1.0,
                          close_steps_seconds={"drain": 0.2, "publish": 0.5})


def test_the_report_gives_the_keys_of_report_json_in_their_order():
    assert list(report().to_json()) == REPORT_KEYS
    assert list(report().published(PUBLICATION).to_json()) == REPORT_KEYS + PUBLISHED_KEYS
    assert report().published(PUBLICATION).to_json()["close_steps_seconds"] == {
        "drain": 0.2, "publish": 0.5}


def test_a_stored_report_reads_back_as_it_was_written():
    for written in (report(), report().published(PUBLICATION)):
        stored = json.loads(json.dumps(written.to_json()))  # as the store keeps it
        assert ReleaseReport.from_json(stored) == written


def test_the_release_status_is_the_report_seen_from_the_dashboard():
    written = ReleaseStatus.of("written", report())
    assert written.close_to_release_seconds is None and written.released_at is None
    published = ReleaseStatus.of("published", report().published(PUBLICATION))
    assert (published.released_at, published.close_to_release_seconds) == (1011.0, 1.0)
    assert published.n_base == 480 and published.mode == "two-stage"


def survey(**override) -> SurveyStatus:
    values = dict(
        id="s1", state="BASE_RUNNING", error=None, k=5, engine="mdav",
        incremental="nn_split_end", received=10, stored=9, stored_here=9, redelivered=1,
        dead_lettered={"invalid_json": 1}, dead_lettered_total=1, dead_letters_unsent=0,
        releases=0, pace=2.5,
        now=50.0, close_at=100.0,
        close_requested_at=None, deadline_seconds=30.0, deadline_at=130.0, base_at=40.0,
        base_started_at=41.0, arrival_coefficient=1.5, nu=0.2, cost_model=("mdav", 1e-6, 2.0),
        cost_model_measured=True,
        arrivals=[(1.0, 3), (2.0, 9)], forecast=[(50.0, 9.0), (100.0, 20.0)],
        progress=ProgressStatus("base", 41.0, 9.0, 12.0),
        plan=PlanStatus("optimal", 0.2, 20.0, 10.0, 0.4, 1.5, "2024-01-01T00:00:40+00:00"),
        release=None)
    return SurveyStatus(**(values | override))


def test_the_status_json_keeps_the_keys_the_dashboard_reads():
    status = ServiceStatus(
        surveys=[survey(), survey(id="s2", progress=None, plan=None,
                                  release=ReleaseStatus.of("published",
                                                           report().published(PUBLICATION)))],
        health={"store": PartHealth(True, "running")}, started_at=1.0, now=50.0)
    doc = json.loads(json.dumps(status.to_json()))
    assert list(doc) == STATUS_KEYS
    assert doc["health"] == {"store": {"ok": True, "detail": "running"}}
    first, second = doc["surveys"]
    assert list(first) == SURVEY_KEYS and list(second) == SURVEY_KEYS
    assert list(first["plan"]) == PLAN_KEYS and list(first["progress"]) == PROGRESS_KEYS
    assert first["cost_model"] == ["mdav", 1e-6, 2.0] and first["arrivals"] == [[1.0, 3],
                                                                                 [2.0, 9]]
    assert first["release"] is None and second["plan"] is None and second["progress"] is None
    assert list(second["release"]) == RELEASE_KEYS
    assert second["release"]["close_to_release_seconds"] == 1.0


def test_dead_letters_the_broker_never_took_are_in_the_status_and_the_metrics():
    """A dead letter given up after its retries (the broker down for good) was counted only
    inside the collector: neither /api/status nor /metrics showed it."""
    from streamanon.service.telemetry import Telemetry

    status = ServiceStatus(surveys=[survey(dead_letters_unsent=3)], health={}, started_at=1.0,
                           now=50.0)
    assert status.to_json()["surveys"][0]["dead_letters_unsent"] == 3
    text = Telemetry().exposition(status.surveys).decode()
    assert 'streamanon_dead_letters_unsent_total{survey="s1"} 3.0' in text
    # a survey's publish failures are a series from the first scrape, so that increase()
    # counts its first failure
    assert 'streamanon_publish_failures_total{survey="s1"} 0.0' in text


def test_writing_the_release_files_leaves_the_report_to_the_publication(tmp_path):
    frame = pd.DataFrame({"age": np.repeat([30.0, 40.0], 5), "answer": np.arange(10)})
    files = write_release_files(frame, tmp_path / "releases", "s1")
    assert sorted(p.name for p in (tmp_path / "releases" / "s1").iterdir()) == [
        "release.csv", "release.parquet"]
    # the report, computed on the raw answers, in the reports folder beside the releases
    assert files["report"] == str(tmp_path / "reports" / "s1" / "report.json")
    final = report(files).published(PUBLICATION)
    write_report(final)
    assert json.loads((tmp_path / "reports" / "s1" / "report.json").read_text()) == \
        final.to_json()
    assert sorted(p.name for p in (tmp_path / "releases" / "s1").iterdir()) == [
        "release.csv", "release.parquet"]
