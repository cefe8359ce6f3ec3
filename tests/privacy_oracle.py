"""Slow reference checkers for k-anonymity, l-diversity, t-closeness and distance-based record
linkage, written from the definitions (specification section 9) with plain Python loops; they import
nothing of streamanon, so an agreement with :mod:`streamanon.risk` and
:mod:`streamanon.privacy` is evidence, not a tautology.

Groups: the rows sharing a key tuple, a missing value being one value of its own per column.
A missing sensitive value is a value of its own too, the last of an ordered domain.
"""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import linprog

MISSING = ("<missing>",)  # a value no real data has; equal only to itself
LP_LIMIT = 12  # domains up to this size: the EMD as an explicit transport LP


def _value(v: Any) -> Hashable:
    return MISSING if pd.isna(v) else v


def _tuples(frame: pd.DataFrame, key: Sequence[str]) -> list[tuple]:
    return [tuple(_value(v) for v in row)
            for row in frame[list(key)].astype(object).itertuples(index=False)]


def group_rows(frame: pd.DataFrame, key: Sequence[str]) -> list[list[int]]:
    """The rows of each group, by position."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, t in enumerate(_tuples(frame, key)):
        groups[t].append(i)
    return list(groups.values())


def k_of(frame: pd.DataFrame, key: Sequence[str]) -> int:
    """The size of the smallest group (0 for an empty table)."""
    sizes = Counter(_tuples(frame, key)).values()
    return min(sizes) if sizes else 0


def l_of(frame: pd.DataFrame, key: Sequence[str], s: str) -> int:
    """Distinct l-diversity: the fewest distinct values of ``s`` in a group."""
    values = [_value(v) for v in frame[s].astype(object)]
    return min(len({values[i] for i in rows}) for rows in group_rows(frame, key))


def domain(values: Sequence[Hashable], order: Sequence[Any] | None = None) -> list[Hashable]:
    """The distinct values, sorted (by ``order`` when given: an ordinal's levels), missing
    last."""
    present = set(values)
    if order is not None:
        ranked = [v for v in order if v in present]
        rest = [v for v in present if v not in set(order) and v != MISSING]
        return ranked + sorted(rest, key=repr) + ([MISSING] if MISSING in present else [])
    known = sorted(v for v in present if v != MISSING)
    return known + ([MISSING] if MISSING in present else [])


def emd_transport(p: np.ndarray, q: np.ndarray, ground: np.ndarray) -> float:
    """The Earth Mover's Distance: the least cost of moving mass ``p`` onto ``q`` with
    ``ground[i, j]`` the cost of moving a unit from value i to value j, solved as the
    transport linear programme (flows f_ij >= 0, rows summing to p, columns to q)."""
    m = len(p)
    rows = np.zeros((m, m * m))
    cols = np.zeros((m, m * m))
    for i in range(m):
        rows[i, i * m:(i + 1) * m] = 1.0
        cols[i, i::m] = 1.0
    fit = linprog(ground.ravel(), A_eq=np.vstack([rows, cols]), b_eq=np.concatenate([p, q]),
                  bounds=(0, None), method="highs")
    assert fit.success, fit.message
    return float(fit.fun)


def emd(p: np.ndarray, q: np.ndarray, kind: str) -> float:
    """EMD of two distributions over one domain (Li et al. 2007): ``ordered`` ground distance
    |i - j| / (m - 1), ``equal`` ground distance 1. An explicit LP on small domains; the
    closed forms (cumulative differences; half the L1 distance) on larger ones."""
    m = len(p)
    if m <= 1:
        return 0.0
    if m <= LP_LIMIT:
        return _emd_lp(tuple(p.tolist()), tuple(q.tolist()), kind)
    if kind == "ordered":
        return float(np.sum(np.abs(np.cumsum(p - q))) / (m - 1))
    return float(0.5 * np.sum(np.abs(p - q)))


@functools.lru_cache(maxsize=65536)
def _emd_lp(p: tuple[float, ...], q: tuple[float, ...], kind: str) -> float:
    """The LP of :func:`emd`, solved once per distinct pair of distributions: small groups
    repeat the same few distributions many times over."""
    m = len(p)
    i, j = np.indices((m, m))
    ground = np.abs(i - j) / (m - 1) if kind == "ordered" else (i != j).astype(float)
    return emd_transport(np.array(p), np.array(q), ground)


def t_of(frame: pd.DataFrame, key: Sequence[str], s: str, kind: str,
         order: Sequence[Any] | None = None) -> float:
    """t-closeness: the largest EMD of a group's distribution of ``s`` to the whole table's,
    over the whole table's distinct values (``order``: an ordinal's levels)."""
    values = [_value(v) for v in frame[s].astype(object)]
    dom = domain(values, order)
    where = {v: i for i, v in enumerate(dom)}

    def distribution(rows: Sequence[int]) -> np.ndarray:
        out = np.zeros(len(dom))
        for r in rows:
            out[where[values[r]]] += 1.0
        return out / len(rows)

    whole = distribution(range(len(values)))
    return max(emd(distribution(rows), whole, kind) for rows in group_rows(frame, key))


def dbrl(original: pd.DataFrame, release: pd.DataFrame, key: Sequence[str],
         ordinal: Mapping[str, Sequence[Any]] | None = None,
         nominal: Sequence[str] = ()) -> float:
    """Distance-based record linkage, brute force over every pair of records: the expected
    share of original records an intruder links to their own released row (same position),
    picking at random among the released records nearest to the original one.

    Distance (the mixed distance): a numeric or ordinal (rank in ``ordinal``'s levels) value
    standardised by the original's observed mean and population standard deviation (1 when
    constant); a nominal attribute contributes 2 / (1 - sum p^2) for a mismatch (``p`` the
    original's level frequencies); a missing value stands at the attribute's mean (for a
    nominal, at the frequency vector ``p``).
    """
    ordinal = dict(ordinal or {})
    n = len(original)
    total = np.zeros((n, len(release)))
    for name in key:
        a = [_value(v) for v in original[name].astype(object)]
        b = [_value(v) for v in release[name].astype(object)]
        if name in nominal:
            total += _nominal_distances(a, b)
        else:
            if name in ordinal:
                rank = {v: float(i) for i, v in enumerate(ordinal[name])}
                a = [MISSING if v == MISSING else rank[v] for v in a]
                b = [MISSING if v == MISSING else rank[v] for v in b]
            total += _numeric_distances(a, b)
    chance = 0.0
    for i in range(n):
        nearest = np.flatnonzero(total[i] <= total[i].min() * (1 + 1e-9) + 1e-12)
        if i in set(nearest.tolist()):
            chance += 1.0 / len(nearest)
    return chance / n


def _numeric_distances(a: list, b: list) -> np.ndarray:
    seen = np.array([float(v) for v in a if v != MISSING])
    mean = float(seen.mean()) if seen.size else 0.0
    sd = float(seen.std()) if seen.size else 0.0
    sd = sd if sd > 0 else 1.0

    def z(v: Any) -> float:
        return 0.0 if v == MISSING else (float(v) - mean) / sd

    return np.array([[(z(x) - z(y)) ** 2 for y in b] for x in a])


def _nominal_distances(a: list, b: list) -> np.ndarray:
    counts = Counter(v for v in a if v != MISSING)
    seen = sum(counts.values())
    levels = sorted(set(counts) | {v for v in b if v != MISSING}, key=repr)
    p = {v: counts.get(v, 0) / seen if seen else 0.0 for v in levels}
    spread = 1.0 - sum(x * x for x in p.values())
    spread = spread if spread > 0 else 1.0

    def vector(v: Any) -> np.ndarray:  # the centred indicator; missing at the centre
        return np.array([0.0 if v == MISSING else float(v == u) - p[u] for u in levels])

    return np.array([[float(np.sum((vector(x) - vector(y)) ** 2)) / spread for y in b]
                     for x in a])
