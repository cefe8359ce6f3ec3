"""The release spliced from a base release made before close (issue 17, streamanon.splicing):
equal, cell by cell, to the release built from scratch of the same partition; its order a
uniform permutation; its messages byte for byte those of its table."""

from __future__ import annotations

import itertools
import json
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from streamanon.errors import KAnonymityError
from streamanon.incremental.run import TwoStageRun
from streamanon.release import prepare, release_prepared
from streamanon.schema import quick_schema
from streamanon.splicing import (
    prepare_base,
    record_messages,
    splice,
    splice_order,
    unchanged_base_records,
)

K = 5
QI = ["a", "b", "c"]


def survey(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(rng.normal(size=(n, 3)) * [1.0, 10.0, 100.0], columns=QI)
    frame["answer"] = rng.integers(0, 5, size=n)
    frame["note"] = [f"r{i}" for i in range(n)]
    return frame


def partitions(frame: pd.DataFrame, n_base: int, incremental: str):
    schema = quick_schema(list(frame.columns), qi=QI, confidential=["answer", "note"])
    run = TwoStageRun(K, "mdav", incremental)
    base_prepared = prepare(frame.iloc[:n_base], schema, K)
    base_labels, seconds = run.run_base(base_prepared.Z)
    prepared = prepare(frame, schema, K)
    Z = (prepared.C - base_prepared.scaling.mean) / base_prepared.scaling.scale
    final = run.partition(Z, n_base, base_result=(base_labels, seconds)).labels
    return base_prepared, base_labels, prepared, final


@pytest.mark.parametrize("incremental", ["two_stage", "nn", "nn_split_end"])
def test_the_spliced_release_equals_the_release_built_from_scratch_cell_by_cell(incremental):
    frame = survey(600)
    n_base = 480
    base_prepared, base_labels, prepared, labels = partitions(frame, n_base, incremental)
    base = prepare_base(frame.iloc[:n_base].reset_index(drop=True), base_prepared, base_labels,
                        K, seed=1)
    release, messages, order = splice(base, frame, prepared, labels, K, seed=2)
    scratch = release_prepared(frame, prepared, labels, K, seed=None, shuffle=False)

    assert sorted(order.tolist()) == list(range(len(frame)))  # every record once
    assert release.distortion == scratch.distortion
    spliced_rows = release.table.assign(cell=labels[order])
    scratch_rows = scratch.table.assign(cell=labels)
    for cell in np.unique(labels):  # the same multiset of rows, cell by cell, to the bit
        mine = spliced_rows[spliced_rows.cell == cell].sort_values("note")
        theirs = scratch_rows[scratch_rows.cell == cell].sort_values("note")
        pd.testing.assert_frame_equal(mine.reset_index(drop=True),
                                      theirs.reset_index(drop=True), check_exact=True)
    # the messages are those of the table's rows, byte for byte, whichever way they were made
    assert messages == record_messages(release.table)
    assert [json.loads(m)["note"] for m in messages] == release.table["note"].tolist()
    kept = unchanged_base_records(base_labels, labels)
    assert kept.any()  # some base cells were reused ...
    if incremental == "two_stage":
        assert kept.all()  # ... 2MDAV leaves every base cell as it was


def test_a_base_cell_that_gained_or_lost_a_member_is_not_unchanged():
    base = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2])
    final = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 1])  # cell 1 gains record 12
    assert unchanged_base_records(base, final).tolist() == [True] * 3 + [False] * 3 + [True] * 3
    split = np.array([5, 5, 5, 1, 1, 1, 2, 2, 4])  # base cell 2 split, cells renumbered
    assert unchanged_base_records(base, split).tolist() == [True] * 6 + [False] * 3
    merged = np.array([0, 0, 0, 0, 0, 0, 2, 2, 2])  # base cells 0 and 1 merged
    assert unchanged_base_records(base, merged).tolist() == [False] * 6 + [True] * 3


@pytest.mark.parametrize("seed", range(20))
def test_unchanged_base_records_agrees_with_its_definition(seed):
    """Against the definition, cell by cell: same members before and after, nothing added."""
    rng = np.random.default_rng(seed)
    n_base, n_late = int(rng.integers(3, 60)), int(rng.integers(0, 20))
    base = rng.integers(0, max(n_base // 3, 1), n_base)
    if seed % 2:  # cells 0..c-1, none empty; else some cell numbers may have no member
        base = np.unique(base, return_inverse=True)[1]
    final = base.copy()
    for i in rng.choice(n_base, int(rng.integers(0, n_base)), replace=False):
        final[i] = rng.integers(0, base.max() + 3)  # moved, split off or merged
    labels = np.concatenate([final, rng.integers(0, base.max() + 3, n_late)])
    expected = [set(np.flatnonzero(base == base[i])) == set(np.flatnonzero(labels == labels[i]))
                for i in range(n_base)]
    assert unchanged_base_records(base, labels).tolist() == expected


def test_the_spliced_order_is_a_uniform_permutation():
    n, n_base, draws = 4, 2, 24_000
    rng = np.random.default_rng(7)
    counts = Counter()
    for _ in range(draws):
        base_order = rng.permutation(n_base)  # as prepare_base draws it
        counts[tuple(splice_order(base_order, n, rng).tolist())] += 1
    assert set(counts) == set(itertools.permutations(range(n)))  # every one of the 24 ...
    expected = draws / 24
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi2 < 49.7  # ... equally often: chi-square, 23 degrees of freedom, p = 0.001


def test_the_gate_holds_in_the_spliced_release():
    frame = survey(300, seed=3)
    base_prepared, base_labels, prepared, labels = partitions(frame, 240, "nn")
    base = prepare_base(frame.iloc[:240].reset_index(drop=True), base_prepared, base_labels, K)
    broken = labels.copy()
    broken[-1] = labels.max() + 1  # a cell of one record
    with pytest.raises(KAnonymityError):
        splice(base, frame, prepared, broken, K)


def test_messages_shared_per_cell_are_the_per_row_bytes():
    frame = pd.DataFrame({"x": [1.5, 1.5, 2.0, 2.0], "id": [1, 2, 3, 4],
                          "y": [np.nan, np.nan, 3.0, 3.0],
                          "z": pd.array([1, None, 2, 3], dtype="Int64")})
    cells = np.array([0, 0, 1, 1])
    assert record_messages(frame, ["x", "y"], cells) == record_messages(frame)
    assert json.loads(record_messages(frame)[1]) == {"x": 1.5, "id": 2, "y": None, "z": None}
    assert record_messages(frame.iloc[:0], ["x"], cells[:0]) == []


def test_a_base_release_is_checked_cell_by_cell():
    frame = survey(100, seed=4)
    schema = quick_schema(list(frame.columns), qi=QI, confidential=["answer", "note"])
    prepared = prepare(frame, schema, K)
    labels = np.arange(100) // 5
    prepare_base(frame, prepared, labels, K)  # twenty cells of five: fine
    labels[:2] = 99  # a cell of two (the tuple-count gate alone would see it too)
    with pytest.raises(KAnonymityError):
        prepare_base(frame, prepared, labels, K)


@pytest.mark.parametrize("late_share", [0.03, 0.07, 0.14])
def test_the_records_nearest_neighbour_late_records_span_are_as_the_planner_prices_them(
        late_share):
    """The planner prices the gate and table after close by the records in cells the stage
    changed (``NearestNeighbourCost.spanned``: each late record joins one of the n_0 / k base
    cells, Poisson); NN-split-end on real partitions changes that many, and 2MDAV none."""
    from scheduler.cost_model import NearestNeighbourCost, PowerLaw, TwoStageCost

    n = 20_000
    n_base = round((1 - late_share) * n)
    frame = survey(n, seed=3)
    _, base_labels, _, labels = partitions(frame, n_base, "nn_split_end")
    changed = n - n_base + int((~unchanged_base_records(base_labels, labels)).sum())
    predicted = NearestNeighbourCost(c=1e-9, k=K).spanned(n_base, n - n_base)
    assert abs(predicted - changed) <= 0.05 * n_base, (predicted, changed)
    _, base_labels, _, labels = partitions(frame, n_base, "two_stage")
    assert unchanged_base_records(base_labels, labels).all()
    assert TwoStageCost(PowerLaw(1e-6, 1.0)).spanned(n_base, n - n_base) == n - n_base


def test_a_release_with_no_late_record_is_the_base_release_reused_whole():
    """Every response arrived before the base snapshot: each cell is a base cell as it was, so
    nothing is gated or serialised again, and the release is the one built from scratch."""
    frame = survey(300)
    base_prepared, base_labels, prepared, labels = partitions(frame, 300, "nn_split_end")
    base = prepare_base(frame, base_prepared, base_labels, K, seed=1)
    release, messages, order = splice(base, frame, prepared, labels, K, seed=2)
    scratch = release_prepared(frame, prepared, labels, K, seed=None, shuffle=False)
    assert messages.new == [] and sorted(order.tolist()) == list(range(300))
    assert release.distortion == scratch.distortion
    assert messages == record_messages(release.table)
