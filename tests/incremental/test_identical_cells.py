"""A late record whose quasi-identifiers equal those of a base cell of identical records joins
that cell at zero loss, whatever the stage; the others go through the stage as before."""

from __future__ import annotations

import numpy as np
import pytest

from streamanon.engines import run_engine
from streamanon.incremental import available_stages, run_stage
from streamanon.metrics import check_partition

STAGES = [s.name for s in available_stages()]


def survey(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A base of 600 records over 30 tuples, and 80 late records: half repeat a tuple that is
    a base cell of identical records, half are new points."""
    rng = np.random.default_rng(seed)
    tuples = rng.integers(0, 6, size=(30, 3)).astype(float)
    base = tuples[rng.integers(0, 30, size=600)]
    late = np.vstack([tuples[rng.integers(0, 30, size=40)],
                      rng.normal(2.5, 1.5, size=(40, 3))])
    return base, late


@pytest.mark.parametrize("stage", STAGES)
def test_a_late_record_joins_the_cell_of_its_own_tuple(stage):
    base, late = survey(0)
    k = 5
    base_labels = run_engine("mdav", base, k)
    labels = run_stage(stage, base, base_labels, late, k)
    check_partition(labels, len(base) + len(late), k)
    pure = {c for c in np.unique(base_labels)
            if np.all(base[base_labels == c] == base[base_labels == c][0])}
    joined = 0
    for i in range(40):  # the late records that repeat a tuple
        own = [c for c in pure if np.array_equal(base[base_labels == c][0], late[i])]
        if own:  # its tuple is a base cell of identical records: it is in that cell
            joined += 1
            members = np.flatnonzero(base_labels == own[0])  # a split stage may cut it in
            assert labels[len(base) + i] in set(labels[members]), (stage, i)  # two: either
    assert joined >= 20
    assert np.array_equal(labels, run_stage(stage, base, base_labels, late, k))


@pytest.mark.parametrize("stage", STAGES)
def test_without_identical_cells_the_stage_runs_as_it_always_has(stage):
    rng = np.random.default_rng(3)
    base, late = rng.normal(size=(300, 3)), rng.normal(size=(40, 3))
    base_labels = run_engine("mdav", base, 5)
    info = next(s for s in available_stages() if s.name == stage)
    assert np.array_equal(run_stage(stage, base, base_labels, late, 5),
                          info.function(base, base_labels, late, 5))
