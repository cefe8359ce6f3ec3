"""Compiled kernels of MDAV* and ONA* (``ona.py``); nothing here is public.

``mdav_star_labels``, ``ona_star_labels`` and ``local_search_labels`` are what the engines run.
``mdav_star_labels_exhaustive`` scans every remaining record and every cell at each step: it
splits the small cells of the local search (fewer than 3k records) and runs MDAV* for k = 1,
and the tests compare the indexed kernel with it (identical labels). The exhaustive ONA*, the
reference of the exact indexed search, is a test oracle (``simulations/reference_kernels.py``);
``ona.py`` explains how the exact indexed kernels stay exact and what the restricted search
(``candidates`` > 0) gives up.

Cells are kept as per-cell sums, sums of squares and sizes, priced with the identities and
helpers of ``cells``. Ties go to the lowest index everywhere.

A kernel passes another ``np.int64(0)`` or ``np.bool_(True)``, never a bare ``0`` or ``True``,
and a counter it passes on starts as ``np.int64(0)``: numba would compile the callee once
more for the constant's own type (``streamanon.warmup``, "One signature per kernel").
"""

from __future__ import annotations

import numba as nb
import numpy as np

from streamanon.engines._mdav_kernels import (
    _cell_of,
    _compact,
    _quantise,
    _screen_buffers,
)
from streamanon.engines.cells import (
    TOL,
    add_record,
    cell_cost,
    centroid_distances,
    dissolve_pays,
    mdav_split,
    move_record,
    offer,
    renumbered,
    rows_of,
    sq,
    sqnorm,
)

# The MDAV screening used below holds a parallel loop: a kernel loaded from numba's cache links
# against the threading layer's symbols, which exist only once the layer has started.
nb.get_num_threads()

_CANDIDATES = 4  # nearest other cells a record remembers between queries
_RECORD_CANDIDATES = 8  # restricted search: nearest other cells a record keeps for a round
_SEEDS = 4  # restricted search: a record's list is rebuilt from its cell's and its 4 nearest's
_HOPS = 8  # restricted search: a cell's list is refreshed from its own and its 8 nearest's


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
        s += sq(X[idx[u]], mu)
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
        dc = sq(x, sums[c] / sizes[c])
        if dc < best:
            best = dc
            best_c = c
    return best_c, best


@nb.njit(cache=True, nogil=True)
def mdav_star_labels_exhaustive(X, k):
    """MDAV* (paper 004, Algorithm 1; see ``ona.py`` for the reading of its damaged lines),
    scanning every remaining record and every cell at each step: the reference of
    :func:`mdav_star_labels`, and the split of the local search's small cells."""
    n, m = X.shape
    labels = np.full(n, -1, np.int64)
    centre = np.zeros(m)
    for i in range(n):
        centre += X[i]
    centre /= n
    far = np.empty(n)
    for i in range(n):
        far[i] = sq(X[i], centre)
    order = np.argsort(-far, kind="mergesort")  # farthest first; ties: lowest index
    sums = np.zeros((n // k + 1, m))
    sizes = np.zeros(n // k + 1, np.int64)
    alive = np.ones(n // k + 1, np.bool_)  # MDAV* never dissolves a cell
    n_cells = np.int64(0)
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
            d[unassigned[u]] = sq(X[unassigned[u]], X[xb])
        n1[0] = xb
        _nearest(d, unassigned, n_un, k - 1, np.array([xb, -1]), n1[1:])
        new_cell = True
        if n_cells > 0 and n_un - 1 >= k:
            v = n1[1] if k > 1 else -1
            if v < 0:  # k = 1: the nearest other record
                _nearest(d, unassigned, n_un, np.int64(1), np.array([xb, -1]), n2[:1])
                v = n2[0]
            for u in range(n_un):
                d2[unassigned[u]] = sq(X[unassigned[u]], X[v])
            n2[0] = v
            _nearest(d2, unassigned, n_un, k - 1, np.array([xb, v]), n2[1:])
            clos, best = _nearest_cell(X[xb], sums, sizes, alive, n_cells, np.int64(-1))
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
        clos, _best = _nearest_cell(X[x], sums, sizes, alive, n_cells, np.int64(-1))
        labels[x] = clos
        sums[clos] += X[x]
        sizes[clos] += 1
    return labels


# -- the indexed kernels (what the engines run) ---------------------------------------------------


@nb.njit(cache=True)
def _set_centroid(sums, sizes, cent, centT, c):
    """Refresh cell ``c``'s centroid, kept row- and column-major, with the bits of
    ``sums[c] / sizes[c]`` (the reference's expression)."""
    for t in range(sums.shape[1]):
        v = sums[c, t] / sizes[c]
        cent[c, t] = v
        centT[t, c] = v


@nb.njit(cache=True)
def _scan_cells(x, centT, alive, n_cells, skip, acc):
    """Every live cell but ``skip``: (nearest id, its squared distance, the second smallest).

    Distances are accumulated column by column over the column-major centroids (vectorised
    across cells) in the reference's order, so they are the reference's bits; ties: lowest id.
    """
    centroid_distances(x, centT, n_cells, acc)
    best = np.inf
    best_c = -1
    second = np.inf
    for c in range(n_cells):
        if not alive[c] or c == skip:
            continue
        v = acc[c]
        if v < best:
            second = best
            best = v
            best_c = c
        elif v < second:
            second = v
    return best_c, best, second


@nb.njit(cache=True)
def _knn_sorted(X, Q, pos_idx, n_pos, removed, lo, h, margin, q, k, bufs, cell, dist, stats):
    """``cell``: ``q`` and its k-1 nearest remaining records, ordered by (distance, index) as the
    reference's repeated minimum orders them; found by the MDAV kernels' exact screening."""
    _cell_of(X, Q, pos_idx, n_pos, removed, lo, h, margin, np.bool_(True), q, k, np.bool_(False),
             bufs, cell, stats)
    for u in range(1, k):
        dist[u] = sq(X[cell[u]], X[q])
    for u in range(2, k):  # insertion sort of k-1 entries
        i = cell[u]
        di = dist[u]
        w = u
        while w > 1 and (dist[w - 1] > di or (dist[w - 1] == di and cell[w - 1] > i)):
            cell[w] = cell[w - 1]
            dist[w] = dist[w - 1]
            w -= 1
        cell[w] = i
        dist[w] = di


@nb.njit(cache=True, nogil=True)
def mdav_star_labels(X, k):
    """MDAV*, the same labels as :func:`mdav_star_labels_exhaustive`.

    The k-1 nearest remaining records come from the quantised screening of the MDAV kernels
    (exact, lowest index on ties); the closest cell from one vectorised pass over the
    column-major centroids; the farthest remaining record from one sort by the distance to c(X),
    which never changes. Nothing is scanned record by record.
    """
    n, m = X.shape
    if k < 2:  # the screening needs a neighbour; MDAV* with k = 1 is trivial anyway
        return mdav_star_labels_exhaustive(X, k)
    labels = np.full(n, -1, np.int64)
    centre = np.zeros(m)
    for i in range(n):
        centre += X[i]
    centre /= n
    far = np.empty(n)
    for i in range(n):
        far[i] = sq(X[i], centre)
    order = np.argsort(-far, kind="mergesort")  # farthest first; ties: lowest index
    cap = n // k + 1
    sums = np.zeros((cap, m))
    sizes = np.zeros(cap, np.int64)
    cent = np.empty((cap, m))
    centT = np.empty((m, cap))
    alive = np.ones(cap, np.bool_)  # MDAV* never dissolves a cell
    acc = np.empty(cap)
    n_cells = np.int64(0)
    removed = np.zeros(n, np.bool_)
    Q, lo, h, margin = _quantise(X)
    bufs = _screen_buffers(m, k, np.int64(1), max(4096, 8 * k))
    stats = np.zeros(5, np.int64)
    pos_idx = np.arange(n)
    n_pos = n
    n_un = n
    n1 = np.empty(k, np.int64)
    n2 = np.empty(k, np.int64)
    dist = np.empty(k)
    ptr = 0
    while n_un >= k:
        while labels[order[ptr]] >= 0:
            ptr += 1
        xb = order[ptr]
        _knn_sorted(X, Q, pos_idx, n_pos, removed, lo, h, margin, xb, k, bufs, n1, dist, stats)
        new_cell = True
        if n_cells > 0 and n_un - 1 >= k:
            v = n1[1]
            removed[xb] = True  # N2 is taken from U without xbar
            _knn_sorted(X, Q, pos_idx, n_pos, removed, lo, h, margin, v, k, bufs, n2, dist,
                        stats)
            removed[xb] = False
            clos, best, _second = _scan_cells(X[xb], centT, alive, n_cells, np.int64(-1), acc)
            cost1 = _sse(X, n1, k) / k
            cost2 = (sizes[clos] / (sizes[clos] + 1.0) * best + _sse(X, n2, k)) / (k + 1.0)
            new_cell = cost1 <= cost2
            if not new_cell:
                labels[xb] = clos
                removed[xb] = True
                sums[clos] += X[xb]
                sizes[clos] += 1
                _set_centroid(sums, sizes, cent, centT, clos)
                n_un -= 1
        if new_cell:
            for u in range(k):
                labels[n1[u]] = n_cells
                removed[n1[u]] = True
                sums[n_cells] += X[n1[u]]
            sizes[n_cells] = k
            _set_centroid(sums, sizes, cent, centT, n_cells)
            n_cells += 1
            n_un -= k
        if n_pos - n_un > n_un // 16 + 4 * k:
            n_pos = _compact(Q, pos_idx, n_pos, removed, np.bool_(True))
    for x in range(n):  # fewer than k left: each joins its closest cell, in index order
        if labels[x] >= 0:
            continue
        clos, _best, _second = _scan_cells(X[x], centT, alive, n_cells, np.int64(-1), acc)
        labels[x] = clos
        sums[clos] += X[x]
        sizes[clos] += 1
        _set_centroid(sums, sizes, cent, centT, clos)
    return labels


@nb.njit(cache=True)
def _log_cell(log, log_len, c):
    """Append ``c`` to the change log (grown by doubling); returns (log, new length)."""
    if log_len == log.shape[0]:
        bigger = np.empty(2 * log.shape[0], np.int64)
        bigger[:log_len] = log
        log = bigger
    log[log_len] = c
    return log, log_len + 1


@nb.njit(cache=True)
def _dist_to_cell(X, s, cent, c):
    d = 0.0
    for t in range(cent.shape[1]):
        e = X[s, t] - cent[c, t]
        d += e * e
    return d


@nb.njit(cache=True)
def _nearest_other(X, s, skip, cent, centT, alive, n_cells, acc, cache_c, cache_lb, cache_own,
                   cache_tau, log, log_len, limit, top_c, top_d, stats):
    """The live cell other than ``skip`` nearest to record ``s`` and its squared distance,
    exactly as a scan of every cell finds it (ties: lowest id).

    The record's cache says: at log position ``tau``, with own cell ``own``, its nearest other
    cells were ``cache_c[s]`` (the ``_CANDIDATES`` nearest) and every other cell but ``own`` was
    at least ``lb`` away. Cells not in the log since ``tau`` have not moved, so only the
    candidates and the logged cells need exact distances; if the best of those is below ``lb``,
    it is the answer. Otherwise (or when the log is long, or the record changed cell) every cell
    is scanned.
    """
    n_keep = cache_c.shape[1]
    tau = cache_tau[s]
    if cache_own[s] == skip and log_len - tau <= limit:
        lb = cache_lb[s]
        n_top = np.int64(0)
        for j in range(n_keep):
            c = cache_c[s, j]
            if c >= 0 and c != skip and alive[c]:
                n_top = offer(top_c, top_d, n_top, c, _dist_to_cell(X, s, cent, c))
        for e in range(tau, log_len):
            c = log[e]
            if c == skip or not alive[c]:
                continue
            seen = False
            for j in range(n_top):
                seen = seen or top_c[j] == c
            if not seen:
                n_top = offer(top_c, top_d, n_top, c, _dist_to_cell(X, s, cent, c))
        if n_top > 0 and top_d[0] < lb:
            for j in range(n_keep):
                cache_c[s, j] = top_c[j] if j < n_top else -1
            if n_top > n_keep:
                lb = min(lb, top_d[n_keep])
            cache_lb[s] = lb
            cache_tau[s] = log_len
            stats[4] += 1
            return top_c[0], top_d[0]
    _scan_cells(X[s], centT, alive, n_cells, skip, acc)
    n_top = np.int64(0)
    cap = top_c.shape[0]
    for c in range(n_cells):
        if alive[c] and c != skip and (n_top < cap or acc[c] <= top_d[cap - 1]):
            n_top = offer(top_c, top_d, n_top, c, acc[c])
    for j in range(n_keep):
        cache_c[s, j] = top_c[j] if j < n_top else -1
    cache_lb[s] = top_d[n_keep] if n_top > n_keep else np.inf
    cache_own[s] = skip
    cache_tau[s] = log_len
    stats[5] += 1
    return top_c[0], top_d[0]


@nb.njit(cache=True)
def _moved(cache_c, cache_own, s, src, dst):
    """Record ``s`` went from ``src`` to ``dst``, its nearest other cell when last queried: its
    cache stays valid with ``src`` taking ``dst``'s place among the candidates."""
    cache_own[s] = dst
    for j in range(cache_c.shape[1]):
        if cache_c[s, j] == dst:
            cache_c[s, j] = src


@nb.njit(cache=True)
def _insert_member(members, sizes, c, i):
    """Insert record ``i`` into cell ``c``'s member list (kept in increasing index order)."""
    w = sizes[c]
    while w > 0 and members[c, w - 1] > i:
        members[c, w] = members[c, w - 1]
        w -= 1
    members[c, w] = i


@nb.njit(cache=True)
def _remove_member(members, sizes, c, i):
    w = 0
    while members[c, w] != i:
        w += 1
    for u in range(w, sizes[c] - 1):
        members[c, u] = members[c, u + 1]


@nb.njit(cache=True)
def _move_indexed(X, norms, labels, i, src, dst, sums, sqs, sizes, members, cent, centT):
    """Move record ``i`` from ``src`` to ``dst``, keeping member lists and centroids up to
    date."""
    _remove_member(members, sizes, src, i)
    _insert_member(members, sizes, dst, i)
    move_record(X, labels, i, src, dst, sums, sqs, sizes, norms[i])
    if sizes[src] > 0:
        _set_centroid(sums, sizes, cent, centT, src)
    _set_centroid(sums, sizes, cent, centT, dst)


@nb.njit(cache=True)
def _heap_push_id(heap, size, c):
    heap[size] = c
    i = size
    while i > 0:
        p = (i - 1) // 2
        if heap[p] <= heap[i]:
            break
        heap[p], heap[i] = heap[i], heap[p]
        i = p
    return size + 1


@nb.njit(cache=True)
def _heap_pop_id(heap, size):
    """Remove the smallest id from the min-heap ``heap[:size]``; returns (id, new size)."""
    top = heap[0]
    size -= 1
    heap[0] = heap[size]
    i = 0
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        small = left
        if left + 1 < size and heap[left + 1] < heap[left]:
            small = left + 1
        if heap[i] <= heap[small]:
            break
        heap[i], heap[small] = heap[small], heap[i]
        i = small
    return top, size


@nb.njit(cache=True)
def _split_indexed(X, norms, labels, c, k, sums, sqs, sizes, alive, n_cells, members, cent,
                   centT, dead, n_dead, use_star, log, log_len):
    """Split cell ``c`` (of 2k or more) with MDAV* (or MDAV); the first part keeps id ``c``,
    the others take the lowest dissolved ids first (a min-heap), then new ones. Returns
    (n_cells, n_dead, log, log_len)."""
    count = sizes[c]
    rows = members[c, :count].copy()  # increasing index order
    sub = rows_of(X, rows, count)
    # MDAV* splits cells of fewer than 3k records: an exhaustive scan costs least there
    part = mdav_star_labels_exhaustive(sub, k) if use_star else mdav_split(sub, k)
    n_parts = part.max() + 1
    ids = np.empty(n_parts, np.int64)
    ids[0] = c
    for p in range(1, n_parts):
        if n_dead > 0:
            ids[p], n_dead = _heap_pop_id(dead, n_dead)
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
        labels[rows[u]] = cid
        members[cid, sizes[cid]] = rows[u]  # rows ascend: the lists stay sorted
        add_record(X[rows[u]], norms[rows[u]], cid, sums, sqs, sizes)
    for p in range(n_parts):
        _set_centroid(sums, sizes, cent, centT, ids[p])
        log, log_len = _log_cell(log, log_len, ids[p])
    return n_cells, n_dead, log, log_len


# -- candidate lists (the restricted ONA*: ``candidates`` > 0) ------------------------------------


def _exact_lists_py(cent, centT, alive, n_cells, nbr):
    """Row c of ``nbr``: the ``nbr.shape[1]`` live cells nearest to cell c's centroid, by
    (distance, id), -1 padded; every centroid pair is scanned, in blocks that stay in cache."""
    width = nbr.shape[1]
    rows = 32
    cols = 2048
    n_blocks = (n_cells + rows - 1) // rows
    for blk in nb.prange(n_blocks):
        lo = blk * rows
        hi = min(lo + rows, n_cells)
        top_c = np.empty((rows, width), np.int64)
        top_d = np.empty((rows, width))
        n_top = np.zeros(rows, np.int64)
        acc = np.empty(cols)
        for c0 in range(0, n_cells, cols):
            c1 = min(c0 + cols, n_cells)
            for r in range(lo, hi):
                if not alive[r]:
                    continue
                for j in range(c1 - c0):
                    acc[j] = 0.0
                for t in range(centT.shape[0]):
                    y = cent[r, t]
                    col = centT[t]
                    for j in range(c1 - c0):
                        d = col[c0 + j] - y
                        acc[j] += d * d
                b = r - lo
                for j in range(c1 - c0):
                    c = c0 + j
                    if alive[c] and c != r:
                        n_top[b] = offer(top_c[b], top_d[b], n_top[b], c, acc[j])
        for r in range(lo, hi):
            b = r - lo
            for j in range(width):
                nbr[r, j] = top_c[b, j] if j < n_top[b] else -1


def _refreshed_lists_py(cent, alive, n_cells, nbr, ex_head, ex_next, ex_cell, out):
    """Row c of ``out``: the ``out.shape[1]`` live cells nearest to cell c's centroid among its
    candidates and the candidates of its ``_HOPS`` nearest (a step of neighbour descent over
    this round's lists, the cells split off included)."""
    width = nbr.shape[1]
    rows = 256
    n_blocks = (n_cells + rows - 1) // rows
    for blk in nb.prange(n_blocks):
        mark = np.full(n_cells, -1, np.int64)
        top_c = np.empty(width, np.int64)
        top_d = np.empty(width)
        for r in range(blk * rows, min((blk + 1) * rows, n_cells)):
            if not alive[r]:
                continue
            mark[r] = r
            n_top = np.int64(0)
            for hop in range(2):  # r's candidates, then their candidates
                j = 0
                e = ex_head[r]
                while j < width or e >= 0:
                    if j < width:
                        q = nbr[r, j]
                        j += 1
                    else:
                        q = ex_cell[e]
                        e = ex_next[e]
                    if q < 0 or not alive[q] or q == r:
                        continue
                    if hop == 0:
                        if mark[q] != r:
                            mark[q] = r
                            n_top = offer(top_c, top_d, n_top, q, _dist_to_cell(cent, r, cent, q))
                        continue
                    if j > _HOPS:
                        break
                    i = 0
                    f = ex_head[q]
                    while i < width or f >= 0:
                        if i < width:
                            d = nbr[q, i]
                            i += 1
                        else:
                            d = ex_cell[f]
                            f = ex_next[f]
                        if d < 0 or not alive[d] or mark[d] == r:
                            continue
                        mark[d] = r
                        n_top = offer(top_c, top_d, n_top, d, _dist_to_cell(cent, r, cent, d))
            for j in range(width):
                out[r, j] = top_c[j] if j < n_top else -1


def _record_lists_py(X, labels, cent, alive, nbr, seeds, first, rec):
    """Row s of ``rec``: the ``rec.shape[1]`` live cells other than its own nearest to record
    s, among its own cell, the first ``seeds`` cells of its row (round 1: of its cell's list)
    and the candidates of all of those (a step of neighbour descent from the record)."""
    n = X.shape[0]
    width = nbr.shape[1]
    n_rec = rec.shape[1]
    rows = 1024
    n_blocks = (n + rows - 1) // rows
    for blk in nb.prange(n_blocks):
        mark = np.full(nbr.shape[0], -1, np.int64)
        top_c = np.empty(n_rec, np.int64)
        top_d = np.empty(n_rec)
        start = np.empty(seeds + 1, np.int64)
        for s in range(blk * rows, min((blk + 1) * rows, n)):
            own = labels[s]
            start[0] = own
            for j in range(seeds):
                start[j + 1] = nbr[own, j] if first else rec[s, j]
            mark[own] = s
            n_top = np.int64(0)
            for j in range(seeds + 1):
                q = start[j]
                if q < 0 or not alive[q]:
                    continue
                for i in range(-1, width):
                    d = q if i < 0 else nbr[q, i]
                    if d < 0 or not alive[d] or mark[d] == s:
                        continue
                    mark[d] = s
                    n_top = offer(top_c, top_d, n_top, d, _dist_to_cell(X, s, cent, d))
            for j in range(n_rec):
                rec[s, j] = top_c[j] if j < n_top else -1


_exact_lists = nb.njit(parallel=True, cache=True)(_exact_lists_py)
_record_lists = nb.njit(parallel=True, cache=True)(_record_lists_py)
_refreshed_lists = nb.njit(parallel=True, cache=True)(_refreshed_lists_py)


@nb.njit(cache=True)
def _nearest_listed(X, s, own, cent, alive, rec, nbr, ex_head, ex_next, ex_cell):
    """The live cell other than ``own`` nearest to record ``s`` among the record's candidates,
    ``own``'s candidates and the cells split off near ``own`` this round; ties: the lowest id."""
    best = np.inf
    best_c = -1
    n_rec = rec.shape[1]
    width = nbr.shape[1]
    j = 0
    e = ex_head[own]
    while j < n_rec + width or e >= 0:
        if j < n_rec:
            c = rec[s, j]
            j += 1
        elif j < n_rec + width:
            c = nbr[own, j - n_rec]
            j += 1
        else:
            c = ex_cell[e]
            e = ex_next[e]
        if c < 0 or c == own or not alive[c]:
            continue
        d = _dist_to_cell(X, s, cent, c)
        if d < best or (d == best and c < best_c):
            best = d
            best_c = c
    return best_c, best


@nb.njit(cache=True)
def _link(ex_head, ex_next, ex_cell, ex_len, c, d):
    """Add cell ``d`` to cell ``c``'s extra candidates; returns (ex_next, ex_cell, ex_len)."""
    if ex_len == ex_cell.shape[0]:
        bigger_next = np.empty(2 * ex_len, np.int64)
        bigger_cell = np.empty(2 * ex_len, np.int64)
        bigger_next[:ex_len] = ex_next
        bigger_cell[:ex_len] = ex_cell
        ex_next = bigger_next
        ex_cell = bigger_cell
    ex_cell[ex_len] = d
    ex_next[ex_len] = ex_head[c]
    ex_head[c] = ex_len
    return ex_next, ex_cell, ex_len + 1


@nb.njit(cache=True)
def _link_parts(parts, n_parts, alive, nbr, ex_head, ex_next, ex_cell, ex_len, mark, stamp):
    """Cell ``parts[0]`` was split into ``parts[:n_parts]`` (the first part keeps its id): each
    new part inherits the parent's candidates plus its siblings, and the parent's candidates
    and the parent get the new parts. So when every cell is a candidate of every other, it
    stays so, and the restricted search is the exhaustive one. Returns (ex_next, ex_cell,
    ex_len, stamp)."""
    c = parts[0]
    width = nbr.shape[1]
    stamp += 1
    for p in range(n_parts):
        mark[parts[p]] = stamp
    old_head = ex_head[c]
    j = 0
    e = old_head
    while j < width or e >= 0:  # the parent's candidates get the new parts
        if j < width:
            d = nbr[c, j]
            j += 1
        else:
            d = ex_cell[e]
            e = ex_next[e]
        if d < 0 or not alive[d] or mark[d] == stamp:
            continue
        mark[d] = stamp
        for p in range(1, n_parts):
            ex_next, ex_cell, ex_len = _link(ex_head, ex_next, ex_cell, ex_len, d, parts[p])
    for p in range(1, n_parts):  # each new part: the parent's candidates, parent and siblings
        q = parts[p]
        for j in range(width):
            nbr[q, j] = nbr[c, j]
        ex_head[q] = -1
        e = old_head
        while e >= 0:
            ex_next, ex_cell, ex_len = _link(ex_head, ex_next, ex_cell, ex_len, q, ex_cell[e])
            e = ex_next[e]
        for p2 in range(n_parts):
            if p2 != p:
                ex_next, ex_cell, ex_len = _link(ex_head, ex_next, ex_cell, ex_len, q,
                                                 parts[p2])
    for p in range(1, n_parts):
        ex_next, ex_cell, ex_len = _link(ex_head, ex_next, ex_cell, ex_len, c, parts[p])
    return ex_next, ex_cell, ex_len, stamp


@nb.njit(cache=True)
def _split_linked(X, norms, labels, c, k, sums, sqs, sizes, alive, n_cells, members, cent, centT,
                  dead, n_dead, log, log_len, restricted, nbr, ex_head, ex_next, ex_cell, ex_len,
                  mark, stamp):
    """``_split_indexed`` with MDAV*, then (restricted search) the parts' candidates linked.
    Returns (n_cells, n_dead, log, log_len, ex_next, ex_cell, ex_len, stamp)."""
    start = log_len
    n_cells, n_dead, log, log_len = _split_indexed(
        X, norms, labels, c, k, sums, sqs, sizes, alive, n_cells, members, cent, centT, dead,
        n_dead, np.bool_(True), log, log_len)
    if restricted:  # the log is only scratch here: it names the parts
        ex_next, ex_cell, ex_len, stamp = _link_parts(log[start:log_len], log_len - start, alive,
                                                      nbr, ex_head, ex_next, ex_cell, ex_len,
                                                      mark, stamp)
        log_len = start
    return n_cells, n_dead, log, log_len, ex_next, ex_cell, ex_len, stamp


@nb.njit(cache=True, nogil=True)
def ona_star_labels(X, k, max_rounds, stats, candidates):
    """ONA*. With ``candidates`` <= 0, the exact indexed search: the labels of the exhaustive
    ONA* (``simulations/reference_kernels.py``); with ``candidates`` = C > 0, the restricted
    search.

    Restricted: at the start of each round every cell gets a list of the C cells with the
    nearest centroids (round 1: an exact scan of all centroid pairs; later rounds: the nearest
    among its old candidates and those of its ``_HOPS`` nearest), and every record a list of its
    ``_RECORD_CANDIDATES`` nearest other cells (from its cell's list and the lists of its
    ``_SEEDS`` previous nearest); cells split off during the round are linked into the lists
    around their parent. A record of cell c, moved or dissolved, goes only to the nearest of
    its own and c's candidates, and no query ever scans all cells. When C is at least the number
    of cells, every cell is a candidate of every other one and the labels are the exhaustive
    ones; otherwise a move whose best destination is not a candidate is missed (measured in
    ``simulations/bench_ona.py``). Every move still strictly lowers the cost.

    ``stats`` (int64, length 4 or more): rounds run, dissolves, moves, splits; with 6 or more,
    also (exact search) nearest-cell queries answered from the change log and by a full scan.
    """
    return local_search_labels(X, k, mdav_star_labels(X, k), max_rounds, stats, candidates)


@nb.njit(cache=True, nogil=True)
def local_search_labels(X, k, start, max_rounds, stats, candidates):
    """ONA*'s local search (the rounds of :func:`ona_star_labels`) from the partition ``start``
    (labels 0..c-1, every cell at least k; cells of 2k or more are split with MDAV first):
    ONA* itself from MDAV*'s labels, or from any other engine's, such as MDAV's."""
    n, m = X.shape
    labels = start.copy()
    cap = n // k + 2
    sums = np.zeros((cap, m))
    sqs = np.zeros(cap)
    sizes = np.zeros(cap, np.int64)
    alive = np.zeros(cap, np.bool_)
    cent = np.zeros((cap, m))
    centT = np.zeros((m, cap))
    norms = np.empty(n)
    for i in range(n):
        norms[i] = sqnorm(X[i])
    n_cells = labels.max() + 1
    counts = np.zeros(n_cells, np.int64)
    for i in range(n):
        counts[labels[i]] += 1
    width = max(3 * k, counts.max())  # a cell never exceeds 3k - 1 once the start is split
    members = np.empty((cap, width), np.int64)
    for i in range(n):  # in index order: the member lists are sorted
        c = labels[i]
        members[c, sizes[c]] = i
        add_record(X[i], norms[i], c, sums, sqs, sizes)
        alive[c] = True
    for c in range(n_cells):
        _set_centroid(sums, sizes, cent, centT, c)
    dead = np.empty(cap, np.int64)
    n_dead = np.int64(0)
    log = np.empty(max(1024, 4 * cap), np.int64)
    log_len = np.int64(0)
    for c in range(labels.max() + 1):  # MDAV* may leave large cells: MDAV splits them
        if sizes[c] >= 2 * k:
            n_cells, n_dead, log, log_len = _split_indexed(
                X, norms, labels, c, k, sums, sqs, sizes, alive, n_cells, members, cent, centT,
                dead, n_dead, np.bool_(False), log, log_len)
            stats[3] += 1
    if members.shape[1] > 3 * k:
        members = members[:, :3 * k].copy()
    counters = np.zeros(6, np.int64)
    cache_c = np.full((n, _CANDIDATES), -1, np.int64)
    top_c = np.empty(_CANDIDATES + 1, np.int64)
    top_d = np.empty(_CANDIDATES + 1)
    cache_lb = np.zeros(n)
    cache_own = np.full(n, -1, np.int64)
    cache_tau = np.zeros(n, np.int64)
    acc = np.empty(cap)
    restricted = candidates > 0
    nbr = np.full((cap, min(candidates, cap) if restricted else 1), -1, np.int64)
    spare = np.full(nbr.shape, -1, np.int64)
    rec = np.full((n if restricted else 1, _RECORD_CANDIDATES), -1, np.int64)
    ex_head = np.full(cap, -1, np.int64)  # extra candidates: cells split off this round
    ex_next = np.empty(max(1024, cap), np.int64)
    ex_cell = np.empty(max(1024, cap), np.int64)
    ex_len = np.int64(0)
    mark = np.zeros(cap, np.int64)
    stamp = np.int64(0)
    buf = np.empty(3 * k, np.int64)
    target = np.empty(3 * k, np.int64)
    gsum = np.zeros((cap, m))
    gsq = np.zeros(cap)
    gsize = np.zeros(cap, np.int64)
    for rnd in range(max_rounds):
        stats[0] += 1
        changed = False
        if restricted:
            if rnd == 0:
                _exact_lists(cent, centT, alive, n_cells, nbr)
            else:
                _refreshed_lists(cent, alive, n_cells, nbr, ex_head, ex_next, ex_cell, spare)
                nbr, spare = spare, nbr
            _record_lists(X, labels, cent, alive, nbr, min(_SEEDS, nbr.shape[1]), rnd == 0, rec)
            ex_head[:] = -1
            ex_len = np.int64(0)
        # Phase 1: dissolve cells of exactly k when the cost strictly drops
        ci = np.int64(0)
        while ci < n_cells:
            if alive[ci] and sizes[ci] == k:
                count = k
                buf[:count] = members[ci, :count]
                limit = max(32, n_cells // 4)
                missing = False
                for u in range(count):
                    if restricted:
                        target[u], _d = _nearest_listed(X, buf[u], ci, cent, alive, rec, nbr,
                                                        ex_head, ex_next, ex_cell)
                        missing = missing or target[u] < 0
                    else:
                        target[u], _d = _nearest_other(
                            X, buf[u], ci, cent, centT, alive, n_cells, acc, cache_c, cache_lb,
                            cache_own, cache_tau, log, log_len, limit, top_c, top_d, counters)
                if missing:  # a restricted list with no live cell left: keep the cell
                    ci += 1
                    continue
                if dissolve_pays(X, buf, count, ci, target, sums, sqs, sizes, gsum, gsq,
                                 gsize):
                    for u in range(count):
                        s = buf[u]
                        _move_indexed(X, norms, labels, s, ci, target[u], sums, sqs, sizes,
                                      members, cent, centT)
                        if not restricted:
                            log, log_len = _log_cell(log, log_len, target[u])
                            _moved(cache_c, cache_own, s, ci, target[u])
                    if not restricted:
                        log, log_len = _log_cell(log, log_len, ci)
                    alive[ci] = False
                    n_dead = _heap_push_id(dead, n_dead, ci)
                    stats[1] += 1
                    changed = True
                    for u in range(count):
                        t = target[u]
                        if alive[t] and sizes[t] >= 2 * k:
                            (n_cells, n_dead, log, log_len, ex_next, ex_cell, ex_len,
                             stamp) = _split_linked(
                                X, norms, labels, t, k, sums, sqs, sizes, alive, n_cells,
                                members, cent, centT, dead, n_dead, log, log_len, restricted,
                                nbr, ex_head, ex_next, ex_cell, ex_len, mark, stamp)
                            stats[3] += 1
            ci += 1
        # Phase 2: move the best single record out of cells larger than k
        ci = np.int64(0)
        while ci < n_cells:
            while alive[ci] and sizes[ci] > k:
                count = sizes[ci]
                buf[:count] = members[ci, :count]
                ni = sizes[ci]
                mu_i = sums[ci] / ni
                best_gain = -np.inf
                best_s = np.int64(-1)
                best_t = np.int64(-1)
                limit = max(32, n_cells // 4)
                for u in range(count):
                    s = buf[u]
                    if restricted:
                        t, dt = _nearest_listed(X, s, ci, cent, alive, rec, nbr, ex_head,
                                                ex_next, ex_cell)
                    else:
                        t, dt = _nearest_other(X, s, ci, cent, centT, alive, n_cells, acc,
                                               cache_c, cache_lb, cache_own, cache_tau, log,
                                               log_len, limit, top_c, top_d, counters)
                    if t < 0:
                        continue
                    gain = ni / (ni - 1.0) * sq(X[s], mu_i) - sizes[t] / (sizes[t] + 1.0) * dt
                    if gain > best_gain:
                        best_gain = gain
                        best_s = s
                        best_t = t
                scale = cell_cost(sums, sqs, sizes, ci) + 1.0
                if best_s < 0 or best_gain <= TOL * scale:
                    break
                _move_indexed(X, norms, labels, best_s, ci, best_t, sums, sqs, sizes, members,
                              cent, centT)
                if not restricted:
                    log, log_len = _log_cell(log, log_len, ci)
                    log, log_len = _log_cell(log, log_len, best_t)
                    _moved(cache_c, cache_own, best_s, ci, best_t)
                stats[2] += 1
                changed = True
                if sizes[best_t] >= 2 * k:
                    n_cells, n_dead, log, log_len, ex_next, ex_cell, ex_len, stamp = \
                        _split_linked(X, norms, labels, best_t, k, sums, sqs, sizes, alive,
                                      n_cells, members, cent, centT, dead, n_dead, log, log_len,
                                      restricted, nbr, ex_head, ex_next, ex_cell, ex_len, mark,
                                      stamp)
                    stats[3] += 1
            ci += 1
        if not changed:
            break
    if stats.shape[0] >= 6:
        stats[4] += counters[4]
        stats[5] += counters[5]
    return renumbered(labels, alive, sizes, n_cells)
