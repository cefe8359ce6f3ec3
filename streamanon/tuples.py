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
    hashes as 0.0, every NaN as one NaN), in one compiled pass over the rows."""
    return _row_hashes(_bits(X))


def _bits(X: np.ndarray) -> np.ndarray:
    """The bits of ``X``'s floats as a C-contiguous, read-only uint64 matrix: one type for
    the kernels whatever the caller's array (a writable and a read-only one would compile
    each kernel twice)."""
    X = np.ascontiguousarray(X, dtype=np.float64)
    bits = X.view(np.uint64).reshape(X.shape)
    bits.flags.writeable = False
    return bits


#: The bits of 0.0 and of numpy's NaN: -0.0 is read as 0.0 and every NaN as this one, so that
#: equal values (NaN: a missing answer, equal to the other missing answers) have equal bits.
_NEGATIVE_ZERO = np.uint64(0x8000000000000000)
_NAN = np.uint64(0x7FF8000000000000)
_EXPONENT = np.uint64(0x7FF0000000000000)
_MANTISSA = np.uint64(0x000FFFFFFFFFFFFF)


@nb.njit(cache=True, nogil=True, inline="always")
def _canonical(z: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    if z == _NEGATIVE_ZERO:
        return np.uint64(0)
    if (z & _EXPONENT) == _EXPONENT and (z & _MANTISSA) != np.uint64(0):
        return _NAN
    return z


@nb.njit(cache=True, nogil=True)
def _row_hashes(bits: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    n, m = bits.shape
    out = np.empty(n, dtype=np.uint64)
    for i in range(n):
        h = np.uint64(0)
        for j in range(m):
            z = _canonical(bits[i, j])
            z = z + np.uint64(0x9E3779B97F4A7C15) * np.uint64(j + 1)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            z = z ^ (z >> np.uint64(31))
            h = (h ^ z) * np.uint64(0x100000001B3)
        out[i] = h
    return out


@nb.njit(cache=True, nogil=True)
def _same_as_first(bits: np.ndarray, first: np.ndarray,
                   inverse: np.ndarray) -> bool:  # pragma: no cover - compiled
    """Whether every row equals its tuple's first row, value by value (as :func:`_canonical`
    reads them), without a copy of the rows."""
    n, m = bits.shape
    for i in range(n):
        f = first[inverse[i]]
        for j in range(m):
            if _canonical(bits[i, j]) != _canonical(bits[f, j]):
                return False
    return True


def collapse(X: np.ndarray) -> Tuples:
    """The distinct rows of ``X`` (n x m floats; NaN is a value of its own, equal to NaN),
    numbered in the order of their hashes.

    The rows are hashed (:func:`row_hashes`), the distinct hashes found in one pass (a hash
    table, not a sort of every row) and numbered in their sorted order; every row is then
    compared with its tuple's first row, and a hash collision (two different rows, one hash)
    falls back to an exact sort of the rows.

    >>> t = collapse(np.array([[1.0, 2.0], [0.0, 1.0], [1.0, 2.0]]))
    >>> t.n_distinct, sorted(t.counts.tolist()), t.inverse[0] == t.inverse[2]
    (2, [1, 2], np.True_)
    """
    import pandas as pd

    X = np.ascontiguousarray(X, dtype=np.float64)
    n = X.shape[0]
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Tuples(empty, empty, empty)
    bits = _bits(X)
    seen, hashes = pd.factorize(row_hashes(X))  # numbered as first seen
    rank = np.empty(len(hashes), dtype=np.int64)
    rank[np.argsort(hashes, kind="stable")] = np.arange(len(hashes))
    inverse = rank[seen]
    # the first row of each hash, in the order first seen: where a new number appears
    newest = np.maximum.accumulate(seen)
    first_seen = np.flatnonzero(np.concatenate([[True], newest[1:] > newest[:-1]]))
    first = np.empty(len(hashes), dtype=np.int64)
    first[rank] = first_seen
    counts = np.bincount(inverse, minlength=len(hashes)).astype(np.int64)
    if not _same_as_first(bits, first, inverse):  # a hash collision: sort the rows exactly
        missing = np.isnan(X)
        exact = np.hstack([np.where(missing, 0.0, X) + 0.0, missing]) if missing.any() else X + 0.0
        _, first, inverse, counts = np.unique(exact, axis=0, return_index=True,
                                              return_inverse=True, return_counts=True)
        return Tuples(inverse.ravel().astype(np.int64), counts.astype(np.int64),
                      first.astype(np.int64))
    return Tuples(inverse, counts, first)


def collapse_codes(C: np.ndarray) -> Tuples:
    """:func:`collapse` of codes where a missing answer is NaN, a value of its own."""
    return collapse(C)


def coarsen(tuples: Tuples, X: np.ndarray) -> Tuples:
    """:func:`collapse` of ``X``, a matrix whose rows are equal wherever the rows ``tuples``
    describes are (``X`` is a function of those rows: the embedding of codes), computed on one
    row per tuple: the same tuples, numbers, first rows and counts as ``collapse(X)``."""
    X = np.asarray(X)
    own = collapse(X[tuples.first])
    inverse = own.inverse[tuples.inverse]
    counts = np.bincount(own.inverse, weights=tuples.counts,
                         minlength=own.n_distinct).astype(np.int64)
    first = np.full(own.n_distinct, X.shape[0], dtype=np.int64)
    np.minimum.at(first, own.inverse, tuples.first)
    return Tuples(inverse, counts, first)
