"""Distinct-tuple microaggregation: the work follows the distinct answers, not the respondents.

Real survey keys are low-cardinality (an age, a region, a handful of categories), so at survey
scale most respondents share their whole quasi-identifier tuple with many others. An engine
that treats every respondent as a separate point pays for n records where the problem has the
size of the number of distinct tuples. :func:`distinct_labels` runs an engine on what must move
only:

1. **Collapse.** Identical rows of the standardised matrix (after the schema's coding, so a
   missing answer coded as a value is a value) are found by hashing each row's bytes
   (:func:`collapse`; every row is then compared with its tuple's first row, so a hash
   collision can never merge two different tuples: it falls back to an exact sort).
2. **Large tuples are cells.** A tuple held by at least k respondents is a cell of identical
   records: its loss is zero, and no engine needs to see it.
3. **Small tuples move.** The respondents of the tuples held by fewer than k (each such tuple
   has at most k - 1 of them, so they are few at survey scale) go through the engine as
   records, in their original order: weighted points whose weights are counted in
   respondents, which is what the engine's k counts.
4. **Whichever loses less.** Each cell the engine made of small tuples is then compared with
   dissolving it: each of its tuples instead joins its nearest large tuple (the sum of
   squares grows by ``g w / (g + w) d^2`` for ``g`` records at distance ``d`` of a tuple of
   ``w``) or borrows ``k - g`` of that tuple's respondents into a cell of its own (``g (k - g)
   / k d^2``, allowed while the tuple keeps k of its own). A cell is dissolved when that loses
   less; small respondents too few for a cell of their own always join or borrow.

Exactness: on data without duplicates, or where the tuples held by k or more hold less than
half of the records (:data:`COLLAPSE_SHARE`), nothing is collapsed and the engine runs on every
record as it always has (:func:`distinct_labels` returns None), so the labels are the
engine's, bit for bit. On duplicated data the large tuples cost nothing and
the small ones pay at most what the engine made of them alone.

Pure: arrays in, arrays out.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.spatial import cKDTree

from streamanon.metrics import sse
from streamanon.tuples import Tuples, collapse, collapse_codes, row_hashes

__all__ = ["COLLAPSE_SHARE", "FULL_RUN_RECORDS", "LENDABLE", "NEIGHBOURS", "Tuples",
           "collapse", "distinct_labels", "engine_rows", "row_hashes", "work_share"]

#: The share of the records that tuples of k or more must hold for the collapse to run: below
#: it the engine runs on every record as it always has (the work saved is small, and on the
#: bundled EIA data, where one tuple of 19 repeats holds 0.5 % of the records, taking it out
#: changed MDAV's path through the other 4,073 records enough to lose 0.1 % more).
COLLAPSE_SHARE = 0.5

#: Up to this many records the engine also runs on every record, and the partition that
#: loses less is kept: there the full run costs little (MDAV: a tenth of a second), and the
#: collapse is a heuristic that can lose more than the engine alone where the rare tuples lie
#: far from everything (measured on Zipf-skewed synthetic codes: 3 of 144 cases, by 9-40 %).
FULL_RUN_RECORDS = 20_000

#: Each large tuple lends the engine up to this many times k - 1 of its respondents (the
#: engine may put them in a cell with rare tuples; those it does not use go back).
LENDABLE = 3

#: How many of the nearest large tuples a small tuple considers joining or borrowing from.
NEIGHBOURS = 8

def distinct_labels(X: np.ndarray, k: int,
                    engine: Callable[[np.ndarray], np.ndarray],
                    tuples: Tuples | None = None) -> np.ndarray | None:
    """Labels of a k-anonymous partition of ``X`` that runs ``engine`` (a function of a
    matrix to labels in which every label occurs k or more times) on the respondents of small
    tuples and the large tuples' lendable respondents only (see the module docstring); None
    when the tuples held by k respondents or more hold less than :data:`COLLAPSE_SHARE` of
    them, where the caller runs the engine on every record as before."""
    X = np.asarray(X, dtype=np.float64)
    tuples = collapse(X) if tuples is None else tuples
    large = _set_aside(tuples, k, len(X))
    if large is None:
        return None
    cell_of_tuple = np.full(tuples.n_distinct, -1, dtype=np.int64)
    cell_of_tuple[large] = np.arange(int(large.sum()))
    labels = cell_of_tuple[tuples.inverse]
    small_rows = np.flatnonzero(labels < 0)
    if len(small_rows):
        _Placer(X, k, tuples, large, labels).run(small_rows, engine)
    labels = np.unique(labels, return_inverse=True)[1].ravel().astype(np.int64)
    if len(X) <= FULL_RUN_RECORDS and len(small_rows):
        full = np.asarray(engine(X))
        if sse(X, full) <= sse(X, labels):
            return full
    return labels


def _set_aside(tuples: Tuples, k: int, n: int) -> np.ndarray | None:
    """Which tuples are cells of their own (held by k or more), or None where nothing is
    collapsed: no repeats, or those tuples hold less than :data:`COLLAPSE_SHARE` of the
    ``n`` records."""
    large = tuples.counts >= k
    if tuples.n_distinct == n or tuples.counts[large].sum() < COLLAPSE_SHARE * n:
        return None
    return large


def engine_rows(X: np.ndarray, k: int, tuples: Tuples | None = None) -> int:
    """How many records the engine runs on when ``run_engine`` collapses ``X``: all of them
    where nothing is collapsed, else the respondents of small tuples and the lendable ones
    of large tuples (0 where every respondent is in a tuple of k or more). What the engine's
    cost follows, and what its cost model is observed at."""
    n = len(X)
    if k < 2 or n == 0:
        return n
    tuples = collapse(X) if tuples is None else tuples
    large = _set_aside(tuples, k, n)
    if large is None:
        return n
    small = int(tuples.counts[~large].sum())
    if small and n <= FULL_RUN_RECORDS:  # the engine also runs on every record
        return n
    if small < k:
        return 0
    return small + int(np.minimum(tuples.counts[large] - k, LENDABLE * (k - 1)).sum())


def work_share(codes: np.ndarray, k: int) -> float:
    """The share of these records (a survey's stored key codes, a missing answer NaN) that
    the engine would run on (:func:`engine_rows`; identical codes are identical embedded
    rows): what a planner prices a base run at before it runs."""
    codes = np.asarray(codes, dtype=np.float64)
    if len(codes) == 0:
        return 1.0
    return engine_rows(codes, k, collapse_codes(codes)) / len(codes)


class _Placer:
    """Steps 3 and 4 of the module docstring: writes the small respondents' cells, and the
    cells of the large tuples' respondents lent to them, into ``labels``."""

    def __init__(self, X: np.ndarray, k: int, tuples: Tuples, large: np.ndarray,
                 labels: np.ndarray) -> None:
        self.X, self.k, self.tuples, self.labels = X, k, tuples, labels
        self.large_ids = np.flatnonzero(large)
        self.weight = tuples.counts[self.large_ids].astype(np.float64)
        self.spare = tuples.counts[self.large_ids] - k  # respondents a tuple may still lend
        self.tree = cKDTree(X[tuples.first[self.large_ids]])
        self.next_label = len(self.large_ids)
        self.order, self.starts = tuples.rows()
        self.lent = np.zeros(len(X), dtype=bool)

    def lendable(self) -> np.ndarray:
        """The last ``min(spare, k - 1)`` respondents of each large tuple: those the engine
        may put in a cell with small tuples."""
        ends = self.starts[self.large_ids] + self.tuples.counts[self.large_ids]
        take = np.minimum(self.spare, LENDABLE * (self.k - 1))
        return np.sort(np.concatenate([self.order[e - t:e] for e, t in zip(ends, take,
                                                                           strict=True)]))

    def run(self, small_rows: np.ndarray,
            engine: Callable[[np.ndarray], np.ndarray]) -> None:
        X, k = self.X, self.k
        rows = np.union1d(small_rows, self.lendable())
        if len(small_rows) >= k:
            cells = np.unique(np.asarray(engine(X[rows])), return_inverse=True)[1].ravel()
        else:  # too few for a cell: each joins or borrows from a large tuple
            rows, cells = small_rows, np.zeros(len(small_rows), dtype=np.int64)
        small = self.labels[rows] < 0
        # A cell without small respondents gives its lent ones back; a cell with them keeps
        # only the lent respondents it needs to reach k, the nearest to its small ones (each
        # one given back lowers the cell's sum of squares and costs nothing where it goes).
        keep = small.copy()
        n_cells = int(cells.max()) + 1
        small_count = np.bincount(cells, weights=small, minlength=n_cells).astype(np.int64)
        needs = np.flatnonzero((small_count > 0) & (small_count < k))
        if len(needs):
            centre = np.zeros((n_cells, X.shape[1]))
            np.add.at(centre, cells[small], X[rows[small]])
            centre /= np.maximum(small_count, 1)[:, None]
            d = np.einsum("ij,ij->i", X[rows] - centre[cells], X[rows] - centre[cells])
            by_cell = np.lexsort((d, ~small, cells))  # per cell: small first, then nearest
            rank = np.empty(len(rows), dtype=np.int64)
            first = np.searchsorted(cells[by_cell], np.arange(n_cells))
            rank[by_cell] = np.arange(len(rows)) - first[cells[by_cell]]
            keep |= (small_count[cells] > 0) & (rank < k)
        rows, cells = rows[keep], cells[keep]
        self._take(rows[self.labels[rows] >= 0])
        self._dissolve(rows, np.unique(cells, return_inverse=True)[1].ravel())

    def _dissolve(self, rows: np.ndarray, cells: np.ndarray) -> None:
        """Each cell is kept, or dissolved where its tuples joining or borrowing from their
        nearest large tuples loses less (the largest gains first; a cell under k always)."""
        X, k = self.X, self.k
        n_cells = int(cells.max()) + 1
        small = self.labels[rows] < 0
        # Each cell's parts: the small respondents of one tuple inside it.
        part_key = cells[small] * self.tuples.n_distinct + self.tuples.inverse[rows[small]]
        _, part_first, part_of_row, part_size = np.unique(
            part_key, return_index=True, return_inverse=True, return_counts=True)
        part_of_row = part_of_row.ravel()
        part_cell = cells[small][part_first]
        part_x = X[rows[small][part_first]]
        q = min(NEIGHBOURS, len(self.large_ids))
        dist, near = self.tree.query(part_x, k=q)
        dist, near = dist.reshape(len(part_x), q) ** 2, near.reshape(len(part_x), q)
        g = part_size.astype(np.float64)[:, None]
        # The loss of keeping each cell: its sum of squares about its mean.
        size = np.bincount(cells, minlength=n_cells).astype(np.float64)
        sums = np.zeros((n_cells, X.shape[1]))
        np.add.at(sums, cells, X[rows])
        squares = np.bincount(cells, weights=np.einsum("ij,ij->i", X[rows], X[rows]),
                              minlength=n_cells)
        keep = squares - np.einsum("ij,ij->i", sums, sums) / size
        keep[size < k] = np.inf
        parts_by_cell = np.argsort(part_cell, kind="stable")
        part_starts = np.searchsorted(part_cell[parts_by_cell], np.arange(n_cells + 1))
        dissolve = np.array([self._cost(parts_by_cell[part_starts[c]:part_starts[c + 1]],
                                        near, dist, g) for c in range(n_cells)])
        # Costs only grow as tuples lend and take joiners, so a cell whose dissolving loses
        # more now keeps its cell; the others are tried, the largest gain first.
        own = np.where(dissolve >= keep, 0, -1)
        small_rows = rows[small]
        rows_by_part = np.argsort(part_of_row, kind="stable")
        row_starts = np.searchsorted(part_of_row[rows_by_part], np.arange(len(part_x) + 1))
        lent_by_cell = np.argsort(np.where(small, n_cells, cells), kind="stable")
        lent_starts = np.searchsorted(np.where(small, n_cells, cells)[lent_by_cell],
                                      np.arange(n_cells + 1))
        candidates = np.flatnonzero(own < 0)
        for cell in candidates[np.argsort((dissolve - keep)[candidates], kind="stable")]:
            parts = parts_by_cell[part_starts[cell]:part_starts[cell + 1]]
            lent = rows[lent_by_cell[lent_starts[cell]:lent_starts[cell + 1]]]
            self._give_back(lent)
            if np.isfinite(keep[cell]) and self._cost(parts, near, dist, g) >= keep[cell]:
                self._take(lent)
                own[cell] = 0
                continue
            for p in parts:
                self._place(small_rows[rows_by_part[row_starts[p]:row_starts[p + 1]]],
                            near[p], dist[p], int(part_size[p]))
        kept = np.flatnonzero(own >= 0)
        own[kept] = self.next_label + np.arange(len(kept))
        self.next_label += len(kept)
        in_kept = own[cells] >= 0
        self.labels[rows[in_kept]] = own[cells[in_kept]]

    def _options(self, near: np.ndarray, dist: np.ndarray, g: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
        """The loss of joining each of the ``near`` large tuples, and of borrowing from it."""
        k, w = self.k, self.weight[near]
        join = g * w / (g + w) * dist
        borrow = np.where(self.spare[near] >= k - g, g * (k - g) / k * dist, np.inf)
        return join, borrow

    def _cost(self, parts: np.ndarray, near: np.ndarray, dist: np.ndarray,
              g: np.ndarray) -> float:
        """Dissolving these parts, with the large tuples as they are now."""
        join, borrow = self._options(near[parts], dist[parts], g[parts])
        return float(np.minimum(join, borrow).min(axis=1).sum())

    def _place(self, rows: np.ndarray, near: np.ndarray, dist: np.ndarray, g: int) -> None:
        """One tuple's ``g`` respondents join or borrow from a nearby large tuple."""
        join, borrow = self._options(near, dist, np.float64(g))
        i = int(np.argmin(np.minimum(join, borrow)))
        j = int(near[i])
        if borrow[i] <= join[i]:
            label = self._new_label()
            self.labels[rows] = label
            self.labels[self._lend(j, self.k - g)] = label
        else:
            self.labels[rows] = j
            self.weight[j] += g

    def _lend(self, j: int, count: int) -> np.ndarray:
        """``count`` respondents of large tuple ``j`` not lent yet, from its last."""
        t = self.large_ids[j]
        rows = self.order[self.starts[t]:self.starts[t] + self.tuples.counts[t]][::-1]
        rows = rows[:count + self.tuples.counts[t] - self.k - self.spare[j]]
        out = rows[~self.lent[rows]][:count]
        self._take(out)
        return out

    def _take(self, rows: np.ndarray) -> None:
        """Large tuples' respondents ``rows`` are lent."""
        labels = self.labels[rows]
        np.subtract.at(self.spare, labels, 1)
        np.subtract.at(self.weight, labels, 1.0)
        self.lent[rows] = True

    def _give_back(self, rows: np.ndarray) -> None:
        """Lent respondents ``rows`` go back to their tuples' cells."""
        labels = self.labels[rows]
        np.add.at(self.spare, labels, 1)
        np.add.at(self.weight, labels, 1.0)
        self.lent[rows] = False

    def _new_label(self) -> int:
        self.next_label += 1
        return self.next_label - 1
