"""Anytime refinement of a k-anonymous partition: local search until the budget runs out.

After the incremental stage at close, the release may wait for whatever time the deadline
leaves. :func:`refine` spends it on the local-search moves of ONA* (paper 004, Algorithm 3):
move one record to another cell when the total SSE strictly drops and its cell keeps more
than k; dissolve a cell of exactly k into the cells where its members cost least when that
strictly lowers the SSE; split a cell of 2k or more with MDAV (which never raises the SSE).
Every operation keeps every cell at k records or more, so the partition is a valid
k-anonymous release after each one and the release can go at any moment: the search stops
when the time budget is spent, when a bound on rounds or operations is reached, or when no
improving operation is left.

Order: the cells the increment touched first (the cells of the records ``first``), then the
cells around the ones that changed, round after round, then all cells once, then again only
around changes, until a round changes nothing. A record considers only the ``neighbours``
cells whose centroids are nearest its own cell's centroid (and those nearest the cells on a
short greedy walk towards it), from a neighbour graph over the centroids (NN-descent, updated
each round), so a round costs about n * neighbours * m, not n x cells. When nothing improves
any more, the candidates double (up to ``max_neighbours``) and all cells are visited again:
the longer the budget, the wider the search.

Determinism: for given inputs, ``max_rounds`` and ``max_moves``, the result is fixed. A time
budget cuts the search wherever the clock says, which depends on the machine and its load;
tests and reproducible runs bound ``max_moves`` or ``max_rounds`` and leave
``budget_seconds`` unset. The clock is read between chunks of ``CHUNK_CELLS`` cells, of the
local search and of the graph's passes alike, so a budget is overrun by one chunk at most
(plus the final relabelling, O(n log n)).

The refinement setting of a release, ``refine``: ``"off"`` (default), ``"auto"`` (with a
deadline: the time left before it, less the planned release overhead; without one,
:data:`AUTO_SECONDS`), or a number of seconds (also capped by a deadline):
:func:`parse_refine`, :func:`refine_window`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from streamanon.errors import ParameterError

#: Cells handed to the compiled kernel between two looks at the clock.
CHUNK_CELLS = 1024
#: Candidate cells per cell (the neighbour graph's degree) at first, and at most.
NEIGHBOURS = 16
MAX_NEIGHBOURS = 64
#: Steps of the greedy walk from a record's cell to the cells whose centroids are nearest it.
HOPS = 2
#: Budget of ``refine = "auto"`` without a deadline, in seconds.
#: The refinement's seconds with ``refine = "auto"`` and no deadline. The planner assumes the
#: same (``scheduler.live.AUTO_REFINE_SECONDS``; the core does not import the scheduler, and a
#: test keeps the two equal).
AUTO_SECONDS = 5.0
_SEED = 20240611


@dataclass(frozen=True)
class Refinement:
    """The refined ``labels`` (0..c-1) and what it took: ``rounds`` of local search, the
    operations done (``moves``, ``dissolves``, ``splits``), ``seconds`` spent, and why it
    ``stopped``: ``"converged"``, ``"budget"``, ``"max_rounds"`` or ``"max_moves"``."""

    labels: np.ndarray
    rounds: int
    moves: int
    dissolves: int
    splits: int
    seconds: float
    stopped: str

    @property
    def operations(self) -> int:
        return self.moves + self.dissolves + self.splits


def refine(X: np.ndarray, labels: np.ndarray, k: int, *, budget_seconds: float | None = None,
           first: np.ndarray | None = None, max_rounds: int = 200,
           max_moves: int | None = None) -> np.ndarray:
    """Labels of ``X`` after local search on the partition ``labels`` (see the module
    docstring); :func:`refine_partition` also says what was done.

    Examples
    --------
    >>> import numpy as np
    >>> from streamanon.engines.mdav import mdav
    >>> from streamanon.metrics import distortion
    >>> X = np.random.default_rng(0).standard_normal((600, 4))
    >>> before = mdav(X, 5)
    >>> after = refine(X, before, 5, max_rounds=5)
    >>> int(np.bincount(after).min()) >= 5, distortion(X, after) < distortion(X, before)
    (True, True)
    """
    return refine_partition(X, labels, k, budget_seconds=budget_seconds, first=first,
                            max_rounds=max_rounds, max_moves=max_moves).labels


def refine_partition(X: np.ndarray, labels: np.ndarray, k: int, *,
                     budget_seconds: float | None = None, first: np.ndarray | None = None,
                     max_rounds: int = 200, max_moves: int | None = None,
                     neighbours: int = NEIGHBOURS, max_neighbours: int = MAX_NEIGHBOURS,
                     hops: int = HOPS,
                     clock: Callable[[], float] = time.perf_counter) -> Refinement:
    """Refine the k-anonymous partition ``labels`` of the standardised records ``X``.

    Parameters
    ----------
    X
        Standardised quasi-identifiers, n x m.
    labels
        A partition of the n records in which every cell holds k or more.
    k
        Minimum cell size.
    budget_seconds
        Stop once this much time is spent (None: no time limit; 0 or less: return the
        partition as it is).
    first
        Indices of the records the increment touched (the late records): their cells are
        refined first. None: all cells from the start.
    max_rounds
        Rounds of local search at most.
    max_moves
        Operations (moves, dissolves, splits) at most; None: no bound.
    neighbours, max_neighbours
        Candidate cells per cell; once no operation improves, the candidates double (up to
        ``max_neighbours``) and the search goes on while time is left.
    hops
        Steps of the greedy walk through the neighbour graph towards the cells nearest a
        record (0: only its own cell's candidates).

    References
    ----------
    Thaeter & Reischuk 2021, Algorithm 3 (the moves); Rebollo-Monedero et al. 2018 for the two
    stages before it (both in docs/design/references.md).
    """
    # the compiled kernels load here, so that reading a ``refine`` setting (the service's
    # configuration) does not load numba
    from streamanon._refine_kernels import (
        build_state,
        graph_descend,
        graph_refresh,
        refine_cells,
        scratch_space,
    )
    from streamanon.engines.base import kernel_matrix
    from streamanon.metrics import check_partition

    started = clock()
    X = kernel_matrix(X)
    n = X.shape[0]
    labels = np.asarray(labels)
    if labels.shape != (n,):
        raise ParameterError(f"{labels.shape} labels for {n} records")
    if int(max_rounds) < 0 or (max_moves is not None and int(max_moves) < 0):
        raise ParameterError("max_rounds and max_moves must be >= 0")
    if int(neighbours) < 1 or int(hops) < 0:
        raise ParameterError(f"need neighbours >= 1 and hops >= 0, got {neighbours}, {hops}")
    _, labels = np.unique(labels, return_inverse=True)
    labels = labels.astype(np.int64).reshape(n)
    check_partition(labels, n, k)
    budget = math.inf if budget_seconds is None else float(budget_seconds)
    if first is not None:
        first = np.asarray(first, dtype=np.int64)
        if len(first) and (first.min() < 0 or first.max() >= n):
            raise ParameterError(f"first must hold record indices 0..{n - 1}")

    def result(rounds: int, stats: np.ndarray, stopped: str, out: np.ndarray) -> Refinement:
        _, out = np.unique(out, return_inverse=True)
        return Refinement(out.astype(np.int64).reshape(n), rounds, int(stats[0]),
                          int(stats[1]), int(stats[2]), clock() - started, stopped)

    stats = np.zeros(3, dtype=np.int64)
    n_cells = int(labels.max()) + 1 if n else 0
    if budget <= 0 or n < 2 * k or n_cells < 2 or max_rounds == 0:
        stopped = "budget" if budget <= 0 else "max_rounds" if max_rounds == 0 else "converged"
        return result(0, stats, stopped, labels)
    cap = n // k + 1
    sums, sqs, sizes, alive, head, nxt, prv = build_state(X, labels, cap)
    counts = np.array([n_cells, 0], dtype=np.int64)  # ids used, free ids
    free = np.empty(cap, dtype=np.int64)
    changed = np.zeros(cap, dtype=bool)
    degree = int(min(neighbours, max(n_cells - 1, 1)))
    G = np.full((cap, degree), -1, dtype=np.int64)
    D = np.full((cap, degree), np.inf)
    scratch = scratch_space(n, cap, X.shape[1])
    max_ops = np.int64(np.iinfo(np.int64).max if max_moves is None else int(max_moves))

    def out_of_time(estimate: float = 0.0) -> bool:
        return clock() - started + estimate > budget

    if first is None or len(first) == 0:
        visit = np.arange(n_cells, dtype=np.int64)
        everywhere = True
    else:
        visit = np.unique(labels[first])
        everywhere = False
    graph_seconds = 0.0
    rounds = 0
    while True:
        if rounds >= max_rounds:
            return result(rounds, stats, "max_rounds", labels)
        if stats.sum() >= max_ops:
            return result(rounds, stats, "max_moves", labels)
        if out_of_time(graph_seconds):
            return result(rounds, stats, "budget", labels)
        step = clock()
        live = np.flatnonzero(alive[:counts[0]]).astype(np.int64)
        cent = np.zeros((cap, X.shape[1]))
        cent[live] = sums[live] / sizes[live, None]
        if rounds == 0:
            _seed_graph(cent, live, G)
        graph_refresh(cent, live, G, D, _SEED + rounds)
        # one NN-descent pass a round, none before the first: the seeded graph already gives
        # the first round candidates, and a pass costs more than a round at large n
        for lo in range(0, len(live) if rounds > 0 else 0, CHUNK_CELLS):
            if out_of_time():
                return result(rounds, stats, "budget", labels)
            graph_descend(cent, live, G, D, G.shape[1], lo, lo + CHUNK_CELLS)
        graph_seconds = clock() - step
        changed[:] = False
        for start in range(0, len(visit), CHUNK_CELLS):
            if out_of_time():
                return result(rounds + 1, stats, "budget", labels)
            refine_cells(X, k, visit, start, min(start + CHUNK_CELLS, len(visit)), labels,
                         sums, sqs, sizes, alive, head, nxt, prv, G, free, counts, changed,
                         stats, max_ops, int(hops), scratch)
            if stats.sum() >= max_ops:
                return result(rounds + 1, stats, "max_moves", labels)
        rounds += 1
        visit = _around_changes(changed, alive, G, counts[0])
        if len(visit) == 0:
            widest = min(max(max_neighbours, neighbours), int(alive.sum()) - 1)
            if everywhere and G.shape[1] >= widest:
                return result(rounds, stats, "converged", labels)
            if everywhere:  # converged with these candidates: wider ones, all cells again
                G, D = _widen(G, D, min(2 * G.shape[1], widest))
            visit = np.flatnonzero(alive[:counts[0]]).astype(np.int64)
            everywhere = True


def _seed_graph(cent: np.ndarray, live: np.ndarray, G: np.ndarray) -> None:
    """A first neighbour graph, better than random and nearly free: each cell's neighbours
    along a seeded random direction (the cells just before and after it when the centroids
    are sorted by their projection); NN-descent improves it from there."""
    direction = np.random.default_rng(_SEED).standard_normal(cent.shape[1])
    order = live[np.argsort(cent[live] @ direction, kind="stable")]
    half = G.shape[1] // 2
    offsets = np.concatenate([np.arange(-half, 0), np.arange(1, G.shape[1] - half + 1)])
    spots = np.clip(np.arange(len(order))[:, None] + offsets, 0, len(order) - 1)
    G[order] = order[spots]


def _widen(G: np.ndarray, D: np.ndarray, degree: int) -> tuple[np.ndarray, np.ndarray]:
    """The neighbour graph with ``degree`` columns, the present ones kept."""
    wide_G = np.full((G.shape[0], degree), -1, dtype=np.int64)
    wide_D = np.full((G.shape[0], degree), np.inf)
    wide_G[:, :G.shape[1]] = G
    wide_D[:, :G.shape[1]] = D
    return wide_G, wide_D


def _around_changes(changed: np.ndarray, alive: np.ndarray, G: np.ndarray,
                    used: int) -> np.ndarray:
    """Live cells that changed in the last round or list a cell that did among their
    candidates (their members' best moves may have changed)."""
    ch = changed[:used]
    rows = G[:used]
    listed = (ch[np.maximum(rows, 0)] & (rows >= 0)).any(axis=1)
    return np.flatnonzero((ch | listed) & alive[:used]).astype(np.int64)


# -- the ``refine`` setting -------------------------------------------------------------------


def parse_refine(value: object) -> str | float:
    """``"off"``, ``"auto"`` or a number of seconds > 0 (a number, or a duration string such
    as ``"30"``, ``"30s"``, ``"2min"``); anything else raises :class:`ParameterError`."""
    from streamanon.durations import parse_duration

    if isinstance(value, str) and value.strip().lower() in ("off", "auto"):
        return value.strip().lower()
    problem = (f"refine must be \"off\", \"auto\" or a number of seconds > 0 (e.g. 30 or "
               f"\"30s\"), got {value!r}")
    if isinstance(value, bool):
        raise ParameterError(problem)
    try:
        seconds = float(value) if isinstance(value, (int, float)) else parse_duration(str(value))
    except ValueError:
        raise ParameterError(problem) from None
    if not (math.isfinite(seconds) and seconds > 0):
        raise ParameterError(problem)
    return seconds


def refine_window(setting: str | float, *, deadline_at: float | None = None,
                  overhead: float = 0.0) -> tuple[float | None, float | None]:
    """The refinement of a release as ``(seconds, until)``: at most ``seconds`` (None: no
    such bound) and not past ``until`` on the :func:`time.time` clock (None: no such bound);
    ``(None, None)`` when it is off.

    ``deadline_at`` is the release deadline (close + deadline, :func:`time.time` clock) and
    ``overhead`` the planned seconds after the compute (the release overhead,
    :func:`scheduler.live.release_overhead`): the refinement ends by ``deadline_at -
    overhead``. ``"auto"`` uses all of that, or :data:`AUTO_SECONDS` without a deadline; a
    number of seconds is also cut there.
    """
    setting = parse_refine(setting)
    if setting == "off":
        return None, None
    until = None if deadline_at is None else deadline_at - overhead
    if setting == "auto":
        return (AUTO_SECONDS if until is None else None), until
    return float(setting), until


def window_budget(seconds: float | None, until: float | None,
                  now: Callable[[], float] = time.time) -> float | None:
    """Seconds the refinement may take from now in the window ``(seconds, until)``
    (:func:`refine_window`); None when it is off."""
    if seconds is None and until is None:
        return None
    left = math.inf if until is None else until - now()
    return max(min(left, math.inf if seconds is None else seconds), 0.0)
