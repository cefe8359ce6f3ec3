"""A plain sequential nearest-centroid adjoiner: the oracle of the nn stages.

Every new record, in order, scores every live cell at its current centroid
(``sum_j (c_j - y_j)^2`` in column order, times ``n/(n+1)`` when inertial), joins the lowest-id
best cell, and moves its centroid to ``(n x + y) / (n + 1)``. Splits run MDAV (the engine the
tests hold equal to ``tests/reference_mdav.py``) on the cell's members in record order; the
first sub-cell keeps the id, the others take new ids.

The records are taken one at a time; only the scores of one record are computed for all cells
at once, column by column, so each cell's sum runs in column order as a scalar loop would.
"""

from __future__ import annotations

import numpy as np

from streamanon.engines.mdav import mdav


def reference_adjoin(base, base_labels, increment, k, *, inertial=False, split=None):
    X = np.concatenate([base, increment])
    n0 = len(base)
    cell_of = np.concatenate([base_labels, np.full(len(increment), -1)]).astype(np.int64)
    n_cells = int(base_labels.max()) + 1
    capacity = n_cells + len(X) // k + 1  # a split makes at most len(members) // k cells
    cent = np.zeros((capacity, X.shape[1]))
    sizes = np.zeros(capacity)
    for c in range(n_cells):
        cent[c] = X[cell_of == c].sum(axis=0) / np.sum(cell_of == c)
        sizes[c] = np.sum(cell_of == c)

    def split_cell(c):
        nonlocal n_cells
        members = np.flatnonzero(cell_of == c)
        labels = mdav(X[members], k, screen=False)
        ids = [c, *list(range(n_cells, n_cells + labels.max()))]
        n_cells += labels.max()
        for s, cid in enumerate(ids):
            rows = members[labels == s]
            cell_of[rows] = cid
            cent[cid] = [sum(X[rows, t]) / len(rows) for t in range(X.shape[1])]
            sizes[cid] = len(rows)

    for i in range(n0, len(X)):
        y = X[i]
        d2 = np.zeros(n_cells)
        for t in range(len(y)):
            diff = cent[:n_cells, t] - y[t]
            d2 += diff * diff
        scores = d2 * sizes[:n_cells] / (sizes[:n_cells] + 1.0) if inertial else d2
        best = int(np.argmin(scores))
        n = sizes[best]
        cent[best] = (n * cent[best] + y) / (n + 1)
        sizes[best] = n + 1
        cell_of[i] = best
        if split == "mid" and sizes[best] >= 2 * k:
            split_cell(best)
    if split == "end":
        for c in range(n_cells):
            if sizes[c] >= 2 * k:
                split_cell(c)
    return cell_of
