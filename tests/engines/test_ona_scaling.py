"""The indexed MDAV* and ONA* kernels give the exhaustive reference's labels, bit for bit; the
restricted ONA* search (``candidates`` > 0) is a valid, deterministic local search that becomes
the exhaustive one when every cell is a candidate.

The reference scans every remaining record and every cell at each step; the exact indexed
kernels prune with exact bounds only, so the partitions must be identical, not merely close.
The restricted search may miss moves, so its IL is measured (``simulations/bench_ona.py``),
not asserted equal."""

from __future__ import annotations

import itertools

import numba
import numpy as np
import pytest

from simulations.reference_kernels import ona_star_labels_exhaustive
from streamanon.engines._local_search_kernels import (
    mdav_star_labels,
    mdav_star_labels_exhaustive,
    ona_star_labels,
)
from streamanon.engines.ona import EXACT_CELLS, RESTRICTED_CANDIDATES, default_candidates, ona_star
from streamanon.errors import ParameterError
from streamanon.metrics import information_loss

# (n, m, k, rounded to one decimal: many exact ties)
SHAPES = [(400, 2, 3, False), (700, 5, 5, False), (900, 15, 10, False), (600, 3, 4, True),
          (1500, 8, 7, False), (350, 1, 2, True), (1200, 4, 6, False)]


def data(n: int, m: int, seed: int, ties: bool) -> np.ndarray:
    X = np.random.default_rng(seed).standard_normal((n, m))
    return np.round(X, 1) if ties else X


@pytest.mark.parametrize(("seed", "shape"), list(enumerate(SHAPES)))
def test_indexed_mdav_star_equals_the_exhaustive_one(seed, shape):
    n, m, k, ties = shape
    X = data(n, m, seed, ties)
    assert np.array_equal(mdav_star_labels(X, k), mdav_star_labels_exhaustive(X, k))


@pytest.mark.heavy  # seconds of computation: make test runs it, make check leaves it out
@pytest.mark.parametrize(("seed", "shape"), list(enumerate(SHAPES)))
def test_indexed_ona_star_equals_the_exhaustive_one(seed, shape):
    n, m, k, ties = shape
    X = data(n, m, 100 + seed, ties)
    fast = np.zeros(6, np.int64)
    slow = np.zeros(4, np.int64)
    assert np.array_equal(ona_star_labels(X, k, 30, fast, 0),
                          ona_star_labels_exhaustive(X, k, 30, slow))
    assert np.array_equal(fast[:4], slow)  # same rounds, dissolves, moves and splits


def test_every_query_is_answered_from_the_cache_or_a_scan():
    X = data(1000, 6, 7, False)
    stats = np.zeros(6, np.int64)
    ona_star_labels(X, 5, 30, stats, 0)
    assert stats[4] > 0 and stats[5] > 0  # both paths ran (and agreed with the reference above)


@pytest.mark.parametrize("k", [2, 5, 10])
def test_every_cell_has_at_least_k(k):
    labels = ona_star(data(2000, 15, k, False), k)
    sizes = np.bincount(labels)
    assert sizes.min() >= k and sizes.max() < 2 * k
    assert np.array_equal(np.unique(labels), np.arange(sizes.size))


def test_ona_star_is_deterministic():
    X = data(1500, 15, 3, False)
    assert np.array_equal(ona_star(X, 10), ona_star(X, 10))


def test_max_rounds_limits_the_local_search_like_the_reference():
    X = data(800, 4, 9, False)
    for rounds in (0, 1, 2):
        assert np.array_equal(ona_star_labels(X, 4, rounds, np.zeros(4, np.int64), 0),
                              ona_star_labels_exhaustive(X, 4, rounds, np.zeros(4, np.int64)))


# -- the restricted search ------------------------------------------------------------------------


@pytest.mark.parametrize(("seed", "shape"), list(enumerate(SHAPES)))
def test_restricted_search_with_every_cell_a_candidate_is_the_exhaustive_one(seed, shape):
    n, m, k, ties = shape
    X = data(n, m, 200 + seed, ties)
    restricted = np.zeros(4, np.int64)
    slow = np.zeros(4, np.int64)
    assert np.array_equal(ona_star_labels(X, k, 30, restricted, n),  # n >= the number of cells
                          ona_star_labels_exhaustive(X, k, 30, slow))
    assert np.array_equal(restricted, slow)


@pytest.mark.parametrize("candidates", [1, 2, 8, 64])
@pytest.mark.parametrize(("seed", "shape"), list(enumerate(SHAPES[:5])))
def test_restricted_search_keeps_the_invariants_and_improves_on_its_start(seed, shape,
                                                                          candidates):
    n, m, k, ties = shape
    X = data(n, m, 300 + seed, ties)
    labels = ona_star_labels(X, k, 30, np.zeros(4, np.int64), candidates)
    sizes = np.bincount(labels)
    assert sizes.min() >= k and sizes.max() < 2 * k
    assert np.array_equal(np.unique(labels), np.arange(sizes.size))
    start = ona_star_labels(X, k, 0, np.zeros(4, np.int64), candidates)  # post-split MDAV*
    il = information_loss(X, labels)
    assert il <= information_loss(X, start) + 1e-9
    assert il <= information_loss(X, mdav_star_labels(X, k)) + 1e-9


def test_restricted_search_is_deterministic_whatever_the_threads():
    X = data(6000, 15, 11, False)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = ona_star_labels(X, 5, 30, np.zeros(4, np.int64), 16)
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        many = ona_star_labels(X, 5, 30, np.zeros(4, np.int64), 16)
    finally:
        numba.set_num_threads(before)
    assert np.array_equal(one, many)
    assert np.array_equal(many, ona_star_labels(X, 5, 30, np.zeros(4, np.int64), 16))


def test_the_default_is_exact_up_to_exact_cells_then_restricted():
    assert default_candidates(EXACT_CELLS * 10, 10) == 0
    assert default_candidates(EXACT_CELLS * 10 + 10, 10) == RESTRICTED_CANDIDATES
    X = data(900, 15, 12, False)
    assert np.array_equal(ona_star(X, 10), ona_star(X, 10, candidates=0))
    assert np.array_equal(ona_star(X, 10, candidates=8),
                          ona_star_labels(X, 10, 30, np.zeros(4, np.int64), 8))


def test_ona_star_rejects_negative_candidates():
    with pytest.raises(ParameterError, match="candidates"):
        ona_star(data(100, 2, 0, False), 3, candidates=-1)


# -- the local search from another start (start="mdav") -------------------------------------------


@pytest.mark.parametrize("candidates", [0, 8])
@pytest.mark.parametrize(("seed", "shape"), list(enumerate(SHAPES[:5])))
def test_the_search_from_mdav_keeps_the_invariants_and_improves_on_mdav(seed, shape, candidates):
    from streamanon.engines.mdav import mdav

    n, m, k, ties = shape
    X = data(n, m, 400 + seed, ties)
    start = mdav(X, k)
    labels = ona_star(X, k, start="mdav", candidates=candidates)
    sizes = np.bincount(labels)
    assert labels.shape == (n,)
    assert sizes.min() >= k and sizes.max() < 2 * k
    assert np.array_equal(np.unique(labels), np.arange(sizes.size))
    assert information_loss(X, labels) <= information_loss(X, start) + 1e-9
    assert np.array_equal(labels, ona_star(X, k, start="mdav", candidates=candidates))


def test_zero_rounds_from_mdav_is_mdav_and_more_rounds_never_cost_more():
    from streamanon.engines.mdav import mdav

    X = data(3000, 15, 21, False)
    assert np.array_equal(ona_star(X, 10, start="mdav", max_rounds=0), mdav(X, 10))
    ils = [information_loss(X, ona_star(X, 10, start="mdav", max_rounds=r, candidates=16))
           for r in (0, 1, 2, 4, 30)]
    assert all(b <= a + 1e-12 for a, b in itertools.pairwise(ils))
    assert ils[-1] < ils[0]  # the search does move records on Gaussian data


def test_the_mdav_star_start_is_the_paper_ona_star():
    X = data(900, 6, 22, False)
    assert np.array_equal(ona_star(X, 5, start="mdav_star"), ona_star(X, 5))
    assert np.array_equal(ona_star(X, 5), ona_star_labels(X, 5, 30, np.zeros(4, np.int64),
                                                          default_candidates(900, 5)))


def test_an_unknown_start_is_a_parameter_error():
    with pytest.raises(ParameterError, match="start must be one of mdav_star, mdav"):
        ona_star(data(100, 2, 0, False), 3, start="random")
