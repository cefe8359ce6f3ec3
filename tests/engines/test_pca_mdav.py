"""PCA-MDAV and its proximal variant (paper 000): partition invariants, determinism, the energy
rule against numpy's spectrum, the reductions to MDAV and to PCA-MDAV that the docstrings claim,
the structure of Algorithm C, and parameter errors."""

from __future__ import annotations

import numpy as np
import pytest

from streamanon.engines import run_engine
from streamanon.engines.mdav import mdav
from streamanon.engines.pca_mdav import (
    auto_distal_cells,
    fit_principal_components,
    pca_mdav,
    pca_mdav_proximal,
    rank_macrocells,
)
from streamanon.errors import ParameterError
from streamanon.metrics import standardise

# (n, m, k): n < 2k, 2k <= n < 3k, k = 1 and 2, and ordinary cases.
SHAPES = [
    (1, 1, 1),
    (2, 3, 1),
    (7, 2, 1),
    (5, 4, 2),
    (9, 2, 5),
    (12, 3, 5),
    (14, 3, 5),
    (31, 3, 2),
    (100, 5, 10),
    (257, 13, 10),
    (300, 6, 7),
]

# Engine and parameters; macrocell sizes small enough to give several macrocells on SHAPES.
CONFIGS = [
    ("pca_mdav", {}),
    ("pca_mdav", {"components": 1}),
    ("pca_mdav", {"energy": 0.3}),
    ("pca_mdav_proximal", {}),
    ("pca_mdav_proximal", {"macrocell_size": "2k"}),
    ("pca_mdav_proximal", {"macrocell_size": "3k", "distal_cells": 1}),
    ("pca_mdav_proximal", {"macrocell_size": "2k", "scope": "macrocell"}),
]


def _correlated(n: int, m: int, seed: int) -> np.ndarray:
    """Standardised Gaussian records with a random correlation, so PCA has something to drop."""
    rng = np.random.default_rng(seed)
    mixing = rng.standard_normal((m, m)) * np.linspace(1.0, 0.2, m)
    return standardise(rng.standard_normal((n, m)) @ mixing.T)


def _params(params: dict, k: int) -> dict:
    size = params.get("macrocell_size")
    if isinstance(size, str):
        params = {**params, "macrocell_size": int(size[0]) * k}
    return params


@pytest.mark.parametrize("n,m,k", SHAPES)
@pytest.mark.parametrize("name,params", CONFIGS)
def test_every_cell_has_at_least_k_and_every_record_one_cell(n, m, k, name, params):
    X = _correlated(n, m, n * 100 + m * 10 + k)
    cells = run_engine(name, X, k, **_params(params, k))
    assert cells.shape == (n,) and cells.dtype == np.int64
    sizes = np.bincount(cells)
    assert sizes.sum() == n and sizes.min() >= k  # labels 0..c-1, all used, each >= k
    if n < 2 * k:
        assert len(sizes) == 1


@pytest.mark.parametrize("n,m,k", SHAPES)
@pytest.mark.parametrize("name,params", [CONFIGS[0], CONFIGS[4], CONFIGS[6]])
def test_partition_is_deterministic(n, m, k, name, params):
    X = _correlated(n, m, n + k)
    params = _params(params, k)
    first = run_engine(name, X, k, **params)
    assert np.array_equal(first, run_engine(name, X.copy(), k, **params))


@pytest.mark.parametrize("n,m,k", [(60, 2, 3), (150, 4, 5), (257, 13, 10), (400, 7, 2)])
def test_all_components_equal_mdav_on_gaussian_data(n, m, k):
    """Keeping every axis only rotates and translates the records: MDAV's partition."""
    X = standardise(np.random.default_rng(n + m).standard_normal((n, m)))
    expected = mdav(X, k)
    assert np.array_equal(pca_mdav(X, k, components=m), expected)
    assert np.array_equal(pca_mdav(X, k, energy=0.0), expected)


def test_zero_energy_loss_drops_only_redundant_attributes():
    """Fig. 10: a column that is a combination of others has eigenvalue 0; dropping it keeps
    every distance, so the partition is still MDAV's."""
    rng = np.random.default_rng(3)
    A = rng.standard_normal((200, 4))
    X = standardise(np.column_stack([A, A[:, 0] + A[:, 1]]))
    pcs = fit_principal_components(X, energy=0.0)
    assert pcs.n_components == 4
    assert np.array_equal(pca_mdav(X, 5, energy=0.0), mdav(X, 5))


@pytest.mark.parametrize("energy", [0.0, 0.03, 0.1, 0.17, 0.25, 0.4, 0.6, 0.95])
@pytest.mark.parametrize("seed", range(3))
def test_energy_rule_keeps_the_fewest_axes_reaching_one_minus_epsilon_squared(energy, seed):
    X = _correlated(300, 8, seed)
    eigenvalues = np.linalg.eigvalsh(np.cov(X, rowvar=False, bias=True))[::-1]
    kept = np.cumsum(eigenvalues) / eigenvalues.sum()
    pcs = fit_principal_components(X, energy=energy)
    count = pcs.n_components
    assert kept[count - 1] >= 1 - energy - 1e-12
    assert count == 1 or kept[count - 2] < 1 - energy
    np.testing.assert_allclose(pcs.eigenvalues, eigenvalues, rtol=1e-10, atol=1e-12)
    assert pcs.kept_energy == pytest.approx(kept[count - 1], rel=1e-12)


def test_partition_is_mdav_on_numpy_principal_coordinates():
    """Algorithm B: MDAV, unchanged, on the centred records times the dominant eigenvectors
    (an axis's sign does not change any distance)."""
    X = _correlated(350, 6, 11)
    _, vectors = np.linalg.eigh(np.cov(X, rowvar=False, bias=True))
    for components in (1, 2, 4):
        axes = vectors[:, ::-1][:, :components]
        projected = (X - X.mean(axis=0)) @ axes
        assert np.array_equal(pca_mdav(X, 6, components=components), mdav(projected, 6))


@pytest.mark.parametrize("n,m,k,size", [(600, 5, 5, 100), (457, 13, 3, 60), (300, 3, 10, 40)])
@pytest.mark.parametrize("energy", [0.1, 0.3])
def test_no_distal_macrocell_is_pca_mdav(n, m, k, size, energy):
    X = _correlated(n, m, n + k)
    assert np.array_equal(
        pca_mdav_proximal(X, k, macrocell_size=size, distal_cells=0, energy=energy),
        pca_mdav(X, k, energy=energy))
    assert np.array_equal(
        pca_mdav_proximal(X, k, macrocell_size=size, distal_cells=0, components=2),
        pca_mdav(X, k, components=2))


@pytest.mark.parametrize("n,m,k,size", [(600, 5, 5, 100), (457, 13, 3, 60), (300, 3, 10, 40),
                                        (90, 2, 4, 90)])
def test_every_macrocell_distal_is_mdav(n, m, k, size):
    X = _correlated(n, m, n + 2 * k)
    assert np.array_equal(
        pca_mdav_proximal(X, k, macrocell_size=size, distal_cells=n // size), mdav(X, k))


def test_pooled_scope_is_algorithm_c():
    """Distal = the C_D macrocells of largest SSE; proximal records get PCA on their own
    spectrum and one MDAV, labelled first; distal records one plain MDAV, labelled after."""
    n, k, size, distal = 800, 4, 100, 3
    X = _correlated(n, 6, 5)
    X[:40] *= 4.0  # a sparse region, so the macrocells differ in distortion
    macro = mdav(X, size)
    sse = np.array([np.sum((X[macro == c] - X[macro == c].mean(axis=0)) ** 2)
                    for c in range(n // size)])
    is_distal = np.isin(macro, np.argsort(-sse, kind="stable")[:distal])
    prox, far = np.flatnonzero(~is_distal), np.flatnonzero(is_distal)

    cells = pca_mdav_proximal(X, k, macrocell_size=size, distal_cells=distal, energy=0.2)
    prox_labels = mdav(fit_principal_components(X[prox], energy=0.2).project(X[prox]), k)
    assert np.array_equal(cells[prox], prox_labels)
    assert np.array_equal(cells[far], mdav(X[far], k) + prox_labels.max() + 1)


def test_macrocells_are_ranked_by_decreasing_sse():
    X = _correlated(500, 4, 8)
    X[:25] *= 5.0
    macro = mdav(X, 50)
    sse = np.array([np.sum((X[macro == c] - X[macro == c].mean(axis=0)) ** 2)
                    for c in range(10)])
    ranked = rank_macrocells(X, macro)
    assert sorted(ranked.tolist()) == list(range(10))
    assert np.all(np.diff(sse[ranked]) <= 1e-9)


@pytest.mark.parametrize("distal", [0, 2, 6])
def test_macrocell_scope_keeps_cells_inside_macrocells(distal):
    n, k, size = 600, 5, 100
    X = _correlated(n, 5, 21)
    macro = mdav(X, size)
    cells = pca_mdav_proximal(X, k, macrocell_size=size, distal_cells=distal, scope="macrocell")
    assert np.bincount(cells).min() >= k
    for c in range(cells.max() + 1):
        assert len(np.unique(macro[cells == c])) == 1
    # labels run macrocell by macrocell, in macrocell order
    first_label = [cells[macro == c].min() for c in range(n // size)]
    assert first_label == sorted(first_label)


def test_macrocell_scope_with_every_macrocell_distal_is_mdav_per_macrocell():
    n, k, size = 500, 4, 100
    X = _correlated(n, 4, 22)
    macro = mdav(X, size)
    cells = pca_mdav_proximal(X, k, macrocell_size=size, distal_cells=n // size,
                              scope="macrocell")
    offset = 0
    for c in range(n // size):
        rows = np.flatnonzero(macro == c)
        expected = mdav(X[rows], k)
        assert np.array_equal(cells[rows], expected + offset)
        offset += expected.max() + 1


@pytest.mark.parametrize("components,m", [(6, 13), (13, 13), (1, 10), (3, 5)])
@pytest.mark.parametrize("seed", range(3))
def test_automatic_distal_count_minimises_the_cost_model(components, m, seed):
    """The pooled split's modelled cost (1 - nu)^2 m_tilde + nu^2 m over all C_D (ties: the
    smaller C_D)."""
    sizes = np.random.default_rng(seed).integers(50, 150, 40)
    chosen = auto_distal_cells(sizes, components, m)
    nu = np.concatenate([[0], np.cumsum(sizes)]) / sizes.sum()
    cost = (1 - nu) ** 2 * components + nu**2 * m
    assert chosen == int(np.argmin(cost))


def test_default_distal_count_is_the_automatic_rule():
    X = _correlated(700, 8, 4)
    size, k = 70, 5
    macro = mdav(X, size)
    ranked_sizes = np.bincount(macro)[rank_macrocells(X, macro)]
    auto = auto_distal_cells(ranked_sizes, fit_principal_components(X).n_components, 8)
    assert 0 < auto < 10
    assert np.array_equal(pca_mdav_proximal(X, k, macrocell_size=size),
                          pca_mdav_proximal(X, k, macrocell_size=size, distal_cells=auto))


def test_runs_through_the_registry():
    X = _correlated(120, 4, 9)
    assert np.array_equal(run_engine("pca_mdav", X, 4, energy=0.2), pca_mdav(X, 4, energy=0.2))
    assert np.array_equal(run_engine("pca_mdav_proximal", X, 4, macrocell_size=30),
                          pca_mdav_proximal(X, 4, macrocell_size=30))


@pytest.mark.parametrize("name", ["pca_mdav", "pca_mdav_proximal"])
@pytest.mark.parametrize(
    "params,match",
    [
        ({"energy": 1.0}, r"energy is epsilon\^2.*at least 0 and below 1.*got 1.0"),
        ({"energy": -0.1}, r"at least 0 and below 1.*got -0.1"),
        ({"energy": float("nan")}, "at least 0 and below 1"),
        ({"energy": "0.1"}, "energy must be a number"),
        ({"energy": True}, "energy must be a number"),
        ({"energy": 0.1, "components": 2}, "either energy .* or components, not both"),
        ({"components": 0}, "components must be from 1 to the number of quasi-identifiers, 3"),
        ({"components": 4}, "components must be from 1 .* 3; got 4"),
        ({"components": 2.0}, "components must be an integer"),
        ({"bogus": 1}, "has no parameter bogus"),
    ],
)
def test_bad_energy_and_components_are_refused_with_a_clear_error(name, params, match):
    X = _correlated(40, 3, 1)
    with pytest.raises(ParameterError, match=match):
        run_engine(name, X, 3, **params)


@pytest.mark.parametrize(
    "params,match",
    [
        ({"macrocell_size": 2}, r"macrocell_size \(K\) must be at least k = 3.*got 2"),
        ({"macrocell_size": 10.0}, "macrocell_size must be an integer"),
        ({"macrocell_size": 10, "distal_cells": -1},
         r"distal_cells must be an integer from 0 to the number of macrocells, 6 here "
         r"\(60 records, macrocell_size 10\); got -1"),
        ({"macrocell_size": 10, "distal_cells": 7}, "from 0 to the number of macrocells, 6"),
        ({"macrocell_size": 10, "distal_cells": 2.0}, "distal_cells must be an integer"),
        ({"macrocell_size": 10, "distal_cells": True}, "distal_cells must be an integer"),
        ({"distal_cells": 2}, "number of macrocells, 1 here"),
        ({"scope": "global"}, "scope must be one of pooled, macrocell; got 'global'"),
    ],
)
def test_bad_macrocell_parameters_are_refused_with_a_clear_error(params, match):
    X = _correlated(60, 3, 2)
    with pytest.raises(ParameterError, match=match):
        run_engine("pca_mdav_proximal", X, 3, **params)
