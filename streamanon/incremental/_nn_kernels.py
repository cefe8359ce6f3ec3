"""Compiled kernels of the nearest-neighbour incremental stages (``nn.py``).

New records are adjoined one at a time, in arrival order, to the cell whose *current* centroid
is nearest (or, inertial, whose ``n_q/(n_q+1) |y - x_q|^2`` is smallest); the centroid moves to
``(n x + y) / (n + 1)``. Ties go to the lowest cell id.

Candidate cells for each record come from a spatial index built over the centroids as they were
when it was built (``cand``: the ids of the ``c`` indexed centroids nearest to the record,
``cand_d``: their distances to it). Centroids then move, and ``split_mid`` creates new cells.
The choice stays exact: a cell outside the candidate list was at least ``cand_d[-1]`` away when
indexed and has moved at most ``max_drift`` since, so it cannot beat a candidate whose current
distance is below ``cand_d[-1] - max_drift``; cells created after the index was built are all
checked. When that test fails, every live cell is checked. With no index (``cand`` empty) every
record is checked against every cell: a linear scan, which beats a tree in high dimension.

A kernel passes another ``np.int64(0)`` or ``np.bool_(True)``, never a bare ``0`` or ``True``,
and a counter it passes on starts as ``np.int64(0)``: numba would compile the callee once
more for the constant's own type (``streamanon.warmup``, "One signature per kernel").
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from streamanon.engines.cells import centroid_distances, mdav_split, rows_of

_SLACK = 1e-9


@nb.njit(cache=True)
def _sqdist_to_cell(X, i, centT, c):
    """Squared distance of record ``i`` to the centroid of cell ``c`` (column order)."""
    s = 0.0
    for t in range(centT.shape[0]):
        d = centT[t, c] - X[i, t]
        s += d * d
    return s


@nb.njit(cache=True)
def _drift(centT, ref, c):
    s = 0.0
    for t in range(centT.shape[0]):
        d = centT[t, c] - ref[t, c]
        s += d * d
    return math.sqrt(s)


@nb.njit(cache=True)
def _score(d2, size, inertial):
    return d2 * size / (size + 1.0) if inertial else d2


@nb.njit(cache=True)
def _best_of(Xall, row, centT, sizes, ids, n_ids, inertial):
    best = np.inf
    best_c = -1
    for t in range(n_ids):
        c = ids[t]
        v = _score(_sqdist_to_cell(Xall, row, centT, c), sizes[c], inertial)
        if v < best or (v == best and c < best_c):
            best = v
            best_c = c
    return best_c, best


@nb.njit(cache=True)
def _scan_best(Xall, row, centT, sizes, n_cells, inertial, acc):
    """Best cell over all ``n_cells``: distances accumulated column by column over the
    column-major centroids, which vectorises across cells."""
    centroid_distances(Xall[row], centT, n_cells, acc)
    best = np.inf
    best_c = -1
    for c in range(n_cells):
        v = _score(acc[c], sizes[c], inertial)
        if v < best:
            best = v
            best_c = c
    return best_c, best


@nb.njit(cache=True)
def _cell_members(head, nxt, c, out):
    """Members of cell ``c`` in increasing record order; returns their count."""
    n = 0
    i = head[c]
    while i >= 0:
        out[n] = i
        n += 1
        i = nxt[i]
    out[:n].sort()
    return n


@nb.njit(cache=True)
def _link(head, nxt, c, i):
    nxt[i] = head[c]
    head[c] = i


@nb.njit(cache=True)
def _recompute_centroid(Xall, members, n, centT, c):
    for t in range(centT.shape[0]):
        s = 0.0
        for u in range(n):
            s += Xall[members[u], t]
        centT[t, c] = s / n


@nb.njit(cache=True)
def split_cell(Xall, c, k, centT, sizes, head, nxt, cell_of, n_cells, members):
    """Run MDAV on the members of cell ``c`` (in record order); the first sub-cell keeps id
    ``c``, the others get new ids from ``n_cells``. Returns the new number of cells."""
    n = _cell_members(head, nxt, c, members)
    labels = mdav_split(rows_of(Xall, members, n), k)
    return apply_split(Xall, c, labels, members, centT, sizes, head, nxt, cell_of, n_cells)


@nb.njit(cache=True)
def cell_members(head, nxt, c, size):
    """The members of cell ``c`` in increasing record order, as a new array."""
    out = np.empty(size, np.int64)
    n = _cell_members(head, nxt, c, out)
    return out[:n]


@nb.njit(cache=True)
def apply_split(Xall, c, labels, members, centT, sizes, head, nxt, cell_of, n_cells):
    """Replace cell ``c`` by the sub-cells ``labels`` (0..s-1, one per entry of ``members``,
    its members in record order): sub-cell 0 keeps id ``c``, the others get new ids from
    ``n_cells``. Returns the new number of cells."""
    n = labels.shape[0]
    n_sub = labels.max() + 1
    ids = np.empty(n_sub, np.int64)
    ids[0] = c
    for s in range(1, n_sub):
        ids[s] = n_cells
        n_cells += 1
    for s in range(n_sub):
        head[ids[s]] = -1
        sizes[ids[s]] = 0
    for u in range(n):
        cell = ids[labels[u]]
        cell_of[members[u]] = cell
        sizes[cell] += 1
        _link(head, nxt, cell, members[u])
    buf = np.empty(n, np.int64)
    for s in range(n_sub):
        count = _cell_members(head, nxt, ids[s], buf)
        _recompute_centroid(Xall, buf, count, centT, ids[s])
    return n_cells


@nb.njit(cache=True)
def adjoin(Xall, start, stop, k, centT, sizes, head, nxt, cell_of, n_cells, cand, cand_d,
           inertial, split_mid, external_split, extras_limit, moved_out, stats):
    """Adjoin records ``start..stop-1`` of ``Xall`` (rows of the union) in order.

    ``cand`` / ``cand_d`` (one row per record) come from an index built over the ``n_cells``
    centroids as they are on entry; with zero columns every record scans every cell. Returns
    ``(next record, n_cells, cell)``: it stops early, so the caller can rebuild the index, once
    ``split_mid`` has made more than ``extras_limit`` cells the index does not describe; and
    with ``external_split`` it stops as soon as a cell reaches ``2k``, unsplit, and returns
    it as ``cell`` (otherwise -1) for the caller to split with another engine.
    With ``moved_out`` an indexed cell that a record joins leaves the index and is checked
    directly from then on, like a new cell (no drift enters the bound); it stops early on the
    same limit.
    ``stats[0]`` counts full scans forced by a failed bound, ``stats[1]`` splits.
    """
    n_cand = cand.shape[1]
    ref = centT.copy()
    in_index = np.zeros(centT.shape[1], np.bool_)
    in_index[:n_cells] = n_cand > 0
    extras = np.empty(centT.shape[1], np.int64)
    acc = np.empty(centT.shape[1])  # cells to check besides the candidates
    n_extra = 0
    max_drift = 0.0
    w_min = k / (k + 1.0) if inertial else 1.0
    members = np.empty(Xall.shape[0], np.int64)
    for i in range(start, stop):
        q = i - start
        best_c = -1
        best = np.inf
        if n_cand > 0:
            best_c, best = _best_of(Xall, i, centT, sizes, cand[q], n_cand, inertial)
            for t in range(n_extra):
                c = extras[t]
                v = _score(_sqdist_to_cell(Xall, i, centT, c), sizes[c], inertial)
                if v < best or (v == best and c < best_c):
                    best = v
                    best_c = c
            bound = cand_d[q, n_cand - 1] - max_drift
            if not (bound > 0 and best < w_min * bound * bound * (1 - _SLACK)):
                best_c = -1  # an unlisted cell might be as good: check them all
                stats[0] += 1
        if best_c < 0:
            best_c, best = _scan_best(Xall, i, centT, sizes, n_cells, inertial, acc)
        # adjoin and move the centroid: x' = (n x + y) / (n + 1)
        n = sizes[best_c]
        for t in range(centT.shape[0]):
            centT[t, best_c] = (n * centT[t, best_c] + Xall[i, t]) / (n + 1)
        sizes[best_c] = n + 1
        cell_of[i] = best_c
        _link(head, nxt, best_c, i)
        if in_index[best_c]:
            if moved_out:
                in_index[best_c] = False
                extras[n_extra] = best_c
                n_extra += 1
            else:
                max_drift = max(max_drift, _drift(centT, ref, best_c))
        if split_mid and sizes[best_c] >= 2 * k:
            if external_split:
                return i + 1, n_cells, best_c
            before = n_cells
            n_cells = split_cell(Xall, best_c, k, centT, sizes, head, nxt, cell_of, n_cells,
                                 members)
            stats[1] += 1
            if n_cand > 0:
                # the re-centred cell and the new ones are checked directly from now on
                if in_index[best_c]:
                    in_index[best_c] = False
                    extras[n_extra] = best_c
                    n_extra += 1
                for c in range(before, n_cells):
                    extras[n_extra] = c
                    n_extra += 1
        if n_extra > extras_limit:
            return i + 1, n_cells, -1
    return stop, n_cells, -1


@nb.njit(cache=True)
def split_large_cells(Xall, k, centT, sizes, head, nxt, cell_of, n_cells, stats):
    """Split every cell of 2k or more records with MDAV (``nn_split_end``)."""
    members = np.empty(Xall.shape[0], np.int64)
    for c in range(n_cells):
        if sizes[c] >= 2 * k:
            n_cells = split_cell(Xall, c, k, centT, sizes, head, nxt, cell_of, n_cells,
                                 members)
            stats[1] += 1
    return n_cells
