"""Compiled kernel of the Mondrian family (``mondrian.py``): median cuts of index segments.

The records are never moved: ``perm`` holds their indices and every part is a segment
``perm[lo:hi]``. A part is cut in two by reordering its segment in place (records on the left
side first, each side in its previous order, so the result does not depend on the sort used).

A kernel passes another ``np.int64(0)`` or ``np.bool_(True)``, never a bare ``0`` or ``True``,
and a counter it passes on starts as ``np.int64(0)``: numba would compile the callee once
more for the constant's own type (``streamanon.warmup``, "One signature per kernel").
"""

from __future__ import annotations

import numba as nb
import numpy as np

RULE_RANGE = 0  # MONDRIAN: the column with the widest range
RULE_VARIANCE = 1  # MONDRIAN_V: the column with the largest variance
RULE_VARIANCE_2D = 2  # MONDRIAN_V2D: also (e_j1 +- e_j2) / sqrt(2)


@nb.njit(cache=True)
def _direction(X, perm, lo, hi, rule, mean, cov):
    """Best direction of segment ``perm[lo:hi]`` as ``(j1, j2, sign)``; ``j2 < 0`` for a column.

    Ties go to the first candidate in the order: columns ``0..m-1``, then pairs ``j1 < j2``
    with sign ``+1`` before ``-1``.
    """
    m = X.shape[1]
    s = hi - lo
    if rule == RULE_RANGE:
        best, bj = -1.0, 0
        for j in range(m):
            low, high = np.inf, -np.inf
            for u in range(lo, hi):
                v = X[perm[u], j]
                low = min(low, v)
                high = max(high, v)
            if high - low > best:
                best, bj = high - low, j
        return bj, -1, 1
    for j in range(m):
        acc = 0.0
        for u in range(lo, hi):
            acc += X[perm[u], j]
        mean[j] = acc / s
    if rule == RULE_VARIANCE:
        best, bj = -1.0, 0
        for j in range(m):
            acc = 0.0
            for u in range(lo, hi):
                d = X[perm[u], j] - mean[j]
                acc += d * d
            if acc > best:
                best, bj = acc, j
        return bj, -1, 1
    # covariance (sums of centred products): projected variance of (e_a + o e_b)/sqrt(2) is
    # (C_aa + C_bb) / 2 + o C_ab
    for a in range(m):
        for b in range(a, m):
            cov[a, b] = 0.0
    for u in range(lo, hi):
        i = perm[u]
        for a in range(m):
            da = X[i, a] - mean[a]
            for b in range(a, m):
                cov[a, b] += da * (X[i, b] - mean[b])
    best, b1, b2, bo = -1.0, 0, -1, 1
    for j in range(m):
        if cov[j, j] > best:
            best, b1 = cov[j, j], j
    for a in range(m):
        for b in range(a + 1, m):
            half = 0.5 * (cov[a, a] + cov[b, b])
            if half + cov[a, b] > best:
                best, b1, b2, bo = half + cov[a, b], a, b, 1
            if half - cov[a, b] > best:
                best, b1, b2, bo = half - cov[a, b], a, b, -1
    return b1, b2, bo


@nb.njit(cache=True)
def _cut(X, perm, lo, hi, k, rule, mean, cov, values, tmp):
    """Cut segment ``perm[lo:hi]`` (at least ``2k`` records) in two; returns the split point.

    Records whose projection is at most the median go left. When that leaves fewer than
    ``k`` records on a side (ties at the median), the segment is cut by rank instead: ordered
    by projection, ties by record index, the first ``floor(s / 2)`` go left. Either way both
    sides have at least ``k`` records.
    """
    s = hi - lo
    j1, j2, o = _direction(X, perm, lo, hi, rule, mean, cov)
    for u in range(s):
        i = perm[lo + u]
        v = X[i, j1]
        if j2 >= 0:
            v += o * X[i, j2]
        values[u] = v
    # the median from two order statistics: a selection, O(s), not a sort
    ordered = np.partition(values[:s], s // 2)
    upper = ordered[s // 2]
    lower = upper if s % 2 == 1 else ordered[: s // 2].max()
    median = 0.5 * (lower + upper)
    n_left = 0
    for u in range(s):
        if values[u] <= median:
            n_left += 1
    if n_left >= k and s - n_left >= k:
        a, b = 0, n_left
        for u in range(s):
            if values[u] <= median:
                tmp[a] = perm[lo + u]
                a += 1
            else:
                tmp[b] = perm[lo + u]
                b += 1
        for u in range(s):
            perm[lo + u] = tmp[u]
        return lo + n_left
    order = np.argsort(values[:s], kind="mergesort")  # stable: ties keep the segment order
    for u in range(s):
        tmp[u] = perm[lo + order[u]]
    # the segment order is by record index only at the root; sort each tie run by index
    u = 0
    while u < s:
        w = u + 1
        while w < s and values[order[w]] == values[order[u]]:
            w += 1
        tmp[u:w] = np.sort(tmp[u:w])
        u = w
    for u in range(s):
        perm[lo + u] = tmp[u]
    return lo + s // 2


@nb.njit(cache=True, nogil=True)
def mondrian_parts(X, k, rule, limit):
    """Cut the records into parts of at most ``limit`` records (``limit >= 2k - 1``).

    Returns ``(perm, bounds)``: part ``p`` is ``perm[bounds[p]:bounds[p + 1]]``, parts in
    depth-first order with the left side first. Every part has at least ``k`` records when
    ``n >= k``.
    """
    n, m = X.shape
    perm = np.arange(n)
    mean = np.empty(m)
    cov = np.empty((m, m)) if rule == RULE_VARIANCE_2D else np.empty((1, 1))
    values = np.empty(n)
    tmp = np.empty(n, np.int64)
    # segments on the stack are disjoint with at least k records each
    stack = np.empty((n // max(k, 1) + 2, 2), np.int64)
    stack[0, 0], stack[0, 1] = 0, n
    top = 1
    bounds = np.empty(n // max(k, 1) + 2, np.int64)
    n_parts = 0
    bounds[0] = 0
    while top > 0:
        top -= 1
        lo, hi = stack[top, 0], stack[top, 1]
        if hi - lo <= limit or hi - lo < 2 * k:
            n_parts += 1
            bounds[n_parts] = hi
            continue
        mid = _cut(X, perm, lo, hi, k, rule, mean, cov, values, tmp)
        stack[top, 0], stack[top, 1] = mid, hi  # right side below, left popped first
        stack[top + 1, 0], stack[top + 1, 1] = lo, mid
        top += 2
    return perm, bounds[: n_parts + 1].copy()
