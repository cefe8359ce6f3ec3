"""A plain, slow, obviously correct MDAV-generic: the oracle the fast engine must equal.

It follows the pseudo-code of specification section 5 line by line, with no pruning and no compiled
code. Distances are squared Euclidean, summed over columns in order; the centroid is the
correctly rounded mean (``math.fsum``); ties go to the lowest row index; the record ``r`` (or
``s``) is always in its own cell.
"""

from __future__ import annotations

import math

import numpy as np


def _sqdist(X: np.ndarray, rows: np.ndarray, q: np.ndarray) -> np.ndarray:
    d = np.zeros(len(rows))
    for j in range(X.shape[1]):
        d += (X[rows, j] - q[j]) ** 2
    return d


def _farthest(X: np.ndarray, R: np.ndarray, q: np.ndarray) -> int:
    """Record of R farthest from q (R is sorted, so argmax picks the lowest index on ties)."""
    return int(R[np.argmax(_sqdist(X, R, q))])


def _cell(X: np.ndarray, R: np.ndarray, r: int, k: int) -> list[int]:
    """r and its k-1 nearest records in R (ties: lowest index)."""
    others = R[R != r]
    d = _sqdist(X, others, X[r])
    order = np.lexsort((others, d))
    return [r, *others[order[: k - 1]].tolist()]


def reference_mdav(X: np.ndarray, k: int) -> np.ndarray:
    n = X.shape[0]
    labels = np.full(n, -1, dtype=np.int64)
    remaining = np.ones(n, dtype=bool)
    label = 0

    def R() -> np.ndarray:
        return np.flatnonzero(remaining)

    def take(cell: list[int]) -> None:
        nonlocal label
        labels[cell] = label
        remaining[cell] = False
        label += 1

    def centroid() -> np.ndarray:
        rows = R()
        return np.array([math.fsum(X[rows, j]) / len(rows) for j in range(X.shape[1])])

    while remaining.sum() >= 3 * k:
        r = _farthest(X, R(), centroid())
        take(_cell(X, R(), r, k))
        s = _farthest(X, R(), X[r])
        take(_cell(X, R(), s, k))
    if remaining.sum() >= 2 * k:
        r = _farthest(X, R(), centroid())
        take(_cell(X, R(), r, k))
    if remaining.any():
        take(R().tolist())
    return labels
