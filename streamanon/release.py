"""A survey's release: the partition of its records, and the table that is published.

Two pure functions, arrays and tables in, arrays and tables out:

- :func:`release_partition` puts the records (original units, arrival order) into cells. With a
  usable base snapshot (the small-base rule, :func:`~streamanon.incremental.base_is_usable`)
  the records after it join the base cells through the incremental stage of a
  :class:`~streamanon.incremental.run.TwoStageRun`, in the standardisation the base was run in;
  otherwise one engine run microaggregates all records, standardised as a whole (Rebollo-Monedero
  et al. 2018, sec. IV; specification sections 5 and 6).
- :func:`release_table` turns a partition into the released table: every quasi-identifier
  replaced by the mean of its cell in original units, every other column unchanged, the
  k-anonymity gate applied to the released values, the rows shuffled; with the distortion of
  the release (specification section 3, docs/design/specification.md).

The service releases a survey with both; the ``anonymize`` command with the second, on the
partition :func:`~streamanon.api.microaggregate` makes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from streamanon.errors import InputError, KAnonymityError
from streamanon.incremental.base import base_is_usable
from streamanon.incremental.run import Partition, TwoStageRun
from streamanon.metrics import (
    Standardisation,
    aggregate,
    distortion,
    fit_and_standardise,
    fit_standardisation,
    require_k_anonymous,
    require_k_anonymous_table,
)
from streamanon.mixed import (
    Encoding,
    check_engine,
    embed,
    encoding_for,
    fit_embedding,
    missing_columns,
    repeated_tuples,
)
from streamanon.released_values import release_codes
from streamanon.schema import Schema
from streamanon.strata import Groups, make_groups, partition_groups, stratum_ids
from streamanon.tuples import Tuples, coarsen
from streamanon.type_loss import loss_by_type, loss_of_pairs


def shuffle_rows(data: Any, seed: int | None = None, *, keep_index: bool = False) -> Any:
    """Rows in a random order (numpy array or DataFrame, index reset unless ``keep_index``),
    so that row order tells nothing about arrival order or cells."""
    rng = np.random.default_rng(seed)
    if isinstance(data, pd.DataFrame):
        order = rng.permutation(len(data))
        out = data.iloc[order]
        return out if keep_index else out.reset_index(drop=True)
    return np.asarray(data)[rng.permutation(len(data))]


@dataclass(frozen=True)
class BaseSnapshot:
    """A finished base run: the cells of the first ``n_base`` records, the standardisation
    (``mean``, ``scale``) they were microaggregated in, and the run's time."""

    n_base: int
    labels: np.ndarray
    mean: np.ndarray
    scale: np.ndarray
    seconds: float


def release_partition(run: TwoStageRun, X: np.ndarray, base: BaseSnapshot | None,
                      prepared: Prepared | None = None) -> Partition:
    """The cells of the records ``X`` (n x m, original units, arrival order).

    Two stages when ``base`` is usable for these n records: its cells stay, the records after
    it join through ``run``'s incremental stage, all standardised as the base was. Otherwise
    (no base, fewer than 2k base records, or more than n) one-shot: ``run``'s engine on all
    records, standardised as a whole. The result's ``mode`` says which.

    ``prepared`` (:func:`prepare_codes` of ``X``, embedded as the base was when there is one)
    describes mixed data: with groups (strata, missing values), each group is partitioned on
    its own, two-stage where the base cells of its records lie wholly inside it and are
    usable, one-shot otherwise.
    """
    X = np.asarray(X, dtype=np.float64)
    if prepared is None or prepared.numeric_complete:
        if base is None or not base_is_usable(base.n_base, run.k, X.shape[0]):
            return run.one_shot(fit_standardisation(X).apply(X))
        Z = (X - base.mean) / base.scale
        return run.partition(Z, base.n_base, base_result=(base.labels, base.seconds))
    if prepared.groups is None:
        if base is None or not base_is_usable(base.n_base, run.k, X.shape[0]):
            return run.one_shot(prepared.Z)
        return run.partition(prepared.Z, base.n_base, base_result=(base.labels, base.seconds))
    n_base = 0 if base is None else min(base.n_base, X.shape[0])
    modes: list[str] = []
    times = [0.0, 0.0]

    def one(rows: np.ndarray, Zg: np.ndarray) -> np.ndarray:
        nb = int(np.sum(rows < n_base))
        base_labels = _base_cells_inside(base, rows[:nb], run.k, len(rows))
        part = (run.partition(Zg, nb, base_result=(base_labels, 0.0))
                if base_labels is not None else run.one_shot(Zg))
        modes.append(part.mode)
        times[0] += part.base_seconds
        times[1] += part.incremental_seconds
        return part.labels

    labels = partition_groups(prepared.Z, prepared.groups, prepared.encoding, one)
    return Partition(labels=labels,
                     mode="two-stage" if "two-stage" in modes else "one-shot",
                     n_base=n_base, n_increment=X.shape[0] - n_base,
                     base_seconds=(base.seconds if base is not None and "two-stage" in modes
                                   else times[0]),
                     incremental_seconds=times[1])


def _base_cells_inside(base: BaseSnapshot | None, rows: np.ndarray, k: int,
                       n_group: int) -> np.ndarray | None:
    """The base cells of a group's base records ``rows``, numbered from 0, when every such
    cell lies wholly inside the group and they are usable; else None (one-shot)."""
    if base is None or not base_is_usable(len(rows), k, n_group):
        return None
    cells = base.labels[rows]
    touched = np.unique(cells)
    if np.bincount(base.labels, minlength=int(base.labels.max()) + 1)[touched].sum() \
            != len(rows):
        return None  # a cell of the base run crosses into another group
    return np.searchsorted(touched, cells).astype(np.int64)


@dataclass(frozen=True)
class Release:
    """The released table and its distortion ``D = SSE / SST`` (standardised data)."""

    table: pd.DataFrame
    distortion: float
    loss: dict[str, Any] = field(default_factory=dict)
    privacy: dict[str, dict[str, Any]] | None = None  # l and t achieved per sensitive answer
    risk: dict[str, Any] | None = None  # streamanon.risk.measure(...).to_json()

    @property
    def information_loss(self) -> float:
        return 100.0 * self.distortion


def release_table(records: pd.DataFrame, labels: np.ndarray, quasi_identifiers: Sequence[str],
                  k: int, seed: int | None) -> Release:
    """The release of ``records`` under the partition ``labels`` (one cell per record).

    The ``quasi_identifiers`` columns (numeric) hold the mean of the record's cell, the other
    columns are kept as they are, and the rows come in the random order ``seed`` draws, so that
    the order tells nothing about arrival or cells.

    Raises
    ------
    KAnonymityError
        When a released quasi-identifier tuple occurs fewer than ``k`` times: nothing that
        fails the gate is ever returned.
    """
    qi = list(quasi_identifiers)
    labels = np.asarray(labels)
    if labels.shape != (len(records),):
        raise InputError(f"{labels.shape} labels for {len(records)} records; one per record")
    # row-major, as records are stored: the sums behind D, to the last bit, follow the layout
    X = qi_values(records, qi)
    table = records.copy()
    table[qi] = aggregate(X, labels)
    require_k_anonymous(table[qi].to_numpy(), k)  # the gate
    return Release(table=shuffle_rows(table, seed),
                   distortion=distortion(fit_standardisation(X).apply(X), labels))


@dataclass(frozen=True)
class Prepared:
    """A table's quasi-identifiers ready for the engines (:func:`prepare`): their encoding
    and codes, the embedding and its scaling, the groups (None: one group, as for complete
    data without strata), the weights, and the distinct code tuples where the keys repeat
    (:func:`streamanon.mixed.repeated_tuples`; None otherwise), which the embedding, the
    engine, the gate and the loss then work on instead of every record."""

    schema: Schema
    encoding: Encoding
    C: np.ndarray
    scaling: Standardisation
    Z: np.ndarray
    groups: Groups | None
    weights: np.ndarray | None
    tuples: Tuples | None = None

    def embedded_tuples(self) -> Tuples | None:
        """The distinct rows of ``Z`` (:func:`streamanon.tuples.collapse` of it, found from
        the code tuples on one row each), or None where the keys do not repeat."""
        return None if self.tuples is None else coarsen(self.tuples, self.Z)

    @property
    def plain_numeric(self) -> bool:
        """Floats only, none missing, no weights: the literature's case, where the release's
        gate and D are exactly the literature's (:func:`release_prepared`)."""
        return (all(c.kind == "float" for c in self.encoding.columns)
                and not missing_columns(self.C).any() and self.weights is None)

    def subset(self, rows: np.ndarray) -> Prepared:
        """The same preparation of the records ``rows`` alone (one group: only for a
        preparation without groups)."""
        if self.groups is not None:
            raise InputError("a preparation with groups cannot be cut into a subset")
        return replace(self, C=self.C[rows], Z=self.Z[rows],
                       weights=None if self.weights is None else self.weights[rows],
                       tuples=None)

    @property
    def numeric_complete(self) -> bool:
        """Numbers only, none missing, one group: the partition is the plain numeric one
        (standardised values, no groups)."""
        return (self.groups is None and self.encoding.numeric_only
                and not missing_columns(self.C).any())


def prepare(frame: pd.DataFrame, schema: Schema, k: int, engine: str = "mdav") -> Prepared:
    """Encode, check and embed ``frame``'s quasi-identifiers under ``schema``
    (:mod:`streamanon.mixed`)."""
    encoding = encoding_for(frame, schema)
    check_engine(engine, encoding)
    C = encoding.codes(frame)
    encoding.check_required(C)
    strata = _strata(frame, schema)
    return prepare_codes(C, schema, encoding, k, strata, _weights(frame, schema.weight))


def _strata(frame: pd.DataFrame, schema: Schema) -> tuple[np.ndarray, list[str]] | None:
    """The strata of ``frame`` with names for the report: a stratum is named by its values
    only when every stratum field declares its levels (a vocabulary, not a response); else
    by number, so that a small merged stratum's value is not told by the report."""
    if not schema.strata:
        return None
    ids, names = stratum_ids(frame, schema.strata)
    if not all(schema.fields[s].levels for s in schema.strata):
        names = [f"stratum {i + 1}" for i in range(len(names))]
    return ids, names


def prepare_codes(C: np.ndarray, schema: Schema, encoding: Encoding, k: int,
                  strata: tuple[np.ndarray, list[str]] | None = None,
                  weights: np.ndarray | None = None,
                  scaling: Standardisation | None = None) -> Prepared:
    """:func:`prepare` from codes (the service stores them): the embedding (in ``scaling``,
    default fitted to ``C``) and the groups of ``strata`` (ids, names) and missing values."""
    if len(C) < k:
        raise InputError(f"{len(C)} records cannot form a cell of k = {k}: no "
                         f"{k}-anonymous release exists")
    # numbers and ranks, none missing: the standardisation and the standardised matrix in
    # one go (the same values; the general way otherwise)
    fitted = fit_and_standardise(C) if scaling is None and not encoding.has_nominal else None
    tuples = repeated_tuples(C)
    if fitted is not None:
        scaling, Z = fitted
    else:
        scaling = fit_embedding(C, encoding) if scaling is None else scaling
        Z = embed(C, encoding, scaling, tuples)
    grouped = [j for j, c in enumerate(encoding.columns) if c.missing == "group"]
    groups = None
    if strata is not None or missing_columns(C)[grouped].any():
        ids, names = strata if strata is not None else (None, [])
        groups = make_groups(C, Z, encoding, k, ids, names)
    return Prepared(schema, encoding, C, scaling, Z, groups, weights, tuples)


def qi_values(frame: pd.DataFrame, names: Sequence[str], start: int = 0) -> np.ndarray:
    """The columns ``names`` of the records from row ``start`` on, as a C-contiguous float
    matrix (only those rows are copied)."""
    return np.ascontiguousarray(frame[list(names)].iloc[start:].to_numpy(dtype=np.float64))


def any_missing(frame: pd.DataFrame, names: Sequence[str]) -> bool:
    """Whether any of the columns ``names`` has a missing value (NaN), column by column
    (no matrix of them is made)."""
    return any(bool(np.isnan(frame[name].to_numpy(dtype=np.float64)).any()) for name in names)


def prepare_stored(frame: pd.DataFrame, schema: Schema, k: int,
                   scaling: Standardisation | None = None) -> Prepared:
    """:func:`prepare` for a table whose quasi-identifiers are stored codes already (the
    service stores a category or ordinal as its level's number, a missing answer as NaN; the
    schema declares the levels), embedded in ``scaling`` (default: fitted to the table)."""
    encoding = encoding_for(frame, schema)
    C = qi_values(frame, encoding.names)
    return prepare_codes(C, schema, encoding, k, _strata(frame, schema),
                         _weights(frame, schema.weight), scaling)


def base_partition(run: TwoStageRun, prepared: Prepared) -> tuple[np.ndarray, float]:
    """The base run on a snapshot: ``run``'s engine on the embedded records (each group on its
    own, as :func:`release_partition` will continue it), with its seconds."""
    if prepared.groups is None:
        return run.run_base(prepared.Z)
    part = release_partition(run, prepared.C, None, prepared)
    return part.labels, part.base_seconds


def _weights(frame: pd.DataFrame, name: str | None) -> np.ndarray | None:
    if name is None:
        return None
    column = frame[name]
    if not pd.api.types.is_numeric_dtype(column) or pd.api.types.is_bool_dtype(column):
        raise InputError(f"weight column {name} is not numeric")
    w = column.to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~(np.isfinite(w) & (w > 0))
    if bad.any():
        raise InputError(f"{int(bad.sum())} weight(s) in {name} are missing, zero, negative "
                         "or infinite; a sampling weight is a positive number")
    return w


def release_prepared(frame: pd.DataFrame, prepared: Prepared, labels: np.ndarray, k: int, *,
                     seed: int | None, shuffle: bool = True, keep_index: bool = False,
                     privacy: Privacy | None = None, risk: bool = False) -> Release:
    """The release of ``frame`` under the partition ``labels``: dropped roles removed, each
    quasi-identifier replaced by its cell's value per type (withheld where a member's group
    withholds it), the gate (k-anonymity, a missing value being a value of its own; with
    ``privacy``, also its l-diversity and t-closeness), the rows shuffled unless told not to,
    and the loss per type; with ``risk``, the disclosure risk and utility measures of
    :func:`streamanon.risk.measure` (before and after, record linkage included: measured on
    the codes, row by row beside the original, whatever the release's order)."""
    labels = np.asarray(labels)
    if labels.shape != (len(frame),):
        raise InputError(f"{labels.shape} labels for {len(frame)} records; one per record")
    enc, C, groups = prepared.encoding, prepared.C, prepared.groups
    withheld = None if groups is None else _cell_union(groups.withheld[groups.ids], labels)
    R = release_codes(C, labels, enc, withheld, prepared.weights)
    # shuffled as it is built: the same rows, in the order shuffle_rows gives them
    order = np.random.default_rng(seed).permutation(len(frame)) if shuffle else None
    table = released_table(frame, prepared, R, keep_index=keep_index, order=order)
    qi = enc.names
    if prepared.plain_numeric:  # complete numeric data: exactly the literature's D and gate
        require_k_anonymous(table[qi].to_numpy(), k)
    else:
        require_k_anonymous_table(table, qi, k)
    achieved = None if privacy is None else privacy.gate(table, qi, order)
    d, loss = release_loss(prepared, labels, R)
    measured = None
    if risk:  # on the codes, row by row beside the original (the release's other columns
        # are the original's: a release changes the quasi-identifiers only)
        from streamanon.risk import measure

        original = frame.reset_index(drop=True)
        measured = measure(original, original, prepared.schema, k, aligned=True,
                           sensitive=[] if privacy is None else list(privacy.names),
                           codes=(enc, C, R)).to_json()
    return Release(table=table, distortion=d, loss=loss, privacy=achieved, risk=measured)


def released_table(frame: pd.DataFrame, prepared: Prepared, R: np.ndarray, *,
                   keep_index: bool = False, order: np.ndarray | None = None) -> pd.DataFrame:
    """``frame`` with its dropped roles removed and its quasi-identifiers replaced by the
    released codes ``R`` (:func:`release_codes`), decoded per type; no gate; the rows in
    ``order`` when given (a shuffle: :func:`shuffle_rows`' order for the same seed)."""
    dropped = set(prepared.schema.dropped)
    names = prepared.encoding.names
    columns = [c for c in frame.columns if c not in dropped]
    table = frame[[c for c in columns if c not in set(names)]]  # the answers kept as they are
    if order is not None:
        table, R = table.iloc[order], R[order]
    if not keep_index:
        table = table.reset_index(drop=True)
    table = table.copy(deep=False)
    decoded = prepared.encoding.decode(R, like=frame)
    for at, name in enumerate(columns):  # each in its place among the columns
        if name in decoded:
            values = decoded[name]
            table.insert(at, name, values.to_numpy() if values.dtype == object else values.array)
    return table


def release_loss(prepared: Prepared, labels: np.ndarray,
                 R: np.ndarray | None) -> tuple[float, dict[str, Any]]:
    """D and the loss per type of the released codes ``R`` (:func:`release_codes`) of the
    records ``prepared`` describes under ``labels``; D as the literature has it (SSE/SST of the
    standardised data) for complete numeric data, where ``R`` is not needed (may be None)."""
    if prepared.plain_numeric:  # every attribute a complete, unweighted float: each of the
        # per-type measures is D itself (SSE / SST of the numeric attributes, none withheld
        # nor imputed), so it is measured once, on the cells (R is their means)
        d = distortion(prepared.Z, labels)
        return d, {"distortion": d, "numeric": d, "ordinal": None, "nominal": None,
                   "withheld": 0, "imputed": 0}
    if prepared.tuples is not None:  # keys repeat: once per (original, released) pair
        cells = int(labels.max()) + 1 if labels.size else 0
        pairs, _ = pd.factorize(prepared.tuples.inverse * cells + labels)
        loss = loss_of_pairs(prepared.C, R, prepared.encoding, prepared.scaling, pairs,
                             prepared.weights, prepared.Z)
    else:
        loss = loss_by_type(prepared.C, R, prepared.encoding, prepared.scaling,
                            prepared.weights, prepared.Z)
    return loss["distortion"], loss


def decoded_original(frame: pd.DataFrame, prepared: Prepared) -> pd.DataFrame:
    """``frame`` with its quasi-identifiers as values (levels by name) rather than codes, as
    the release gives them: the original a report compares the release with."""
    original = frame.reset_index(drop=True).copy()
    for name, values in prepared.encoding.decode(prepared.C, like=frame).items():
        original[name] = values.to_numpy() if values.dtype == object else values.array
    return original


def _cell_union(withheld: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per record, what its cell withholds: what any member's group withholds. Cells lie
    within groups, except where the l/t merging joined cells of two groups; there the release
    withholds what either withholds, so every member's released tuple is the same."""
    cells = int(labels.max()) + 1 if labels.size else 0
    union = np.zeros((cells, withheld.shape[1]), dtype=bool)
    np.logical_or.at(union, labels, withheld)
    return union[labels]


@dataclass(frozen=True)
class Privacy:
    """The sensitive answers (``S``: n x s codes, the rank of each value in its column's
    domain, a missing answer a value of its own) with their EMD ground distance (``kinds``:
    ``ordered`` or ``equal``), and the l-diversity and t-closeness a release must have."""

    names: tuple[str, ...]
    S: np.ndarray
    kinds: tuple[str, ...]
    l: int | None = None  # noqa: E741 (the model's name)
    t: float | None = None

    def enforce(self, Z: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """``labels`` with cells merged until every cell is l-diverse and t-close
        (``streamanon.privacy.enforce``, the merging of Soria-Comas et al.)."""
        from streamanon.privacy import enforce

        if self.l is None and self.t is None:
            return labels
        return enforce(Z, labels, self.S, list(self.kinds), t=self.t, l=self.l)

    def achieved(self, groups: np.ndarray) -> dict[str, dict[str, Any]]:
        """Per sensitive answer over the groups ``groups`` (one id per record): the smallest
        number of distinct answers in a group (l) and the largest EMD to the whole (t)."""
        from streamanon.privacy import cell_distinct, cell_emds

        return {name: {"kind": kind, "l": int(cell_distinct(groups, self.S[:, j]).min()),
                       "t": float(cell_emds(groups, self.S[:, j], kind).max())}
                for j, (name, kind) in enumerate(zip(self.names, self.kinds, strict=True))}

    def gate(self, table: pd.DataFrame, key: Sequence[str],
             order: np.ndarray | None = None) -> dict[str, dict[str, Any]]:
        """The l/t part of the gate, on the groups a reader of ``table`` sees (records with the
        same released key, a missing value a value of its own); ``table`` rows are the rows
        of ``S``, or with ``order`` the rows ``S[order]`` (a shuffled release). Raises
        :class:`KAnonymityError` when l or t is not met."""
        groups = key_groups(table, key)
        if order is not None:  # each table row's group, at its record's row of S
            aligned = np.empty_like(groups)
            aligned[order] = groups
            groups = aligned
        achieved = self.achieved(groups)
        bad = [f"{name}: l = {a['l']} < {self.l}" for name, a in achieved.items()
               if self.l is not None and a["l"] < self.l]
        bad += [f"{name}: t = {a['t']:.4f} > {self.t}" for name, a in achieved.items()
                if self.t is not None and a["t"] > self.t + 1e-12]
        if bad:
            raise KAnonymityError("release is not private enough: " + "; ".join(bad))
        return achieved


def key_groups(table: pd.DataFrame, key: Sequence[str]) -> np.ndarray:
    """A group number per row: rows with the same values of ``key`` (a missing value a value
    of its own), as a reader of the release groups them."""
    codes = [pd.factorize(table[c], use_na_sentinel=False)[0] for c in key]
    groups = pd.MultiIndex.from_arrays(codes).factorize()[0] if len(codes) > 1 else codes[0]
    return np.asarray(groups, dtype=np.int64)
