"""Nearest-neighbour incremental stages: adjoin, optionally weight, optionally split.

Each new record, in arrival order, joins the cell whose current centroid is nearest, and that
centroid moves to ``(n x + y) / (n + 1)`` (paper 001, sec. III-B.6). Adjoining alone lets cells
grow, so the distortion grows with nu (paper 001, Fig. 17); splitting cells of 2k or more with
MDAV keeps cells small: as soon as they reach 2k (``nn_split_mid``, so the new centroids attract
later records) or once at the end (``nn_split_end``, which the paper finds slightly better).
``nn_inertial`` picks ``argmin n_q/(n_q+1) |y - x_q|^2``, the cell whose SSE grows least.

Nearest-centroid search: an index proposes the few centroids nearest each record, as they were
when it was built; the kernel checks them at their current positions and proves that no other
cell can be nearer (see ``_nn_kernels``), scanning every cell when it cannot. The index is a
k-d tree (:class:`scipy.spatial.cKDTree`) up to ``TREE_MAX_DIMENSION`` quasi-identifiers. In
higher dimension a tree prunes little, and ``index="auto"`` compares every record with every
centroid: one by one (a compiled scan) for a few thousand cells, else in blocks (``blocks``:
|x|^2 + |y|^2 - 2 x.y with the products of a few hundred records by a few thousand centroids at
a time from BLAS, the index rebuilt for each few hundred records, and a cell a record joins
taken out of it and checked directly). Either way no n_0 x n_+ matrix is formed and the
assignment is the one of a plain sequential loop.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import numba as nb
import numpy as np
from scipy.spatial import cKDTree

from streamanon.engines.base import get_engine, run_engine
from streamanon.engines.cells import offer_products
from streamanon.errors import ParameterError
from streamanon.incremental._nn_kernels import (
    adjoin,
    apply_split,
    cell_members,
    split_large_cells,
)
from streamanon.incremental.base import (
    LOSS_NU,
    base_is_usable,
    joined_rows,
    register_stage,
    union_one_shot,
)
from streamanon.metrics import cell_means

#: Above this many columns the linear scan beats the tree (measured; the incremental-stages
#: benchmark page).
TREE_MAX_DIMENSION = 8
_CANDIDATES = 8
_CHUNK = 4096
_EXTRAS_LIMIT = 256
#: Above this many centroid values (cells x columns; 800 KB) the blocked search beats the scan
#: (measured, ``python -m simulations.bench_nn_search``: the scan wins at 60,000 values, the
#: blocks from 150,000; the incremental-stages benchmark page).
BLOCKS_MIN_VALUES = 100_000
_BLOCK_RECORDS = 128  # the blocked search's products: 128 records x 2,048 cells (2 MiB)
_BLOCK_CELLS = 2048
_BLOCK_CHUNK = 512

_INDEX_DOC = ("nearest-centroid search: auto (default), kdtree, blocks or scan; result "
              "unchanged")


@nb.njit(cache=True)
def _member_lists(labels, n_total, capacity):
    """Linked lists of the members of each cell: ``head[cell]``, then ``nxt[record]``."""
    head = np.full(capacity, -1, np.int64)
    nxt = np.full(n_total, -1, np.int64)
    for i in range(labels.shape[0]):
        c = labels[i]
        nxt[i] = head[c]
        head[c] = i
    return head, nxt


def search_for(index: str, m: int, n_cells: int) -> str:
    """The nearest-centroid search of ``index`` for ``n_cells`` base cells in ``m`` columns:
    ``auto`` takes the tree up to ``TREE_MAX_DIMENSION`` columns; above, the blocked search
    for more than ``BLOCKS_MIN_VALUES`` centroid values, else the scan."""
    if index == "auto":
        if m <= TREE_MAX_DIMENSION:
            return "kdtree"
        return "blocks" if n_cells * m > BLOCKS_MIN_VALUES else "scan"
    if index in ("kdtree", "blocks", "scan"):
        return index
    raise ParameterError(f"index must be auto, kdtree, blocks or scan, got {index!r}")


def _candidates(search: str, X: np.ndarray, start: int, stop: int, centT: np.ndarray,
                n_cells: int) -> tuple[np.ndarray, np.ndarray]:
    """For records ``start..stop-1`` of ``X``: the ids of the ``_CANDIDATES`` centroids
    nearest to each (fewer when there are fewer cells) and their distances."""
    c = min(_CANDIDATES, n_cells)
    if search == "kdtree":
        dist, ids = cKDTree(centT[:, :n_cells].T).query(X[start:stop], k=c, workers=-1)
        return (np.ascontiguousarray(np.asarray(ids, dtype=np.int64).reshape(stop - start, c)),
                np.ascontiguousarray(np.asarray(dist, dtype=np.float64)
                                     .reshape(stop - start, c)))
    return _blocked_candidates(X[start:stop], centT[:, :n_cells], c)


def _blocked_candidates(Q: np.ndarray, C: np.ndarray, c: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``c`` columns of ``C`` (m x cells) nearest to each row of ``Q`` and their distances,
    from |x|^2 + |y|^2 - 2 x.y with the products in blocks (BLAS), the last distance lowered
    by the rounding those may carry so that no cell left out is nearer than it says."""
    n_q, m = Q.shape
    xx = np.einsum("ij,ij->i", Q, Q)
    cc = np.einsum("ij,ij->j", C, C)
    ids = np.full((n_q, c), -1, dtype=np.int64)
    sq = np.full((n_q, c), np.inf)
    count = np.zeros(n_q, dtype=np.int64)
    Q2 = -2.0 * Q  # exact: the products come out as -2 x.y
    for r0 in range(0, n_q, _BLOCK_RECORDS):
        r1 = min(n_q, r0 + _BLOCK_RECORDS)
        for c0 in range(0, C.shape[1], _BLOCK_CELLS):
            P = Q2[r0:r1] @ C[:, c0:c0 + _BLOCK_CELLS]
            offer_products(P, xx[r0:r1], cc, c0, ids[r0:r1], sq[r0:r1], count[r0:r1])
    # each term of the expansion is off by at most about m units of rounding of |x|^2 + |y|^2
    rounding = (2 * m + 8) * np.finfo(np.float64).eps * (xx + cc.max())
    dist = np.sqrt(np.maximum(sq, 0.0))
    dist[:, -1] = np.sqrt(np.maximum(sq[:, -1] - rounding, 0.0))
    return ids, dist


def adjoin_increment(base: np.ndarray, base_labels: np.ndarray, increment: np.ndarray, k: int,
                     *, inertial: bool = False, split: str | None = None,
                     index: str = "auto", engine: str = "mdav",
                     engine_params: dict[str, object] | None = None) -> np.ndarray:
    """Labels of the union after adjoining ``increment`` to the base cells (and splitting
    cells of ``2k`` or more with ``engine``: the compiled MDAV for ``mdav``, else through the
    engine registry)."""
    external = _check_splitting_engine(engine, engine_params) if split else False
    n0, m = base.shape
    n_plus = increment.shape[0]
    n_cells = int(base_labels.max()) + 1 if len(base_labels) else 0
    search = search_for(index, m, n_cells)
    if n_plus == 0:
        return base_labels.copy()
    if not base_is_usable(n0, k):
        return union_one_shot(base, increment, k)
    X = joined_rows(base, increment)
    n = n0 + n_plus
    capacity = n // k + 1
    centT = np.zeros((m, capacity))  # column-major: the scan vectorises across cells
    sizes = np.zeros(capacity, dtype=np.int64)
    means, counts = cell_means(base, base_labels)
    centT[:, :n_cells] = means.T
    sizes[:n_cells] = counts
    head, nxt = _member_lists(base_labels.astype(np.int64), n, capacity)
    cell_of = np.concatenate([base_labels.astype(np.int64), np.full(n_plus, -1, np.int64)])
    stats = np.zeros(2, dtype=np.int64)
    # BLAS on one thread: its products are small, and two threads were slower and less even
    # (400,000 x 15, 20,000 late records: 1.8-1.9 s on one, 2.0-3.0 s on two)
    with _one_blas_thread() if search == "blocks" else nullcontext():
        n_cells = _adjoin_records(X, n0, k, centT, sizes, head, nxt, cell_of, n_cells, search,
                                  inertial, split == "mid", external, engine, engine_params,
                                  stats)
    if split == "end":
        if external:
            for c in np.flatnonzero(sizes[:n_cells] >= 2 * k):
                n_cells = _split_with_engine(X, int(c), k, engine, engine_params, centT, sizes,
                                             head, nxt, cell_of, n_cells)
        else:
            split_large_cells(X, k, centT, sizes, head, nxt, cell_of, n_cells, stats)
    return cell_of


def _adjoin_records(X: np.ndarray, n0: int, k: int, centT: np.ndarray, sizes: np.ndarray,
                    head: np.ndarray, nxt: np.ndarray, cell_of: np.ndarray, n_cells: int,
                    search: str, inertial: bool, split_mid: bool, external: bool, engine: str,
                    engine_params: dict[str, object] | None, stats: np.ndarray) -> int:
    """Adjoin the records ``n0..`` of ``X`` in order, with the candidates of ``search``
    rebuilt for each chunk of records (and after a split by another engine); returns the
    number of cells."""
    n = X.shape[0]
    pos = n0
    no_cand = np.empty((0, 0), dtype=np.int64)
    # the blocked search takes the cells records join out of its index (module docstring):
    # it is rebuilt for each few hundred records, before those cells slow the check down
    chunk, limit = ((_BLOCK_CHUNK, _BLOCK_CHUNK) if search == "blocks"
                    else (_CHUNK, _EXTRAS_LIMIT))
    while pos < n:
        stop = min(n, pos + chunk) if search != "scan" else n
        if search != "scan":
            cand, cand_d = _candidates(search, X, pos, stop, centT, n_cells)
        else:
            cand, cand_d = no_cand, np.empty((0, 0))
        pos, n_cells, full = adjoin(X, pos, stop, k, centT, sizes, head, nxt, cell_of, n_cells,
                                    cand, cand_d, inertial, split_mid, external, limit,
                                    search == "blocks", stats)
        if full >= 0:
            n_cells = _split_with_engine(X, full, k, engine, engine_params, centT, sizes, head,
                                         nxt, cell_of, n_cells)
    return n_cells


def _one_blas_thread() -> Any:
    """A context in which BLAS runs on one thread (threadpoolctl; the setting is restored on
    leaving it)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def _check_splitting_engine(engine: str, engine_params: dict[str, object] | None) -> bool:
    """True when ``engine`` splits through the registry (anything but the built-in MDAV)."""
    info = get_engine(engine)
    if info.per_record:
        raise ParameterError(
            f"{engine} needs per-record parameter(s) {', '.join(sorted(info.per_record))} and "
            "cannot split cells; choose another splitting engine")
    return engine != "mdav" or bool(engine_params)


def _split_with_engine(X: np.ndarray, c: int, k: int, engine: str,
                       engine_params: dict[str, object] | None, centT: np.ndarray,
                       sizes: np.ndarray, head: np.ndarray, nxt: np.ndarray,
                       cell_of: np.ndarray, n_cells: int) -> int:
    members = cell_members(head, nxt, c, int(sizes[c]))
    labels = run_engine(engine, X[members], k, **(engine_params or {}))
    _, labels = np.unique(labels, return_inverse=True)  # ids 0..s-1
    return apply_split(X, c, labels.astype(np.int64), members, centT, sizes, head, nxt,
                       cell_of, n_cells)


_PARAMS = {"index": _INDEX_DOC}
_SOURCE = "Rebollo-Monedero et al. 2018 (paper 001), sec. III-B.6, IV-D, Table 1"

#: The loss a stage adds over its base engine's one-shot loss at the ratios
#: :data:`~streamanon.incremental.base.LOSS_NU`, over an MDAV base (m = 15, k = 10, 50,000
#: Gaussian records); linear in between. ``nn_split_mid`` is taken as ``nn_split_end`` and
#: ``nn_inertial`` as ``nn`` (they measured the same).
_SPLIT_END_LOSS = (0.0, 0.0021, 0.0104, 0.0210, 0.0469, 0.0718, 0.0847, 0.0796, 0.0894, 0.1182,
                   0.1182)
_NN_LOSS = (0.0, 0.0021, 0.0104, 0.0210, 0.0470, 0.0748, 0.1081, 0.1478, 0.2589, 0.5044,
            0.5044)


@register_stage("nn", summary="adjoin each new record to the nearest (moving) centroid",
                source=_SOURCE, parameters=_PARAMS,
                nu_grid=LOSS_NU, added_loss=_NN_LOSS, cost="nearest_neighbour")
def nn(base, base_labels, increment, k, *, index="auto"):
    return adjoin_increment(base, base_labels, increment, k, index=index)


@register_stage("nn_inertial",
                summary="adjoin to argmin n_q/(n_q+1)|y - x_q|^2 (least SSE increase)",
                source=_SOURCE, parameters=_PARAMS,
                nu_grid=LOSS_NU, added_loss=_NN_LOSS, cost="nearest_neighbour")
def nn_inertial(base, base_labels, increment, k, *, index="auto"):
    return adjoin_increment(base, base_labels, increment, k, inertial=True, index=index)


_SPLIT_PARAMS = {**_PARAMS, "inertial": "choose cells by n_q/(n_q+1)|y - x_q|^2 (Fig. 19)",
                 "engine": "engine that splits cells of 2k or more (default mdav)",
                 "engine_params": "parameters of the splitting engine (dict, default none)"}


@register_stage("nn_split_mid",
                summary="adjoin; split a cell (MDAV or engine=) as soon as it reaches 2k",
                source=_SOURCE, parameters=_SPLIT_PARAMS,
                nu_grid=LOSS_NU, added_loss=_SPLIT_END_LOSS, cost="nearest_neighbour_split")
def nn_split_mid(base, base_labels, increment, k, *, index="auto", inertial=False,
                 engine="mdav", engine_params=None):
    return adjoin_increment(base, base_labels, increment, k, split="mid", index=index,
                            inertial=bool(inertial), engine=engine, engine_params=engine_params)


@register_stage("nn_split_end",
                summary="adjoin; then split every cell of 2k or more (MDAV or engine=)",
                source=_SOURCE, parameters=_SPLIT_PARAMS,
                nu_grid=LOSS_NU, added_loss=_SPLIT_END_LOSS, cost="nearest_neighbour_split",
                # incremental = "auto"'s first choice: the better quality while it is in time
                auto_rank=0)
def nn_split_end(base, base_labels, increment, k, *, index="auto", inertial=False,
                 engine="mdav", engine_params=None):
    return adjoin_increment(base, base_labels, increment, k, split="end", index=index,
                            inertial=bool(inertial), engine=engine, engine_params=engine_params)
