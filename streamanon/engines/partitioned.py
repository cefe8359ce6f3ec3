"""Partitioned microaggregation: Mondrian-V cuts into parts, any engine on each part.

Exact MDAV's time grows faster than linearly in n. MONA (Thaeter & Reischuk 2021, Algorithm 6)
cuts the records with Mondrian-V median cuts until the parts are small and clusters each part
on its own; this module does the same with a size limit instead of
``n^rho`` and with any registered engine on the parts (MDAV by default, ONA*, ...). A part
costs ``a p^b``, so ``n / p`` parts of ``p`` records cost ``a n p^(b - 1)``: linear in ``n``
at a fixed part size, and the parts can run anywhere.

The parts are independent, so where they run does not change the result: in this process, or
on the workers of a Dask cluster through a runner its caller passes in (:data:`PartRunner`;
:mod:`streamanon.cluster`, outside the core, makes one). The cuts, the order of the records
inside a part and the numbering of the cells (part by part, in cut order) are fixed here; the
runner only evaluates ``engine`` on each part's matrix.

Choices:

- Cuts as in :func:`streamanon.engines.mondrian.mona` (Mondrian-V, the kernel
  :func:`~streamanon.engines._mondrian_kernels.mondrian_parts`): a part is cut while it has more
  than ``max(part_size, 2k - 1)`` records, so every part has at least ``k`` records and at most
  ``part_size`` (when ``part_size >= 2k - 1``). The records of a part keep their input order.
- ``DEFAULT_PART_SIZE = 100_000``: where MDAV on a part takes seconds, so that sending a part
  (12 MB at m = 15) costs far less than clustering it, and a million records make ten parts
  to spread over the workers. The price is information loss above exact MDAV, largest on
  records with no structure for the cuts to follow (i.i.d. Gaussian) and smaller as the parts
  grow; ``simulations/bench_partitioned.py`` measures it (the scaling benchmark page).
  Larger parts cost less IL and more time: ``n / p`` parts cost ``a n p^(b - 1)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import partial

import numpy as np

from streamanon.engines._mondrian_kernels import RULE_VARIANCE, mondrian_parts
from streamanon.engines.base import get_engine, kernel_matrix, register, run_engine
from streamanon.errors import ParameterError
from streamanon.progress import Progress

DEFAULT_PART_SIZE = 100_000

#: What each part runs when the caller names no engine (``anonymize --cluster`` without
#: ``--engine``, a service survey with ``engine = "auto"`` and ``[compute] cluster``): MDAV,
#: then six rounds of ONA*'s local search over 24 candidate cells. MDAV alone on the parts
#: loses more than exact MDAV on all the records (the cuts split natural cells); the rounds win
#: it back on the workers, within the run (the scaling benchmark page measures both).
DEFAULT_PART_ENGINE = "ona_star"
DEFAULT_PART_PARAMS: Mapping[str, object] = {"start": "mdav", "max_rounds": 6,
                                             "candidates": 24}

PartFunction = Callable[[np.ndarray], np.ndarray]
PartRunner = Callable[[PartFunction, Iterable[np.ndarray]], Iterator[tuple[int, np.ndarray]]]
"""Evaluates the function on every part's matrix; yields ``(part index, labels)`` in any order."""


def cut_parts(X: np.ndarray, k: int, part_size: int) -> list[np.ndarray]:
    """The row indices of each part: Mondrian-V cuts until a part has at most
    ``max(part_size, 2k - 1)`` records; every part has at least ``k`` (when ``n >= k``)."""
    X = kernel_matrix(X)
    perm, bounds = mondrian_parts(X, int(k), RULE_VARIANCE, max(int(part_size), 2 * int(k) - 1))
    return [perm[bounds[p]:bounds[p + 1]] for p in range(len(bounds) - 1)]


def cluster_part(X_part: np.ndarray, k: int, engine: str,
                 engine_params: Mapping[str, object]) -> np.ndarray:
    """``engine``'s labels on one part (what a cluster worker runs)."""
    return run_engine(engine, X_part, k, **engine_params).astype(np.int64, copy=False)


def join_labels(n: int, parts: list[np.ndarray], part_labels: list[np.ndarray]) -> np.ndarray:
    """One label array for the ``n`` records: part ``p``'s cells numbered after part
    ``p - 1``'s."""
    labels = np.empty(n, dtype=np.int64)
    offset = 0
    for rows, part in zip(parts, part_labels, strict=True):
        labels[rows] = part + offset
        offset += int(part.max()) + 1
    return labels


def run_here(function: PartFunction,
             arrays: Iterable[np.ndarray]) -> Iterator[tuple[int, np.ndarray]]:
    """The local runner: one part after the other, in this process."""
    return enumerate(map(function, arrays))


def partitioned_labels(X: np.ndarray, k: int, *, engine: str = "mdav",
                       engine_params: Mapping[str, object] | None = None,
                       part_size: int = DEFAULT_PART_SIZE, runner: PartRunner = run_here,
                       progress: Progress | None = None) -> np.ndarray:
    """Cut ``X`` into parts (:func:`cut_parts`), run ``engine`` on each through ``runner`` and
    join the labels (:func:`join_labels`). The result does not depend on the runner."""
    X = kernel_matrix(X)
    params = _check(engine, engine_params, part_size)
    if progress is not None:
        progress.start(X.shape[0])
    parts = cut_parts(X, k, part_size)
    function = partial(cluster_part, k=int(k), engine=engine, engine_params=params)
    results: list[np.ndarray | None] = [None] * len(parts)
    for p, labels in runner(function, (X[rows] for rows in parts)):
        results[p] = np.asarray(labels, dtype=np.int64)
        if progress is not None:
            progress.counter[0] += len(parts[p])
    missing = [p for p, labels in enumerate(results) if labels is None]
    if missing:
        raise RuntimeError(f"the runner returned no labels for part(s) {missing}")
    labels = join_labels(X.shape[0], parts, results)  # type: ignore[arg-type]
    if progress is not None:
        progress.finish()
    return labels


def _check(engine: object, engine_params: object, part_size: object) -> dict[str, object]:
    if not isinstance(engine, str):
        raise ParameterError(f"engine must be an engine name, got {engine!r}")
    if engine == "partitioned":
        raise ParameterError("partitioned cannot wrap itself; choose an engine such as mdav")
    info = get_engine(engine)
    if info.per_record:
        raise ParameterError(
            f"{engine} takes per-record parameters ({', '.join(sorted(info.per_record))}), "
            "which partitioned does not cut with the records; run it without partitioning")
    if engine_params is None:
        engine_params = {}
    if not isinstance(engine_params, Mapping):
        raise ParameterError(f"engine_params must be a dict of {engine!r} parameters, got "
                             f"{type(engine_params).__name__}")
    if isinstance(part_size, bool) or not isinstance(part_size, (int, np.integer)) \
            or part_size < 1:
        raise ParameterError(f"part_size must be a positive integer, got {part_size!r}")
    return dict(engine_params)


@register(
    "partitioned",
    summary="Mondrian-V cuts into parts of at most part_size records, any engine on each part, "
            "here or on a Dask cluster",
    source="Thaeter & Reischuk 2021 (paper 004), Alg. 6 (MONA), generalised",
    parameters={
        "engine": "engine run on each part (default mdav)",
        "engine_params": "parameters of that engine (dict, default none)",
        "part_size": f"largest part, in records (default {DEFAULT_PART_SIZE:,})",
        "runner": "where the parts run: a PartRunner (streamanon.cluster.part_runner gives one "
                  "for a Dask cluster); default: one after the other in this process; the "
                  "result is the same",
    },
    runtime=("runner",),
    warmup=lambda X: {"part_size": 100},
)
def partitioned(X: np.ndarray, k: int, *, engine: str = "mdav",
                engine_params: Mapping[str, object] | None = None,
                part_size: int = DEFAULT_PART_SIZE, runner: PartRunner | None = None,
                progress: Progress | None = None) -> np.ndarray:
    """Labels of ``engine`` run on each Mondrian-V part of ``X`` of at most ``part_size``
    records.

    Parameters
    ----------
    X
        Standardised quasi-identifiers, n x m.
    k
        Minimum cell size.
    engine, engine_params
        The engine run on each part and its parameters (not ``partitioned``, nor an engine
        with per-record parameters).
    part_size
        Largest part. ``part_size >= n`` runs ``engine`` on all of ``X``.
    runner
        Where the parts run (:data:`PartRunner`). ``None``: one after the other in this
        process (:func:`run_here`); :func:`streamanon.cluster.part_runner` opens one on the
        workers of a Dask cluster. The labels are the same.
    progress
        Optional counter, advanced part by part.

    Examples
    --------
    >>> import numpy as np
    >>> from streamanon.engines.mdav import mdav
    >>> X = np.random.default_rng(1).standard_normal((300, 3))
    >>> labels = partitioned(X, 5, part_size=100)
    >>> int(np.bincount(labels).min()) >= 5
    True
    >>> bool((partitioned(X, 5, part_size=300) == mdav(X, 5)).all())
    True

    References
    ----------
    Thaeter & Reischuk 2021 (docs/design/references.md), Algorithm 6 (MONA) and MONDRIAN_V.
    """
    if runner is not None and not callable(runner):
        raise ParameterError(f"runner must be a PartRunner (a callable; "
                             f"streamanon.cluster.part_runner makes one), got {runner!r}")
    return partitioned_labels(X, k, engine=engine, engine_params=engine_params,
                              part_size=part_size, runner=runner or run_here,
                              progress=progress)
