"""A survey's release: the partition of its records, and the table that is published.

Two pure functions, arrays and tables in, arrays and tables out:

- :func:`release_partition` puts the records (original units, arrival order) into cells. With a
  usable base snapshot (the small-base rule, :func:`~streamanon.incremental.base_is_usable`)
  the records after it join the base cells through the incremental stage of a
  :class:`~streamanon.incremental.run.TwoStageRun`, in the standardisation the base was run in;
  otherwise one engine run microaggregates all records, standardised as a whole (paper 001,
  sec. IV; SPEC sections 5 and 6).
- :func:`release_table` turns a partition into the released table: every quasi-identifier
  replaced by the mean of its cell in original units, every other column unchanged, the
  k-anonymity gate applied to the released values, the rows shuffled; with the distortion of
  the release (SPEC section 3).

The service releases a survey with both; the ``anonymize`` command with the second, on the
partition :func:`~streamanon.api.microaggregate` makes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from streamanon.api import shuffle_rows
from streamanon.errors import InputError
from streamanon.incremental import base_is_usable
from streamanon.incremental.run import Partition, TwoStageRun
from streamanon.metrics import aggregate, distortion, fit_standardisation, require_k_anonymous


@dataclass(frozen=True)
class BaseSnapshot:
    """A finished base run: the cells of the first ``n_base`` records, the standardisation
    (``mean``, ``scale``) they were microaggregated in, and the run's time."""

    n_base: int
    labels: np.ndarray
    mean: np.ndarray
    scale: np.ndarray
    seconds: float


def release_partition(run: TwoStageRun, X: np.ndarray, base: BaseSnapshot | None) -> Partition:
    """The cells of the records ``X`` (n x m, original units, arrival order).

    Two stages when ``base`` is usable for these n records: its cells stay, the records after
    it join through ``run``'s incremental stage, all standardised as the base was. Otherwise
    (no base, fewer than 2k base records, or more than n) one-shot: ``run``'s engine on all
    records, standardised as a whole. The result's ``mode`` says which.
    """
    X = np.asarray(X, dtype=np.float64)
    if base is None or not base_is_usable(base.n_base, run.k, X.shape[0]):
        return run.one_shot(fit_standardisation(X).apply(X))
    Z = (X - base.mean) / base.scale
    return run.partition(Z, base.n_base, base_result=(base.labels, base.seconds))


@dataclass(frozen=True)
class Release:
    """The released table and its distortion ``D = SSE / SST`` (standardised data)."""

    table: pd.DataFrame
    distortion: float

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
    X = np.ascontiguousarray(records[qi].to_numpy(dtype=np.float64))
    table = records.copy()
    table[qi] = aggregate(X, labels)
    require_k_anonymous(table[qi].to_numpy(), k)  # the gate
    return Release(table=shuffle_rows(table, seed),
                   distortion=distortion(fit_standardisation(X).apply(X), labels))
