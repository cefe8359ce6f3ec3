"""A release spliced from a base release made before close (issue 17; pure, no I/O).

The expensive part of a large release besides the engines is Python-bound: one JSON message
per record. A two-stage release leaves most cells of the base run as they were, so the
messages of their records can be made while the survey is still open, right after the base
run (:func:`prepare_base`), and at close only the records of the cells the incremental stage
made or changed are serialised and spliced in (:func:`splice`).

The row order stays a uniform random permutation of the final release: the base records are
put in a uniformly random order before close; at close the late records are put, in a
uniformly random order, at a uniformly random set of positions among the n of the release,
and the base records fill the other positions in their order. Every permutation of the n
records arises from exactly one (set of positions, order of the late records, order of the
base records), of which there are C(n, n_late) * n_late! * n_base! = n!, all equally likely;
and none of the three depends on the values, so the order tells nothing about arrival, cells or
stage. A base record whose cell changed keeps its position and only gets new values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pandas as pd

from streamanon.errors import InputError
from streamanon.release import Prepared, Release, release_prepared


@dataclass(frozen=True)
class BaseRelease:
    """The release of a base snapshot's records, made before close: their ``frame`` (stored
    records, arrival order), their base ``labels``, each record's release message (record
    order) and the random ``order`` the base records take in the final release."""

    frame: pd.DataFrame
    labels: np.ndarray
    messages: list[bytes]
    order: np.ndarray

    @property
    def n_base(self) -> int:
        return len(self.labels)


def prepare_base(frame: pd.DataFrame, prepared: Prepared, labels: np.ndarray, k: int,
                 seed: int | None = None) -> BaseRelease:
    """The base records' release messages under their base ``labels`` (the gate applies to
    them: each base cell has k records), and their random order."""
    labels = np.asarray(labels)
    release = release_prepared(frame, prepared, labels, k, seed=None, shuffle=False)
    messages = record_messages(release.table, prepared.encoding.names, labels)
    order = np.random.default_rng(seed).permutation(len(labels))
    return BaseRelease(frame, labels, messages, order)


def unchanged_base_records(base_labels: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Which base records are in a cell that is exactly their base cell (no member added,
    none taken away) under the final ``labels`` of all records (base records first)."""
    base_labels = np.asarray(base_labels)
    n_base = len(base_labels)
    final = np.asarray(labels)[:n_base]
    cells = int(base_labels.max()) + 1
    low = np.full(cells, np.iinfo(np.int64).max, dtype=np.int64)
    high = np.full(cells, -1, dtype=np.int64)
    np.minimum.at(low, base_labels, final)
    np.maximum.at(high, base_labels, final)
    size = np.bincount(base_labels, minlength=cells)
    final_size = np.bincount(labels)
    same = (low == high) & (final_size[np.maximum(low, 0)] == size)
    return same[base_labels]


def splice_order(base_order: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """The release order of ``n`` records whose first ``len(base_order)`` are the base:
    the late records (``n_base`` to ``n - 1``) in a random order at random positions, the base
    records in ``base_order`` elsewhere (a uniform permutation: module docstring)."""
    n_base = len(base_order)
    if n < n_base:
        raise InputError(f"{n} records cannot hold a base of {n_base}")
    late = np.zeros(n, dtype=bool)
    late[rng.choice(n, n - n_base, replace=False)] = True
    order = np.empty(n, dtype=np.int64)
    order[~late] = base_order
    order[late] = n_base + rng.permutation(n - n_base)
    return order


def splice(base: BaseRelease, frame: pd.DataFrame, prepared: Prepared, labels: np.ndarray,
           k: int, seed: int | None = None) -> tuple[Release, list[bytes], np.ndarray]:
    """The release of all records ``frame`` (the base records first, as ``base.frame``) under
    their final ``labels``, with the base's messages reused wherever a base cell is unchanged:
    the shuffled release, its messages in that order and the order (row i of the release is
    record ``order[i]``). The table is computed whole (numpy, with the gate); only messages are
    spliced. Equal, cell by cell, to a release built from scratch of the same partition."""
    labels = np.asarray(labels)
    n = len(frame)
    if labels.shape != (n,) or base.n_base > n:
        raise InputError(f"{labels.shape} labels for {n} records with a base of {base.n_base}")
    release = release_prepared(frame, prepared, labels, k, seed=None, shuffle=False)
    keep = np.zeros(n, dtype=bool)
    keep[:base.n_base] = unchanged_base_records(base.labels, labels)
    redo = np.flatnonzero(~keep)
    fresh = record_messages(release.table.iloc[redo], prepared.encoding.names, labels[redo])
    messages: list[Any] = [None] * n
    for i in np.flatnonzero(keep).tolist():
        messages[i] = base.messages[i]
    for i, message in zip(redo.tolist(), fresh, strict=True):
        messages[i] = message
    order = splice_order(base.order, n, np.random.default_rng(seed))
    table = release.table.iloc[order].reset_index(drop=True)
    shuffled = Release(table=table, distortion=release.distortion, loss=release.loss)
    return shuffled, [messages[i] for i in order.tolist()], order


def record_messages(frame: pd.DataFrame, qi: Sequence[str] = (),
                    cells: np.ndarray | None = None) -> list[bytes]:
    """One JSON object per row, the row's columns in table order (orjson; NaN as null).

    With ``cells`` (one id per row, rows of a cell sharing their ``qi`` values, as in a
    release), the quasi-identifier part of a message is serialised once per cell and shared by
    its rows; the bytes are the same either way, only faster (a release has n / k cells)."""
    cols = [str(c) for c in frame.columns]
    if not cols:
        return [b"{}"] * len(frame)
    shared = set(qi) if cells is not None and len(frame) else set()
    runs: list[tuple[bool, list[str]]] = []  # maximal runs of shared / per-row columns
    for c in cols:
        if runs and runs[-1][0] == (c in shared):
            runs[-1][1].append(c)
        else:
            runs.append((c in shared, [c]))
    parts = []
    if shared:
        _, first, inverse = np.unique(cells, return_index=True, return_inverse=True)
    for per_cell, names in runs:
        if per_cell:
            fragments = np.array(_fragments(frame.iloc[first][names]), dtype=object)
            parts.append(fragments[inverse].tolist())
        else:
            parts.append(_fragments(frame[names]))
    if len(parts) == 1:
        return [b"{%b}" % p for p in parts[0]]
    return [b"{%b}" % b",".join(p) for p in zip(*parts, strict=True)]


def _fragments(frame: pd.DataFrame) -> list[bytes]:
    """Per row, its columns as the inside of a JSON object (``"a":1,"b":null``)."""
    cols = [str(c) for c in frame.columns]
    data = [_json_values(frame[c]) for c in frame.columns]
    return [orjson.dumps(dict(zip(cols, row, strict=True)))[1:-1]
            for row in zip(*data, strict=True)]


def _json_values(column: pd.Series) -> list[Any]:
    """A column's values for JSON: a missing value of a nullable integer, boolean or category
    column (``pd.NA``) as None."""
    values = column.tolist()
    if isinstance(column.dtype, pd.api.extensions.ExtensionDtype) and column.hasnans:
        return [None if v is pd.NA or (isinstance(v, float) and v != v) else v for v in values]
    return values
