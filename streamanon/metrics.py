"""Standardisation, distortion and the k-anonymity gate (specification section 3,
docs/design/specification.md).

All functions are pure: arrays (or, for the table checks, a DataFrame) in, numbers or arrays out.

Distortion follows the microaggregation literature: on the standardised data (each
quasi-identifier shifted to mean 0 and scaled to population standard deviation 1), the sum of
squared distances of every record to its cell mean (SSE) divided by the sum of squared distances
to the global mean (SST, which equals n*m after standardisation when no column is constant).
``IL = 100 * D`` is the published "information loss" in percent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numba as nb
import numpy as np
import pandas as pd

from streamanon.errors import InputError, KAnonymityError
from streamanon.tuples import collapse


@dataclass(frozen=True)
class Standardisation:
    """The affine map of each column to mean 0 and population standard deviation 1.

    A constant column has ``scale`` 1, so it standardises to zeros and adds nothing to any
    distance.
    """

    mean: np.ndarray
    scale: np.ndarray

    def apply(self, X: np.ndarray) -> np.ndarray:
        return (np.asarray(X, dtype=np.float64) - self.mean) / self.scale

    def invert(self, Z: np.ndarray) -> np.ndarray:
        return np.asarray(Z, dtype=np.float64) * self.scale + self.mean


def fit_standardisation(X: np.ndarray) -> Standardisation:
    """Column means and population standard deviations of ``X`` (n x m)."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] == 0:
        raise InputError(f"expected a non-empty 2-D matrix of records, got shape {X.shape}")
    mean = X.mean(axis=0)
    std = X.std(axis=0)  # ddof=0: population standard deviation
    constant = ~(std > 0) | np.all(X == X[0], axis=0)
    scale = np.where(constant, 1.0, std)
    mean = np.where(constant, X[0], mean)
    return Standardisation(mean=mean, scale=scale)


def fit_and_standardise(X: np.ndarray) -> tuple[Standardisation, np.ndarray] | None:
    """``fit_standardisation(X)`` and ``X`` standardised by it, bit for bit for a C-ordered
    ``X`` (another layout is made C-ordered first, as the callers' is), in three compiled
    passes and one new matrix (numpy's takes two n x m temporaries besides the result: at a
    million records by 15, 0.17-0.21 s against 0.08 s, more in fresh memory); None where it
    does not apply (fewer than two columns, where numpy sums a column pairwise, no records, a
    value missing or infinite), for the caller to take the general way."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] < 2:
        return None
    X = np.ascontiguousarray(X)
    mean = np.empty(X.shape[1])
    scale = np.empty(X.shape[1])
    Z = np.empty_like(X)
    if not _fit_and_standardise(X, mean, scale, Z):
        return None
    return Standardisation(mean=mean, scale=scale), Z


@nb.njit(cache=True)
def _fit_and_standardise(X: np.ndarray, centre: np.ndarray, scale: np.ndarray,
                         Z: np.ndarray) -> bool:
    """:func:`fit_standardisation`'s arithmetic in its order (numpy reduces a C-ordered
    matrix over its rows one row after another: the same sums), then ``Z``; False, with
    nothing meaningful written, at the first value that is not finite."""
    n, m = X.shape
    total = np.zeros(m)
    for i in range(n):
        for j in range(m):
            x = X[i, j]
            if not np.isfinite(x):
                return False
            total[j] += x
    mean = total / n
    squares = np.zeros(m)
    same = np.ones(m, dtype=np.bool_)
    for i in range(n):
        for j in range(m):
            d = X[i, j] - mean[j]
            squares[j] += d * d
            if X[i, j] != X[0, j]:
                same[j] = False
    std = np.sqrt(squares / n)
    for j in range(m):
        constant = not std[j] > 0 or same[j]
        scale[j] = 1.0 if constant else std[j]
        centre[j] = X[0, j] if constant else mean[j]
    for i in range(n):
        for j in range(m):
            Z[i, j] = (X[i, j] - centre[j]) / scale[j]
    return True


def standardise(X: np.ndarray) -> np.ndarray:
    """``X`` with every column at mean 0 and population standard deviation 1 (constant columns
    become 0)."""
    return fit_standardisation(X).apply(X)


def cell_means(X: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean of every cell and the size of every cell, indexed by label ``0..max(labels)``."""
    X = np.ascontiguousarray(X, dtype=np.float64)
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.shape[0] != X.shape[0]:  # the kernel trusts both
        raise ValueError(f"{labels.size} labels for {X.shape[0]} records")
    if labels.size and labels.dtype.kind not in "iu":
        raise ValueError(f"cell labels must be integers, got {labels.dtype}")
    n_cells = int(labels.max()) + 1 if labels.size else 0
    if labels.size and int(labels.min()) < 0:
        raise ValueError("cell labels must be non-negative")
    sums, sizes = _cell_sums(X, labels.astype(np.int64, copy=False), n_cells)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = sums / sizes[:, None]
    return means, sizes


@nb.njit(cache=True)
def _cell_sums(X: np.ndarray, labels: np.ndarray, n_cells: int) -> tuple[np.ndarray, np.ndarray]:
    """Each cell's column sums and size, adding its records in record order (the sums
    ``np.bincount(labels, weights=X[:, j])`` gives, in one pass over the rows: five times
    faster at a million records than a bincount per column, which gathers a strided column
    each time)."""
    m = X.shape[1]
    sums = np.zeros((n_cells, m))
    sizes = np.zeros(n_cells, dtype=np.int64)
    for i in range(X.shape[0]):
        c = labels[i]
        sizes[c] += 1
        for j in range(m):
            sums[c, j] += X[i, j]
    return sums, sizes


def aggregate(X: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Every record replaced by the mean of its cell: the microaggregated release values."""
    means, _ = cell_means(X, labels)
    return means[np.asarray(labels)]


def sse(Z: np.ndarray, labels: np.ndarray) -> float:
    """Sum of squared distances of every record to its cell mean."""
    Z = np.ascontiguousarray(Z, dtype=np.float64)
    labels = np.asarray(labels)
    means, _ = cell_means(Z, labels)  # which checks the labels
    return float(np.sum(_row_squares(Z, labels.astype(np.int64, copy=False), means)))


def sst(Z: np.ndarray) -> float:
    """Sum of squared distances of every record to the global mean."""
    Z = np.ascontiguousarray(Z, dtype=np.float64)
    if Z.shape[0] == 0:
        return 0.0
    return float(np.sum(_row_squares(Z, np.zeros(Z.shape[0], dtype=np.int64),
                                     Z.mean(axis=0)[None, :])))


@nb.njit(cache=True)
def _row_squares(Z: np.ndarray, labels: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """Each record's squared distance to its centre ``centres[labels[i]]``: summed (pairwise)
    by the caller, the sum ``np.sum((Z - centres[labels]) ** 2)`` is, to rounding, without its
    three n x m temporaries (a fifth of a second at a million records by 15)."""
    out = np.empty(Z.shape[0])
    for i in range(Z.shape[0]):
        c = labels[i]
        total = 0.0
        for j in range(Z.shape[1]):
            d = Z[i, j] - centres[c, j]
            total += d * d
        out[i] = total
    return out


def distortion(Z: np.ndarray, labels: np.ndarray) -> float:
    """``D = SSE / SST`` of a partition of standardised data ``Z``; 0 when SST is 0."""
    total = sst(Z)
    return sse(Z, labels) / total if total > 0 else 0.0


def information_loss(Z: np.ndarray, labels: np.ndarray) -> float:
    """``IL = 100 * D``, the information loss in percent used by the literature."""
    return 100.0 * distortion(Z, labels)


def relative_distortion_increase(d_two_stage: float, d_one_shot: float) -> float:
    """``delta = (D_T - D) / D`` (paper 001, Table 2): extra distortion of a two-stage release
    relative to the one-shot release of the same engine."""
    if d_one_shot == 0:
        return 0.0 if d_two_stage == 0 else float("inf")
    return (d_two_stage - d_one_shot) / d_one_shot


def check_partition(labels: np.ndarray, n: int, k: int) -> None:
    """Raise unless ``labels`` assigns each of ``n`` records to a cell of at least ``k``.

    Labels must be integers ``0..c-1`` with every value used.
    """
    labels = np.asarray(labels)
    if labels.shape != (n,):
        raise KAnonymityError(f"partition has {labels.shape} labels for {n} records")
    if n == 0:
        return
    if not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0:
        raise KAnonymityError("partition labels must be non-negative integers")
    sizes = np.bincount(labels)
    used = sizes[sizes > 0]
    if len(used) != len(sizes):
        raise KAnonymityError("partition labels must be consecutive from 0")
    if used.min() < k:
        raise KAnonymityError(
            f"partition has a cell of {int(used.min())} records, fewer than k = {k}"
        )


@dataclass(frozen=True)
class KAnonymityReport:
    """Outcome of the k-anonymity check of a released table."""

    k: int
    n_records: int
    n_groups: int
    smallest_group: int
    groups_below_k: int
    records_below_k: int

    @property
    def ok(self) -> bool:
        return self.groups_below_k == 0 and self.n_records >= self.k


def _report_from_sizes(sizes: np.ndarray, n: int, k: int) -> KAnonymityReport:
    if n == 0:
        return KAnonymityReport(k, 0, 0, 0, 0, 0)
    small = sizes < k
    return KAnonymityReport(
        k=k,
        n_records=n,
        n_groups=len(sizes),
        smallest_group=int(sizes.min()),
        groups_below_k=int(small.sum()),
        records_below_k=int(sizes[small].sum()),
    )


def _pass_gate(report: KAnonymityReport) -> KAnonymityReport:
    if not report.ok:
        raise KAnonymityError(
            f"release is not {report.k}-anonymous: {report.groups_below_k} quasi-identifier "
            f"groups ({report.records_below_k} records) occur fewer than {report.k} times"
        )
    return report


def check_k_anonymity(released_qi: np.ndarray, k: int) -> KAnonymityReport:
    """Group the released quasi-identifier tuples; every distinct tuple must occur ``k`` times.

    Tuples are compared exactly, as a reader of the release would.
    """
    Q = np.asarray(released_qi)
    if Q.ndim == 1:
        Q = Q[:, None]
    counts = _hashed_tuple_counts(Q)
    if counts is None:
        _, counts = np.unique(Q, axis=0, return_counts=True)
    return _report_from_sizes(counts, Q.shape[0], k)


def _hashed_tuple_counts(Q: np.ndarray) -> np.ndarray | None:
    """How often each distinct row of the float matrix ``Q`` occurs, as ``np.unique(Q,
    axis=0, return_counts=True)`` counts them, by a 64-bit hash of the rows
    (:func:`streamanon.tuples.collapse`: exact, every row compared with its tuple's first);
    None for anything but NaN-free floats (the caller uses ``np.unique``)."""
    if Q.dtype.kind != "f" or Q.shape[0] == 0 or np.isnan(Q).any():
        return None
    return collapse(Q).counts


def require_k_anonymous(released_qi: np.ndarray, k: int) -> KAnonymityReport:
    """The gate: return the report, or raise :class:`KAnonymityError` if the table fails."""
    return _pass_gate(check_k_anonymity(released_qi, k))


def _qi_group_keys(frame: pd.DataFrame, columns: Sequence[str]) -> np.ndarray:
    """One integer per row, equal for two rows exactly when their ``columns`` tuples are equal.

    Values are compared as they are stored: floats exactly, text as text, categories by their
    category. Every missing value (NaN, None, ``pd.NA``, NaT) is one value of its own per column,
    equal to the other missing values and to nothing else: a reader of the release sees the same
    blank in both rows.
    """
    unknown = [c for c in columns if c not in frame.columns]
    if unknown:
        raise InputError(
            f"unknown column(s): {', '.join(map(str, unknown))}; the table has: "
            f"{', '.join(map(str, frame.columns))}"
        )
    keys = np.zeros(len(frame), dtype=np.int64)
    for column in columns:
        codes, uniques = pd.factorize(frame[column])  # missing -> -1
        codes = np.where(codes < 0, len(uniques), codes).astype(np.int64)
        # Re-factorising after each column keeps keys below n, so the product never overflows.
        keys, _ = pd.factorize(keys * (len(uniques) + 1) + codes)
    return keys


def check_table_k_anonymity(
    frame: pd.DataFrame, columns: Sequence[str], k: int
) -> KAnonymityReport:
    """Group the rows of ``frame`` by their tuple of values in ``columns``; every distinct tuple
    must occur ``k`` times.

    The table form of :func:`check_k_anonymity` for releases with text, categorical or missing
    quasi-identifiers: tuples are compared exactly, and a missing value is a value of its own
    (all missing values of a column are equal to each other and to no other value).
    """
    keys = _qi_group_keys(frame, columns)
    return _report_from_sizes(np.bincount(keys), len(frame), k)


def require_k_anonymous_table(
    frame: pd.DataFrame, columns: Sequence[str], k: int
) -> KAnonymityReport:
    """The gate for tables: return the report, or raise :class:`KAnonymityError` if ``frame``
    is not k-anonymous on ``columns``."""
    return _pass_gate(check_table_k_anonymity(frame, columns, k))


def sample_unique_share(frame: pd.DataFrame, columns: Sequence[str]) -> float:
    """Share of the rows whose tuple of values in ``columns`` occurs exactly once in ``frame``
    (missing values compared as in :func:`check_table_k_anonymity`); 0 for an empty table."""
    if len(frame) == 0:
        return 0.0
    sizes = np.bincount(_qi_group_keys(frame, columns))
    return float(sizes[sizes == 1].sum() / len(frame))
