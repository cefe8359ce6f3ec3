"""Compiled kernel for :func:`streamanon.engines.tcloseness.kfirst_cells` when only ``t`` is
asked (no l-diversity).

Nothing here is public. :func:`kfirst_labels` takes the same decisions as the NumPy loop of
``tcloseness.py`` (``_kfirst_cells_numpy``): MDAV's ``x_r`` / ``x_s`` order, a seed's ``k - 1``
nearest free records, then growth while the cell is not t-close, each time the free record
whose addition gives the smallest largest EMD over the sensitive columns, ties to the nearest
to the seed, then to the lowest row. The numbers are the same, bit for bit, because they are
added in NumPy's order: squared distances as ``sum_j (x_j - q_j)**2``, the free records'
centroid as their sum in row order divided by their count, the EMDs with the running sums of
:meth:`streamanon.privacy.Domain.emd_if_added`, and NumPy's pairwise summation
(:func:`_pairwise_sum`) where NumPy sums along an array (a distance over eight or more
quasi-identifiers, a cell's absolute gaps). The tests compare the two loops label for label.

Speed comes from keeping the free records compacted (row order kept, dead slots squeezed out
once they are a sixteenth of the slots), from reusing the distances to ``x_r`` computed for
its cell to find ``x_s``, and from an insertion buffer for the ``k - 1`` nearest: the work per
cell is a few passes over the free records, with no temporary arrays.

A kernel passes another ``np.int64(0)`` or ``np.bool_(True)``, never a bare ``0`` or ``True``,
and a counter it passes on starts as ``np.int64(0)``: numba would compile the callee once
more for the constant's own type (``streamanon.warmup``, "One signature per kernel").
"""

from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(cache=True)
def _block_sum(a, start, n):
    """NumPy's pairwise sum of ``a[start:start + n]`` for ``n <= 128``: in order below eight
    terms, else with eight accumulators."""
    if n < 8:
        res = 0.0
        for i in range(start, start + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[start], a[start + 1], a[start + 2], a[start + 3]
    r4, r5, r6, r7 = a[start + 4], a[start + 5], a[start + 6], a[start + 7]
    i = 8
    while i < n - (n % 8):
        b = start + i
        r0 += a[b]
        r1 += a[b + 1]
        r2 += a[b + 2]
        r3 += a[b + 3]
        r4 += a[b + 4]
        r5 += a[b + 5]
        r6 += a[b + 6]
        r7 += a[b + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[start + i]
        i += 1
    return res


@nb.njit(cache=True)
def _pairwise_sum(a, start, n):
    """``a[start:start + n].sum()`` added in NumPy's order: blocks of up to 128 terms
    (:func:`_block_sum`), longer runs split in two halves (the first a multiple of eight)
    summed separately. The halving runs on an explicit stack: numba's cache does not load
    self-recursive functions reliably."""
    if n <= 128:
        return _block_sum(a, start, n)
    # frame f: the run a[begin[f]:begin[f] + length[f]]; stage 0 = to split, 1 = left half
    # pending, 2 = right half pending (left in left[f])
    begin = np.empty(64, np.int64)
    length = np.empty(64, np.int64)
    stage = np.zeros(64, np.int64)
    left = np.empty(64)
    begin[0], length[0], stage[0] = start, n, 0
    top = 1
    result = 0.0
    while top > 0:
        f = top - 1
        size = length[f]
        half = size // 2
        half -= half % 8
        if size <= 128 or stage[f] == 3:
            value = _block_sum(a, begin[f], size) if size <= 128 else left[f]
            top -= 1
            if top == 0:
                result = value
            elif stage[top - 1] == 1:
                left[top - 1] = value
                stage[top - 1] = 2
            else:
                left[top - 1] += value
                stage[top - 1] = 3
        elif stage[f] == 0:
            stage[f] = 1
            begin[top], length[top], stage[top] = begin[f], half, 0
            top += 1
        else:
            begin[top], length[top], stage[top] = begin[f] + half, size - half, 0
            top += 1
    return result


@nb.njit(cache=True)
def _free_centroid(Xc, live, n_slots, n_free, centroid):
    """The centroid of the free (live) records, summed in slot order, into ``centroid``."""
    m = Xc.shape[0]
    centroid[:] = 0.0
    for i in range(n_slots):
        if live[i]:
            for j in range(m):
                centroid[j] += Xc[j, i]
    for j in range(m):
        centroid[j] = centroid[j] / n_free


@nb.njit(cache=True)
def _distances(Xc, n_slots, q, d, scratch):
    """``d[i] = sum_j (Xc[j, i] - q[j])**2`` for every slot, added in NumPy's order: in column
    order for fewer than eight columns (vectorised over the slots), pairwise from eight on."""
    m = Xc.shape[0]
    if m >= 8:
        for i in range(n_slots):
            for j in range(m):
                diff = Xc[j, i] - q[j]
                scratch[j] = diff * diff
            d[i] = _pairwise_sum(scratch, np.int64(0), m)
        return
    for i in range(n_slots):
        diff = Xc[0, i] - q[0]
        d[i] = diff * diff
    for j in range(1, m):
        qj = q[j]
        for i in range(n_slots):
            diff = Xc[j, i] - qj
            d[i] += diff * diff


@nb.njit(cache=True)
def _farthest(d, live, n_slots):
    """The live slot of largest ``d``, the lowest on ties."""
    best = -1
    far = -1.0
    for i in range(n_slots):
        if live[i] and d[i] > far:
            far, best = d[i], i
    return best


@nb.njit(cache=True)
def _compact(Xc, Cc, rows, live, n_slots):
    """Squeeze dead slots out of the first ``n_slots``, keeping row order; the new count."""
    w = 0
    for i in range(n_slots):
        if live[i]:
            if w != i:
                Xc[:, w] = Xc[:, i]
                Cc[:, w] = Cc[:, i]
                rows[w] = rows[i]
                live[w] = True
            w += 1
    return w


@nb.njit(cache=True)
def _cell_emd(counts, size, cumulative, share, m, equal, gap):
    """EMD of a cell given its counts per domain value (``Domain.emd_of_counts``); ``gap``
    scratch of length ``m``."""
    if m == 1:
        return 0.0
    if equal:
        for v in range(m):
            gap[v] = abs(counts[v] / size - share[v])
        return 0.5 * _pairwise_sum(gap, np.int64(0), m)
    running = 0.0
    for v in range(m - 1):
        running += counts[v]
        gap[v] = abs(running / size - cumulative[v])
    return _pairwise_sum(gap, np.int64(0), m - 1) / (m - 1)


@nb.njit(cache=True)
def _emd_if_added(counts, size, cumulative, share, m, equal, gap, out):
    """``out[v]``: EMD of the cell plus one record of value ``v`` (``Domain.emd_if_added``);
    ``size`` is the cell's size before the addition, ``gap`` and ``out`` of length ``m``."""
    if m == 1:
        out[0] = 0.0
        return
    grown = size + 1.0
    step = 1.0 / grown
    if equal:
        for v in range(m):
            out[v] = abs(counts[v] / grown - share[v])
        total = _pairwise_sum(out, np.int64(0), m)
        for v in range(m):
            gap[v] = counts[v] / grown - share[v]
        for v in range(m):
            out[v] = 0.5 * (total - abs(gap[v]) + abs(gap[v] + step))
        return
    running = 0.0
    for v in range(m - 1):
        running += counts[v]
        gap[v] = running / grown - cumulative[v]
    # out[v] = (sum_{u < v} |gap_u| + sum_{u >= v} |gap_u + step|) / (m - 1)
    after = 0.0
    out[m - 1] = 0.0
    for v in range(m - 2, -1, -1):
        after += abs(gap[v] + step)
        out[v] = after
    before = 0.0
    out[0] = (0.0 + out[0]) / (m - 1)
    for v in range(1, m):
        before += abs(gap[v - 1])
        out[v] = (before + out[v]) / (m - 1)


@nb.njit(cache=True)
def _too_far(counts, size, cumulative, share, sizes, equal, limit, gap):
    for c in range(sizes.shape[0]):
        if _cell_emd(counts[c], size, cumulative[c], share[c], sizes[c], equal[c], gap) > limit:
            return True
    return False


@nb.njit(cache=True)
def _take(slot, label, rows, live, Cc, counts, labels, members, n_members):
    live[slot] = False
    labels[rows[slot]] = label
    for c in range(Cc.shape[0]):
        counts[c, Cc[c, slot]] += 1.0
    if n_members == members.shape[0]:
        bigger = np.empty(2 * n_members, np.int64)
        bigger[:n_members] = members
        members = bigger
    members[n_members] = slot
    return members


@nb.njit(cache=True)
def _make_cell(Xc, Cc, rows, live, n_slots, seed, k, d, counts, cumulative, share, sizes,
               equal, limit, label, labels, near_slot, near_d, gap, members, scores, scratch):
    """Build the cell of slot ``seed``: its ``k - 1`` nearest live slots, then growth while the
    cell is not t-close. Leaves in ``d`` the squared distances of every slot to the seed;
    marks the members dead and labels them; returns the cell's size and the members buffer."""
    _distances(Xc, n_slots, Xc[:, seed].copy(), d, scratch)
    need = k - 1
    filled = 0
    if need > 0:
        for i in range(n_slots):
            if not live[i] or i == seed:
                continue
            di = d[i]
            # slots come in row order, so an equal distance never displaces a kept slot
            if filled == need and di >= near_d[need - 1]:
                continue
            pos = filled if filled < need else need - 1
            while pos > 0 and near_d[pos - 1] > di:
                near_d[pos] = near_d[pos - 1]
                near_slot[pos] = near_slot[pos - 1]
                pos -= 1
            if filled < need:
                filled += 1
            near_d[pos] = di
            near_slot[pos] = i
    members = _take(seed, label, rows, live, Cc, counts, labels, members, np.int64(0))
    size = np.int64(1)
    for p in range(filled):
        members = _take(near_slot[p], label, rows, live, Cc, counts, labels, members, size)
        size += 1
    n_cols = Cc.shape[0]
    while _too_far(counts, float(size), cumulative, share, sizes, equal, limit, gap):
        for c in range(n_cols):
            _emd_if_added(counts[c], float(size), cumulative[c], share[c], sizes[c],
                          equal[c], gap, scores[c])
        best = np.int64(-1)
        best_score = 0.0
        best_d = 0.0
        for i in range(n_slots):
            if not live[i]:
                continue
            score = scores[0, Cc[0, i]]
            for c in range(1, n_cols):
                other = scores[c, Cc[c, i]]
                if other > score:
                    score = other
            if (best < 0 or score < best_score
                    or (score == best_score and d[i] < best_d)):
                best, best_score, best_d = i, score, d[i]
        if best < 0:
            break  # no free record left
        members = _take(best, label, rows, live, Cc, counts, labels, members, size)
        size += 1
    for p in range(size):
        for c in range(n_cols):
            counts[c, Cc[c, members[p]]] = 0.0
    return size, members


@nb.njit(cache=True, nogil=True)
def kfirst_labels(X, k, codes, cumulative, share, sizes, equal, limit, progress):
    """Algorithm 2's cells on the standardised float64 matrix ``X`` (n x m).

    ``codes`` (n x s, int64) are the records' ranks in each sensitive column's domain;
    ``cumulative`` and ``share`` (s x max domain size) that column's distribution function and
    distribution, ``sizes`` the domain sizes, ``equal`` the columns with the equal ground
    distance; a cell is too far when an EMD exceeds ``limit`` (``t`` plus the tolerance).
    Returns the labels, ``-1`` for the records left free (fewer than ``2k``), and the number of
    cells. ``progress[0]`` counts the records placed.
    """
    n, m = X.shape
    # the free records by slot, in row order, column-major so that distances vectorise
    Xc = np.ascontiguousarray(X.T)
    Cc = np.ascontiguousarray(codes.T)
    rows = np.arange(n)
    live = np.ones(n, np.bool_)
    n_slots = n
    n_free = n
    labels = np.full(n, -1, np.int64)
    d = np.empty(n)
    d_c = np.empty(n)
    counts = np.zeros(cumulative.shape)
    scores = np.zeros(cumulative.shape)
    gap = np.empty(cumulative.shape[1])
    near_slot = np.empty(max(k - 1, 1), np.int64)
    near_d = np.empty(max(k - 1, 1))
    members = np.empty(max(4 * k, 16), np.int64)
    centroid = np.empty(m)
    scratch = np.empty(m)
    n_cells = np.int64(0)
    while n_free >= 2 * k:
        # x_r: the free record farthest from the free records' centroid (ties: lowest row)
        _free_centroid(Xc, live, n_slots, n_free, centroid)
        _distances(Xc, n_slots, centroid, d_c, scratch)
        x_r = _farthest(d_c, live, n_slots)
        size, members = _make_cell(Xc, Cc, rows, live, n_slots, x_r, k, d, counts,
                                   cumulative, share, sizes, equal, limit, n_cells, labels,
                                   near_slot, near_d, gap, members, scores, scratch)
        n_free -= size
        n_cells += 1
        if n_free >= 2 * k:
            # x_s: the free record farthest from x_r, from the distances its cell computed
            x_s = _farthest(d, live, n_slots)
            size, members = _make_cell(Xc, Cc, rows, live, n_slots, x_s, k, d, counts,
                                       cumulative, share, sizes, equal, limit, n_cells,
                                       labels, near_slot, near_d, gap, members, scores, scratch)
            n_free -= size
            n_cells += 1
        progress[0] = n - n_free
        if n_slots - n_free > n_free // 16 + 4 * k:
            n_slots = _compact(Xc, Cc, rows, live, n_slots)
    return labels, n_cells


@nb.njit(cache=True, nogil=True)
def tfirst_labels(X, stratum, position, size, n_cells, progress):
    """Algorithm 3's cells on the standardised float64 matrix ``X`` (n x m).

    ``stratum[i]`` is record ``i``'s stratum (``0..size-1``) of the sensitive ordering and
    ``position[i]`` its place in it. While fewer than ``n_cells`` cells are made: ``x_r``, the
    free record farthest from the free records' centroid, gets a cell of the free record
    nearest to it in every stratum (ties to the earlier place), then ``x_s``, the free record
    farthest from ``x_r``, likewise. Returns the labels, ``-1`` for the records left free.
    ``progress[0]`` counts the records placed.
    """
    n, m = X.shape
    Xc = np.ascontiguousarray(X.T)
    rows = np.arange(n)
    live = np.ones(n, np.bool_)
    n_slots = n
    n_free = n
    labels = np.full(n, -1, np.int64)
    d = np.empty(n)
    best_d = np.empty(size)
    best_place = np.empty(size, np.int64)
    best_slot = np.empty(size, np.int64)
    centroid = np.empty(m)
    scratch = np.empty(m)
    dummy = np.empty((0, n), np.int64)
    made = 0
    while made < n_cells:
        _free_centroid(Xc, live, n_slots, n_free, centroid)
        _distances(Xc, n_slots, centroid, d, scratch)
        seed = _farthest(d, live, n_slots)
        for turn in range(2):
            if turn == 1:
                if made == n_cells:
                    break
                seed = _farthest(d, live, n_slots)  # x_s, from the distances to x_r
            _distances(Xc, n_slots, Xc[:, seed].copy(), d, scratch)
            best_d[:] = np.inf
            for i in range(n_slots):
                if not live[i]:
                    continue
                row = rows[i]
                s = stratum[row]
                if d[i] < best_d[s] or (d[i] == best_d[s] and position[row] < best_place[s]):
                    best_d[s], best_place[s], best_slot[s] = d[i], position[row], i
            for s in range(size):
                live[best_slot[s]] = False
                labels[rows[best_slot[s]]] = made
            n_free -= size
            made += 1
        progress[0] = n - n_free
        if n_slots - n_free > n_free // 16 + 4 * size:
            n_slots = _compact(Xc, dummy, rows, live, n_slots)
    return labels
