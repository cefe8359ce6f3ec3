"""The base snapshot's values, kept in the compute process from the base run to the close.

At close a two-stage release needs every record's quasi-identifiers in the compute process,
and the base snapshot's are most of them: a million records' values take most of a second to
send there. The base run already sent them, so the compute process keeps them
(:func:`kept_base_partition`), standardised as the close uses them and with room after them,
and at close only the records after the snapshot are sent (:func:`kept_release_partition`):
they are standardised into that room and the stages run on the rows of the one array, the very
rows :func:`streamanon.release.release_partition` would compute, so the release is the one a
full send would give. At a million records that spares the close the joining and standardising
of a million rows, whose fresh memory alone (page faults) cost about half a second.

What is kept is one snapshot per survey, in the process that ran its base run; it is used up by
the close, or dropped (:func:`forget`) by a close that does not use it. A close that finds
nothing (another compute process, a restart, a newer snapshot, other columns) gets None and
sends everything. With several compute processes the close may reach another than the one
that keeps the values (then sent whole), and that one holds them (n_base x m floats) until its
survey's next base run; an instance that hands its leadership over keeps them likewise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from streamanon.incremental.base import base_is_usable
from streamanon.incremental.run import TwoStageRun
from streamanon.release import BaseSnapshot, Partition, Prepared, base_partition


@dataclass(frozen=True)
class _Kept:
    snapshot_seq: int
    names: tuple[str, ...]
    mean: np.ndarray  # the snapshot's standardisation
    scale: np.ndarray
    rows: np.ndarray  # its records standardised, n_base x m in record order, then spare rows
    spare: int

    @property
    def n_base(self) -> int:
        return int(self.rows.shape[0]) - self.spare


#: survey id -> its base snapshot's values, in this (compute) process only
_KEPT: dict[str, _Kept] = {}

#: Rows kept spare after the snapshot's for the records after it, as many as the snapshot's
#: (and at least this many): address space, not memory, until the close writes into them.
MIN_SPARE_ROWS = 4096


def kept_base_partition(survey: str, snapshot_seq: int, run: TwoStageRun,
                        prepared: Prepared) -> tuple[np.ndarray, float]:
    """:func:`~streamanon.release.base_partition`, keeping the snapshot's values for the close
    when they are plain numbers (complete, one group), in place of any older snapshot's: kept
    standardised as the close will use them, in an array with room for the records after the
    snapshot, so that the close neither copies nor standardises the snapshot's again."""
    result = base_partition(run, prepared)
    _KEPT.pop(survey, None)
    if prepared.numeric_complete:
        C = np.asarray(prepared.C, dtype=np.float64)
        n_base, m = C.shape
        spare = max(n_base, MIN_SPARE_ROWS)
        rows = np.empty((n_base + spare, m))
        mean, scale = prepared.scaling.mean, prepared.scaling.scale
        _standardise_into(rows[:n_base], C, mean, scale)
        _KEPT[survey] = _Kept(snapshot_seq, tuple(prepared.encoding.names), mean.copy(),
                              scale.copy(), rows, spare)
    return result


def kept_release_partition(survey: str, snapshot_seq: int, names: Sequence[str],
                           run: TwoStageRun, late: np.ndarray,
                           base: BaseSnapshot) -> Partition | None:
    """:func:`~streamanon.release.release_partition` of the kept snapshot's records followed by
    ``late`` (the records after it, columns ``names``, arrival order) on ``base``; None when
    this process does not keep that snapshot of the survey with those columns and that
    standardisation, or when the base is not usable for them (the caller then sends all). What
    was kept is used up either way."""
    kept = _KEPT.pop(survey, None)
    late = np.asarray(late, dtype=np.float64)
    n = base.n_base + late.shape[0]
    if (kept is None or kept.snapshot_seq != snapshot_seq or kept.names != tuple(names)
            or kept.n_base != base.n_base or not np.array_equal(kept.mean, base.mean)
            or not np.array_equal(kept.scale, base.scale)
            or not base_is_usable(base.n_base, run.k, n)):
        return None
    # the rows release_partition standardises, (X - mean) / scale: the late ones after the
    # kept ones, in the room left for them when there is enough
    if late.shape[0] <= kept.spare:
        Z = kept.rows[:n]
    else:
        Z = np.concatenate([kept.rows[:base.n_base], np.empty_like(late)])
    _standardise_into(Z[base.n_base:], late, base.mean, base.scale)
    return run.partition(Z, base.n_base, base_result=(base.labels, base.seconds))


def _standardise_into(out: np.ndarray, values: np.ndarray, mean: np.ndarray,
                      scale: np.ndarray) -> None:
    """``out[:] = (values - mean) / scale``, the arithmetic of
    :meth:`~streamanon.metrics.Standardisation.apply`, written in place."""
    np.divide(np.subtract(values, mean, out=out), scale, out=out)


def forget(survey: str) -> None:
    """Drop what is kept for ``survey`` (its release was computed without it)."""
    _KEPT.pop(survey, None)


def kept_surveys() -> list[str]:
    """The surveys whose base snapshot this process keeps (for tests and diagnostics)."""
    return sorted(_KEPT)
