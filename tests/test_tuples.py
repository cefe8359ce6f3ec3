"""The distinct rows of a matrix (streamanon.tuples): what the collapse must find on codes
with missing answers, signed zeros and hash collisions, and that the tuples of an embedding
found from the codes' tuples are those of the embedding itself."""

from __future__ import annotations

import numpy as np
import pytest

from streamanon import tuples
from streamanon.tuples import coarsen, collapse, collapse_codes


def codes(n: int, m: int, levels: int, seed: int, missing: float = 0.1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    C = rng.integers(0, levels, size=(n, m)).astype(float)
    C[rng.random(C.shape) < missing] = np.nan
    return C


def exact(C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's tuple and the counts by an exact sort, a missing value a value of its own."""
    missing = np.isnan(C)
    _, inverse, counts = np.unique(np.hstack([np.where(missing, 0.0, C) + 0.0, missing]),
                                   axis=0, return_inverse=True, return_counts=True)
    return inverse.ravel(), counts


def same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two labelings group the rows alike."""
    pairs = np.unique(np.stack([a, b]), axis=1)
    return pairs.shape[1] == len(np.unique(a)) == len(np.unique(b))


@pytest.mark.parametrize("seed", range(4))
def test_missing_answers_are_one_value_and_signed_zeros_another(seed):
    C = codes(5_000, 4, 3, seed)
    C[np.random.default_rng(seed).random(C.shape) < 0.05] *= -1  # -0.0 where a code is 0
    t = collapse_codes(C)
    inverse, counts = exact(C)
    assert t.n_distinct == len(counts) and sorted(t.counts) == sorted(counts)
    assert same_partition(t.inverse, inverse)
    assert np.array_equal(t.first, [np.flatnonzero(t.inverse == i)[0]
                                    for i in range(t.n_distinct)])


def test_numbers_follow_the_hashes_as_they_always_have():
    """The tuples are numbered in the order of their hashes (what the distinct-tuple engine's
    labels follow): the numbers of a sort of the hashes, first rows and counts included."""
    X = codes(20_000, 6, 4, 7, missing=0.0)
    _, first, inverse, counts = np.unique(tuples.row_hashes(X), return_index=True,
                                          return_inverse=True, return_counts=True)
    t = collapse(X)
    assert np.array_equal(t.inverse, inverse.ravel())
    assert np.array_equal(t.first, first) and np.array_equal(t.counts, counts)


def test_a_hash_collision_never_merges_two_tuples(monkeypatch):
    C = codes(3_000, 3, 4, 1)
    monkeypatch.setattr(tuples, "row_hashes", lambda X: np.zeros(len(X), np.uint64))
    t = collapse_codes(C)
    inverse, counts = exact(C)
    assert t.n_distinct == len(counts) and same_partition(t.inverse, inverse)


@pytest.mark.parametrize("seed", range(3))
def test_the_tuples_of_an_embedding_found_from_the_codes_are_its_own(seed):
    """An embedding can join two code tuples (a missing answer embedded where a level is):
    ``coarsen`` finds the embedding's tuples, numbers, first rows and counts as a collapse of
    the whole embedding does."""
    C = codes(8_000, 3, 3, seed)
    Z = np.nan_to_num(C, nan=1.0) * 0.5 - 0.5  # a missing answer lands on level 1
    by_codes = coarsen(collapse_codes(C), Z)
    whole = collapse(Z)
    for name in ("inverse", "counts", "first"):
        assert np.array_equal(getattr(by_codes, name), getattr(whole, name)), name
    assert by_codes.n_distinct < collapse_codes(C).n_distinct
