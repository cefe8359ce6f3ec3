"""The released values of mixed survey data: each cell's value per attribute, by type
(specification section 9), from the codes of :mod:`streamanon.mixed`.

Released values (:func:`release_codes`): per cell the (weighted) mean of a numeric attribute,
rounded for ``int`` (every member gets the same value, so k-anonymity holds); the (weighted)
median level of an ordinal; the (weighted) modal category of a nominal. Where two medians or
several modes tie, the cell takes the level the release has given least so far against its
share of the data, so that ties do not all move the margin the same way.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from streamanon.mixed import Encoding


def release_codes(C: np.ndarray, labels: np.ndarray, encoding: Encoding,
                  withheld: np.ndarray | None = None,
                  weights: np.ndarray | None = None) -> np.ndarray:
    """The released codes: each record's cell value per attribute (see the module docstring),
    NaN where ``withheld`` (n x m) says the value is not released. A cell with no observed
    value of an imputed attribute takes the value over all records."""
    labels = np.asarray(labels, dtype=np.int64)
    cells = int(labels.max()) + 1 if labels.size else 0
    out = np.empty_like(C, dtype=np.float64)
    w = np.ones(C.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)
    sizes = np.bincount(labels, minlength=cells).astype(np.float64) if weights is None else None
    everyone = np.zeros(C.shape[0], dtype=np.int64)
    for j, col in enumerate(encoding.columns):
        x = C[:, j]
        seen = ~np.isnan(x)
        complete = bool(seen.all())
        if col.kind in ("float", "int"):
            if complete and sizes is not None:  # the plain cell mean: one bincount
                with np.errstate(invalid="ignore", divide="ignore"):
                    value = np.bincount(labels, weights=x, minlength=cells) / sizes
            else:
                value = _weighted_mean(x, seen, w, labels, cells)
            if col.kind == "int":
                value = np.rint(value)
        else:
            value = _level_value(x, seen, None if weights is None and complete else w,
                                 labels, cells, len(col.levels), col.kind)
        empty = np.isnan(value)
        if empty.any():  # cells with no observed value: the value over all records
            if col.kind in ("float", "int"):
                fallback = _weighted_mean(x, seen, w, everyone, 1)[0]
                fallback = np.rint(fallback) if col.kind == "int" else fallback
            else:
                fallback = _level_value(x, seen, w, everyone, 1, len(col.levels), col.kind)[0]
            value = np.where(empty, fallback, value)
        out[:, j] = value[labels]
    if withheld is not None:
        out[withheld] = np.nan
    return out


def _weighted_mean(x: np.ndarray, seen: np.ndarray, w: np.ndarray, labels: np.ndarray,
                   cells: int) -> np.ndarray:
    ws = np.where(seen, w, 0.0)
    total = np.bincount(labels, weights=ws, minlength=cells)
    sums = np.bincount(labels, weights=np.where(seen, x, 0.0) * ws, minlength=cells)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, sums / np.where(total > 0, total, 1.0), np.nan)


def _level_value(x: np.ndarray, seen: np.ndarray, w: np.ndarray | None, labels: np.ndarray,
                 cells: int, n_levels: int, kind: str) -> np.ndarray:
    """Per cell the weighted modal level (nominal) or the weighted lower median (ordinal);
    ``w`` None: every value observed and of weight 1 (the counts, counted as integers)."""
    if w is None:
        table = np.bincount(labels * n_levels + x.astype(np.int64),
                            minlength=cells * n_levels).astype(np.float64)
    else:
        codes = np.where(seen, x, 0).astype(np.int64)
        table = np.bincount(labels * n_levels + codes, weights=np.where(seen, w, 0.0),
                            minlength=cells * n_levels)
    table = table.reshape(cells, n_levels)
    total = table.sum(axis=1)
    if kind == "ordinal":
        cumulative = np.cumsum(table, axis=1)
        value = np.argmax(cumulative >= total[:, None] / 2.0, axis=1)  # the lower median
        upper = np.argmax(cumulative > total[:, None] / 2.0, axis=1)  # the upper median
        value = _ties_keeping_the_margin(table, total, value, (upper != value) & (total > 0),
                                         lambda c: np.array([value[c], upper[c]]))
    else:
        value = np.argmax(table, axis=1)
        top = table[np.arange(len(table)), value]
        ties = (total > 0) & ((table == top[:, None]).sum(axis=1) > 1)
        value = _ties_keeping_the_margin(table, total, value, ties,
                                         lambda c: np.flatnonzero(table[c] == top[c]))
    return np.where(total > 0, value.astype(np.float64), np.nan)


def _ties_keeping_the_margin(table: np.ndarray, total: np.ndarray, value: np.ndarray,
                             tied: np.ndarray, choices: Callable[[int], np.ndarray]
                             ) -> np.ndarray:
    """``value`` (each cell's level; ``table``: cells x levels, weighted counts) where the
    cells ``tied`` take, of their equally good ``choices`` (the levels that tie for the mode;
    the lower and the upper median), the one the release has given least so far against its
    share of the data: cells in order, after every cell without a tie. A tie costs the same
    loss whichever level wins (the share of values changed; the mean rank shift); always the
    first level, or always the lower median, moved the margin the same way at every tie
    (a k = 5 cell of five states released as the first state, alphabetically: CCES 2016's
    state margin moved 2.06 % at k = 5, 0.16 % with this rule)."""
    tied = np.flatnonzero(tied)
    if len(tied) == 0:
        return value
    value = value.copy()
    released = np.bincount(np.delete(value, tied), weights=np.delete(total, tied),
                           minlength=table.shape[1])
    deficit = table.sum(axis=0) - released
    for c in tied:
        levels = choices(c)
        level = levels[np.argmax(deficit[levels])]  # the first of equal deficits
        value[c] = level
        deficit[level] -= total[c]
    return value
