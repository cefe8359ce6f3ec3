"""MDAV* and ONA*: variable-size cells, then local search (paper 004, Algorithms 1 and 3).

MDAV* walks the records from the farthest from the global centroid inwards, like MDAV, but at
each step compares, per record placed, the cost of a new cell around the farthest record ``x``
(``x`` and its k-1 nearest) with the cost of adding ``x`` to its closest existing cell and
opening a cell around its nearest neighbour instead; so cells may grow beyond k where that is
cheaper. ONA* starts from MDAV*, then repeats two local-search phases until nothing changes:
dissolve a cell of exactly k into the cells nearest its members when the total cost strictly
drops, and move the single most profitable record out of each cell larger than k; cells that
reach 2k are split again with MDAV*.

Choices where the paper (Thaeter & Reischuk 2021) is silent or its text damaged:

- MDAV* lines 7-8 compare costs per record placed: ``Cost(N1)/k`` against
  ``(n/(n+1)|x - mu_clos|^2 + Cost(N2))/(k+1)``; ties go to a new cell; with no cell yet, or
  fewer than k+1 records left, a new cell is forced. The records left at the end (fewer than
  k) join their closest cells in index order. "Closest cell" is by centroid.
- ONA* post-splits MDAV* cells of 2k or more with classic MDAV (the paper's MDAV+ is not
  published; MDAV also bounds the parts to k..2k-1).
- Cells are visited in id order; cells created by a split during a phase are visited in the
  same phase; dissolved ids are reused by later splits. A move must gain more than 1e-12 of
  the cell's cost (so floating-point ties cannot cycle). At most ``max_rounds`` rounds (30, as
  the paper's ONA runs).

How it is made fast (``_local_search_kernels``): the exhaustive kernels are kept there as the
reference, and tests compare.

- MDAV*: the k-1 nearest remaining records come from the MDAV kernels' exact quantised
  screening (one pass over 1-byte coordinates), the closest cell from one vectorised pass over
  the column-major centroids; no step scans record by record. Same labels as the reference.
- ONA*, exact search (``candidates=0``; the default up to ``EXACT_CELLS`` cells): cells keep
  sorted member lists and dissolved ids wait in a min-heap. Each record remembers its 4 nearest
  other cells, a lower bound on every other cell, and a position in a log of the cells that
  changed since; a query computes exact distances only to those and to the logged cells and,
  when the bound proves the answer, skips the scan of every centroid. Same labels as the
  reference, but still quadratic: early rounds change most cells, so most queries scan.
- ONA*, restricted search (``candidates=C``; the default, C = ``RESTRICTED_CANDIDATES``, above
  ``EXACT_CELLS`` cells): a record's move or dissolve goes only to the nearest of a short list
  of cells, rebuilt once per round: its cell's C nearest cells (by centroid) and the record's
  own 8 nearest cells, found from the lists of its cell and of its previous nearest cells. No
  query scans all cells. It is not exact: a move whose best destination is on neither list is
  missed, so the local search may stop at another local optimum. ``simulations/bench_ona.py``
  measures the difference: with C = 64 on Gaussian 50,000 x 15, k = 10, IL -0.10 % to +0.00 %
  of the exact search's (three data sets) in a third of its time; at 20,000 (where the default
  is exact) +0.3 %; on the benchmark files at most +0.2 %. When C is at least the number of
  cells, it is the exact search. The cost per round is about linear in n; at 100,000 records
  and more, the MDAV* start (quadratic, like MDAV) takes a third of the time or more.
"""

from __future__ import annotations

import numpy as np

from streamanon.engines._local_search_kernels import (
    local_search_labels,
    mdav_star_labels,
    ona_star_labels,
)
from streamanon.engines.base import kernel_matrix, register
from streamanon.engines.mdav import mdav
from streamanon.errors import ParameterError
from streamanon.progress import Progress

_SOURCE = "Thaeter & Reischuk 2021 (paper 004)"
#: Up to this many cells (n // k), ONA* searches every cell by default (exact).
EXACT_CELLS = 2_000
#: Above it, a move considers this many cells nearest to the record's own cell (plus its own 8).
RESTRICTED_CANDIDATES = 64


def default_candidates(n: int, k: int) -> int:
    """ONA*'s default ``candidates`` for n records: 0 (exact search) up to ``EXACT_CELLS``
    cells, ``RESTRICTED_CANDIDATES`` above."""
    return 0 if n // max(int(k), 1) <= EXACT_CELLS else RESTRICTED_CANDIDATES


@register("mdav_star", summary="MDAV*: MDAV that may grow cells where that costs less",
          source=f"{_SOURCE}, Alg. 1", mixed=True)
def mdav_star(X: np.ndarray, k: int, *, progress: Progress | None = None) -> np.ndarray:
    """MDAV* labels of the standardised records ``X``.

    Examples
    --------
    >>> import numpy as np
    >>> labels = mdav_star(np.random.default_rng(0).standard_normal((60, 2)), 4)
    >>> int(np.bincount(labels).min()) >= 4
    True

    References
    ----------
    Thaeter & Reischuk 2021 (docs/design/references.md), Algorithm 1.
    """
    X = kernel_matrix(X)
    if X.shape[0] < 2 * k:
        return np.zeros(X.shape[0], dtype=np.int64)
    return mdav_star_labels(X, int(k))


#: The partitions ONA*'s local search may start from (``start``).
STARTS = ("mdav_star", "mdav")


@register("ona_star", summary="ONA*: MDAV* start, then dissolve/move local search",
          source=f"{_SOURCE}, Alg. 3",
          # measured: -13.6 % on Gaussian 50,000 x 15, -14.9 % on census-like 50,000 x 13,
          # k = 10; 8.8 s for 30,000 records (the demo's calibration, 2 cores)
          mixed=True, one_shot_loss=0.86, cost_model=(1.0e-7, 1.78), auto=True,
          parameters={"max_rounds": "local-search rounds at most (default 30)",
                      "start": "the partition the search starts from: mdav_star (default, the "
                               "paper's) or mdav (faster start, a few rounds gain most)",
                      "candidates": "cells a record may move to, nearest to its cell first: 0 = "
                                    f"every cell (exact); default 0 up to {EXACT_CELLS:,} cells, "
                                    f"{RESTRICTED_CANDIDATES} above"})
def ona_star(X: np.ndarray, k: int, *, max_rounds: int = 30, candidates: int | None = None,
             start: str = "mdav_star", progress: Progress | None = None) -> np.ndarray:
    """ONA* labels of the standardised records ``X``.

    Parameters
    ----------
    X
        Standardised quasi-identifiers, n x m.
    k
        Minimum cell size.
    max_rounds
        Upper bound on the rounds of the two local-search phases.
    candidates
        0: every cell is a possible destination (the exhaustive search's labels). C > 0: only
        the C cells nearest to the record's cell and the record's own 8 nearest cells, lists
        rebuilt each round (faster, not exact). None: :func:`default_candidates`.
    start
        ``"mdav_star"``: the paper's ONA*. ``"mdav"``: the same local search from MDAV's
        partition, whose start costs a sixth of MDAV*'s at 100,000 records; its first rounds
        gain most (on 100,000 x 15 Gaussian, k = 10: -2.7 / -5.3 / -7.3 / -8.7 % of MDAV's IL
        after 1 / 2 / 3 / 4 rounds, -11.8 % converged, against ONA*'s -13.5 %). The partitioned
        engine runs it on each part (``simulations/bench_partitioned.py``).

    Examples
    --------
    >>> import numpy as np
    >>> from streamanon.metrics import distortion
    >>> X = np.random.default_rng(1).standard_normal((200, 3))
    >>> from streamanon.engines.mdav import mdav
    >>> distortion(X, ona_star(X, 5)) <= distortion(X, mdav(X, 5))
    True

    References
    ----------
    Thaeter & Reischuk 2021 (docs/design/references.md), Algorithm 3.
    """
    if int(max_rounds) < 0:
        raise ParameterError(f"max_rounds must be >= 0, got {max_rounds}")
    if candidates is not None and (isinstance(candidates, bool) or int(candidates) < 0):
        raise ParameterError(f"candidates must be a non-negative integer or None, got "
                             f"{candidates!r}")
    if start not in STARTS:
        raise ParameterError(f"start must be one of {', '.join(STARTS)}, got {start!r}")
    X = kernel_matrix(X)
    if X.shape[0] < 2 * k:
        return np.zeros(X.shape[0], dtype=np.int64)
    if candidates is None:
        candidates = default_candidates(X.shape[0], k)
    stats = np.zeros(4, dtype=np.int64)
    if start == "mdav":
        labels = np.ascontiguousarray(mdav(X, k), dtype=np.int64)
        return local_search_labels(X, int(k), labels, int(max_rounds), stats, int(candidates))
    return ona_star_labels(X, int(k), int(max_rounds), stats, int(candidates))
