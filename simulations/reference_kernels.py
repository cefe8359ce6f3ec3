"""The exhaustive ONA*: the oracle the indexed ONA* kernel must equal, bit for bit.

``ona_star_labels_exhaustive`` runs ONA*'s local search (paper 004, Algorithm 3) from MDAV*'s
exhaustive labels, finding every member of a cell by a scan of all labels and every nearest cell
by a scan of all centroids, with none of the indexed kernel's caches, logs and member lists; the
cell arithmetic (``streamanon.engines.cells``) is the kernels' own, so both price every move
with the same numbers. Quadratic: for ``simulations/bench_ona.py`` and the tests
(``tests/engines/test_ona_scaling.py``), which import it from here since the benchmarks may not
import ``tests``.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from streamanon.engines._local_search_kernels import _nearest_cell, mdav_star_labels_exhaustive
from streamanon.engines.cells import (
    TOL,
    add_record,
    cell_cost,
    dissolve_pays,
    mdav_split,
    move_record,
    renumbered,
    rows_of,
    sq,
    sqnorm,
)


@nb.njit(cache=True)
def _members(labels, c, out):
    count = 0
    for i in range(labels.shape[0]):
        if labels[i] == c:
            out[count] = i
            count += 1
    return count


@nb.njit(cache=True)
def _split_exhaustive(X, labels, c, k, sums, sqs, sizes, alive, n_cells, buf, use_star):
    """Split cell ``c`` (of 2k or more) with MDAV* (or MDAV); the first part keeps id ``c``."""
    count = _members(labels, c, buf)
    sub = rows_of(X, buf, count)
    part = mdav_star_labels_exhaustive(sub, k) if use_star else mdav_split(sub, k)
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
        add_record(X[buf[u]], sqnorm(X[buf[u]]), cid, sums, sqs, sizes)
    return n_cells


@nb.njit(cache=True, nogil=True)
def ona_star_labels_exhaustive(X, k, max_rounds, stats):
    """ONA* (paper 004, Algorithm 3), every nearest cell found by scanning all cells.
    ``stats``: rounds run, dissolves, moves, splits."""
    n, m = X.shape
    labels = mdav_star_labels_exhaustive(X, k)
    cap = n // k + 2
    sums = np.zeros((cap, m))
    sqs = np.zeros(cap)
    sizes = np.zeros(cap, np.int64)
    alive = np.zeros(cap, np.bool_)
    n_cells = labels.max() + 1
    for i in range(n):
        c = labels[i]
        add_record(X[i], sqnorm(X[i]), c, sums, sqs, sizes)
        alive[c] = True
    buf = np.empty(n, np.int64)
    for c in range(labels.max() + 1):  # MDAV* may leave large cells: MDAV splits them
        if sizes[c] >= 2 * k:
            n_cells = _split_exhaustive(X, labels, c, k, sums, sqs, sizes, alive, n_cells, buf,
                                        False)
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
                if dissolve_pays(X, buf, count, ci, target, sums, sqs, sizes, gsum, gsq,
                                 gsize):
                    for u in range(count):
                        move_record(X, labels, buf[u], ci, target[u], sums, sqs, sizes,
                                    sqnorm(X[buf[u]]))
                    alive[ci] = False
                    stats[1] += 1
                    changed = True
                    for u in range(count):
                        t = target[u]
                        if alive[t] and sizes[t] >= 2 * k:
                            n_cells = _split_exhaustive(X, labels, t, k, sums, sqs, sizes,
                                                        alive, n_cells, buf, True)
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
                    gain = ni / (ni - 1.0) * sq(X[s], mu_i) - sizes[t] / (sizes[t] + 1.0) * dt
                    if gain > best_gain:
                        best_gain = gain
                        best_s = s
                        best_t = t
                scale = cell_cost(sums, sqs, sizes, ci) + 1.0
                if best_s < 0 or best_gain <= TOL * scale:
                    break
                move_record(X, labels, best_s, ci, best_t, sums, sqs, sizes, sqnorm(X[best_s]))
                stats[2] += 1
                changed = True
                if sizes[best_t] >= 2 * k:
                    n_cells = _split_exhaustive(X, labels, best_t, k, sums, sqs, sizes, alive,
                                                n_cells, buf, True)
                    stats[3] += 1
            ci += 1
        if not changed:
            break
    return renumbered(labels, alive, sizes, n_cells)


