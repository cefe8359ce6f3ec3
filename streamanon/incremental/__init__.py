"""Incremental stages: the records that arrived after the base snapshot join the release.

A stage takes the base result (standardised base records and their labels) and the
standardised increment, and returns labels for the union (base records first, then the
increment, in arrival order) in which every cell holds at least k records. Paper 001, Table 1:

| name | what |
|---|---|
| ``two_stage`` | an engine on the increment alone, cells united with the base cells (2MDAV) |
| ``nn`` | adjoin each new record to the nearest current centroid, which moves |
| ``nn_inertial`` | as ``nn``, choosing argmin n_q/(n_q+1) |y - x_q|^2 |
| ``nn_split_mid`` | as ``nn``, splitting a cell with MDAV as soon as it reaches 2k |
| ``nn_split_end`` | as ``nn``, then splitting every cell of 2k or more with MDAV |

Edge cases (specification section 5, docs/design/specification.md): an empty increment
returns the base labels; a base of fewer than 2k records is one cell at most, so the whole
union is microaggregated one-shot with MDAV (the small-base rule, :func:`base_is_usable`, which
the release and the service follow too); an increment smaller than k cannot form a cell of its
own, so ``two_stage`` adjoins it (``nn``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from streamanon.errors import InputError
from streamanon.metrics import check_partition
from streamanon.registry import Entry, Registry

StageFunction = Callable[..., np.ndarray]
StageInfo = Entry

_STAGES = Registry("incremental stage")
register_stage = _STAGES.register
available_stages = _STAGES.all
get_stage = _STAGES.get


def run_stage(name: str, base: np.ndarray, base_labels: np.ndarray, increment: np.ndarray,
              k: int, **params: object) -> np.ndarray:
    """Validate, run stage ``name``, and check that the union's partition is k-anonymous."""
    info = _STAGES.check_parameters(name, params)
    base = np.ascontiguousarray(base, dtype=np.float64)
    increment = np.ascontiguousarray(increment, dtype=np.float64).reshape(-1, base.shape[1])
    base_labels = np.asarray(base_labels, dtype=np.int64)
    if base_labels.shape != (base.shape[0],):
        raise InputError("base labels must have one entry per base record")
    for part in (base, increment):
        if not np.isfinite(part).all():
            raise InputError("records contain NaN or infinite values")
    n = base.shape[0] + increment.shape[0]
    if n < k:
        raise InputError(f"{n} records cannot form a cell of k = {k}")
    if base.shape[0] >= k:  # a smaller base has no valid cells; stages run one-shot then
        check_partition(base_labels, base.shape[0], k)
    labels = np.asarray(info.function(base, base_labels, increment, k, **params))
    check_partition(labels, n, k)
    return labels


def base_is_usable(n_base: int | None, k: int, n: int | None = None) -> bool:
    """The small-base rule: whether a release builds on a base snapshot of ``n_base`` records.

    A base of fewer than 2k records holds one cell at most, which leaves the increment nothing
    to join, and a base larger than the ``n`` records released (when ``n`` is given) is not a
    snapshot of them; with either, or with no base at all (``None``), the release is one-shot:
    one engine run on all records (specification section 5).
    """
    return n_base is not None and 2 * k <= n_base and (n is None or n_base <= n)


def union_one_shot(base: np.ndarray, increment: np.ndarray, k: int, engine: str = "mdav",
                   engine_params: dict[str, object] | None = None) -> np.ndarray:
    """The fallback when the base is too small to build on: one engine run on the union."""
    from streamanon.engines import run_engine

    return run_engine(engine, np.concatenate([base, increment]), k, **(engine_params or {}))


# Stages register themselves on import.
from streamanon.incremental import nn as _nn  # noqa: E402,F401
from streamanon.incremental import two_stage as _two_stage  # noqa: E402,F401
