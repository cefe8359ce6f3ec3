"""LDA-MDAV (paper 003): partition invariants, alpha = 1 is MDAV, the stretch keeps cells on one
side of the class boundary, the Fisher direction, and parameter errors."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

from streamanon.engines import run_engine
from streamanon.engines.lda_mdav import fisher_direction, lda_mdav, lda_operator
from streamanon.engines.mdav import mdav
from streamanon.errors import ParameterError
from streamanon.metrics import standardise

# (n, m, k): n < 2k, 2k <= n < 3k, k = 1 and 2, and ordinary cases.
SHAPES = [
    (2, 1, 1),
    (3, 2, 1),
    (7, 2, 1),
    (5, 4, 2),
    (9, 2, 5),
    (12, 3, 5),
    (14, 3, 5),
    (31, 3, 2),
    (100, 5, 10),
    (300, 4, 7),
]


def _data(n: int, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = standardise(rng.standard_normal((n, m)))
    y = (X[:, 0] + 0.5 * rng.standard_normal(n) > 0).astype(int)
    y[0], y[-1] = 0, 1  # both classes present even for tiny n
    return X, y


def _mixed_cell_fraction(cells: np.ndarray, y: np.ndarray) -> float:
    """Fraction of cells holding records of both classes."""
    positives = np.bincount(cells, weights=y)
    sizes = np.bincount(cells)
    return float(np.mean((positives > 0) & (positives < sizes)))


@pytest.mark.parametrize("n,m,k", SHAPES)
@pytest.mark.parametrize("alpha", [1.0, 4.0, 64.0])
def test_every_cell_has_at_least_k_and_every_record_one_cell(n, m, k, alpha):
    X, y = _data(n, m, n * 100 + m * 10 + k)
    cells = lda_mdav(X, k, labels=y, alpha=alpha)
    assert cells.shape == (n,) and cells.dtype == np.int64
    sizes = np.bincount(cells)
    assert sizes.sum() == n and sizes.min() >= k  # labels 0..c-1, all used, each >= k
    if n < 2 * k:
        assert len(sizes) == 1


@pytest.mark.parametrize("n,m,k", SHAPES)
def test_partition_is_deterministic(n, m, k):
    X, y = _data(n, m, n + k)
    first = lda_mdav(X, k, labels=y, alpha=8.0)
    assert np.array_equal(first, lda_mdav(X.copy(), k, labels=y.copy(), alpha=8.0))


@pytest.mark.parametrize("n,m,k", SHAPES)
def test_alpha_one_equals_mdav(n, m, k):
    X, y = _data(n, m, 7 * n + k)
    assert np.array_equal(lda_mdav(X, k, labels=y, alpha=1.0), mdav(X, k))


@pytest.mark.parametrize("seed", range(5))
def test_alpha_one_equals_mdav_with_ties_and_duplicates(seed):
    rng = np.random.default_rng(seed)
    X = standardise(np.round(rng.standard_normal((200, 3)) * 1.5))  # many exact ties
    X[rng.integers(0, 200, 40)] = X[0]
    y = rng.integers(0, 2, 200)
    assert np.array_equal(lda_mdav(X, 4, labels=y), mdav(X, 4))


def test_partition_is_mdav_on_the_rotated_and_stretched_records():
    X, y = _data(250, 4, 11)
    T = lda_operator(fisher_direction(X, y.astype(bool)), 6.0)
    assert np.array_equal(lda_mdav(X, 5, labels=y, alpha=6.0), mdav(X @ T.T, 5))


def test_operator_stretches_only_the_discriminant_component_of_distances():
    rng = np.random.default_rng(2)
    u = rng.standard_normal(5)
    u /= np.linalg.norm(u)
    alpha = 3.0
    T = lda_operator(u, alpha)
    delta = rng.standard_normal((50, 5))
    stretched = np.sum((delta @ T.T) ** 2, axis=1)
    expected = np.sum(delta**2, axis=1) + (alpha**2 - 1) * (delta @ u) ** 2
    np.testing.assert_allclose(stretched, expected, rtol=1e-12)
    np.testing.assert_allclose(np.abs(T[0]), alpha * np.abs(u), rtol=1e-12)


def test_larger_alpha_makes_fewer_cells_straddle_the_class_boundary():
    rng = np.random.default_rng(0)
    n = 800
    y = rng.integers(0, 2, n)
    # Two well separated classes along an oblique direction, wide spread along the boundary.
    along = rng.standard_normal(n) * 3.0
    across = np.where(y == 1, 1.5, -1.5) + 0.5 * rng.standard_normal(n)
    X = standardise(np.column_stack([along + across, along - across, rng.standard_normal(n)]))
    mixed = [_mixed_cell_fraction(lda_mdav(X, 10, labels=y, alpha=a), y) for a in (1, 4, 16)]
    assert mixed[0] > 0.15
    assert mixed[1] < mixed[0] and mixed[2] < mixed[1]
    assert mixed[2] < 0.5 * mixed[0]


def test_fisher_direction_is_parallel_to_scikit_learn_lda():
    rng = np.random.default_rng(4)
    n = 400
    y = rng.integers(0, 2, n)
    X = rng.multivariate_normal([0, 0, 0], [[1, 0.7, 0.2], [0.7, 1, 0.1], [0.2, 0.1, 1]], n)
    X[y == 1] += [0.8, -0.3, 0.5]
    X = standardise(X)
    u = fisher_direction(X, y.astype(bool))
    coef = LinearDiscriminantAnalysis(solver="lsqr").fit(X, y).coef_[0]
    assert np.linalg.norm(u) == pytest.approx(1.0)
    assert abs(u @ coef) / np.linalg.norm(coef) == pytest.approx(1.0, abs=1e-9)


def test_singular_scatter_gives_the_zero_spread_separating_direction():
    """A column constant within each class makes Sigma_W singular; it separates perfectly."""
    rng = np.random.default_rng(5)
    y = rng.integers(0, 2, 100).astype(bool)
    X = standardise(np.column_stack([rng.standard_normal(100), y.astype(float),
                                     rng.standard_normal(100)]))
    u = fisher_direction(X, y)
    assert abs(u[1]) == pytest.approx(1.0, abs=1e-6)
    cells = lda_mdav(X, 5, labels=y, alpha=16.0)
    assert _mixed_cell_fraction(cells, y.astype(int)) <= 0.05


def test_collinear_columns_and_constant_column_are_handled():
    rng = np.random.default_rng(6)
    a = rng.standard_normal(120)
    y = (a + rng.standard_normal(120) > 0).astype(int)
    X = standardise(np.column_stack([a, 2 * a, np.zeros(120), rng.standard_normal(120)]))
    u = fisher_direction(X, y.astype(bool))
    assert np.isfinite(u).all() and np.linalg.norm(u) == pytest.approx(1.0)
    assert np.bincount(lda_mdav(X, 6, labels=y, alpha=8.0)).min() >= 6


def test_equal_class_means_fall_back_to_mdav():
    X = standardise(np.array([[0.0, 1.0], [1.0, 0.0], [0.0, 0.0], [1.0, 1.0]] * 5))
    y = np.array([0, 0, 1, 1] * 5)  # both classes have mean (0.5, 0.5)
    assert not fisher_direction(X, y.astype(bool)).any()
    assert np.array_equal(lda_mdav(X, 3, labels=y, alpha=8.0), mdav(X, 3))


def test_labels_of_any_two_values_give_the_same_partition():
    X, y = _data(150, 3, 8)
    as_strings = np.where(y == 1, "yes", "no")  # "no" < "yes": same class order as 0 < 1
    as_floats = np.where(y == 1, 2.5, -1.0)
    expected = lda_mdav(X, 5, labels=y, alpha=8.0)
    assert np.array_equal(lda_mdav(X, 5, labels=as_strings, alpha=8.0), expected)
    assert np.array_equal(lda_mdav(X, 5, labels=list(as_floats), alpha=8.0), expected)


def test_runs_through_the_registry():
    X, y = _data(90, 3, 9)
    labels = run_engine("lda_mdav", X, 4, labels=y, alpha=2.0)
    assert np.array_equal(labels, lda_mdav(X, 4, labels=y, alpha=2.0))


@pytest.mark.parametrize(
    "params,match",
    [
        ({}, "needs labels="),
        ({"labels": np.array([0, 1] * 5)}, "10 values for 20 records"),
        ({"labels": np.zeros(20)}, "exactly two classes in labels, got 1"),
        ({"labels": np.arange(20) % 3}, "exactly two classes in labels, got 3"),
        ({"labels": np.zeros((20, 1))}, "1-D array"),
        ({"labels": np.array([0.0, np.nan] * 10)}, "NaN"),
        ({"labels": np.array([0, 1] * 10), "alpha": 0.5}, "alpha must be a finite number >= 1"),
        ({"labels": np.array([0, 1] * 10), "alpha": float("nan")}, "alpha must be"),
        ({"labels": np.array([0, 1] * 10), "alpha": "2"}, "alpha must be a number"),
        ({"labels": np.array([0, 1] * 10), "alpha": True}, "alpha must be a number"),
    ],
)
def test_bad_parameters_are_refused_with_a_clear_error(params, match):
    X, _ = _data(20, 2, 1)
    with pytest.raises(ParameterError, match=match):
        run_engine("lda_mdav", X, 3, **params)
