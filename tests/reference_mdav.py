"""A plain, slow, obviously correct MDAV-generic: the oracle the fast engine must equal.

It follows the pseudo-code of SPEC section 5 line by line. Distances are squared Euclidean,
summed over columns in order; the centroid is the correctly rounded mean (``math.fsum``); ties go
to the lowest row index.
"""

from __future__ import annotations

import math

import numpy as np


def _sqdist(X: np.ndarray, rows: np.ndarray, q: np.ndarray) -> np.ndarray:
    d = np.zeros(len(rows))
    for j in range(X.shape[1]):
        d += (X[rows, j] - q[j]) ** 2
    return d


def _farthest(X: np.ndarray, R: list[int], q: np.ndarray) -> int:
    rows = np.array(R)
    d = _sqdist(X, rows, q)
    best = d.max()
    return int(min(rows[d == best]))


def _cell(X: np.ndarray, R: list[int], r: int, k: int) -> list[int]:
    """r and its k-1 nearest records in R (ties: lowest index)."""
    others = np.array([i for i in R if i != r], dtype=np.int64)
    d = _sqdist(X, others, X[r])
    order = np.lexsort((others, d))
    return [r] + [int(i) for i in others[order[: k - 1]]]


def reference_mdav(X: np.ndarray, k: int) -> np.ndarray:
    n = X.shape[0]
    labels = np.full(n, -1, dtype=np.int64)
    R = list(range(n))
    label = 0

    def take(cell: list[int]) -> None:
        nonlocal label
        for i in cell:
            labels[i] = label
            R.remove(i)
        label += 1

    def centroid() -> np.ndarray:
        return np.array([math.fsum(X[R, j]) / len(R) for j in range(X.shape[1])])

    while len(R) >= 3 * k:
        r = _farthest(X, R, centroid())
        take(_cell(X, R, r, k))
        s = _farthest(X, R, X[r])
        take(_cell(X, R, s, k))
    if len(R) >= 2 * k:
        r = _farthest(X, R, centroid())
        take(_cell(X, R, r, k))
    if R:
        take(list(R))
    return labels
