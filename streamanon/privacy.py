"""Beyond k-anonymity: t-closeness and distinct l-diversity of a partition, and the merging step
that enforces them.

A cell of a k-anonymous release still discloses its members' sensitive answers when those are
too alike. *t-closeness* (Li, Li and Venkatasubramanian, ICDE 2007) asks that the distribution
of each sensitive attribute in every cell be within Earth Mover's Distance ``t`` of its
distribution in the whole data; *distinct l-diversity* asks for at least ``l`` distinct values
per cell. The EMD is taken over the domain of the sorted distinct values of the whole column,
with one of Li et al.'s two ground distances: ``ordered`` (``|i - j| / (m - 1)`` between ranks,
for numbers and ordinal answers) or ``equal`` (1 between any two distinct values, for nominal
answers).

:func:`enforce` is the merging step of Soria-Comas et al. (algorithm 1, second half): while a
cell violates the model, the worst cell is merged with the cell whose centroid is nearest.
Merging keeps every cell at least ``k``; the cell of all records has EMD 0, so the loop always
ends, t-close; it is l-diverse iff the data is.

Everything here is pure NumPy over arrays; the functions are vectorised so that a partition of
a million records into thousands of cells is checked in well under a second.

References
----------
N. Li, T. Li, S. Venkatasubramanian, "t-Closeness: Privacy beyond k-anonymity and
l-diversity", ICDE 2007, section 4 (EMD for ordered and equal distances).
J. Soria-Comas, J. Domingo-Ferrer, D. Sánchez, S. Martínez, "t-Closeness through
Microaggregation: Strict Privacy with Enhanced Utility Preservation", IEEE TKDE 27(11), 2015,
algorithm 1 (Soria-Comas et al. 2015 in docs/design/references.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from streamanon.errors import InputError, ParameterError

KINDS = ("ordered", "equal")

#: Slack on ``EMD <= t``: EMDs are float sums, and a cell whose EMD equals ``t`` in exact
#: arithmetic must not be merged because of rounding. The release gate uses the same slack.
TOLERANCE = 1e-12


def _check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise ParameterError(f"EMD kind must be 'ordered' (numbers, ordinal answers) or "
                             f"'equal' (nominal answers), got {kind!r}")
    return kind


@dataclass(frozen=True)
class Domain:
    """One sensitive column coded on its domain: ``codes[i]`` is the rank of record ``i``'s value
    among the ``m`` sorted distinct values; ``share`` is the distribution of the whole column,
    ``cumulative`` its distribution function at each domain value and ``prefix`` the running
    sum of ``cumulative`` (``prefix[i]`` = sum of ``cumulative[:i]``)."""

    codes: np.ndarray
    m: int
    kind: str
    share: np.ndarray
    cumulative: np.ndarray
    prefix: np.ndarray

    @classmethod
    def of(cls, values: np.ndarray, kind: str) -> Domain:
        """The domain of a column of values (any dtype :func:`numpy.unique` can sort)."""
        _check_kind(kind)
        values = np.asarray(values).ravel()
        if values.size == 0:
            raise InputError("a sensitive column needs at least one value")
        uniques, codes = np.unique(values, return_inverse=True)
        m = len(uniques)
        share = np.bincount(codes.ravel(), minlength=m) / values.size
        cumulative = np.cumsum(share)
        cumulative[-1] = 1.0
        prefix = np.concatenate([[0.0], np.cumsum(cumulative)])
        return cls(codes.ravel().astype(np.int64), m, kind, share, cumulative, prefix)

    def cell_emds(self, cells: np.ndarray, n_cells: int, codes: np.ndarray | None = None
                  ) -> np.ndarray:
        """The EMD to the whole column of each cell ``0..n_cells-1``; ``cells[i]`` is the cell
        of the record with code ``codes[i]`` (default: every record of the column)."""
        codes = self.codes if codes is None else codes
        return self.histogram_emds(*histograms(cells, codes, self.m), n_cells)

    def histogram_emds(self, cell: np.ndarray, code: np.ndarray, count: np.ndarray,
                       n_cells: int) -> np.ndarray:
        """The EMD of each cell ``0..n_cells-1`` from its histogram: the entries
        ``(cell[e], code[e], count[e])`` sorted by cell, then code, without repeats."""
        if self.m == 1:
            return np.zeros(n_cells)
        sizes = np.bincount(cell, count, minlength=n_cells)
        if self.kind == "equal":
            # 1/2 sum_v |h_v - p_v| = 1/2 (1 + sum over the cell's values of (|h_v - p_v| - p_v))
            p = self.share[code]
            terms = np.abs(count / sizes[cell] - p) - p
            return np.maximum(0.5 * (1.0 + np.bincount(cell, terms, minlength=n_cells)), 0.0)
        # sum_{i < m-1} |F_cell(i) - F(i)| / (m - 1). F_cell is a step function: level L_e on
        # [code_e, code_{e+1}). F is non-decreasing, so on each step the sum of |L_e - F(i)|
        # splits at the first i with F(i) >= L_e and is read off prefix sums: O(h log m) for
        # h histogram entries.
        entries = np.bincount(cell, minlength=n_cells)
        present = entries > 0
        last = np.cumsum(entries)[present] - 1
        first = last - entries[present] + 1
        offset = np.cumsum(sizes) - sizes
        level = (np.cumsum(count) - offset[cell]) / sizes[cell]
        start = code
        end = np.empty_like(start)
        end[:-1] = start[1:]
        end[last] = self.m - 1  # a cell's last step ends at m - 1
        split = np.clip(np.searchsorted(self.cumulative, level, side="left"), start, end)
        P = self.prefix
        steps = (level * (split - start) - (P[split] - P[start])
                 + (P[end] - P[split]) - level * (end - split))
        below = np.zeros(n_cells)  # the step before a cell's first value, where F_cell = 0
        below[present] = P[start[first]]
        return (below + np.bincount(cell, steps, minlength=n_cells)) / (self.m - 1)

    def emd_of_counts(self, counts: np.ndarray) -> float:
        """The EMD of one cell given by its count of each domain value (length ``m``)."""
        if self.m == 1:
            return 0.0
        size = counts.sum()
        if self.kind == "equal":
            return float(0.5 * np.abs(counts / size - self.share).sum())
        gap = np.cumsum(counts)[:-1] / size - self.cumulative[:-1]
        return float(np.abs(gap).sum() / (self.m - 1))

    def emd_if_added(self, counts: np.ndarray) -> np.ndarray:
        """For each domain value ``c``, the EMD of the cell ``counts`` plus one record of value
        ``c``: all ``m`` candidates in O(m)."""
        if self.m == 1:
            return np.zeros(1)
        size = counts.sum() + 1.0
        step = 1.0 / size
        if self.kind == "equal":
            gap = counts / size - self.share
            return 0.5 * (np.abs(gap).sum() - np.abs(gap) + np.abs(gap + step))
        gap = np.cumsum(counts)[:-1] / size - self.cumulative[:-1]
        # Adding value c raises the cell's distribution function by 1/size from c on.
        before = np.concatenate([[0.0], np.cumsum(np.abs(gap))])
        after = np.concatenate([np.cumsum(np.abs(gap + step)[::-1])[::-1], [0.0]])
        return (before + after) / (self.m - 1)


def histograms(cells: np.ndarray, codes: np.ndarray, m: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The cells' histograms as entries ``(cell, code, count)``, sorted by cell, then code;
    ``cells`` and ``codes`` are int64 per record, ``m`` the domain size."""
    keys, count = np.unique(cells * np.int64(m) + codes, return_counts=True)
    cell, code = np.divmod(keys, m)
    return cell, code, count.astype(np.float64)


def emd(cell: np.ndarray, whole: np.ndarray, kind: str) -> float:
    """Earth Mover's Distance between the empirical distributions of ``cell`` and ``whole``.

    The domain is the sorted distinct values of ``whole`` (``m`` of them); every value of
    ``cell`` must be one of them. ``kind="ordered"``: ground distance ``|i - j| / (m - 1)``
    between the ranks, ``EMD = sum_i |sum_{j <= i} (p_j - q_j)| / (m - 1)``.
    ``kind="equal"``: ground distance 1 between distinct values, ``EMD = sum_i |p_i - q_i| / 2``.
    ``m = 1`` gives 0.

    Examples
    --------
    >>> emd([1, 2], [1, 2, 3, 4], "ordered")  # cumulative gaps 1/4, 1/2, 1/4 over m - 1 = 3
    0.3333333333333333
    >>> emd(["a", "a"], ["a", "b"], "equal")
    0.5

    References
    ----------
    Li, Li and Venkatasubramanian (ICDE 2007), section 4.2.
    """
    _check_kind(kind)
    whole = np.asarray(whole).ravel()
    cell = np.asarray(cell).ravel()
    if whole.size == 0 or cell.size == 0:
        raise InputError("emd needs at least one value in the cell and in the whole")
    domain = np.unique(whole)
    where = np.searchsorted(domain, cell)
    if (where >= len(domain)).any() or (domain[np.minimum(where, len(domain) - 1)] != cell).any():
        raise InputError("every value of the cell must occur in the whole column")
    return Domain.of(whole, kind).emd_of_counts(np.bincount(where, minlength=len(domain)))


def _cell_index(labels: np.ndarray, n: int) -> tuple[np.ndarray, int]:
    labels = np.asarray(labels).ravel()
    if labels.shape != (n,):
        raise InputError(f"{labels.shape[0]} labels for {n} sensitive values; give one per "
                         f"record")
    uniques, index = np.unique(labels, return_inverse=True)
    return index.ravel().astype(np.int64), len(uniques)


def cell_emds(labels: np.ndarray, sensitive: np.ndarray, kind: str) -> np.ndarray:
    """The EMD of every cell's distribution of ``sensitive`` to the whole column's.

    Entry ``i`` belongs to the ``i``-th smallest label (so to label ``i`` when the labels are
    ``0..c-1``). Vectorised: O(n log n).

    Examples
    --------
    >>> cell_emds([0, 0, 1, 1], [1, 2, 3, 4], "ordered").round(4).tolist()
    [0.3333, 0.3333]
    >>> cell_emds([0, 1, 0, 1], [1, 2, 3, 4], "ordered").round(4).tolist()
    [0.1667, 0.1667]
    """
    domain = Domain.of(sensitive, kind)
    cells, n_cells = _cell_index(labels, len(domain.codes))
    return domain.cell_emds(cells, n_cells)


def cell_distinct(labels: np.ndarray, sensitive: np.ndarray) -> np.ndarray:
    """The number of distinct values of ``sensitive`` in every cell (distinct l-diversity),
    indexed as in :func:`cell_emds`.

    Examples
    --------
    >>> cell_distinct([0, 0, 1, 1], ["a", "a", "a", "b"]).tolist()
    [1, 2]
    """
    codes = np.unique(np.asarray(sensitive).ravel(), return_inverse=True)[1].ravel()
    cells, n_cells = _cell_index(labels, len(codes))
    return _distinct(cells, n_cells, codes.astype(np.int64), int(codes.max()) + 1)


def _distinct(cells: np.ndarray, n_cells: int, codes: np.ndarray, m: int) -> np.ndarray:
    pairs = np.unique(cells * np.int64(m) + codes) // m
    return np.bincount(pairs, minlength=n_cells)


def sensitive_columns(S: object, n: int) -> np.ndarray:
    """``S`` as an ``n x s`` array (a vector is one column); values of any sortable dtype."""
    if S is None:
        raise ParameterError("the sensitive attributes S= are required: one row per record")
    S = np.asarray(S)
    if S.ndim == 1:
        S = S[:, None]
    if S.ndim != 2 or S.shape[1] == 0:
        raise InputError(f"S must be a vector or an n x s matrix, got shape {S.shape}")
    if S.shape[0] != n:
        raise InputError(f"S has {S.shape[0]} rows for {n} records; give one per record")
    if np.issubdtype(S.dtype, np.number) and not np.isfinite(S).all():
        raise InputError("S contains NaN or infinite values; code a missing answer as a value "
                         "of its own")
    return S


def resolve_kinds(kinds: str | Sequence[str] | None, s: int) -> tuple[str, ...]:
    """One EMD kind per sensitive column: ``None`` is ``ordered`` for all, a string is that
    kind for all, a sequence gives each column's."""
    if kinds is None:
        kinds = "ordered"
    if isinstance(kinds, str):
        kinds = [kinds] * s
    kinds = tuple(kinds)
    if len(kinds) != s:
        raise ParameterError(f"{len(kinds)} EMD kinds for {s} sensitive columns; give one each")
    return tuple(_check_kind(kind) for kind in kinds)


def _violations(emds: np.ndarray, distinct: np.ndarray, t: float | None,
                l: int | None) -> np.ndarray:  # noqa: E741 (the model's name)
    bad = np.zeros(emds.shape[0], dtype=bool)
    if t is not None:
        bad |= emds.max(axis=1) > t + TOLERANCE
    if l is not None:
        bad |= distinct.min(axis=1) < l
    return bad


def enforce(Z: np.ndarray, labels: np.ndarray, S: np.ndarray, kinds: Sequence[str], *,
            t: float | None, l: int | None) -> np.ndarray:  # noqa: E741 (the model's name)
    """Merge cells until every cell is t-close and distinctly l-diverse in every column of
    ``S``, or one cell is left.

    Soria-Comas et al.'s rule: take the violating cell with the largest EMD (the maximum over
    the sensitive columns; with ``t=None``, or among cells that violate only l, the one with
    fewest distinct values), merge it with the cell whose centroid in ``Z`` is nearest
    (squared Euclidean; ties to the lower label), and repeat. Deterministic. Cells only grow,
    so a k-anonymous partition stays k-anonymous.

    Parameters
    ----------
    Z
        The records' standardised quasi-identifiers, n x m (the centroids come from them).
    labels
        The partition: one integer cell label per record.
    S
        Sensitive attributes, a vector or n x s (codes or values; only order and equality count).
    kinds
        EMD kind of each column of ``S`` (``ordered`` or ``equal``), or one string for all.
    t
        Largest EMD allowed in a cell, or ``None`` for no t-closeness.
    l
        Fewest distinct values allowed in a cell, or ``None`` for no l-diversity.

    Returns
    -------
    numpy.ndarray
        int64 labels ``0..c-1`` (cells numbered in the order of their lowest original label).

    Examples
    --------
    >>> import numpy as np
    >>> Z = np.array([[0.0], [0.1], [5.0], [5.1]])
    >>> enforce(Z, [0, 0, 1, 1], [1, 1, 2, 2], "ordered", t=0.4, l=None).tolist()
    [0, 0, 0, 0]
    >>> enforce(Z, [0, 0, 1, 1], [1, 2, 1, 2], "ordered", t=0.4, l=2).tolist()
    [0, 0, 1, 1]

    References
    ----------
    Soria-Comas, Domingo-Ferrer, Sánchez and Martínez (TKDE 2015), algorithm 1.
    """
    Z = np.asarray(Z, dtype=np.float64)
    if Z.ndim != 2:
        raise InputError(f"Z must be an n x m matrix, got {Z.ndim} dimension(s)")
    n = Z.shape[0]
    S = sensitive_columns(S, n)
    domains = [Domain.of(S[:, j], kind)
               for j, kind in enumerate(resolve_kinds(kinds, S.shape[1]))]
    cells, n_cells = _cell_index(labels, n)
    if t is None and l is None:
        return cells
    while True:
        cells, merged = _merge(Z, cells, n_cells, domains, t, l)
        n_cells = int(cells.max()) + 1 if n else 0
        # The merged cells' EMDs were recomputed cell by cell; this check on the final
        # partition is the one the release gate makes, so the two can never disagree.
        if not merged or n_cells <= 1 or not _violations(
                *_scores(cells, n_cells, domains)[1:], t, l).any():
            return cells


def _scores(cells: np.ndarray, n_cells: int, domains: list[Domain]
            ) -> tuple[list[tuple[np.ndarray, np.ndarray, np.ndarray]], np.ndarray, np.ndarray]:
    """The cells' histograms per sensitive column, their EMDs and distinct counts (c x s)."""
    tables = [histograms(cells, d.codes, d.m) for d in domains]
    emds = np.column_stack([d.histogram_emds(*h, n_cells)
                            for d, h in zip(domains, tables, strict=True)])
    distinct = np.column_stack([np.bincount(h[0], minlength=n_cells) for h in tables])
    return tables, emds, distinct


def _merge(Z: np.ndarray, cells: np.ndarray, n_cells: int, domains: list[Domain],
           t: float | None, l: int | None) -> tuple[np.ndarray, bool]:  # noqa: E741
    """One pass of the merging loop; the merged cells' scores come from their histograms
    (``code``, ``count`` per sensitive column), merged by value, not from their records."""
    tables, emds, distinct = _scores(cells, n_cells, domains)
    bad = _violations(emds, distinct, t, l)
    if not bad.any() or n_cells <= 1:
        return cells, False
    cuts = [np.cumsum(np.bincount(cell, minlength=n_cells))[:-1] for cell, _, _ in tables]
    codes = [np.split(code, cut) for (_, code, _), cut in zip(tables, cuts, strict=True)]
    counts = [np.split(count, cut) for (_, _, count), cut in zip(tables, cuts, strict=True)]
    sizes = np.bincount(cells, minlength=n_cells).astype(np.float64)
    sums = np.stack([np.bincount(cells, Z[:, j], minlength=n_cells)
                     for j in range(Z.shape[1])], axis=1)
    alive = np.ones(n_cells, dtype=bool)
    owner = np.arange(n_cells)
    worst_emd = emds.max(axis=1) if t is not None else np.zeros(n_cells)
    fewest = distinct.min(axis=1)
    while alive.sum() > 1 and (bad & alive).any():
        candidates = np.flatnonzero(bad & alive)
        worst = candidates[np.lexsort((candidates, fewest[candidates],
                                       -worst_emd[candidates]))[0]]
        others = np.flatnonzero(alive)
        others = others[others != worst]
        centroids = sums[others] / sizes[others, None]
        gaps = ((centroids - sums[worst] / sizes[worst]) ** 2).sum(axis=1)
        nearest = others[np.argmin(gaps)]  # argmin: first of equal gaps, the lower label
        keep, drop = min(worst, nearest), max(worst, nearest)
        sizes[keep] += sizes[drop]
        sums[keep] += sums[drop]
        alive[drop] = False
        owner[owner == drop] = keep
        row = np.empty(len(domains))
        count = np.empty(len(domains), dtype=np.int64)
        for j, domain in enumerate(domains):
            code, inverse = np.unique(np.concatenate([codes[j][keep], codes[j][drop]]),
                                      return_inverse=True)
            counts[j][keep] = np.bincount(inverse, np.concatenate(
                [counts[j][keep], counts[j][drop]]), minlength=len(code))
            codes[j][keep] = code
            row[j] = domain.histogram_emds(np.zeros(len(code), dtype=np.int64), code,
                                           counts[j][keep], 1)[0]
            count[j] = len(code)
        worst_emd[keep] = row.max() if t is not None else 0.0
        fewest[keep] = count.min()
        bad[keep] = _violations(row[None, :], count[None, :], t, l)[0]
        bad[drop] = False
    survivors = np.flatnonzero(alive)
    renumber = np.zeros(n_cells, dtype=np.int64)
    renumber[survivors] = np.arange(len(survivors))
    return renumber[owner[cells]], True
