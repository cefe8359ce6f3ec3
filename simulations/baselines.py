"""Plain reference programs that the benchmarks race against.

``numpy_mdav`` is MDAV-generic written the direct way, as the paper's Matlab implementation
would be: for every cell, full vectorised scans over all remaining records (distances summed
column by column), no pruning, no compiled kernel. Its centroid is ``numpy.mean`` rather than
the correctly rounded mean, so on data with near-ties at the last bit it may (very rarely) pick
a different record; the benchmark reports whether the partitions were identical.
"""

from __future__ import annotations

import numpy as np


def _sqdist(R: np.ndarray, q: np.ndarray) -> np.ndarray:
    d = np.zeros(R.shape[0])
    for j in range(R.shape[1]):
        d += (R[:, j] - q[j]) ** 2
    return d


def _cell(R: np.ndarray, pos: int, k: int) -> np.ndarray:
    """Positions of R[pos] and its k-1 nearest rows (ties: lowest position)."""
    d = _sqdist(R, R[pos])
    d[pos] = -np.inf  # the record itself always belongs to its cell
    if k >= len(d):
        return np.arange(len(d))
    v = np.partition(d, k - 1)[k - 1]
    below = np.flatnonzero(d < v)
    ties = np.flatnonzero(d == v)[: k - len(below)]
    return np.concatenate([below, ties])


def numpy_mdav(X: np.ndarray, k: int) -> np.ndarray:
    """MDAV-generic labels (specification section 5) by brute-force NumPy scans."""
    n = X.shape[0]
    labels = np.full(n, -1, dtype=np.int64)
    R = np.ascontiguousarray(X, dtype=np.float64)
    ids = np.arange(n)
    label = 0

    def take(positions: np.ndarray) -> None:
        nonlocal R, ids, label
        labels[ids[positions]] = label
        label += 1
        keep = np.ones(len(ids), dtype=bool)
        keep[positions] = False
        R, ids = R[keep], ids[keep]

    while len(ids) >= 3 * k:
        r = int(np.argmax(_sqdist(R, R.mean(axis=0))))
        r_row = R[r].copy()
        take(_cell(R, r, k))
        s = int(np.argmax(_sqdist(R, r_row)))
        take(_cell(R, s, k))
    if len(ids) >= 2 * k:
        r = int(np.argmax(_sqdist(R, R.mean(axis=0))))
        take(_cell(R, r, k))
    if len(ids):
        labels[ids] = label
    return labels
