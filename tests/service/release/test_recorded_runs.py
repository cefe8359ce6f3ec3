"""What a release leaves for the next plans (issue 62, part 1), through
:meth:`Releaser.write` and the record kept after publishing, on a SQLite store without a
broker: a one-shot release's engine run on every record is a sample of the engine's cost under
this machine's conditions, as a base run is one, and the compute step's part that is not the
engines (sending the records to the compute process, standardising) is kept as a step of its
own, ``compute_rest``, which the overhead model then prices."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest

from scheduler.cost_model import CostModelStore
from scheduler.overhead import COMPUTE_REST
from streamanon.service.config import parse_config
from streamanon.service.release_steps import engine_at_close, steps_to_keep
from streamanon.service.reports import ReleaseReport
from tests.service.lifecycle_helpers import put_model, releasing_survey, stored_rows

M, K, N = 2, 3, 60


@pytest.fixture
def survey(tmp_path):
    close = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    models = tmp_path / "cost_models.json"
    put_model(models, "mdav", M, K, [(1000, 0.01), (2000, 0.04)])
    config = parse_config({
        "planner": {"cost_models": str(models)},
        "output": {"directory": str(tmp_path / "releases")},
        "surveys": [{"id": "s", "k": K, "engine": "mdav", "close": close, "schema": {
            "rid": {"role": "identifier"},
            **{f"q{i}": {"role": "quasi_identifier", "type": "float"} for i in range(M)}}}]},
        {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32})
    sv, store, pool = releasing_survey(config, tmp_path / "s.db", stored_rows(N, M))
    yield sv, CostModelStore(models)
    pool.shutdown()
    store.close()


def released_one_shot(survey) -> dict:
    """The release written at close without a base run, then recorded as after publishing
    (its close steps as the survey timed them)."""

    async def run():
        releaser = survey.parts.releaser
        row, _ = await releaser.write(survey, survey.plans.models[0])
        report = ReleaseReport.from_json(row.report)
        steps = {name: survey.timings[name] for name in ("load", "compute", "gate_and_table",
                                                          "files")}
        await releaser._record_steps(survey, report, steps)
        return row.report

    return asyncio.run(run())


def test_a_one_shot_release_is_a_sample_of_its_engines_cost(survey):
    sv, models = survey
    report = released_one_shot(sv)
    assert report["mode"] == "one-shot"
    runs = [s for s in models.samples("mdav", M, K) if s[2] == "run"]
    assert len(runs) == 1 and runs[0][0] == N
    assert runs[0][1] == pytest.approx(report["base_seconds"])


def test_the_compute_step_less_its_engine_is_kept_as_a_step(survey):
    sv, models = survey
    released_one_shot(sv)
    (kept,) = models._load()["release_steps"]["runs"]
    steps = kept[2]
    assert steps[COMPUTE_REST] == pytest.approx(
        max(sv.timings["compute"] - sv.timings["compute_engine"], 0.0), abs=1e-3)
    assert COMPUTE_REST not in sv.timings  # a report's close steps do not have it


def test_the_engine_seconds_at_close_are_the_runs_that_happened_after_it():
    from streamanon.incremental.run import Partition, Refinement

    one_shot = Partition(labels=None, mode="one-shot", n_base=0, n_increment=10,
                         base_seconds=2.0, incremental_seconds=0.0)
    two_stage = Partition(labels=None, mode="two-stage", n_base=90, n_increment=10,
                          base_seconds=7.0, incremental_seconds=0.5)
    assert engine_at_close(one_shot) == 2.0 and engine_at_close(two_stage) == 0.5
    refined = Partition(labels=None, mode="two-stage", n_base=90, n_increment=10,
                        base_seconds=7.0, incremental_seconds=0.5,
                        refinement=Refinement.__new__(Refinement))
    object.__setattr__(refined.refinement, "seconds", 1.25)
    assert engine_at_close(refined) == 1.75
    assert steps_to_keep({"compute": 3.0, "files": 0.2}, 2.5) == {
        "compute": 3.0, "files": 0.2, COMPUTE_REST: 0.5}
    assert steps_to_keep({"compute": 3.0}, None) == {"compute": 3.0}
    assert steps_to_keep({"compute": 1.0}, 1.2)[COMPUTE_REST] == 0.0


def test_a_one_shot_sample_counts_the_records_the_engine_ran_on(survey, tmp_path):
    """Repeated keys: 25,000 of the respondents share four keys, so the engine ran on the 60
    others and what the four keys lend them (``engine_rows``): the sample is at those records,
    where one at every record would have told the model that 25,060 records took well under
    a second."""
    import numpy as np

    from streamanon.service.store import RecordRow, record_digest

    sv, models = survey
    store = sv.parts.store
    store.ensure_survey("s")
    rows = []
    for i in range(N, N + 25_000):  # 25,000 more respondents over four keys
        qi = np.array([float(i % 2), float(i % 4 // 2)]).tobytes()
        rows.append(RecordRow(arrived_at=1000.0 + i, partition=0, offset=i,
                              rid_hash=i.to_bytes(32, "big"),
                              digest=record_digest(qi, "{}", None), qi=qi, confidential="{}",
                              label=None))
    store.insert_records("s", rows)
    report = released_one_shot(sv)
    assert report["mode"] == "one-shot" and report["n"] == N + 25_000
    assert N <= sv.timings["one_shot_work"] < 1_000
    runs = [s for s in models.samples("mdav", M, K) if s[2] == "run"]
    assert [s[0] for s in runs] == [sv.timings["one_shot_work"]]
