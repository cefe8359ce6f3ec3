"""The base snapshot's values kept in the compute process from the base run to the close
(streamanon.service.kept): at close only the later records are sent, and the release is the
one a full send gives."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from streamanon.incremental.run import TwoStageRun
from streamanon.release import BaseSnapshot, prepare_stored, release_partition
from streamanon.schema import quick_schema
from streamanon.service import kept
from streamanon.service.processes import worker_pool

K = 5
QI = ["a", "b", "c"]


@pytest.fixture(autouse=True)
def nothing_kept():
    kept._KEPT.clear()
    yield
    kept._KEPT.clear()


def survey(n: int, seed: int = 0, missing: bool = False) -> tuple[pd.DataFrame, object]:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(rng.normal(size=(n, 3)) * [1.0, 10.0, 100.0], columns=QI)
    if missing:
        frame.loc[3, "b"] = np.nan
    frame["answer"] = rng.integers(0, 5, size=n)
    schema = quick_schema(list(frame.columns), qi=QI, confidential=["answer"],
                          missing="group" if missing else None)
    return frame, schema


def snapshot(frame: pd.DataFrame, schema, n_base: int, run: TwoStageRun, seq: int = 7,
             survey_id: str = "s") -> BaseSnapshot:
    prepared = prepare_stored(frame.iloc[:n_base], schema, K)
    labels, seconds = kept.kept_base_partition(survey_id, seq, run, prepared)
    return BaseSnapshot(n_base, labels, prepared.scaling.mean, prepared.scaling.scale, seconds)


@pytest.mark.parametrize("stage", ["two_stage", "nn_split_end"])
def test_the_release_from_the_kept_values_is_the_release_from_all_values(stage):
    frame, schema = survey(600)
    run = TwoStageRun(K, "mdav", stage)
    base = snapshot(frame, schema, 480, run)
    assert kept.kept_surveys() == ["s"]
    X = frame[QI].to_numpy(dtype=np.float64)
    part = kept.kept_release_partition("s", 7, QI, run, X[480:], base)
    whole = release_partition(run, X, base, None)
    assert part is not None and part.mode == "two-stage" == whole.mode
    np.testing.assert_array_equal(part.labels, whole.labels)
    assert kept.kept_surveys() == []  # used up by the close


def test_more_late_records_than_the_room_kept_for_them_give_the_same_release(monkeypatch):
    monkeypatch.setattr(kept, "MIN_SPARE_ROWS", 0)  # room for as many as the snapshot's
    frame, schema = survey(700)
    run = TwoStageRun(K, "mdav", "nn_split_end")
    X = frame[QI].to_numpy(dtype=np.float64)
    for n_base in (300, 400):  # 400 late, more than its 300 rows of room; 300, within its 400
        base = snapshot(frame, schema, n_base, run)
        part = kept.kept_release_partition("s", 7, QI, run, X[n_base:], base)
        assert part is not None
        np.testing.assert_array_equal(part.labels, release_partition(run, X, base, None).labels)


def test_another_standardisation_is_not_used():
    frame, schema = survey(300)
    run = TwoStageRun(K, "mdav", "two_stage")
    X = frame[QI].to_numpy(dtype=np.float64)
    base = snapshot(frame, schema, 240, run)
    other = BaseSnapshot(240, base.labels, base.mean + 1e-9, base.scale, base.seconds)
    assert kept.kept_release_partition("s", 7, QI, run, X[240:], other) is None


def test_nothing_is_used_that_is_not_the_same_snapshot_of_the_same_columns():
    frame, schema = survey(300)
    run = TwoStageRun(K, "mdav", "two_stage")
    X = frame[QI].to_numpy(dtype=np.float64)
    for seq, names, n_base in [(8, QI, 240), (7, ["a", "c", "b"], 240), (7, QI, 239)]:
        base = snapshot(frame, schema, 240, run)
        if n_base != 240:
            base = BaseSnapshot(n_base, base.labels[:n_base], base.mean, base.scale, 0.0)
        assert kept.kept_release_partition("s", seq, names, run, X[n_base:], base) is None
        assert kept.kept_surveys() == []
    assert kept.kept_release_partition("s", 7, QI, run, X[240:], base) is None  # nothing kept
    snapshot(frame, schema, 240, run, seq=1)
    snapshot(frame, schema, 240, run, seq=2)  # a newer base run replaces the older
    assert kept.kept_release_partition("s", 1, QI, run, X[240:], base) is None
    snapshot(frame, schema, 240, run, survey_id="t")
    kept.forget("t")
    assert kept.kept_surveys() == []


def test_values_that_are_not_plain_numbers_are_not_kept():
    frame, schema = survey(300, missing=True)
    snapshot(frame, schema, 240, TwoStageRun(K, "mdav", "two_stage"))
    assert kept.kept_surveys() == []


def test_the_compute_process_keeps_them_between_its_calls():
    """As the service runs them: the base run and the close in its compute process."""
    frame, schema = survey(400)
    run = TwoStageRun(K, "mdav", "two_stage")
    prepared = prepare_stored(frame.iloc[:320], schema, K)
    X = frame[QI].to_numpy(dtype=np.float64)
    pool = worker_pool(1)
    try:
        labels, seconds = pool.submit(kept.kept_base_partition, "s", 3, run, prepared).result()
        base = BaseSnapshot(320, labels, prepared.scaling.mean, prepared.scaling.scale, seconds)
        part = pool.submit(kept.kept_release_partition, "s", 3, QI, run, X[320:], base).result()
        assert part is not None
        np.testing.assert_array_equal(part.labels,
                                      release_partition(run, X, base, None).labels)
        assert pool.submit(kept.kept_surveys).result() == []
    finally:
        pool.shutdown()
    assert kept.kept_surveys() == []  # this process kept nothing
