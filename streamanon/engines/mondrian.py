"""The Mondrian family and MONA (paper 004, Algorithms 4-6).

Mondrian cuts the records at the median of one direction and recurses on both halves until a
part has fewer than ``2k`` records; the parts are the cells. It never compares two records, so
it runs in ``O(n m log n)`` (``O(n m^2 log n)`` for V2D), but the cells follow the cuts rather
than the data. The variants differ only in the direction of each cut:

- ``mondrian``: the column with the widest range (LeFevre et al.);
- ``mondrian_v``: the column with the largest variance within the part;
- ``mondrian_v2d``: also the diagonals ``(e_j1 +- e_j2) / sqrt(2)``, by the projected variance.

MONA_rho (``mona``, ``mona_2d``) uses the fast cuts only for the coarse work: parts larger than
``n^rho`` are cut by Mondrian-V (V2D), and ONA* (with its default ``candidates`` for the
part's size) clusters each remaining part. ``rho = 0`` is Mondrian-V, ``rho = 1`` is ONA*;
the runtime is ``O(n^(1 + rho) m)``. The parts are
independent and ONA* releases the GIL, so they run on parallel threads; the result does not
depend on the number of threads.

Choices where the paper (Thaeter & Reischuk 2021) is silent:

- The median of an even count is the mean of the two middle values; records at most the median
  go left. When ties at the median would leave a side with fewer than ``k`` records (the text
  then stops splitting, which can leave arbitrarily large cells on tie-heavy data), the part is
  cut by rank instead: ordered by the projection, ties by record index, the first half left.
  So every cell has ``k`` to ``2k - 1`` records, as the paper states.
- Ties between directions go to the first: columns in order, then pairs ``j1 < j2`` with the
  ``+`` diagonal before the ``-`` one.
- MONA's threshold ``n^rho`` uses the size ``n`` of the whole input; a part is cut while it has
  more than ``max(n^rho, 2k - 1)`` records.
"""

from __future__ import annotations

import numbers
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from streamanon.engines._local_search_kernels import ona_star_labels
from streamanon.engines._mondrian_kernels import (
    RULE_RANGE,
    RULE_VARIANCE,
    RULE_VARIANCE_2D,
    mondrian_parts,
)
from streamanon.engines.base import kernel_matrix, register
from streamanon.engines.ona import default_candidates
from streamanon.errors import ParameterError
from streamanon.progress import Progress

_SOURCE = "Thaeter & Reischuk 2021 (paper 004)"
_ONA_ROUNDS = 30


def _parts_to_labels(perm: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    labels = np.empty(len(perm), dtype=np.int64)
    labels[perm] = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))
    return labels


def _mondrian(X: np.ndarray, k: int, rule: int, progress: Progress | None) -> np.ndarray:
    X = kernel_matrix(X)
    if progress is not None:
        progress.start(X.shape[0])
    perm, bounds = mondrian_parts(X, int(k), rule, 2 * int(k) - 1)
    if progress is not None:
        progress.finish()
    return _parts_to_labels(perm, bounds)


@register("mondrian", summary="median cuts on the widest-range column (O(n m log n))",
          source=f"{_SOURCE}, Alg. 4")
def mondrian(X: np.ndarray, k: int, *, progress: Progress | None = None) -> np.ndarray:
    """Mondrian labels of the standardised records ``X``: every cell has ``k..2k-1`` records
    (all ``n`` when ``n < 2k``).

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0, 0.0], [1.0, 0.1], [2.0, 0.0], [3.0, 0.2], [4.0, 0.0]])
    >>> mondrian(X, 2).tolist()  # widest column 0, median 2: {0, 1, 2} | {3, 4}
    [0, 0, 0, 1, 1]

    References
    ----------
    LeFevre, DeWitt and Ramakrishnan (2006); as used in Thaeter & Reischuk 2021
    (docs/design/references.md), Algorithm 4.
    """
    return _mondrian(X, k, RULE_RANGE, progress)


@register("mondrian_v", summary="median cuts on the largest-variance column (O(n m log n))",
          source=f"{_SOURCE}, sec. 4 (MONDRIAN_V)")
def mondrian_v(X: np.ndarray, k: int, *, progress: Progress | None = None) -> np.ndarray:
    """Mondrian-V labels: like :func:`mondrian`, cutting the column of largest variance.

    References
    ----------
    Thaeter & Reischuk 2021 (docs/design/references.md), MONDRIAN_V.
    """
    return _mondrian(X, k, RULE_VARIANCE, progress)


@register("mondrian_v2d",
          summary="median cuts on the largest-variance column or 45-degree diagonal "
                  "(O(n m^2 log n))",
          source=f"{_SOURCE}, Alg. 5")
def mondrian_v2d(X: np.ndarray, k: int, *, progress: Progress | None = None) -> np.ndarray:
    """Mondrian-V2D labels: the cut direction may also be ``(e_j1 +- e_j2) / sqrt(2)``.

    References
    ----------
    Thaeter & Reischuk 2021 (docs/design/references.md), Algorithm 5 (MONDRIAN_V2D).
    """
    return _mondrian(X, k, RULE_VARIANCE_2D, progress)


def _check_rho(rho: object) -> float:
    if isinstance(rho, bool) or not isinstance(rho, numbers.Real):
        raise ParameterError(f"rho must be a number in [0, 1], got {rho!r}")
    if not 0.0 <= float(rho) <= 1.0:
        raise ParameterError(
            f"rho must be in [0, 1] (0: Mondrian-V, 1: ONA*), got {rho}")
    return float(rho)


def _threads(n_threads: object) -> int:
    if n_threads is None:
        return os.cpu_count() or 1
    if isinstance(n_threads, bool) or not isinstance(n_threads, (int, np.integer)) \
            or n_threads < 1:
        raise ParameterError(f"n_threads must be a positive integer, got {n_threads!r}")
    return int(n_threads)


def _mona(X: np.ndarray, k: int, rule: int, rho: object, n_threads: object,
          progress: Progress | None) -> np.ndarray:
    rho = _check_rho(rho)
    threads = _threads(n_threads)
    X = kernel_matrix(X)
    n = X.shape[0]
    k = int(k)
    if progress is not None:
        progress.start(n)
    limit = max(int(np.floor(n ** rho * (1 + 1e-12))), 2 * k - 1)
    perm, bounds = mondrian_parts(X, k, rule, limit)
    parts = [perm[bounds[p]:bounds[p + 1]] for p in range(len(bounds) - 1)]

    def cluster(rows: np.ndarray) -> np.ndarray:
        if len(rows) < 2 * k:
            part = np.zeros(len(rows), dtype=np.int64)
        else:
            part = ona_star_labels(np.ascontiguousarray(X[rows]), k, _ONA_ROUNDS,
                                   np.zeros(4, dtype=np.int64), default_candidates(len(rows), k))
        if progress is not None:
            progress.counter[0] += len(rows)  # may be late by a part: display only
        return part

    if threads > 1 and len(parts) > 1:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            results = list(pool.map(cluster, parts))
    else:
        results = [cluster(rows) for rows in parts]
    labels = np.empty(n, dtype=np.int64)
    offset = 0
    for rows, part in zip(parts, results, strict=True):
        labels[rows] = part + offset
        offset += int(part.max()) + 1
    if progress is not None:
        progress.finish()
    return labels


_MONA_PARAMETERS = {
    "rho": "split limit n^rho, in [0, 1] (default 0.5; 0 = Mondrian-V, 1 = ONA*)",
    "n_threads": "threads running ONA* on the parts (default: all cores); result unchanged",
}


@register("mona", summary="Mondrian-V cuts down to n^rho records, then ONA* on each part",
          source=f"{_SOURCE}, Alg. 6", parameters=_MONA_PARAMETERS, mixed=True)
def mona(X: np.ndarray, k: int, *, rho: float = 0.5, n_threads: int | None = None,
         progress: Progress | None = None) -> np.ndarray:
    """MONA_rho labels of the standardised records ``X``.

    Parameters
    ----------
    X
        Standardised quasi-identifiers, n x m.
    k
        Minimum cell size.
    rho
        Parts of more than ``n^rho`` records are cut by Mondrian-V; ONA* clusters the rest.
    n_threads
        Parts clustered in parallel (ONA* runs without the GIL).

    Examples
    --------
    >>> import numpy as np
    >>> from streamanon.metrics import distortion
    >>> X = np.random.default_rng(2).standard_normal((400, 3))
    >>> distortion(X, mona(X, 5, rho=0.6)) < distortion(X, mondrian_v(X, 5))
    True
    >>> bool((mona(X, 5, rho=0.0) == mondrian_v(X, 5)).all())
    True

    References
    ----------
    Thaeter & Reischuk 2021 (docs/design/references.md), Algorithm 6 (caption only in the
    available text; the body is reconstructed from the paper's prose).
    """
    return _mona(X, k, RULE_VARIANCE, rho, n_threads, progress)


@register("mona_2d", summary="Mondrian-V2D cuts down to n^rho records, then ONA* on each part",
          source=f"{_SOURCE}, Alg. 6", parameters=_MONA_PARAMETERS, mixed=True)
def mona_2d(X: np.ndarray, k: int, *, rho: float = 0.5, n_threads: int | None = None,
            progress: Progress | None = None) -> np.ndarray:
    """MONA_2D_rho labels: :func:`mona` with Mondrian-V2D cuts.

    References
    ----------
    Thaeter & Reischuk 2021 (docs/design/references.md), Algorithm 6 and Table 5.
    """
    return _mona(X, k, RULE_VARIANCE_2D, rho, n_threads, progress)
