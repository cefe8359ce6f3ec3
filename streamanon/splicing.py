"""A release spliced from a base release made before close (pure, no I/O).

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

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pandas as pd

from streamanon.errors import InputError, KAnonymityError
from streamanon.release import (
    Prepared,
    Release,
    release_loss,
    release_prepared,
    released_table,
)
from streamanon.released_values import release_codes


@dataclass(frozen=True)
class BaseRelease:
    """The release of a base snapshot's records, made before close: their ``frame`` (stored
    records, arrival order), their base ``labels``, their release ``table`` and released
    codes ``R`` (record order, not shuffled), the random ``order`` the base records take in
    the final release, and their release ``messages`` in that order (``messages[j]`` is
    record ``order[j]``'s)."""

    frame: pd.DataFrame
    labels: np.ndarray
    table: pd.DataFrame
    R: np.ndarray
    messages: list[bytes]
    order: np.ndarray

    @property
    def n_base(self) -> int:
        return len(self.labels)


def prepare_base(frame: pd.DataFrame, prepared: Prepared, labels: np.ndarray, k: int,
                 seed: int | None = None) -> BaseRelease:
    """The base records' release under their base ``labels``, its messages and their random
    order. Checked cell by cell (every base cell has k records, all with one released tuple),
    so that any set of whole base cells is k-anonymous: the gate of the part a splice reuses."""
    if prepared.groups is not None or np.isnan(prepared.C).any():
        raise InputError("a base release is spliced only for complete data without groups")
    labels = np.asarray(labels)
    R = release_codes(prepared.C, labels, prepared.encoding, None, prepared.weights)
    table = released_table(frame, prepared, R)
    # the gate, cell by cell (k or more rows, one released tuple each: k-anonymous, and so is
    # any set of whole cells); the release's loss is measured on the spliced release
    _require_cells(table, prepared.encoding.names, labels, k)
    order = np.random.default_rng(seed).permutation(len(labels))
    # made in the order they are sent (a splice keeps the base records in ``order``): read
    # in the order they lie in memory, a million messages go out a second and a half faster
    messages = record_messages(table.iloc[order], prepared.encoding.names, labels[order])
    return BaseRelease(frame, labels, table, R, messages, order)


def _require_cells(table: pd.DataFrame, qi: Sequence[str], labels: np.ndarray, k: int) -> None:
    """Every cell of ``labels`` has ``k`` rows of ``table`` or more, all with the same
    ``qi`` values; raises :class:`KAnonymityError` otherwise."""
    sizes = np.bincount(labels)
    _, first = np.unique(labels, return_index=True)
    lead = first[np.searchsorted(np.unique(labels), labels)]
    same = np.ones(len(labels), dtype=bool)
    for name in qi:
        values = table[name].to_numpy()
        same &= values == values[lead]
    small = sizes[sizes > 0] < k
    if small.any() or not same.all():
        raise KAnonymityError(
            f"base release: {int(small.sum())} cell(s) under k = {k}, "
            f"{int((~same).sum())} record(s) released unlike their cell")


def unchanged_base_records(base_labels: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Which base records are in a cell that is exactly their base cell (no member added,
    none taken away) under the final ``labels`` of all records (base records first)."""
    base_labels = np.asarray(base_labels)
    n_base = len(base_labels)
    final = np.asarray(labels)[:n_base]
    cells = int(base_labels.max()) + 1
    # one member's final label per base cell (whichever the scatter keeps: any member serves)
    one = np.zeros(cells, dtype=np.int64)
    one[base_labels] = final
    moved = np.bincount(base_labels[final != one[base_labels]], minlength=cells)
    size = np.bincount(base_labels, minlength=cells)
    final_size = np.bincount(labels)
    same = (moved == 0) & (final_size[one] == size)
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
    their final ``labels``: the shuffled release, its messages in that order and the order (row
    i of the release is record ``order[i]``).

    Only the records of cells the incremental stage made or changed are released, gated and
    serialised now; the base cells left as they were keep their rows and messages (checked
    cell by cell before close: :func:`prepare_base`). A cell's values depend on its members
    only, so the result equals, cell by cell, the release built from scratch of the same
    partition (complete data, no groups: a cell with no observed value would take the value
    over all records). D and the loss are measured over the whole release."""
    labels = np.asarray(labels)
    n = len(frame)
    if labels.shape != (n,) or base.n_base > n:
        raise InputError(f"{labels.shape} labels for {n} records with a base of {base.n_base}")
    keep = np.zeros(n, dtype=bool)
    if _json_kinds(base.frame) == _json_kinds(frame):  # else the base messages' JSON differs
        keep[:base.n_base] = unchanged_base_records(base.labels, labels)
    kept, redo = np.flatnonzero(keep), np.flatnonzero(~keep)
    part = prepared.subset(redo)
    fresh = base.table.iloc[:0]  # every record in a base cell as it was: nothing to redo
    if len(redo):
        fresh = release_prepared(frame.iloc[redo], part, labels[redo], k, seed=None,
                                 shuffle=False).table  # the gate of the new part
    R = None  # the released codes: the loss of complete floats needs only the cells
    if not prepared.plain_numeric:
        R = np.empty_like(prepared.C, dtype=np.float64)
        R[kept] = base.R[kept]
        if len(redo):
            R[redo] = release_codes(part.C, labels[redo], part.encoding, None, part.weights)
    d, loss = release_loss(prepared, labels, R)
    order = splice_order(base.order, n, np.random.default_rng(seed))
    row_of = np.arange(n, dtype=np.int64)  # record -> row of the joined table (a kept base
    row_of[redo] = base.n_base + np.arange(len(redo))  # record's is its row of base.table)
    rows = row_of[order]
    joined = pd.concat([base.table, fresh], ignore_index=True) if len(fresh) else base.table
    table = joined.iloc[rows].reset_index(drop=True)
    made = record_messages(fresh, prepared.encoding.names, labels[redo]) if len(fresh) else []
    sent_as = np.arange(n)  # a base record's message: its place in base.order
    sent_as[base.order] = np.arange(base.n_base)
    source = np.where(keep, sent_as, base.n_base + np.cumsum(~keep) - 1)[order]
    return (Release(table=table, distortion=d, loss=loss),
            Messages((base.messages, made), base.n_base, source), order)


def _json_kinds(frame: pd.DataFrame) -> list[tuple[str, str]]:
    """Each column with the kind of JSON value its type writes (a nullable integer writes
    what an integer does): a base message is reused only when no column changed its kind
    between the base records and all records (an int column that a late 2.5 made float)."""
    def kind(dtype: Any) -> str:
        if pd.api.types.is_bool_dtype(dtype):
            return "bool"
        if pd.api.types.is_integer_dtype(dtype):
            return "int"
        return "float" if pd.api.types.is_float_dtype(dtype) else str(dtype)
    return [(str(c), kind(frame[c].dtype)) for c in frame.columns]


class Messages(Sequence[bytes]):
    """Messages in release order, taken from the base release's and the new ones as they are
    sent (not copied into a list of their own first: a million references cost a second):
    message i is ``base[source[i]]`` when ``source[i] < n``, else ``new[source[i] - n]``."""

    def __init__(self, parts: tuple[list[bytes], list[bytes]], n: int,
                 source: np.ndarray) -> None:
        self.base, self.new = parts
        self.n = n
        self.source = source

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        j = int(self.source[i])
        return self.base[j] if j < self.n else self.new[j - self.n]

    def __iter__(self) -> Iterator[bytes]:
        base, new, n = self.base, self.new, self.n
        for j in self.source.tolist():
            yield base[j] if j < n else new[j - n]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)


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
