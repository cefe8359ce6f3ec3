"""Compiled kernels of MDAV* and ONA* (``ona.py``); nothing here is public.

Cells are kept as label arrays plus per-cell sums, sums of squares and sizes, so that a cell's
centroid and cost (SSE) are O(m) to read and every move is priced exactly with the standard
identities (adding y to a cell of n with mean mu costs n/(n+1) |y - mu|^2, removing it saves
n/(n-1) |y - mu|^2, merging A and B costs |A||B|/(|A|+|B|) |mu_A - mu_B|^2 more).
Ties go to the lowest index everywhere.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from streamanon.engines._mdav_kernels import mdav_labels

_TOL = 1e-12  # a move must gain more than this (relative) to count: no cycling on ties


@nb.njit(cache=True)
def _sq(a, b):
    s = 0.0
    for t in range(a.shape[0]):
        d = a[t] - b[t]
        s += d * d
    return s


@nb.njit(cache=True)
def _sse(X, idx, count):
    """Cost (SSE) of the records ``idx[:count]``."""
    m = X.shape[1]
    mu = np.zeros(m)
    for u in range(count):
        mu += X[idx[u]]
    mu /= count
    s = 0.0
    for u in range(count):
        s += _sq(X[idx[u]], mu)
    return s


@nb.njit(cache=True)
def _nearest(d, idx, count, want, exclude, out):
    """The ``want`` entries of ``idx[:count]`` with the smallest ``d`` (ties: lowest index),
    skipping ``exclude``; written to ``out``."""
    taken = 0
    used = np.zeros(count, np.bool_)
    while taken < want:
        best = np.inf
        best_u = -1
        for u in range(count):
            if used[u] or idx[u] == exclude[0] or idx[u] == exclude[1]:
                continue
            if d[idx[u]] < best or (d[idx[u]] == best and idx[u] < idx[best_u]):
                best = d[idx[u]]
                best_u = u
        used[best_u] = True
        out[taken] = idx[best_u]
        taken += 1


@nb.njit(cache=True)
def _nearest_cell(x, sums, sizes, alive, n_cells, skip):
    """The live cell (not ``skip``) with the nearest centroid; ties: the lowest id."""
    best = np.inf
    best_c = -1
    for c in range(n_cells):
        if not alive[c] or c == skip:
            continue
        dc = _sq(x, sums[c] / sizes[c])
        if dc < best:
            best = dc
            best_c = c
    return best_c, best


@nb.njit(cache=True, nogil=True)
def mdav_star_labels(X, k):
    """MDAV* (paper 004, Algorithm 1; see ``ona.py`` for the reading of its damaged lines)."""
    n, m = X.shape
    labels = np.full(n, -1, np.int64)
    centre = np.zeros(m)
    for i in range(n):
        centre += X[i]
    centre /= n
    far = np.empty(n)
    for i in range(n):
        far[i] = _sq(X[i], centre)
    order = np.argsort(-far, kind="mergesort")  # farthest first; ties: lowest index
    sums = np.zeros((n // k + 1, m))
    sizes = np.zeros(n // k + 1, np.int64)
    alive = np.ones(n // k + 1, np.bool_)  # MDAV* never dissolves a cell
    n_cells = 0
    unassigned = np.arange(n)
    n_un = n
    d = np.empty(n)
    d2 = np.empty(n)
    n1 = np.empty(k, np.int64)
    n2 = np.empty(k, np.int64)
    ptr = 0
    while n_un >= k:
        while labels[order[ptr]] >= 0:
            ptr += 1
        xb = order[ptr]
        for u in range(n_un):
            d[unassigned[u]] = _sq(X[unassigned[u]], X[xb])
        n1[0] = xb
        _nearest(d, unassigned, n_un, k - 1, np.array([xb, -1]), n1[1:])
        new_cell = True
        if n_cells > 0 and n_un - 1 >= k:
            v = n1[1] if k > 1 else -1
            if v < 0:  # k = 1: the nearest other record
                _nearest(d, unassigned, n_un, 1, np.array([xb, -1]), n2[:1])
                v = n2[0]
            for u in range(n_un):
                d2[unassigned[u]] = _sq(X[unassigned[u]], X[v])
            n2[0] = v
            _nearest(d2, unassigned, n_un, k - 1, np.array([xb, v]), n2[1:])
            clos, best = _nearest_cell(X[xb], sums, sizes, alive, n_cells, -1)
            cost1 = _sse(X, n1, k) / k
            cost2 = (sizes[clos] / (sizes[clos] + 1.0) * best + _sse(X, n2, k)) / (k + 1.0)
            new_cell = cost1 <= cost2
            if not new_cell:
                labels[xb] = clos
                sums[clos] += X[xb]
                sizes[clos] += 1
        if new_cell:
            for u in range(k):
                labels[n1[u]] = n_cells
                sums[n_cells] += X[n1[u]]
            sizes[n_cells] = k
            n_cells += 1
        w = 0
        for u in range(n_un):
            if labels[unassigned[u]] < 0:
                unassigned[w] = unassigned[u]
                w += 1
        n_un = w
    for u in range(n_un):  # fewer than k left: each joins its closest cell
        x = unassigned[u]
        clos, _best = _nearest_cell(X[x], sums, sizes, alive, n_cells, -1)
        labels[x] = clos
        sums[clos] += X[x]
        sizes[clos] += 1
    return labels


# -- ONA* -----------------------------------------------------------------------------------------


@nb.njit(cache=True)
def _members(labels, c, out):
    count = 0
    for i in range(labels.shape[0]):
        if labels[i] == c:
            out[count] = i
            count += 1
    return count


@nb.njit(cache=True)
def _split(X, labels, c, k, sums, sqs, sizes, alive, n_cells, buf, use_star):
    """Split cell ``c`` (of 2k or more) with MDAV* (or MDAV); the first part keeps id ``c``."""
    count = _members(labels, c, buf)
    sub = np.empty((count, X.shape[1]))
    for u in range(count):
        sub[u] = X[buf[u]]
    if use_star:
        part = mdav_star_labels(sub, k)
    else:
        part = mdav_labels(sub, k, False, 1, 64, 1 << 62, np.zeros(5, np.int64),
                           np.zeros(2, np.int64))
    n_parts = part.max() + 1
    ids = np.empty(n_parts, np.int64)
    ids[0] = c
    free = 0
    for p in range(1, n_parts):  # reuse the ids of dissolved cells before new ones
        while free < n_cells and (alive[free] or free == c):
            free += 1
        if free < n_cells:
            ids[p] = free
            free += 1
        else:
            ids[p] = n_cells
            n_cells += 1
    for p in range(n_parts):
        sums[ids[p]] = 0.0
        sqs[ids[p]] = 0.0
        sizes[ids[p]] = 0
        alive[ids[p]] = True
    for u in range(count):
        cid = ids[part[u]]
        labels[buf[u]] = cid
        sums[cid] += X[buf[u]]
        sqs[cid] += _sq(X[buf[u]], np.zeros(X.shape[1]))
        sizes[cid] += 1
    return n_cells


@nb.njit(cache=True)
def _cost(sums, sqs, sizes, c):
    s = 0.0
    for t in range(sums.shape[1]):
        s += sums[c, t] * sums[c, t]
    return max(sqs[c] - s / sizes[c], 0.0)


@nb.njit(cache=True)
def _move(X, labels, i, src, dst, sums, sqs, sizes):
    labels[i] = dst
    norm = _sq(X[i], np.zeros(X.shape[1]))
    sums[src] -= X[i]
    sqs[src] -= norm
    sizes[src] -= 1
    sums[dst] += X[i]
    sqs[dst] += norm
    sizes[dst] += 1


@nb.njit(cache=True, nogil=True)
def ona_star_labels(X, k, max_rounds, stats):
    """ONA* (paper 004, Algorithm 3). ``stats``: rounds run, dissolves, moves, splits."""
    n, m = X.shape
    labels = mdav_star_labels(X, k)
    cap = n // k + 2
    sums = np.zeros((cap, m))
    sqs = np.zeros(cap)
    sizes = np.zeros(cap, np.int64)
    alive = np.zeros(cap, np.bool_)
    n_cells = labels.max() + 1
    for i in range(n):
        c = labels[i]
        sums[c] += X[i]
        sqs[c] += _sq(X[i], np.zeros(m))
        sizes[c] += 1
        alive[c] = True
    buf = np.empty(n, np.int64)
    for c in range(labels.max() + 1):  # MDAV* may leave large cells: MDAV splits them
        if sizes[c] >= 2 * k:
            n_cells = _split(X, labels, c, k, sums, sqs, sizes, alive, n_cells, buf, False)
            stats[3] += 1
    target = np.empty(n, np.int64)
    gsum = np.zeros((cap, m))
    gsq = np.zeros(cap)
    gsize = np.zeros(cap, np.int64)
    for _ in range(max_rounds):
        stats[0] += 1
        changed = False
        # Phase 1: dissolve cells of exactly k when the cost strictly drops
        ci = 0
        while ci < n_cells:
            if alive[ci] and sizes[ci] == k:
                count = _members(labels, ci, buf)
                for u in range(count):
                    target[u], _d = _nearest_cell(X[buf[u]], sums, sizes, alive, n_cells, ci)
                for u in range(count):
                    t = target[u]
                    gsum[t] = 0.0
                    gsq[t] = 0.0
                    gsize[t] = 0
                for u in range(count):
                    t = target[u]
                    gsum[t] += X[buf[u]]
                    gsq[t] += _sq(X[buf[u]], np.zeros(m))
                    gsize[t] += 1
                added = 0.0
                for u in range(count):
                    t = target[u]
                    if gsize[t] <= 0:
                        continue  # this receiver's group is already counted
                    g_cost = _cost(gsum, gsq, gsize, t)
                    mu_l = sums[t] / sizes[t]
                    mu_g = gsum[t] / gsize[t]
                    added += g_cost + sizes[t] * gsize[t] / (sizes[t] + gsize[t]) * _sq(mu_l, mu_g)
                    gsize[t] = -gsize[t]  # mark counted, keep the size
                for u in range(count):
                    gsize[target[u]] = abs(gsize[target[u]])
                own = _cost(sums, sqs, sizes, ci)
                if own - added > _TOL * (own + 1.0):
                    for u in range(count):
                        _move(X, labels, buf[u], ci, target[u], sums, sqs, sizes)
                    alive[ci] = False
                    stats[1] += 1
                    changed = True
                    for u in range(count):
                        t = target[u]
                        if alive[t] and sizes[t] >= 2 * k:
                            n_cells = _split(X, labels, t, k, sums, sqs, sizes, alive, n_cells,
                                             buf, True)
                            stats[3] += 1
            ci += 1
        # Phase 2: move the best single record out of cells larger than k
        ci = 0
        while ci < n_cells:
            while alive[ci] and sizes[ci] > k:
                count = _members(labels, ci, buf)
                ni = sizes[ci]
                mu_i = sums[ci] / ni
                best_gain = -np.inf
                best_s = -1
                best_t = -1
                for u in range(count):
                    s = buf[u]
                    t, dt = _nearest_cell(X[s], sums, sizes, alive, n_cells, ci)
                    if t < 0:
                        continue
                    gain = ni / (ni - 1.0) * _sq(X[s], mu_i) - sizes[t] / (sizes[t] + 1.0) * dt
                    if gain > best_gain:
                        best_gain = gain
                        best_s = s
                        best_t = t
                scale = _cost(sums, sqs, sizes, ci) + 1.0
                if best_s < 0 or best_gain <= _TOL * scale:
                    break
                _move(X, labels, best_s, ci, best_t, sums, sqs, sizes)
                stats[2] += 1
                changed = True
                if sizes[best_t] >= 2 * k:
                    n_cells = _split(X, labels, best_t, k, sums, sqs, sizes, alive, n_cells,
                                     buf, True)
                    stats[3] += 1
            ci += 1
        if not changed:
            break
    # labels 0..c-1 in order of cell id
    new_id = np.full(n_cells, -1, np.int64)
    nxt = 0
    for c in range(n_cells):
        if alive[c] and sizes[c] > 0:
            new_id[c] = nxt
            nxt += 1
    out = np.empty(n, np.int64)
    for i in range(n):
        out[i] = new_id[labels[i]]
    return out
