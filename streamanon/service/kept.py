"""The base snapshot's values, kept in the compute process from the base run to the close.

At close a two-stage release needs every record's quasi-identifiers in the compute process,
and the base snapshot's are most of them: a million records' values take most of a second to
send there. The base run already sent them, so the compute process keeps them
(:func:`kept_base_partition`) and at close only the records after the snapshot are sent
(:func:`kept_release_partition`), which puts them back together and runs
:func:`streamanon.release.release_partition` on the very same array, so the release is the one
a full send would give.

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

from streamanon.incremental.run import TwoStageRun
from streamanon.release import BaseSnapshot, Partition, Prepared, base_partition, release_partition


@dataclass(frozen=True)
class _Kept:
    snapshot_seq: int
    names: tuple[str, ...]
    values: np.ndarray  # the snapshot's quasi-identifiers as stored, n_base x m, record order


#: survey id -> its base snapshot's values, in this (compute) process only
_KEPT: dict[str, _Kept] = {}


def kept_base_partition(survey: str, snapshot_seq: int, run: TwoStageRun,
                        prepared: Prepared) -> tuple[np.ndarray, float]:
    """:func:`~streamanon.release.base_partition`, keeping the snapshot's values for the close
    when they are plain numbers (complete, one group), in place of any older snapshot's."""
    result = base_partition(run, prepared)
    _KEPT.pop(survey, None)
    if prepared.numeric_complete:
        _KEPT[survey] = _Kept(snapshot_seq, tuple(prepared.encoding.names), prepared.C)
    return result


def kept_release_partition(survey: str, snapshot_seq: int, names: Sequence[str],
                           run: TwoStageRun, late: np.ndarray,
                           base: BaseSnapshot) -> Partition | None:
    """:func:`~streamanon.release.release_partition` of the kept snapshot's records followed by
    ``late`` (the records after it, columns ``names``, arrival order) on ``base``; None when
    this process does not keep that snapshot of the survey with those columns. What was kept
    is used up either way."""
    kept = _KEPT.pop(survey, None)
    if (kept is None or kept.snapshot_seq != snapshot_seq or kept.names != tuple(names)
            or kept.values.shape[0] != base.n_base):
        return None
    X = np.concatenate([kept.values, np.asarray(late, dtype=np.float64)])
    return release_partition(run, X, base, None)


def forget(survey: str) -> None:
    """Drop what is kept for ``survey`` (its release was computed without it)."""
    _KEPT.pop(survey, None)


def kept_surveys() -> list[str]:
    """The surveys whose base snapshot this process keeps (for tests and diagnostics)."""
    return sorted(_KEPT)
