"""Compiled kernels of the anytime refinement (``streamanon/refine.py``); nothing here is public.

A partition is held as labels, per-cell sums, sums of squares and sizes (so a centroid and a
cost are O(m) to read; the arithmetic and the dissolve pricing are ``engines/cells.py``'s,
shared with ONA*'s kernels), plus doubly linked member lists (``head[cell]``, ``nxt[record]``,
``prv[record]``), so that moving a record is O(m) and a split gathers only its cell's members.
Ids of dissolved cells go on a free stack (``free``, ``counts[1]`` of them) and are reused by
splits, so no more than n // k + 1 ids are ever needed.

Candidate cells come from ``G``: for each cell, ``C`` cells with (approximately) the nearest
centroids, built by NN-descent (Dong, Charikar and Li 2011: a neighbour of a neighbour is
likely a neighbour) over the centroids, because a k-d tree prunes almost nothing at m = 15.
The graph only proposes; every move is priced exactly, so a poor graph costs improvement,
never validity. Every operation keeps every live cell at k records or more and never raises
the total cost (SSE). Ties go to the lowest position in ``G``'s row; everything is sequential,
so the result is a function of the input and the number of operations allowed.

A kernel passes another ``np.int64(0)`` or ``np.bool_(True)``, never a bare ``0`` or ``True``,
and a counter it passes on starts as ``np.int64(0)``: numba would compile the callee once
more for the constant's own type (``streamanon.warmup``, "One signature per kernel").
"""

from __future__ import annotations

import numba as nb
import numpy as np

from streamanon.engines.cells import (
    TOL,
    add_record,
    cell_cost,
    dissolve_pays,
    mdav_split,
    move_record,
    rows_of,
    sq,
    sqnorm,
)

# stats: operations done so far
MOVES, DISSOLVES, SPLITS = 0, 1, 2


# -- member lists ---------------------------------------------------------------------------------


@nb.njit(cache=True)
def _unlink(head, nxt, prv, i, c):
    p = prv[i]
    q = nxt[i]
    if p >= 0:
        nxt[p] = q
    else:
        head[c] = q
    if q >= 0:
        prv[q] = p


@nb.njit(cache=True)
def _link(head, nxt, prv, i, c):
    q = head[c]
    nxt[i] = q
    prv[i] = -1
    if q >= 0:
        prv[q] = i
    head[c] = i


@nb.njit(cache=True)
def _relocate(X, labels, i, src, dst, sums, sqs, sizes, head, nxt, prv):
    _unlink(head, nxt, prv, i, src)
    _link(head, nxt, prv, i, dst)
    move_record(X, labels, i, src, dst, sums, sqs, sizes, sqnorm(X[i]))


@nb.njit(cache=True)
def _gather(head, nxt, c, buf):
    count = 0
    i = head[c]
    while i >= 0:
        buf[count] = i
        count += 1
        i = nxt[i]
    return count


@nb.njit(cache=True)
def _sq_to_centroid(x, sums, sizes, c):
    """|x - centroid(c)|^2 without allocating."""
    s = 0.0
    inv = 1.0 / sizes[c]
    for t in range(x.shape[0]):
        d = x[t] - sums[c, t] * inv
        s += d * d
    return s


@nb.njit(cache=True, nogil=True)
def build_state(X, labels, cap):
    """Sums, sums of squares, sizes, live flags and member lists of ``labels`` (0..c-1)."""
    n, m = X.shape
    sums = np.zeros((cap, m))
    sqs = np.zeros(cap)
    sizes = np.zeros(cap, np.int64)
    alive = np.zeros(cap, np.bool_)
    head = np.full(cap, -1, np.int64)
    nxt = np.full(n, -1, np.int64)
    prv = np.full(n, -1, np.int64)
    for i in range(n - 1, -1, -1):  # lists in ascending record order
        c = labels[i]
        add_record(X[i], sqnorm(X[i]), c, sums, sqs, sizes)
        alive[c] = True
        _link(head, nxt, prv, i, c)
    return sums, sqs, sizes, alive, head, nxt, prv


# -- operations -----------------------------------------------------------------------------------


@nb.njit(cache=True)
def _new_id(free, counts):
    if counts[1] > 0:
        counts[1] -= 1
        return free[counts[1]]
    c = counts[0]
    counts[0] += 1
    return c


@nb.njit(cache=True)
def _split(X, k, c, labels, sums, sqs, sizes, alive, head, nxt, prv, G, free, counts, changed,
           buf, stats):
    """Split cell ``c`` (2k records or more) with MDAV; the first part keeps id ``c``, the
    others take free ids and, until the graph is rebuilt, ``c``'s candidate row."""
    count = _gather(head, nxt, c, buf)
    part = mdav_split(rows_of(X, buf, count), k)
    n_parts = part.max() + 1
    ids = np.empty(n_parts, np.int64)
    ids[0] = c
    C = G.shape[1]
    for p in range(1, n_parts):
        cid = _new_id(free, counts)
        ids[p] = cid
        sums[cid] = 0.0
        sqs[cid] = 0.0
        sizes[cid] = 0
        head[cid] = -1
        alive[cid] = True
        changed[cid] = True
        for j in range(C):
            G[cid, j] = G[c, j]
        G[cid, C - 1] = c
    G[c, C - 1] = ids[1]
    for u in range(count):
        if part[u] != 0:
            _relocate(X, labels, buf[u], c, ids[part[u]], sums, sqs, sizes, head, nxt, prv)
    changed[c] = True
    stats[SPLITS] += 1


@nb.njit(cache=True)
def _best_target(x, ci, saved, G, sums, sizes, alive, hops):
    """The candidate cell where adding ``x`` lowers the total cost most, given that taking it
    out of its cell ``ci`` saves ``saved``: ``ci``'s row of ``G``, then a greedy walk of up to
    ``hops`` steps, each through the row of the cell whose centroid is nearest ``x`` so far
    (a record on the edge of its cell is nearest cells that its cell's centroid is not).
    Returns (cell, gain), gain possibly negative; (-1, -inf) without a live candidate."""
    C = G.shape[1]
    best_gain = -np.inf
    best_t = -1
    nearest = -1
    nearest_d = np.inf
    row = ci
    for _ in range(hops + 1):
        walked = nearest
        for j in range(C):
            t = G[row, j]
            if t < 0 or t == ci or not alive[t]:
                continue
            d = _sq_to_centroid(x, sums, sizes, t)
            gain = saved - sizes[t] / (sizes[t] + 1.0) * d
            if gain > best_gain:
                best_gain = gain
                best_t = t
            if d < nearest_d:
                nearest_d = d
                nearest = t
        if nearest < 0 or nearest == walked:
            break
        row = nearest
    return best_t, best_gain


@nb.njit(cache=True)
def _dissolve(X, k, ci, labels, sums, sqs, sizes, alive, head, nxt, prv, G, free, counts,
              changed, buf, target, gsum, gsq, gsize, stats, hops):
    """Dissolve cell ``ci`` (exactly k records) into the candidate cells where each member
    costs least to add, if the total cost strictly drops (paper 004, Alg. 3, lines 6-17)."""
    count = _gather(head, nxt, ci, buf)
    for u in range(count):
        best_t, _gain = _best_target(X[buf[u]], ci, 0.0, G, sums, sizes, alive, hops)
        if best_t < 0:
            return False
        target[u] = best_t
    if not dissolve_pays(X, buf, count, ci, target, sums, sqs, sizes, gsum, gsq, gsize):
        return False
    for u in range(count):
        _relocate(X, labels, buf[u], ci, target[u], sums, sqs, sizes, head, nxt, prv)
        changed[target[u]] = True
    alive[ci] = False
    sums[ci] = 0.0
    sqs[ci] = 0.0
    changed[ci] = True
    free[counts[1]] = ci
    counts[1] += 1
    stats[DISSOLVES] += 1
    for u in range(count):
        t = target[u]
        if alive[t] and sizes[t] >= 2 * k:
            _split(X, k, t, labels, sums, sqs, sizes, alive, head, nxt, prv, G, free, counts,
                   changed, buf[count:], stats)
    return True


@nb.njit(cache=True)
def _move_out(X, k, ci, labels, sums, sqs, sizes, alive, head, nxt, prv, G, free, counts,
              changed, buf, stats, max_ops, hops):
    """Move records out of cell ``ci`` (more than k records), each to the candidate cell where
    the total cost drops most, while it drops and ``ci`` keeps more than k (paper 004, Alg. 3,
    lines 18-30, first improvement instead of best of the cell)."""
    count = _gather(head, nxt, ci, buf)
    for u in range(count):
        if sizes[ci] <= k or stats[0] + stats[1] + stats[2] >= max_ops:
            break
        s = buf[u]
        x = X[s]
        ni = sizes[ci]
        saved = ni / (ni - 1.0) * _sq_to_centroid(x, sums, sizes, ci)
        best_t, best_gain = _best_target(x, ci, saved, G, sums, sizes, alive, hops)
        if best_t < 0 or not best_gain > TOL * (cell_cost(sums, sqs, sizes, ci) + 1.0):
            continue
        _relocate(X, labels, s, ci, best_t, sums, sqs, sizes, head, nxt, prv)
        changed[ci] = True
        changed[best_t] = True
        stats[MOVES] += 1
        if sizes[best_t] >= 2 * k:
            _split(X, k, best_t, labels, sums, sqs, sizes, alive, head, nxt, prv, G, free,
                   counts, changed, buf[count:], stats)


@nb.njit(cache=True, nogil=True)
def refine_cells(X, k, visit, start, stop, labels, sums, sqs, sizes, alive, head, nxt, prv, G,
                 free, counts, changed, stats, max_ops, hops, scratch):
    """Local search on the cells ``visit[start:stop]`` in that order: split a cell of 2k or
    more, dissolve one of exactly k, move records out of a larger one. Stops early once
    ``stats`` counts ``max_ops`` operations; returns the position reached in ``visit``.
    ``scratch``: :func:`scratch_space`."""
    buf, target, gsum, gsq, gsize = scratch
    pos = start
    while pos < stop:
        if stats[0] + stats[1] + stats[2] >= max_ops:
            break
        ci = visit[pos]
        pos += 1
        if not alive[ci]:
            continue
        if sizes[ci] >= 2 * k:
            _split(X, k, ci, labels, sums, sqs, sizes, alive, head, nxt, prv, G, free, counts,
                   changed, buf, stats)
        elif sizes[ci] == k:
            _dissolve(X, k, ci, labels, sums, sqs, sizes, alive, head, nxt, prv, G, free,
                      counts, changed, buf, target, gsum, gsq, gsize, stats, hops)
        else:
            _move_out(X, k, ci, labels, sums, sqs, sizes, alive, head, nxt, prv, G, free,
                      counts, changed, buf, stats, max_ops, hops)
    return pos


def scratch_space(n, cap, m):
    """Working arrays of :func:`refine_cells`, made once per refinement."""
    return (np.empty(n, np.int64), np.empty(n, np.int64), np.zeros((cap, m)), np.zeros(cap),
            np.zeros(cap, np.int64))


# -- candidate graph (NN-descent over the centroids) ----------------------------------------------


@nb.njit(cache=True)
def _insert(G, D, u, w, d):
    """Put ``w`` at distance ``d`` into ``u``'s sorted row unless there or no nearer than the
    last; returns whether it went in."""
    C = G.shape[1]
    if not d < D[u, C - 1]:
        return False
    for j in range(C):
        if G[u, j] == w:
            return False
    j = C - 1
    while j > 0 and D[u, j - 1] > d:
        G[u, j] = G[u, j - 1]
        D[u, j] = D[u, j - 1]
        j -= 1
    G[u, j] = w
    D[u, j] = d
    return True


@nb.njit(cache=True, nogil=True)
def graph_refresh(cent, live, G, D, seed):
    """Re-price every row at the current centroids, drop dead or repeated entries, fill the
    gaps with random live cells (seeded) and sort each row by distance."""
    np.random.seed(seed)
    C = G.shape[1]
    n_live = live.shape[0]
    is_live = np.zeros(G.shape[0], np.bool_)
    for a in range(n_live):
        is_live[live[a]] = True
    row = np.empty(C, np.int64)
    for a in range(n_live):
        u = live[a]
        kept = 0
        for j in range(C):
            t = G[u, j]
            if t < 0 or t == u or not is_live[t]:
                continue
            dup = False
            for q in range(kept):
                if row[q] == t:
                    dup = True
                    break
            if not dup:
                row[kept] = t
                kept += 1
        G[u, :] = -1
        D[u, :] = np.inf
        for q in range(kept):
            _insert(G, D, u, row[q], sq(cent[u], cent[row[q]]))
        tries = 0
        while kept < min(C, n_live - 1) and tries < 8 * C:
            tries += 1
            t = live[np.random.randint(n_live)]
            if t != u and _insert(G, D, u, t, sq(cent[u], cent[t])):
                kept += 1


@nb.njit(cache=True, nogil=True)
def graph_descend(cent, live, G, D, reverse_cap, start, stop):
    """One NN-descent pass over the live cells ``live[start:stop]``: each tries the neighbours
    of its neighbours and of the cells that list it (at most ``reverse_cap`` of those).
    Returns the number of updates."""
    C = G.shape[1]
    cap = G.shape[0]
    n_live = live.shape[0]
    rev = np.full((cap, reverse_cap), -1, np.int64)
    n_rev = np.zeros(cap, np.int64)
    for a in range(n_live):
        u = live[a]
        for j in range(C):
            v = G[u, j]
            if v >= 0 and n_rev[v] < reverse_cap:
                rev[v, n_rev[v]] = u
                n_rev[v] += 1
    updates = 0
    for a in range(start, min(stop, n_live)):
        u = live[a]
        for src in range(C + reverse_cap):
            v = G[u, src] if src < C else rev[u, src - C]
            if v < 0:
                continue
            for j in range(C):
                w = G[v, j]
                if w < 0 or w == u:
                    continue
                if _insert(G, D, u, w, sq(cent[u], cent[w])):
                    updates += 1
            if src >= C and _insert(G, D, u, v, sq(cent[u], cent[v])):
                updates += 1
    return updates
