"""Cell arithmetic the compiled kernels share: ONA*'s local search, the refinement and the
incremental stages.

A cell is held as a row of per-cell sums, a sum of squared norms and a size (``sums[c]``,
``sqs[c]``, ``sizes[c]``), so that its centroid and its cost (SSE) are O(m) to read and every
change is priced exactly with the standard identities: adding y to a cell of n with mean mu
costs n/(n+1) |y - mu|^2, removing it saves n/(n-1) |y - mu|^2, merging A and B costs
|A||B|/(|A|+|B|) |mu_A - mu_B|^2 more. The kernels of ONA*'s local search
(``engines/_local_search_kernels``), of the refinement (``streamanon/_refine_kernels``) and of
the incremental stages (``incremental/_nn_kernels``) take these pieces from here, so that each
computes the same numbers in the same order. Small helpers are compiled into their callers
(numba inlines them). The module is public to the other packages of streamanon, which is why
it has no leading underscore; its functions are numba kernels, not an API for users.

Imports: NumPy, numba and ``_mdav_kernels`` (MDAV on the records of one cell).

A kernel passes another ``np.int64(0)`` or ``np.bool_(True)``, never a bare ``0`` or ``True``,
and a counter it passes on starts as ``np.int64(0)``: numba would compile the callee once
more for the constant's own type (``streamanon.warmup``, "One signature per kernel").
"""

from __future__ import annotations

import numba as nb
import numpy as np

from streamanon.engines._mdav_kernels import mdav_labels

TOL = 1e-12  # an operation must gain more than this (relative) to count: no cycling on ties


@nb.njit(cache=True)
def sq(a, b):
    """Squared distance |a - b|^2, summed in column order."""
    s = 0.0
    for t in range(a.shape[0]):
        d = a[t] - b[t]
        s += d * d
    return s


@nb.njit(cache=True)
def sqnorm(x):
    """|x|^2, summed in column order (the bits of ``sq(x, 0)``)."""
    s = 0.0
    for t in range(x.shape[0]):
        s += x[t] * x[t]
    return s


@nb.njit(cache=True)
def cell_cost(sums, sqs, sizes, c):
    """Cost (SSE) of cell ``c``: sum of squares minus |sum|^2 / size, never below 0."""
    s = 0.0
    for t in range(sums.shape[1]):
        s += sums[c, t] * sums[c, t]
    return max(sqs[c] - s / sizes[c], 0.0)


@nb.njit(cache=True)
def add_record(x, norm, c, sums, sqs, sizes):
    """Count the record ``x`` (squared norm ``norm``) in cell ``c``."""
    sums[c] += x
    sqs[c] += norm
    sizes[c] += 1


@nb.njit(cache=True)
def move_record(X, labels, i, src, dst, sums, sqs, sizes, norm):
    """Move record ``i`` (squared norm ``norm``) from cell ``src`` to cell ``dst``."""
    labels[i] = dst
    sums[src] -= X[i]
    sqs[src] -= norm
    sizes[src] -= 1
    add_record(X[i], norm, dst, sums, sqs, sizes)


@nb.njit(cache=True)
def dissolve_pays(X, members, count, ci, target, sums, sqs, sizes, gsum, gsq, gsize):
    """Whether dissolving cell ``ci`` lowers the total cost by more than ``TOL`` (relative), its
    members ``members[:count]`` going to the cells ``target[:count]`` (ONA*'s dissolve, paper
    004, Alg. 3, lines 6-17).

    The members bound for one receiver are priced as a group: the group's own cost plus the
    merge term with the receiver. ``gsum``, ``gsq``, ``gsize`` are scratch rows indexed by cell
    (only the receivers' rows are touched).
    """
    for u in range(count):
        t = target[u]
        gsum[t] = 0.0
        gsq[t] = 0.0
        gsize[t] = 0
    for u in range(count):
        x = X[members[u]]
        add_record(x, sqnorm(x), target[u], gsum, gsq, gsize)
    added = 0.0
    for u in range(count):
        t = target[u]
        if gsize[t] <= 0:
            continue  # this receiver's group is already counted
        g_cost = cell_cost(gsum, gsq, gsize, t)
        g = gsize[t]
        between = 0.0
        for q in range(sums.shape[1]):
            d = sums[t, q] / sizes[t] - gsum[t, q] / g
            between += d * d
        added += g_cost + sizes[t] * g / (sizes[t] + g) * between
        gsize[t] = -g  # mark counted, keep the size
    for u in range(count):
        gsize[target[u]] = abs(gsize[target[u]])
    own = cell_cost(sums, sqs, sizes, ci)
    return own - added > TOL * (own + 1.0)


@nb.njit(cache=True)
def rows_of(X, rows, count):
    """The records ``rows[:count]`` of ``X``, in that order, as a new matrix."""
    sub = np.empty((count, X.shape[1]))
    for u in range(count):
        sub[u] = X[rows[u]]
    return sub


@nb.njit(cache=True)
def mdav_split(sub, k):
    """MDAV's labels (0..s-1) of the records ``sub`` (a cell of 2k or more, sequential, no
    screening): how the kernels split a cell."""
    return mdav_labels(sub, k, np.bool_(False), np.int64(1), np.int64(64), np.int64(1 << 62),
                       np.zeros(5, np.int64), np.zeros(2, np.int64))


@nb.njit(cache=True)
def centroid_distances(x, centT, n_cells, acc):
    """``acc[c]`` = |x - centroid c|^2 for the first ``n_cells`` columns of the column-major
    centroids ``centT``: accumulated column by column (vectorised across cells), each in
    column order."""
    for c in range(n_cells):
        acc[c] = 0.0
    for t in range(centT.shape[0]):
        y = x[t]
        col = centT[t]
        for c in range(n_cells):
            d = col[c] - y
            acc[c] += d * d


@nb.njit(cache=True)
def offer(top_c, top_d, n_top, c, d):
    """Offer cell ``c`` at ``d`` to the list ``top_*[:n_top]`` kept sorted by (distance, id)
    and holding at most ``top_c.shape[0]`` entries; returns the new count."""
    cap = top_c.shape[0]
    if n_top == cap and (d > top_d[cap - 1] or (d == top_d[cap - 1] and c > top_c[cap - 1])):
        return n_top
    w = n_top if n_top < cap else cap - 1
    while w > 0 and (top_d[w - 1] > d or (top_d[w - 1] == d and top_c[w - 1] > c)):
        top_c[w] = top_c[w - 1]
        top_d[w] = top_d[w - 1]
        w -= 1
    top_c[w] = c
    top_d[w] = d
    return min(n_top + 1, cap)


@nb.njit(cache=True)
def offer_products(P, xx, cc, c0, top_c, top_d, n_top):
    """Offer cells ``c0 ..`` to each record's list (``offer``) at the squared distance
    |x|^2 + |c|^2 - 2 x.c, from the products ``P`` = -2 x.c (records x cells) of a block and
    the squared norms ``xx`` (of the block's records) and ``cc`` (of all centroids). A block
    whose nearest cell is no nearer than a full list's last is passed over (most are, once
    the lists have filled)."""
    width = top_c.shape[1]
    acc = np.empty(P.shape[1])
    for r in range(P.shape[0]):
        for j in range(P.shape[1]):
            acc[j] = (xx[r] + cc[c0 + j]) + P[r, j]
        if n_top[r] == width and acc.min() > top_d[r, width - 1]:
            continue
        for j in range(P.shape[1]):
            if n_top[r] < width or acc[j] <= top_d[r, width - 1]:
                n_top[r] = offer(top_c[r], top_d[r], n_top[r], c0 + j, acc[j])


@nb.njit(cache=True)
def renumbered(labels, alive, sizes, n_cells):
    """``labels`` with the live, non-empty cells numbered 0..c-1 in order of cell id."""
    new_id = np.full(n_cells, -1, np.int64)
    nxt = 0
    for c in range(n_cells):
        if alive[c] and sizes[c] > 0:
            new_id[c] = nxt
            nxt += 1
    out = np.empty(labels.shape[0], np.int64)
    for i in range(labels.shape[0]):
        out[i] = new_id[labels[i]]
    return out
