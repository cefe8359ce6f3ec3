"""The groups mixed survey data is microaggregated in: strata and missing-value patterns
(specification section 9). Cells are formed within a group and never cross groups.

Missing values (:func:`make_groups`): for a field with ``missing = "group"`` the pattern of
which such fields are missing splits the records; cells are formed within a pattern and the
values stay missing in the release. A pattern of fewer than k records joins the nearest pattern
(fewest differing fields, then the larger), whose pattern its records then take: a value that
pattern has is filled with the cell's value (imputed), a value it lacks is withheld. A field
with ``missing = "impute"`` does not split: its gaps are filled with the cell's value. The
k-anonymity check treats a missing value as a value of its own. **Strata** split the records
first; a stratum of fewer than k records joins the stratum whose centroid is nearest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from streamanon.errors import InputError
from streamanon.mixed import Encoding


@dataclass
class Groups:
    """Each record's group (``ids``), what each group releases as missing (``withheld``:
    groups x quasi-identifiers), and what was merged."""

    ids: np.ndarray
    withheld: np.ndarray
    merged_strata: list[dict[str, Any]] = field(default_factory=list)
    moved_records: int = 0  # records of a pattern under k that took another pattern

    @property
    def count(self) -> int:
        return int(self.withheld.shape[0])

    def members(self) -> list[np.ndarray]:
        """The records of each group, in their order (arrival order is kept)."""
        order = np.argsort(self.ids, kind="stable")
        bounds = np.cumsum(np.bincount(self.ids, minlength=self.count))[:-1]
        return np.split(order, bounds)


def stratum_ids(frame: pd.DataFrame, strata: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """A stratum number per row (missing is a value of its own) and a name per stratum."""
    if not strata:
        return np.zeros(len(frame), dtype=np.int64), ["all"]
    keys = frame[list(strata)].astype(object).where(frame[list(strata)].notna(), None)
    codes, uniques = pd.MultiIndex.from_frame(keys).factorize()
    names = [", ".join(f"{s}={v}" for s, v in zip(strata, u, strict=True)) for u in uniques]
    return codes.astype(np.int64), names


def make_groups(C: np.ndarray, Z: np.ndarray, encoding: Encoding, k: int,
                strata: np.ndarray | None = None,
                stratum_names: Sequence[str] = ()) -> Groups:
    """The groups records are microaggregated in (see the module docstring).

    Raises
    ------
    InputError
        Fewer than ``k`` records in all.
    """
    n = C.shape[0]
    if n < k:
        raise InputError(f"{n} records cannot form a cell of k = {k}: no {k}-anonymous "
                         "release exists")
    strata = np.zeros(n, dtype=np.int64) if strata is None else np.asarray(strata)
    merged_strata = []
    stratum_of = _merge_strata(strata, Z, k, merged_strata, list(stratum_names))
    grouped = [j for j, c in enumerate(encoding.columns) if c.missing == "group"]
    pattern_missing = np.isnan(C[:, grouped])
    ids = np.empty(n, dtype=np.int64)
    withheld_rows: list[np.ndarray] = []
    moved = 0
    for s in np.unique(stratum_of):
        rows = np.flatnonzero(stratum_of == s)
        patterns, which = np.unique(pattern_missing[rows], axis=0, return_inverse=True)
        which = which.reshape(-1)
        target = _merge_patterns(patterns, np.bincount(which, minlength=len(patterns)), k)
        for p in np.unique(target):
            members = rows[target[which] == p]
            moved += int(np.sum(which[target[which] == p] != p))
            ids[members] = len(withheld_rows)
            mask = np.zeros(len(encoding.columns), dtype=bool)
            mask[grouped] = patterns[p]
            withheld_rows.append(mask)
    withheld = (np.array(withheld_rows, dtype=bool) if withheld_rows
                else np.zeros((0, len(encoding.columns)), dtype=bool))
    return Groups(ids=ids, withheld=withheld, merged_strata=merged_strata, moved_records=moved)


def _merge_strata(strata: np.ndarray, Z: np.ndarray, k: int, merged: list[dict[str, Any]],
                  names: list[str]) -> np.ndarray:
    """Strata of fewer than ``k`` records joined, smallest first, to the stratum whose
    centroid is nearest; the merges are appended to ``merged``."""
    labels = np.unique(strata, return_inverse=True)[1].reshape(-1)
    count = int(labels.max()) + 1
    sizes = np.bincount(labels, minlength=count).astype(np.int64)
    sums = np.zeros((count, Z.shape[1]))
    np.add.at(sums, labels, Z)

    def nearest(a: int, others: np.ndarray) -> int:
        centroids = sums[others] / sizes[others, None]
        return int(others[np.argmin(np.sum((centroids - sums[a] / sizes[a]) ** 2, axis=1))])

    def join(a: int, b: int) -> None:
        merged.append({"stratum": names[a] if a < len(names) else str(a),
                       "into": names[b] if b < len(names) else str(b),
                       "records": int(sizes[a])})
        sums[b] += sums[a]

    return _merge_small(sizes, k, nearest, join)[labels]


def _merge_patterns(patterns: np.ndarray, sizes: np.ndarray, k: int) -> np.ndarray:
    """For each pattern, the pattern it is released as: patterns under ``k`` records join,
    smallest first, the nearest (fewest differing fields, then the larger, then the first)."""
    sizes = sizes.astype(np.int64).copy()

    def nearest(a: int, others: np.ndarray) -> int:
        differ = np.sum(patterns[others] != patterns[a], axis=1)
        return int(others[np.lexsort((others, -sizes[others], differ))[0]])

    return _merge_small(sizes, k, nearest)


def _merge_small(sizes: np.ndarray, k: int, nearest: Callable[[int, np.ndarray], int],
                 join: Callable[[int, int], None] | None = None) -> np.ndarray:
    """For each group, the group it ends in: while a group has fewer than ``k`` records and
    another is left, the smallest (the first of equals), ``a``, joins ``nearest(a, others)``
    among the groups left. ``join(a, b)`` is told of each merge before ``sizes`` (updated in
    place) adds ``a``'s records to ``b``."""
    count = len(sizes)
    into = np.arange(count)
    alive = np.ones(count, dtype=bool)
    while alive.sum() > 1:
        small = np.flatnonzero(alive & (sizes < k))
        if small.size == 0:
            break
        a = int(small[np.argmin(sizes[small])])
        b = nearest(a, np.flatnonzero(alive & (np.arange(count) != a)))
        if join is not None:
            join(a, b)
        sizes[b] += sizes[a]
        alive[a] = False
        into[into == a] = b
    return into


def partition_groups(Z: np.ndarray, groups: Groups, encoding: Encoding,
                     run: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """Labels of all records from ``run(rows, Z_group)`` on each group (cells never cross
    groups); the embedding columns a group withholds are left out of its run."""
    labels = np.empty(Z.shape[0], dtype=np.int64)
    offset = 0
    slices = encoding.slices
    for g, rows in enumerate(groups.members()):
        keep = np.concatenate([np.arange(slices[j].start, slices[j].stop)
                               for j in range(len(slices)) if not groups.withheld[g, j]]
                              or [np.zeros(0, dtype=np.int64)]).astype(np.int64)
        Zg = np.ascontiguousarray(Z[np.ix_(rows, keep)]) if keep.size else np.zeros(
            (rows.size, 1))
        part = np.asarray(run(rows, Zg), dtype=np.int64)
        labels[rows] = part + offset
        offset += int(part.max()) + 1 if part.size else 0
    return labels
