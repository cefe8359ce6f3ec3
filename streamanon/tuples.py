"""The distinct rows of a matrix, found by hashing: what the distinct-tuple microaggregation
(:mod:`streamanon.engines.distinct`), the embedding of repeated survey keys
(:func:`streamanon.mixed.embed`) and the incremental stages' identical cells
(:func:`streamanon.incremental.base.identical_cells`) share.

Pure: arrays in, arrays out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_MIX = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))
_PRIME = np.uint64(0x100000001B3)


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
    """A 64-bit hash of each row's bytes (splitmix64 of each value, combined FNV-style)."""
    bits = np.ascontiguousarray(X + 0.0).view(np.uint64)  # + 0.0: -0.0 is 0.0
    h = np.zeros(X.shape[0], dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(X.shape[1]):
            z = bits[:, j] + np.uint64(0x9E3779B97F4A7C15) * np.uint64(j + 1)
            z = (z ^ (z >> np.uint64(30))) * _MIX[0]
            z = (z ^ (z >> np.uint64(27))) * _MIX[1]
            z ^= z >> np.uint64(31)
            h = (h ^ z) * _PRIME
    return h


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


