"""Invariants of every registered engine: at least k records per cell, every record in exactly
one cell, determinism, small-n edge cases, tie-heavy data; and every engine works as a base
engine and as the splitting engine of the incremental stages.

The engine list comes from the registry, so an engine added later is covered without editing
this file (per-record parameters are generated from ``Entry.per_record``).
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from streamanon.engines import available_engines, get_engine, run_engine
from streamanon.errors import ParameterError
from streamanon.incremental import run_stage
from streamanon.incremental.run import TwoStageRun
from streamanon.metrics import standardise

ENGINES = [e.name for e in available_engines()]
SPLITTERS = [e.name for e in available_engines() if not e.per_record]

# (n, m, k): n = k, n < 2k, 2k <= n < 3k, k = 1 and 2, and ordinary cases.
SHAPES = [
    (1, 1, 1),
    (3, 2, 1),
    (4, 2, 4),
    (9, 2, 5),
    (12, 3, 5),
    (14, 3, 5),
    (31, 3, 2),
    (100, 5, 10),
    (257, 6, 7),
]


def per_record_params(name: str, n: int, seed: int) -> dict[str, object]:
    """Values for an engine's per-record parameters: a binary label, confidential columns."""
    rng = np.random.default_rng(seed)
    params: dict[str, object] = {}
    for parameter in get_engine(name).per_record:
        if parameter == "labels":
            y = rng.integers(0, 2, n)
            y[0], y[-1] = 0, 1  # two classes even for n = 2
            params[parameter] = y if n > 1 else None
        elif parameter == "Y":
            params[parameter] = rng.standard_normal((n, 2))
        elif parameter == "S":  # a sensitive answer on five levels, t-closeness 0.3
            params[parameter] = rng.integers(0, 5, n)
            params["t"] = 0.3
        else:  # a new per-record parameter needs a generator here
            raise AssertionError(f"no test values for per-record parameter {parameter!r}")
    return {key: value for key, value in params.items() if value is not None}


def check_cells(labels: np.ndarray, n: int, k: int) -> None:
    assert labels.shape == (n,)
    assert np.issubdtype(labels.dtype, np.integer)
    _, sizes = np.unique(labels, return_counts=True)
    assert sizes.sum() == n  # every record in exactly one cell
    assert sizes.min() >= k


def test_every_engine_is_listed_with_source_and_summary():
    assert {"mdav", "mdav_star", "ona_star", "mondrian", "mondrian_v", "mondrian_v2d", "mona",
            "mona_2d", "pca_mdav", "pca_mdav_proximal", "lda_mdav", "dependence"} <= set(ENGINES)
    for name in ENGINES:
        info = get_engine(name)
        assert info.summary and info.source
        accepted = inspect.signature(info.function).parameters
        assert "progress" in accepted  # the CLI and the API always pass it
        assert set(info.parameters) <= set(accepted), name
        assert info.per_record <= set(info.parameters), name


@pytest.mark.parametrize("name", ENGINES)
@pytest.mark.parametrize("n,m,k", SHAPES)
def test_cells_have_at_least_k_and_cover_every_record(name, n, m, k):
    X = standardise(np.random.default_rng(n * 31 + m).standard_normal((n, m)))
    if name == "lda_mdav" and n < 2:  # one record cannot hold two classes
        with pytest.raises(ParameterError, match="exactly two classes"):
            run_engine(name, X, k, labels=np.zeros(n))
        return
    labels = run_engine(name, X, k, **per_record_params(name, n, n))
    check_cells(labels, n, k)
    if n < 2 * k:
        assert len(np.unique(labels)) == 1


@pytest.mark.parametrize("name", ENGINES)
def test_tie_heavy_integer_data(name):
    """Duplicates and ties on every column: no engine may lose a record or make a small cell."""
    rng = np.random.default_rng(5)
    X = standardise(rng.integers(0, 3, (240, 4)).astype(float))
    X[:60] = X[0]  # a quarter of the records identical
    for k in (2, 7):
        check_cells(run_engine(name, X, k, **per_record_params(name, 240, 1)), 240, k)


@pytest.mark.parametrize("name", ENGINES)
def test_deterministic(name):
    X = standardise(np.random.default_rng(11).standard_normal((400, 4)))
    params = per_record_params(name, 400, 2)
    first = run_engine(name, X, 6, **params)
    second = run_engine(name, X.copy(), 6, **params)
    assert np.array_equal(first, second)


@pytest.mark.parametrize("name", ENGINES)
def test_usable_as_the_base_engine_of_a_two_stage_release(name):
    n, k = 300, 5
    X = standardise(np.random.default_rng(3).standard_normal((n, 3)))
    run = TwoStageRun(k, name, "nn_split_end", engine_params=per_record_params(name, n, 4))
    result = run.run(X, 240, compare_one_shot=True)
    check_cells(result.labels, n, k)
    assert result.one_shot_distortion is not None


@pytest.mark.parametrize("name", SPLITTERS)
@pytest.mark.parametrize("stage", ["nn_split_mid", "nn_split_end", "two_stage"])
def test_usable_as_the_splitting_engine_of_the_incremental_stages(name, stage):
    rng = np.random.default_rng(8)
    k = 4
    base = rng.standard_normal((200, 3))
    base_labels = run_engine("mdav", base, k)
    increment = rng.standard_normal((150, 3)) * 0.3  # crowds a few cells past 2k
    labels = run_stage(stage, base, base_labels, increment, k, engine=name)
    check_cells(labels, 350, k)
    if stage != "two_stage":
        assert np.array_equal(labels[:200] >= 0, np.ones(200, bool))
    again = run_stage(stage, base, base_labels, increment, k, engine=name)
    assert np.array_equal(labels, again)


@pytest.mark.parametrize("index", ["auto", "blocks"])
@pytest.mark.parametrize("stage", ["nn_split_mid", "nn_split_end"])
def test_splitting_through_the_registry_equals_the_compiled_mdav_split(stage, index):
    """engine_params forces the registry path; with mdav it must give the built-in result
    (with the blocked search too: a split by another engine comes back to a rebuilt list)."""
    rng = np.random.default_rng(9)
    base = rng.standard_normal((300, 2))
    base_labels = run_engine("mdav", base, 5)
    increment = rng.standard_normal((200, 2)) * 0.5
    builtin = run_stage(stage, base, base_labels, increment, 5, index=index)
    registry = run_stage(stage, base, base_labels, increment, 5, engine="mdav",
                         engine_params={"screen": False}, index=index)
    assert np.array_equal(builtin, registry)
