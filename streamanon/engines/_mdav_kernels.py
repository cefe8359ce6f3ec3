"""Compiled kernels for :mod:`streamanon.engines.mdav`.

Nothing here is public. The entry point is :func:`mdav_labels`; the module docstring of
``mdav.py`` explains the algorithm, this one explains how it is made fast while staying exact.

Exactness
---------
Every decision MDAV takes (farthest record from the centroid, farthest record from ``r``, the
``k - 1`` nearest records of ``r`` or ``s``) is taken on float64 squared distances computed as
``sum_j (x_j - q_j)**2`` in column order, ties going to the lowest row index: the same numbers,
bit for bit, that a plain implementation computes. The centroid is the correctly rounded mean,
kept exact under deletions with Shewchuk expansions (what :func:`math.fsum` does), so it too is
bit-identical to ``fsum(column) / count``.

Speed
-----
Exact distances are computed only for a few candidates. Candidates come from two filters that
can never drop the true answer:

* *Quantised screening.* A copy of the data is rounded to a grid of step ``h`` (``uint8``,
  column-major, compacted as records leave). Squared grid distances are small integers, exact in
  int32, computed 8 lanes at a time. If every record lies within ``e_max`` of its grid point,
  the grid distance ``u`` and the true distance ``t`` (both in grid units) differ by at most
  ``2 e_max / h``; a record can be among the true nearest (or the true farthest) only if its grid
  distance is within twice that margin of the screening threshold. The scan reads 1 byte per
  coordinate instead of 8, so the whole data of a 1M x 15 survey sits in the L3 cache.
* *Moving-centroid bounds.* The farthest record from the centroid is found from a list of
  records sorted by their distance to a reference centroid ``c_ref``. By the triangle
  inequality ``|x - c| <= |x - c_ref| + |c - c_ref|``, so the walk down the list stops as soon
  as that upper bound falls below the best exact distance found. The list is rebuilt when the
  centroid has drifted too far for the bound to prune.

When a filter cannot prune (massive ties, e.g. many duplicate records), the kernel falls back to
an exact scan of all remaining records, so the result never depends on the filters.

A kernel passes another ``np.int64(0)`` or ``np.bool_(True)``, never a bare ``0`` or ``True``,
and a counter it passes on starts as ``np.int64(0)``: numba would compile the callee once
more for the constant's own type (``streamanon.warmup``, "One signature per kernel").
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

_BLOCK = 256
_EXPANSION_CAP = 96  # non-overlapping float64 partials never exceed ~40
_REL_SLACK = 1e-9  # covers rounding in the float64 bounds (errors are ~1e-15 relative)
_NO_THRESHOLD = np.int64(1) << 62
# Rebuild the far list once a walk needs this many exact distances: a rebuild costs a full scan,
# a walk step one distance, so long walks are cheaper than frequent rebuilds.
_STALE_WALK = 256


# --------------------------------------------------------------------------------------------
# Exact running sums (Shewchuk 1997; the algorithm behind math.fsum).
# --------------------------------------------------------------------------------------------


@nb.njit(cache=True)
def _expansion_add(partials, count, x):
    """Add ``x`` to the non-overlapping expansion ``partials[:count]``; return the new count."""
    i = 0
    for j in range(count):
        y = partials[j]
        if abs(x) < abs(y):
            x, y = y, x
        hi = x + y
        lo = y - (hi - x)
        if lo != 0.0:
            partials[i] = lo
            i += 1
        x = hi
    partials[i] = x
    return i + 1


@nb.njit(cache=True)
def _expansion_round(partials, count):
    """Correctly rounded value of an expansion (CPython's ``math.fsum`` final step)."""
    if count == 0:
        return 0.0
    n = count - 1
    hi = partials[n]
    lo = 0.0
    while n > 0:
        x = hi
        n -= 1
        y = partials[n]
        hi = x + y
        yr = hi - x
        lo = y - yr
        if lo != 0.0:
            break
    if n > 0 and ((lo < 0.0 and partials[n - 1] < 0.0) or (lo > 0.0 and partials[n - 1] > 0.0)):
        y = lo * 2.0
        x = hi + y
        yr = x - hi
        if y == yr:
            hi = x
    return hi


@nb.njit(cache=True)
def _exact_sums_init(X):
    n, m = X.shape
    partials = np.zeros((m, _EXPANSION_CAP))
    counts = np.zeros(m, np.int64)
    for i in range(n):
        for j in range(m):
            counts[j] = _expansion_add(partials[j], counts[j], X[i, j])
    return partials, counts


@nb.njit(cache=True)
def _exact_sums_remove(partials, counts, row):
    for j in range(row.shape[0]):
        counts[j] = _expansion_add(partials[j], counts[j], -row[j])


@nb.njit(cache=True)
def _exact_mean(partials, counts, n_alive, out):
    for j in range(out.shape[0]):
        out[j] = _expansion_round(partials[j], counts[j]) / n_alive


# --------------------------------------------------------------------------------------------
# Exact distances and exact selections (the reference arithmetic).
# --------------------------------------------------------------------------------------------


@nb.njit(cache=True)
def _sqdist(X, i, q):
    s = 0.0
    for j in range(q.shape[0]):
        d = X[i, j] - q[j]
        s += d * d
    return s


@nb.njit(cache=True)
def _kth_smallest(values, kth):
    """The ``kth`` smallest (0-based) of ``values``, which it reorders (Hoare's selection)."""
    lo = 0
    hi = values.shape[0] - 1
    while lo < hi:
        pivot = values[(lo + hi) // 2]
        i = lo
        j = hi
        while i <= j:
            while values[i] < pivot:
                i += 1
            while values[j] > pivot:
                j -= 1
            if i <= j:
                values[i], values[j] = values[j], values[i]
                i += 1
                j -= 1
        if kth <= j:
            hi = j
        elif kth >= i:
            lo = i
        else:
            break
    return values[kth]


@nb.njit(cache=True)
def _select_nearest(X, cand_idx, n_cand, q, exclude, want, out):
    """The ``want`` candidates nearest to ``q`` (ties: lowest index), skipping ``exclude``.

    ``cand_idx[:n_cand]`` must be in increasing index order and hold at least ``want`` records
    besides ``exclude``. Writes the chosen indices to ``out`` (in no particular order).
    """
    if want == 0:
        return
    d2 = np.empty(n_cand)
    for t in range(n_cand):
        i = cand_idx[t]
        d2[t] = np.inf if i == exclude else _sqdist(X, i, q)
    kth = _kth_smallest(d2.copy(), want - 1)
    c = 0
    for t in range(n_cand):
        if d2[t] < kth:
            out[c] = cand_idx[t]
            c += 1
    for t in range(n_cand):  # ties at the k-th distance: lowest indices first
        if c == want:
            break
        if d2[t] == kth:
            out[c] = cand_idx[t]
            c += 1


@nb.njit(cache=True)
def _select_farthest(X, cand_idx, n_cand, q, removed):
    best = -1.0
    best_i = -1
    for t in range(n_cand):
        i = cand_idx[t]
        if removed[i]:
            continue
        d = _sqdist(X, i, q)
        if d > best or (d == best and i < best_i):
            best = d
            best_i = i
    return best_i


# --------------------------------------------------------------------------------------------
# Quantised screening pass.
# --------------------------------------------------------------------------------------------


@nb.njit(cache=True)
def _heap_push(heap, size, value):
    """Max-heap of the smallest values seen; returns the new size (capacity heap.shape[0])."""
    cap = heap.shape[0]
    if size < cap:
        i = size
        heap[i] = value
        while i > 0:
            p = (i - 1) // 2
            if heap[p] >= heap[i]:
                break
            heap[p], heap[i] = heap[i], heap[p]
            i = p
        return size + 1
    heap[0] = value
    i = 0
    while True:
        left = 2 * i + 1
        if left >= cap:
            break
        big = left
        if left + 1 < cap and heap[left + 1] > heap[left]:
            big = left + 1
        if heap[i] >= heap[big]:
            break
        heap[i], heap[big] = heap[big], heap[i]
        i = big
    return size


@nb.njit(cache=True)
def _near_threshold(kth, margin):
    """Largest grid distance a true nearest record can have, given the k-th smallest ``kth``."""
    return np.int64(math.floor((math.sqrt(kth) + margin) ** 2 * (1.0 + _REL_SLACK))) + 1


@nb.njit(cache=True)
def _far_threshold(far_max, margin):
    """Smallest grid distance the true farthest record can have, given the largest ``far_max``."""
    r = math.sqrt(far_max) - margin
    if r <= 0.0:
        return np.int64(-1)
    return np.int64(math.ceil(r * r * (1.0 - _REL_SLACK))) - 1


@nb.njit(cache=True)
def _grid_sqdist_block(Q, qv, b0, nb_, acc):
    """``acc[i]`` = squared grid distance of position ``b0 + i`` to ``qv``: exact int32.

    Columns go four at a time so that ``acc`` makes one trip through L1 per four columns; the
    loop over records vectorises.
    """
    m = Q.shape[0]
    for i in range(nb_):
        acc[i] = 0
    j = 0
    while j + 4 <= m:
        r0 = Q[j, b0:b0 + nb_]
        r1 = Q[j + 1, b0:b0 + nb_]
        r2 = Q[j + 2, b0:b0 + nb_]
        r3 = Q[j + 3, b0:b0 + nb_]
        q0 = qv[j]
        q1 = qv[j + 1]
        q2 = qv[j + 2]
        q3 = qv[j + 3]
        for i in range(nb_):
            d0 = np.int32(r0[i]) - q0
            d1 = np.int32(r1[i]) - q1
            d2 = np.int32(r2[i]) - q2
            d3 = np.int32(r3[i]) - q3
            acc[i] += (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3)
        j += 4
    while j < m:
        r0 = Q[j, b0:b0 + nb_]
        q0 = qv[j]
        for i in range(nb_):
            d0 = np.int32(r0[i]) - q0
            acc[i] += d0 * d0
        j += 1


_BELOW = np.bool_(True)  # _filter_candidates: keep the values at most the threshold
_ABOVE = np.bool_(False)  # and those at least the threshold


@nb.njit(cache=True)
def _filter_candidates(pos, val, count, thr, below):
    """Drop candidates the tightened threshold has ruled out; return the new count."""
    w = 0
    for c in range(count):
        if (val[c] <= thr) if below else (val[c] >= thr):
            pos[w] = pos[c]
            val[w] = val[c]
            w += 1
    return w


def _screen_py(Q, n_pos, pos_idx, removed, qv, heaps, heap_sizes, near_pos, near_s, n_near,
               far_pos, far_s, n_far, far_max, want_far, margin, overflow):
    """One pass over positions ``[0, n_pos)``: grid distances to ``qv``; per thread, keep the
    k smallest (heap), every record that may be among the true nearest, and (``want_far``) every
    record that may be the true farthest. Overflowing candidate buffers set ``overflow``."""
    n_threads = heaps.shape[0]
    cap = near_pos.shape[1]
    chunk = (n_pos + n_threads - 1) // n_threads
    for t in nb.prange(n_threads):
        lo = t * chunk
        hi = min(n_pos, lo + chunk)
        acc = np.empty(_BLOCK, np.int32)
        heap = heaps[t]
        hsize = np.int64(0)
        near_thr = _NO_THRESHOLD
        fmax = np.int64(-1)
        far_thr = np.int64(-1) if want_far else _NO_THRESHOLD
        nn = np.int64(0)
        nf = np.int64(0)
        full = False
        for b0 in range(lo, hi, _BLOCK):
            nb_ = min(hi, b0 + _BLOCK) - b0
            _grid_sqdist_block(Q, qv, b0, nb_, acc)
            low = acc[0]
            high = acc[0]
            for i in range(nb_):
                low = min(low, acc[i])
                high = max(high, acc[i])
            if low > near_thr and high < far_thr:
                continue
            for i in range(nb_):
                s = np.int64(acc[i])
                near = s <= near_thr
                far = s >= far_thr
                if not (near or far):
                    continue
                p = b0 + i
                if removed[pos_idx[p]]:
                    continue
                if near:
                    if hsize < heap.shape[0] or s < heap[0]:
                        hsize = _heap_push(heap, hsize, s)
                        if hsize == heap.shape[0]:
                            near_thr = _near_threshold(heap[0], margin)
                    if nn == cap:
                        nn = _filter_candidates(near_pos[t], near_s[t], nn, near_thr, _BELOW)
                        if nn > cap // 2:
                            full = True
                            break
                    if s <= near_thr:
                        near_pos[t, nn] = p
                        near_s[t, nn] = s
                        nn += 1
                if far:
                    if s > fmax:
                        fmax = s
                        far_thr = _far_threshold(fmax, margin)
                    if nf == cap:
                        nf = _filter_candidates(far_pos[t], far_s[t], nf, far_thr, _ABOVE)
                        if nf > cap // 2:
                            full = True
                            break
                    far_pos[t, nf] = p
                    far_s[t, nf] = s
                    nf += 1
            if full:
                break
        heap_sizes[t] = hsize
        n_near[t] = nn
        n_far[t] = nf
        far_max[t] = fmax
        overflow[t] = full


_screen_parallel = nb.njit(parallel=True, cache=True)(_screen_py)
_screen_serial = nb.njit(cache=True)(_screen_py)


# --------------------------------------------------------------------------------------------
# Quantisation.
# --------------------------------------------------------------------------------------------


@nb.njit(cache=True)
def _grid_value(x, lo, h):
    v = math.floor((x - lo) / h + 0.5)
    return min(max(v, 0.0), 255.0)


@nb.njit(cache=True)
def _quantise(X):
    """Grid copy ``Q`` (m x n, uint8, column-major) and the screening margin in grid units."""
    n, m = X.shape
    lo = np.empty(m)
    span = 0.0
    for j in range(m):
        a = X[0, j]
        b = X[0, j]
        for i in range(n):
            a = min(a, X[i, j])
            b = max(b, X[i, j])
        lo[j] = a
        span = max(span, b - a)
    h = span / 255.0 if span > 0.0 else 1.0
    Q = np.empty((m, n), np.uint8)
    e_max2 = 0.0
    for i in range(n):
        e2 = 0.0
        for j in range(m):
            v = _grid_value(X[i, j], lo[j], h)
            Q[j, i] = np.uint8(v)
            err = X[i, j] - (lo[j] + h * v)
            e2 += err * err
        e_max2 = max(e_max2, e2)
    # grid and true distances differ by <= 2 e_max / h; comparing two records doubles it
    margin = 4.0 * math.sqrt(e_max2) / h * (1.0 + _REL_SLACK) + _REL_SLACK
    return Q, lo, h, margin


@nb.njit(cache=True)
def _grid_query(X, i, lo, h, out):
    for j in range(out.shape[0]):
        out[j] = np.int32(_grid_value(X[i, j], lo[j], h))


# --------------------------------------------------------------------------------------------
# Exact scans (the fallback, and the whole algorithm when screening is off).
# --------------------------------------------------------------------------------------------


@nb.njit(cache=True)
def _alive_indices(pos_idx, n_pos, removed):
    out = np.empty(n_pos, np.int64)
    c = 0
    for p in range(n_pos):
        i = pos_idx[p]
        if not removed[i]:
            out[c] = i
            c += 1
    return out[:c]


# --------------------------------------------------------------------------------------------
# The farthest record from the moving centroid.
# --------------------------------------------------------------------------------------------


@nb.njit(cache=True)
def _build_far_list(X, alive, c, list_len):
    """Records sorted by decreasing distance to ``c``: the top ``list_len`` (more on ties), and
    the largest distance of a record left out (-inf when none is)."""
    n = alive.shape[0]
    d = np.empty(n)
    for t in range(n):
        d[t] = math.sqrt(_sqdist(X, alive[t], c))
    floor_d = -np.inf
    if n > list_len:
        v = _kth_smallest(d.copy(), n - list_len)
        keep = d >= v
        for t in range(n):
            if not keep[t] and d[t] > floor_d:
                floor_d = d[t]
        sel = alive[keep]
        d = d[keep]
    else:
        sel = alive.copy()
    order = np.argsort(-d)
    return sel[order], d[order], floor_d


@nb.njit(cache=True)
def _walk_far_list(X, c, c_ref, top_idx, top_d, head, floor_d, removed):
    """Exact farthest record from ``c`` using the list built around ``c_ref``.

    Returns (index, records examined, new head); index -1 when the list cannot prove it.
    """
    dd = 0.0
    for j in range(c.shape[0]):
        e = c[j] - c_ref[j]
        dd += e * e
    delta = math.sqrt(dd) * (1.0 + _REL_SLACK) + 1e-300
    n = top_idx.shape[0]
    while head < n and removed[top_idx[head]]:
        head += 1
    best = -1.0
    best_i = -1
    examined = 0
    for t in range(head, n):
        i = top_idx[t]
        if removed[i]:
            continue
        if best_i >= 0 and (top_d[t] + delta) * (1.0 + _REL_SLACK) < math.sqrt(best):
            return best_i, examined, head
        d = _sqdist(X, i, c)
        examined += 1
        if d > best or (d == best and i < best_i):
            best = d
            best_i = i
    if best_i < 0:
        return -1, examined, head
    if floor_d == -np.inf or (floor_d + delta) * (1.0 + _REL_SLACK) < math.sqrt(best):
        return best_i, examined, head
    return -1, examined, head


# --------------------------------------------------------------------------------------------
# MDAV-generic.
# --------------------------------------------------------------------------------------------


@nb.njit(cache=True)
def _compact(Q, pos_idx, n_pos, removed, screen):
    w = 0
    for p in range(n_pos):
        if not removed[pos_idx[p]]:
            if w != p:
                pos_idx[w] = pos_idx[p]
                if screen:
                    for j in range(Q.shape[0]):
                        Q[j, w] = Q[j, p]
            w += 1
    return w


@nb.njit(cache=True)
def _nearest_screened(X, Q, pos_idx, n_pos, removed, lo, h, margin, q_i, k, want_far, bufs,
                      cell):
    """Cell of ``q_i`` (it and its k-1 nearest) by screening, into ``cell``; with ``want_far``
    the same pass leaves the candidates for the farthest record in ``bufs``. Returns False when
    a candidate buffer overflowed (the caller then scans exactly)."""
    (qv, heaps, heap_sizes, near_pos, near_s, n_near, far_pos, far_s, n_far, far_max,
     overflow) = bufs
    _grid_query(X, q_i, lo, h, qv)
    if heaps.shape[0] > 1:
        _screen_parallel(Q, n_pos, pos_idx, removed, qv, heaps, heap_sizes, near_pos, near_s,
                         n_near, far_pos, far_s, n_far, far_max, want_far, margin, overflow)
    else:
        _screen_serial(Q, n_pos, pos_idx, removed, qv, heaps, heap_sizes, near_pos, near_s,
                       n_near, far_pos, far_s, n_far, far_max, want_far, margin, overflow)
    n_threads = heaps.shape[0]
    for t in range(n_threads):
        if overflow[t]:
            return False
    total = 0
    for t in range(n_threads):
        total += heap_sizes[t]
    # float64, as _kth_smallest takes the exact distances: grid distances are exact in it
    pooled = np.empty(total)
    c = 0
    for t in range(n_threads):
        for u in range(heap_sizes[t]):
            pooled[c] = heaps[t, u]
            c += 1
    kth = np.int64(_kth_smallest(pooled, k - 1))
    thr = _near_threshold(kth, margin)
    cand = np.empty(n_threads * near_pos.shape[1], np.int64)
    c = np.int64(0)
    for t in range(n_threads):
        for u in range(n_near[t]):
            if near_s[t, u] <= thr:
                cand[c] = pos_idx[near_pos[t, u]]
                c += 1
    q = X[q_i].copy()
    cell[0] = q_i
    _select_nearest(X, cand, c, q, q_i, k - 1, cell[1:])
    return True


@nb.njit(cache=True)
def _far_from_screen(X, pos_idx, removed, bufs, margin, r):
    """Exact farthest record from ``r`` among the screened candidates, or -1 if they cannot
    prove it (e.g. the grid's farthest record went into r's cell)."""
    far_pos, far_s, n_far, far_max, overflow = bufs[6], bufs[7], bufs[8], bufs[9], bufs[10]
    n_threads = far_pos.shape[0]
    global_max = np.int64(-1)
    for t in range(n_threads):
        if overflow[t]:
            return -1
        global_max = max(global_max, far_max[t])
    alive_max = np.int64(-1)
    for t in range(n_threads):
        for u in range(n_far[t]):
            if not removed[pos_idx[far_pos[t, u]]]:
                alive_max = max(alive_max, far_s[t, u])
    if alive_max < global_max or alive_max < 0:
        return -1
    thr = _far_threshold(alive_max, margin)
    cand = np.empty(n_threads * far_pos.shape[1], np.int64)
    c = np.int64(0)
    for t in range(n_threads):
        for u in range(n_far[t]):
            if far_s[t, u] >= thr:
                cand[c] = pos_idx[far_pos[t, u]]
                c += 1
    # thread chunks are in position order, positions in index order: cand is sorted
    return _select_farthest(X, cand, c, X[r].copy(), removed)


@nb.njit(cache=True)
def _screen_buffers(m, k, n_threads, cap):
    """(query, heaps, heap sizes, near positions, near values, near counts, far positions, far
    values, far counts, far maxima, overflow flags) for ``n_threads`` threads."""
    return (np.empty(m, np.int32), np.empty((n_threads, k), np.int64),
            np.zeros(n_threads, np.int64), np.empty((n_threads, cap), np.int64),
            np.empty((n_threads, cap), np.int64), np.zeros(n_threads, np.int64),
            np.empty((n_threads, cap), np.int64), np.empty((n_threads, cap), np.int64),
            np.zeros(n_threads, np.int64), np.zeros(n_threads, np.int64),
            np.zeros(n_threads, np.bool_))


@nb.njit(cache=True)
def _cell_of(X, Q, pos_idx, n_pos, removed, lo, h, margin, screen, q_i, k, want_far, bufs, cell,
             stats):
    """Fill ``cell`` with ``q_i`` and its k-1 nearest remaining records. Returns whether the
    screening pass ran (and so whether ``bufs`` holds farthest candidates)."""
    ok = screen and _nearest_screened(X, Q, pos_idx, n_pos, removed, lo, h, margin, q_i, k,
                                      want_far, bufs, cell)
    if not ok:
        stats[2] += 1
        alive = _alive_indices(pos_idx, n_pos, removed)
        cell[0] = q_i
        _select_nearest(X, alive, alive.shape[0], X[q_i].copy(), q_i, k - 1, cell[1:])
    return ok


@nb.njit(cache=True)
def _assign(X, cell, label, labels, removed, partials, counts):
    for i in cell:
        labels[i] = label
        removed[i] = True
        _exact_sums_remove(partials, counts, X[i])


@nb.njit(cache=True, nogil=True)
def mdav_labels(X, k, screen, n_threads, far_list_len, min_parallel, stats, progress):
    """MDAV-generic labels for the standardised float64 matrix ``X`` (see ``mdav.py``).

    ``screen`` turns the quantised filter on; ``n_threads`` threads scan when at least
    ``min_parallel`` records remain. The result does not depend on either. ``stats`` (int64,
    length 5) receives counts: list rebuilds, exact distances in walks, exact fallback scans for
    nearest and for farthest, compactions. ``progress[0]`` counts the records placed so far.
    """
    n, m = X.shape
    labels = np.full(n, -1, np.int64)
    removed = np.zeros(n, np.bool_)
    partials, counts = _exact_sums_init(X)
    n_alive = n
    pos_idx = np.arange(n)
    n_pos = n
    c = np.empty(m)
    cell = np.empty(k, np.int64)
    label = np.int64(0)

    if screen:
        Q, lo, h, margin = _quantise(X)
    else:
        Q, lo, h, margin = np.empty((m, 0), np.uint8), np.zeros(m), 1.0, 0.0
    cap = max(4096, 8 * k)
    bufs_parallel = _screen_buffers(m, k, n_threads, cap)
    bufs_serial = _screen_buffers(m, k, np.int64(1), cap)

    c_ref = np.full(m, np.nan)
    top_idx = np.empty(0, np.int64)
    top_d = np.empty(0)
    head = np.int64(0)
    floor_d = -np.inf
    stale = True

    while n_alive >= 2 * k:
        # r: the record farthest from the centroid
        _exact_mean(partials, counts, n_alive, c)
        r = -1
        if not stale:
            r, examined, head = _walk_far_list(X, c, c_ref, top_idx, top_d, head, floor_d, removed)
            stale = examined > _STALE_WALK
            stats[1] += examined
        if r < 0:
            stats[0] += 1
            alive = _alive_indices(pos_idx, n_pos, removed)
            top_idx, top_d, floor_d = _build_far_list(X, alive, c, far_list_len)
            c_ref[:] = c
            head = np.int64(0)
            r, examined, head = _walk_far_list(X, c, c_ref, top_idx, top_d, head, floor_d, removed)
            stale = False
        two_cells = n_alive >= 3 * k
        bufs = bufs_parallel if n_threads > 1 and n_alive >= min_parallel else bufs_serial
        ok = _cell_of(X, Q, pos_idx, n_pos, removed, lo, h, margin, screen, r, k, two_cells,
                      bufs, cell, stats)
        _assign(X, cell, label, labels, removed, partials, counts)
        n_alive -= k
        label += 1
        if not two_cells:
            break
        # s: the record farthest from r, among those left
        s = _far_from_screen(X, pos_idx, removed, bufs, margin, r) if ok else -1
        if s < 0:
            stats[3] += 1
            alive = _alive_indices(pos_idx, n_pos, removed)
            s = _select_farthest(X, alive, alive.shape[0], X[r].copy(), removed)
        bufs = bufs_parallel if n_threads > 1 and n_alive >= min_parallel else bufs_serial
        _cell_of(X, Q, pos_idx, n_pos, removed, lo, h, margin, screen, s, k, np.bool_(False), bufs,
                 cell, stats)
        _assign(X, cell, label, labels, removed, partials, counts)
        n_alive -= k
        label += 1
        progress[0] = n - n_alive
        if n_pos - n_alive > n_alive // 16 + 4 * k:
            n_pos = _compact(Q, pos_idx, n_pos, removed, screen)
            stats[4] += 1
    for i in range(n):
        if not removed[i]:
            labels[i] = label
    return labels
