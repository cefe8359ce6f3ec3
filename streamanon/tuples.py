"""The distinct rows of a matrix, found by hashing: what the distinct-tuple microaggregation
(:mod:`streamanon.engines.distinct`), the embedding of repeated survey keys
(:func:`streamanon.mixed.embed`), the incremental stages' identical cells
(:func:`streamanon.incremental.base.identical_cells`) and the k-anonymity gate
(:func:`streamanon.metrics.check_k_anonymity`) share.

Pure: arrays in, arrays out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np


@dataclass(frozen=True)
class Tuples:
    """The distinct rows of a matrix: ``inverse`` (n: each row's tuple), ``counts`` (T: the
    respondents of each tuple) and ``first`` (T: each tuple's first row)."""

    inverse: np.ndarray
    counts: np.ndarray
    first: np.ndarray

    @property
    def n_distinct(self) -> int:
        return len(self.counts)

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The rows grouped by tuple (``order``) and where each tuple's rows start in it."""
        order = np.argsort(self.inverse, kind="stable")
        starts = np.concatenate([[0], np.cumsum(self.counts)[:-1]])
        return order, starts


def row_hashes(X: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each row's bytes (splitmix64 of each value, combined FNV-style; -0.0
    hashes as 0.0), in one compiled pass over the rows."""
    X = np.ascontiguousarray(X, dtype=np.float64)
    return _row_hashes(X.view(np.uint64).reshape(X.shape))


@nb.njit(cache=True, nogil=True)
def _row_hashes(bits: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    n, m = bits.shape
    out = np.empty(n, dtype=np.uint64)
    negative_zero = np.uint64(0x8000000000000000)
    for i in range(n):
        h = np.uint64(0)
        for j in range(m):
            z = bits[i, j]
            if z == negative_zero:
                z = np.uint64(0)
            z = z + np.uint64(0x9E3779B97F4A7C15) * np.uint64(j + 1)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            z = z ^ (z >> np.uint64(31))
            h = (h ^ z) * np.uint64(0x100000001B3)
        out[i] = h
    return out


def collapse(X: np.ndarray) -> Tuples:
    """The distinct rows of ``X`` (finite, n x m), numbered in the order of their hashes.

    >>> t = collapse(np.array([[1.0, 2.0], [0.0, 1.0], [1.0, 2.0]]))
    >>> t.n_distinct, sorted(t.counts.tolist()), t.inverse[0] == t.inverse[2]
    (2, [1, 2], np.True_)
    """
    X = np.asarray(X, dtype=np.float64)
    _, first, inverse, counts = np.unique(row_hashes(X), return_index=True,
                                          return_inverse=True, return_counts=True)
    inverse = inverse.ravel()
    if not np.array_equal(X, X[first[inverse]]):  # a hash collision: sort the rows exactly
        _, first, inverse, counts = np.unique(X + 0.0, axis=0, return_index=True,
                                              return_inverse=True, return_counts=True)
        inverse = inverse.ravel()
    return Tuples(inverse.astype(np.int64), counts.astype(np.int64), first.astype(np.int64))




def collapse_codes(C: np.ndarray) -> Tuples:
    """:func:`collapse` of codes where a missing answer is NaN, a value of its own (NaN is
    never equal to itself, so each value's missingness is hashed beside it)."""
    C = np.asarray(C, dtype=np.float64)
    missing = np.isnan(C)
    return collapse(np.hstack([np.where(missing, 0.0, C), missing]))
