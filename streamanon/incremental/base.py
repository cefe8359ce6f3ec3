"""The incremental-stage registry, the small-base rule and the one-shot fallback.

Each stage module registers itself here (:func:`register_stage`), with its traits (its loss
curve, how the planner prices it, whether ``incremental = "auto"`` may pick it);
:mod:`streamanon.incremental` imports them all and re-exports this module's names. Imports the
core's leaves and the engine registry, never a stage module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from streamanon.engines.base import kernel_matrix
from streamanon.errors import InputError
from streamanon.metrics import check_partition
from streamanon.registry import Entry, Function, Registry, StageTags

StageFunction = Callable[..., np.ndarray]
StageInfo = Entry

_STAGES = Registry("incremental stage", "stage")
available_stages = _STAGES.all
get_stage = _STAGES.get
unregister_stage = _STAGES.unregister

#: The ratios nu at which the stages' added loss was measured (each stage's ``nu_grid``):
#: over an MDAV base, m = 15, k = 10, 50,000 Gaussian records (the "engines and incremental
#: stages" page of the documentation).
LOSS_NU = (0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 0.9, 1.0)


def register_stage(name: str, *, summary: str, source: str,
                   parameters: dict[str, str] | None = None,
                   nu_grid: Sequence[float], added_loss: Sequence[float], cost: str,
                   auto_rank: int | None = None) -> Callable[[Function], Function]:
    """Decorator that registers a stage under ``name`` with its traits, kept on its entry as
    :class:`~streamanon.registry.StageTags` (``entry.stage``: what each trait means): its
    loss curve (``added_loss`` at the ratios ``nu_grid``), how the planner prices it
    (``cost``) and whether ``incremental = "auto"`` may pick it (``auto_rank``)."""
    try:
        traits = StageTags(nu_grid=tuple(float(x) for x in nu_grid),
                           added_loss=tuple(float(x) for x in added_loss), cost=cost,
                           auto_rank=auto_rank)
    except ValueError as exc:
        raise ValueError(f"incremental stage {name!r}: {exc}") from None
    return _STAGES.register(name, summary=summary, source=source, parameters=parameters,
                            traits=traits)


def run_stage(name: str, base: np.ndarray, base_labels: np.ndarray, increment: np.ndarray,
              k: int, **params: object) -> np.ndarray:
    """Validate, run stage ``name``, and check that the union's partition is k-anonymous."""
    info = _STAGES.check_parameters(name, params)
    base = kernel_matrix(base)
    increment = kernel_matrix(np.asarray(increment).reshape(-1, base.shape[1]))
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
    joins = identical_cells(base, base_labels, increment) if base.shape[0] >= k else None
    if joins is None:
        labels = np.asarray(info.function(base, base_labels, increment, k, **params))
    else:  # the late records of an identical cell join it; the others go through the stage
        rest = joins < 0
        labels = np.empty(n, dtype=np.int64)
        if rest.any():
            stage = np.asarray(info.function(base, base_labels, increment[rest], k, **params))
            labels[: base.shape[0]] = stage[: base.shape[0]]
            labels[base.shape[0]:][rest] = stage[base.shape[0]:]
        else:
            labels[: base.shape[0]] = base_labels
        labels[base.shape[0]:][~rest] = labels[joins[~rest]]
    check_partition(labels, n, k)
    return labels


def identical_cells(base: np.ndarray, base_labels: np.ndarray,
                    increment: np.ndarray) -> np.ndarray | None:
    """For each late record, a base record of a cell whose records are all identical to it
    (-1 where there is none): the cell it joins at zero loss, whatever the stage. None when no
    late record has one (the stage then runs exactly as it would alone)."""
    from streamanon.tuples import row_hashes

    if len(increment) == 0 or len(base) == 0:
        return None
    h = row_hashes(base)
    n_cells = int(base_labels.max()) + 1
    first = np.empty(n_cells, dtype=np.int64)
    first[base_labels] = np.arange(len(base))  # a record of each cell (any one will do)
    pure = np.ones(n_cells, dtype=bool)
    pure[base_labels[h != h[first[base_labels]]]] = False
    if not pure.any():  # continuous data: no cell of identical hashes
        return None
    rows = np.flatnonzero(pure[base_labels])  # exactly equal, not only alike in hash
    pure[base_labels[rows[~np.all(base[rows] == base[first[base_labels[rows]]], axis=1)]]] = False
    if not pure.any():
        return None
    cells = np.flatnonzero(pure)
    keys = h[first[cells]]
    order = np.argsort(keys, kind="stable")
    late = row_hashes(increment)
    at = np.minimum(np.searchsorted(keys[order], late), len(keys) - 1)
    match = first[cells[order[at]]]
    found = (keys[order[at]] == late) & np.all(base[match] == increment, axis=1)
    if not found.any():
        return None
    return np.where(found, match, -1)


def base_is_usable(n_base: int | None, k: int, n: int | None = None) -> bool:
    """The small-base rule: whether a release builds on a base snapshot of ``n_base`` records.

    A base of fewer than 2k records holds one cell at most, which leaves the increment nothing
    to join, and a base larger than the ``n`` records released (when ``n`` is given) is not a
    snapshot of them; with either, or with no base at all (``None``), the release is one-shot:
    one engine run on all records (specification section 5).
    """
    return n_base is not None and 2 * k <= n_base and (n is None or n_base <= n)


def joined_rows(base: np.ndarray, increment: np.ndarray) -> np.ndarray:
    """The records of ``base`` followed by those of ``increment`` (C-contiguous, n x m): a view
    when the increment's rows follow the base's in one array (as the service's compute process
    keeps them: joining a million rows would copy them, in fresh memory), else a new array.
    The stages only read it (a view left writeable: the compiled kernels take one type of
    array, and a read-only one would be compiled anew at the close)."""
    base = np.ascontiguousarray(base, dtype=np.float64)
    increment = np.ascontiguousarray(increment, dtype=np.float64)
    owner = base.base
    if (owner is not None and increment.base is owner and base.ndim == increment.ndim == 2
            and base.shape[1] == increment.shape[1] and base.shape[0] > 0
            and increment.__array_interface__["data"][0]
            == base.__array_interface__["data"][0] + base.nbytes):
        return np.lib.stride_tricks.as_strided(
            base, shape=(base.shape[0] + increment.shape[0], base.shape[1]),
            strides=(base.shape[1] * base.itemsize, base.itemsize))  # a one-row base's
    # own stride may be anything: numpy calls one row contiguous whatever it is
    return np.ascontiguousarray(np.concatenate([base, increment]))


def union_one_shot(base: np.ndarray, increment: np.ndarray, k: int, engine: str = "mdav",
                   engine_params: dict[str, object] | None = None) -> np.ndarray:
    """The fallback when the base is too small to build on: one engine run on the union."""
    from streamanon.engines import run_engine

    return run_engine(engine, joined_rows(base, increment), k, **(engine_params or {}))
