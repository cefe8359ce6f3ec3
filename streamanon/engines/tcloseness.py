"""k-anonymous t-close (and l-diverse) microaggregation: the three algorithms of Soria-Comas et
al.

Microaggregation publishes the sensitive attributes untouched, so a cell whose sensitive values
are alike discloses them however large the cell. t-closeness bounds the Earth Mover's Distance
between each cell's distribution of a sensitive attribute and the whole data's
(:mod:`streamanon.privacy`). The paper gives three ways to get there. ``tclose_merge``
(algorithm 1) runs any k-anonymous engine and then merges the worst cell with its nearest
neighbour until every cell is t-close. ``tclose_kfirst`` (algorithm 2) is MDAV in which a cell
of ``k`` records that is not t-close keeps taking the record that lowers its EMD most.
``tclose_tfirst`` (algorithm 3) first fixes the cell size ``k'`` at which *any* cell holding one
record from each of ``k'`` equal strata of the sensitive ordering is t-close, then builds such
cells MDAV-style on the quasi-identifiers.

Beyond the paper, which treats one ordered sensitive attribute and no l-diversity: ``S`` may
hold several sensitive columns (each ``ordered`` or ``equal``, ``kinds``), ``t`` is then
required of every column and distinct ``l``-diversity may be asked as well. ``tclose_kfirst``
grows a cell while it violates either (for t the record that lowers the largest EMD over the
columns most; for l alone the nearest record bringing a missing value). ``tclose_tfirst``
stratifies on the first column of ``S`` only, as the paper does for its one attribute. The
records left over when ``k'`` does not divide ``n`` go each to the nearest cell that stays
compliant with it (the paper's exact rule for them was not available). Every engine ends with
:func:`streamanon.privacy.enforce`, the merging step of algorithm 1, so the guarantee holds
whatever the data; for algorithms 2 and 3 it is a safety net that rarely acts on a single
ordered attribute (the tests count it). :func:`kfirst_cells` and :func:`tfirst_cells` return
the partitions before that net.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from streamanon.engines._tclose_kernels import kfirst_labels, tfirst_labels
from streamanon.engines.base import get_engine, kernel_matrix, register, run_engine
from streamanon.errors import ParameterError
from streamanon.privacy import TOLERANCE, Domain, enforce, resolve_kinds, sensitive_columns
from streamanon.progress import Progress

_PARAMETERS = {
    "S": "sensitive attributes, n x s (a vector is one); published unchanged; required",
    "t": "largest EMD of a cell to the whole, in [0, 1], per sensitive column",
    "l": "fewest distinct sensitive values per cell, per column (distinct l-diversity)",
    "kinds": "EMD ground distance per column: ordered (default) or equal (nominal)",
}


def _warmup(X: np.ndarray) -> dict[str, object]:
    """The parameters of :mod:`streamanon.warmup`'s run: four sensitive levels, t = 0.5."""
    return {"S": np.random.default_rng(1).integers(0, 4, len(X)).astype(np.float64), "t": 0.5}


def tfirst_cluster_size(n: int, k: int, t: float) -> int:
    """``k' = max(k, ceil(n / (2 (n - 1) t + 1)))``: the cell size of algorithm 3.

    A cell with one record from each of ``k'`` strata of ``n / k'`` consecutive ranks of the
    sensitive attribute has ``EMD <= (n - k') / (2 k' (n - 1))`` (distinct values, ordered
    distance), which is at most ``t`` exactly when ``k' >= n / (2 (n - 1) t + 1)``.

    Examples
    --------
    >>> tfirst_cluster_size(1080, 2, 0.1), tfirst_cluster_size(1080, 2, 0.01)
    (5, 48)
    >>> tfirst_cluster_size(1080, 5, 0.2)
    5

    References
    ----------
    Soria-Comas et al. (TKDE 2015), section on t-closeness-first microaggregation; digest
    ``notes/tcloseness_digest.md`` section 2.3.
    """
    if n <= 1:
        return max(k, 1)
    # The relative slack keeps an exact integer quotient (n = 1081, t = 0.1 gives 5) from
    # being rounded up by the float division.
    return max(k, math.ceil(n / (2.0 * (n - 1) * t + 1.0) * (1.0 - 1e-12)))


def _privacy_parameters(n: int, S: object, t: object, l: object,  # noqa: E741
                        kinds: str | Sequence[str] | None
                        ) -> tuple[np.ndarray, tuple[str, ...], float | None, int | None]:
    S = sensitive_columns(S, n)
    kinds = resolve_kinds(kinds, S.shape[1])
    if t is not None:
        if isinstance(t, bool) or not isinstance(t, numbers.Real) or not 0.0 <= t <= 1.0:
            raise ParameterError(f"t must be a number in [0, 1] (the largest EMD of a cell), "
                                 f"got {t!r}")
        t = float(t)
    if l is not None:
        if isinstance(l, bool) or not isinstance(l, numbers.Integral) or l < 1:
            raise ParameterError(f"l must be a positive integer, got {l!r}")
        l = int(l)  # noqa: E741
        fewest = min(len(np.unique(S[:, j])) for j in range(S.shape[1]))
        if l > fewest:
            raise ParameterError(f"l = {l} but a sensitive column has only {fewest} distinct "
                                 f"values: no partition is {l}-diverse; lower l")
    if t is None and l is None:
        raise ParameterError("give t= (t-closeness) or l= (l-diversity), or both")
    return S, kinds, t, l


class _Cell:
    """A cell being grown: its members and, per sensitive column, its value counts."""

    def __init__(self, members: list[int], domains: list[Domain]) -> None:
        self.members = list(members)
        self.counts = [np.bincount(d.codes[members], minlength=d.m).astype(np.float64)
                       for d in domains]

    def add(self, record: int, domains: list[Domain]) -> None:
        self.members.append(record)
        for counts, domain in zip(self.counts, domains, strict=True):
            counts[domain.codes[record]] += 1.0

    def too_far(self, domains: list[Domain], t: float | None) -> bool:
        if t is None:
            return False
        pairs = zip(domains, self.counts, strict=True)
        return max(d.emd_of_counts(c) for d, c in pairs) > t + TOLERANCE

    def lacking(self, l: int | None) -> list[int]:  # noqa: E741
        """The columns with fewer than ``l`` distinct values."""
        if l is None:
            return []
        return [j for j, counts in enumerate(self.counts) if np.count_nonzero(counts) < l]


def _squared_distances(Z: np.ndarray, rows: np.ndarray, point: np.ndarray) -> np.ndarray:
    return ((Z[rows] - point) ** 2).sum(axis=1)


def _farthest(Z: np.ndarray, rows: np.ndarray, point: np.ndarray) -> int:
    return int(rows[np.argmax(_squared_distances(Z, rows, point))])


def _domains(S: np.ndarray, n: int, kinds: Sequence[str]) -> list[Domain]:
    S = sensitive_columns(S, n)
    return [Domain.of(S[:, j], kind) for j, kind in enumerate(resolve_kinds(kinds, S.shape[1]))]


def _mdav_seeds(X: np.ndarray, free: np.ndarray, more: Callable[[], bool],
                make_cell: Callable[[int], None], progress: Progress | None) -> None:
    """MDAV's order of cells: while ``more()``, a cell around ``x_r``, the free record
    farthest from the free records' centroid, then (if still ``more()``) one around ``x_s``,
    the free record farthest from ``x_r``. ``make_cell(seed)`` takes its records out of
    ``free``; ``progress`` counts the records placed."""
    n = free.size
    if progress is not None:
        progress.start(n)

    def make(seed: int) -> None:
        make_cell(seed)
        if progress is not None:
            progress.counter[0] = n - int(free.sum())

    while more():
        rows = np.flatnonzero(free)
        x_r = _farthest(X, rows, X[rows].mean(axis=0))
        make(x_r)
        if more():
            make(_farthest(X, np.flatnonzero(free), X[x_r]))


def _grow(Z: np.ndarray, cell: _Cell, seed: int, free: np.ndarray, domains: list[Domain],
          t: float | None, l: int | None) -> None:  # noqa: E741
    """Algorithm 2's inner loop: add records of ``free`` to ``cell`` while it is not t-close
    (the record giving the smallest largest-EMD; ties to the nearest to ``seed``) or not
    l-diverse (the nearest record bringing a missing value, t-close ones first)."""
    while free.any():
        too_far = cell.too_far(domains, t)
        lacking = cell.lacking(l)
        if not too_far and not lacking:
            return
        pool = np.flatnonzero(free)
        near = _squared_distances(Z, pool, Z[seed])
        score = np.zeros(len(pool))
        if t is not None:
            score = np.max([d.emd_if_added(c)[d.codes[pool]]
                            for d, c in zip(domains, cell.counts, strict=True)], axis=0)
        if too_far:
            pick = pool[np.lexsort((pool, near, score))[0]]
        else:
            brings = np.zeros(len(pool), dtype=bool)
            for j in lacking:
                brings |= cell.counts[j][domains[j].codes[pool]] == 0
            if not brings.any():
                return  # no free record helps; the final merging step decides
            usable = brings & (score <= t + TOLERANCE) if t is not None else brings
            choice = np.flatnonzero(usable if usable.any() else brings)
            pick = pool[choice[np.lexsort((pool[choice], near[choice]))[0]]]
        cell.add(int(pick), domains)
        free[pick] = False


def _attach(Z: np.ndarray, labels: np.ndarray, leftovers: np.ndarray, domains: list[Domain],
            t: float | None, l: int | None) -> None:  # noqa: E741
    """Put each leftover record (in index order) into the nearest cell (centroid distance)
    that stays t-close and l-diverse with it; the nearest cell when none does."""
    n_cells = int(labels.max()) + 1
    for record in leftovers:
        placed = labels >= 0
        sizes = np.bincount(labels[placed], minlength=n_cells)
        centroids = np.stack([np.bincount(labels[placed], Z[placed, j], minlength=n_cells)
                              for j in range(Z.shape[1])], axis=1) / sizes[:, None]
        order = np.argsort(((centroids - Z[record]) ** 2).sum(axis=1), kind="stable")
        target = int(order[0])
        for cell_id in order:
            cell = _Cell([*np.flatnonzero(labels == cell_id), int(record)], domains)
            if not cell.too_far(domains, t) and not cell.lacking(l):
                target = int(cell_id)
                break
        labels[record] = target


def kfirst_cells(X: np.ndarray, k: int, S: np.ndarray, kinds: Sequence[str],
                 t: float | None, l: int | None = None,  # noqa: E741
                 progress: Progress | None = None) -> np.ndarray:
    """Algorithm 2 before the final merging: k-anonymity-first, t-closeness-aware MDAV.

    While at least ``2k`` records are free: ``x_r``, the free record farthest from their
    centroid, and its ``k - 1`` nearest free records form a cell, grown while it violates the
    model (:func:`_grow`); then the same from ``x_s``, the free record farthest from ``x_r``.
    The last ``k`` to ``2k - 1`` free records form one cell; fewer than ``k`` (left when cells
    grew) join the nearest cells that stay compliant. Cells may still violate the model.

    With ``t`` and no ``l`` the loop runs compiled (:mod:`._tclose_kernels`), taking the same
    decisions; with ``l`` it runs in NumPy.
    """
    X = np.asarray(X, dtype=np.float64)
    n = X.shape[0]
    domains = _domains(S, n, kinds)
    if t is None or l is not None:
        return _kfirst_cells_numpy(X, k, domains, t, l, progress)
    widest = max(d.m for d in domains)
    cumulative = np.zeros((len(domains), widest))
    share = np.zeros((len(domains), widest))
    for j, d in enumerate(domains):
        cumulative[j, :d.m] = d.cumulative
        share[j, :d.m] = d.share
    counter = progress.counter if progress is not None else np.zeros(2, dtype=np.int64)
    counter[0], counter[1] = 0, n
    labels, n_cells = kfirst_labels(
        kernel_matrix(X), int(k),
        np.ascontiguousarray(np.stack([d.codes for d in domains], axis=1)),
        cumulative, share, np.array([d.m for d in domains], dtype=np.int64),
        np.array([d.kind == "equal" for d in domains]), float(t) + TOLERANCE, counter)
    _finish_kfirst(X, labels, int(n_cells), k, domains, t, l)
    return labels


def _finish_kfirst(X: np.ndarray, labels: np.ndarray, n_cells: int, k: int,
                   domains: list[Domain], t: float | None, l: int | None) -> None:  # noqa: E741
    """The records still free after the seeded cells: one cell when they are at least ``k``
    (or no cell exists), else each joins the nearest compliant cell."""
    free = labels < 0
    if free.sum() >= k or n_cells == 0:
        labels[free] = n_cells
    elif free.any():
        _attach(X, labels, np.flatnonzero(free), domains, t, l)


def _kfirst_cells_numpy(X: np.ndarray, k: int, domains: list[Domain], t: float | None,
                        l: int | None, progress: Progress | None) -> np.ndarray:  # noqa: E741
    """:func:`kfirst_cells` in NumPy: the loop for l-diversity, and the reference the
    compiled loop is tested against."""
    n = X.shape[0]
    labels = np.full(n, -1, dtype=np.int64)
    free = np.ones(n, dtype=bool)
    n_cells = 0

    def make_cell(seed: int) -> None:
        nonlocal n_cells
        rows = np.flatnonzero(free)
        nearest = rows[np.lexsort((rows, _squared_distances(X, rows, X[seed])))[:k]]
        nearest = np.concatenate([[seed], nearest[nearest != seed][:k - 1]])
        cell = _Cell(list(nearest), domains)
        free[nearest] = False
        _grow(X, cell, seed, free, domains, t, l)
        labels[cell.members] = n_cells
        n_cells += 1

    _mdav_seeds(X, free, lambda: free.sum() >= 2 * k, make_cell, progress)
    _finish_kfirst(X, labels, n_cells, k, domains, t, l)
    return labels


def tfirst_cells(X: np.ndarray, k: int, S: np.ndarray, kinds: Sequence[str], t: float,
                 l: int | None = None,  # noqa: E741
                 progress: Progress | None = None) -> np.ndarray:
    """Algorithm 3 before the final merging: t-closeness-first microaggregation.

    The records, sorted by the first sensitive column (ties by row), are cut into
    ``k' = tfirst_cluster_size(n, k, t)`` strata of ``floor(n / k')`` or ``ceil(n / k')``
    consecutive ranks (boundaries at ``floor(i n / k')``). MDAV-style, ``x_r`` (the free
    record farthest from the free records' centroid) gets a cell of the free record nearest
    to it in every stratum, then ``x_s`` (the free record farthest from ``x_r``) likewise,
    until ``floor(n / k')`` cells of ``k'`` are made; the ``n mod k'`` records left (at most one
    per stratum) join the nearest cells that stay compliant. ``n < 2 k'`` gives one cell.
    The loop runs compiled (:mod:`._tclose_kernels`).
    """
    X = np.asarray(X, dtype=np.float64)
    n = X.shape[0]
    domains = _domains(S, n, kinds)
    size = tfirst_cluster_size(n, k, t)
    labels = np.full(n, -1, dtype=np.int64)
    if n < 2 * size:
        return np.zeros(n, dtype=np.int64)
    ranked = np.argsort(domains[0].codes, kind="stable")
    bounds = (np.arange(size + 1) * n) // size
    place = np.empty(n, dtype=np.int64)
    place[ranked] = np.arange(n)
    stratum = np.searchsorted(bounds, place, side="right") - 1
    counter = progress.counter if progress is not None else np.zeros(2, dtype=np.int64)
    counter[0], counter[1] = 0, n
    labels = tfirst_labels(kernel_matrix(X), stratum, place - bounds[stratum], size,
                           n // size, counter)
    if (labels < 0).any():
        _attach(X, labels, np.flatnonzero(labels < 0), domains, t, l)
    return labels


def _final(X: np.ndarray, labels: np.ndarray, S: np.ndarray, kinds: Sequence[str],
           t: float | None, l: int | None, progress: Progress | None) -> np.ndarray:  # noqa: E741
    labels = enforce(X, labels, S, kinds, t=t, l=l)
    if progress is not None:
        progress.finish()
    return labels


@register(
    "tclose_merge",
    summary="any engine, then merge the worst cell with its nearest until t-close/l-diverse",
    source="Soria-Comas et al., TKDE 2015 (arXiv 1512.02909), algorithm 1",
    parameters={
        **_PARAMETERS,
        "engine": "base engine name (default mdav; any registered engine without S)",
        "engine_params": "parameters of the base engine (dict, default none)",
    },
    per_record=("S",),
    mixed=True, warmup=_warmup,
)
def tclose_merge(
    X: np.ndarray,
    k: int,
    *,
    S: np.ndarray | None = None,
    t: float | None = None,
    l: int | None = None,  # noqa: E741
    kinds: str | Sequence[str] | None = None,
    engine: str = "mdav",
    engine_params: Mapping[str, object] | None = None,
    progress: Progress | None = None,
) -> np.ndarray:
    """Partition ``X`` with ``engine``, then merge cells until every one is t-close and
    l-diverse (:func:`streamanon.privacy.enforce`).

    Parameters
    ----------
    X
        Standardised quasi-identifiers, n x m, finite.
    k
        Minimum cell size.
    S
        Sensitive attributes, n x s or a vector; required.
    t, l
        The largest EMD and the fewest distinct values allowed per cell and column; at least
        one of them.
    kinds
        ``ordered`` (default) or ``equal`` per column of ``S``, or one for all.
    engine, engine_params
        The base engine and its parameters.
    progress
        Passed to the base engine.

    Returns
    -------
    numpy.ndarray
        int64 labels ``0..c-1``; every cell has at least ``k`` records, is t-close and
        l-diverse in every column of ``S``.

    Examples
    --------
    >>> import numpy as np
    >>> from streamanon.privacy import cell_emds
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((200, 3))
    >>> s = X[:, 0] + 0.1 * rng.standard_normal(200)  # sensitive, tied to the first QI
    >>> cells = tclose_merge(X, 5, S=s, t=0.2)
    >>> bool(cell_emds(cells, s, "ordered").max() <= 0.2), bool(np.bincount(cells).min() >= 5)
    (True, True)

    References
    ----------
    Soria-Comas, Domingo-Ferrer, Sánchez, Martínez, "t-Closeness through Microaggregation",
    IEEE TKDE 27(11), 2015, algorithm 1; digest ``notes/tcloseness_digest.md`` section 2.1.
    """
    X = np.asarray(X, dtype=np.float64)
    S, kinds, t, l = _privacy_parameters(X.shape[0], S, t, l, kinds)  # noqa: E741
    if not isinstance(engine, str):
        raise ParameterError(f"engine must be an engine name, got {engine!r}")
    if "S" in get_engine(engine).per_record:
        raise ParameterError(f"tclose_merge cannot wrap {engine!r}; choose a k-anonymity "
                             f"engine such as mdav")
    if engine_params is not None and not isinstance(engine_params, Mapping):
        raise ParameterError(f"engine_params must be a dict of {engine!r} parameters, got "
                             f"{type(engine_params).__name__}")
    params = dict(engine_params or {})
    if progress is not None:
        params["progress"] = progress
    labels = run_engine(engine, X, k, **params)
    return enforce(X, labels, S, kinds, t=t, l=l)


@register(
    "tclose_kfirst",
    summary="k-anonymity-first t-closeness-aware MDAV: cells grow until t-close/l-diverse",
    source="Soria-Comas et al., TKDE 2015 (arXiv 1512.02909), algorithm 2",
    parameters=dict(_PARAMETERS),
    per_record=("S",),
    mixed=True, warmup=_warmup,
)
def tclose_kfirst(
    X: np.ndarray,
    k: int,
    *,
    S: np.ndarray | None = None,
    t: float | None = None,
    l: int | None = None,  # noqa: E741
    kinds: str | Sequence[str] | None = None,
    progress: Progress | None = None,
) -> np.ndarray:
    """Algorithm 2 (:func:`kfirst_cells`), then the merging step as a safety net.

    Parameters and return value as :func:`tclose_merge` (without ``engine``). O(n^2 / k)
    distance evaluations, as plain MDAV, plus O(m) per record added to a growing cell.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(1)
    >>> X = rng.standard_normal((120, 2))
    >>> cells = tclose_kfirst(X, 4, S=X[:, 0], t=0.25)
    >>> int(np.bincount(cells).min()) >= 4
    True

    References
    ----------
    Soria-Comas et al. (TKDE 2015), algorithm 2; digest section 2.2.
    """
    X = np.asarray(X, dtype=np.float64)
    S, kinds, t, l = _privacy_parameters(X.shape[0], S, t, l, kinds)  # noqa: E741
    labels = kfirst_cells(X, k, S, kinds, t, l, progress)
    return _final(X, labels, S, kinds, t, l, progress)


@register(
    "tclose_tfirst",
    summary="t-closeness-first: cells of k'(n,t) records, one from each sensitive stratum",
    source="Soria-Comas et al., TKDE 2015 (arXiv 1512.02909), algorithm 3",
    parameters=dict(_PARAMETERS, t="largest EMD of a cell to the whole, in (0, 1]; required"),
    per_record=("S",),
    mixed=True, warmup=_warmup,
)
def tclose_tfirst(
    X: np.ndarray,
    k: int,
    *,
    S: np.ndarray | None = None,
    t: float | None = None,
    l: int | None = None,  # noqa: E741
    kinds: str | Sequence[str] | None = None,
    progress: Progress | None = None,
) -> np.ndarray:
    """Algorithm 3 (:func:`tfirst_cells`), then the merging step as a safety net.

    Parameters and return value as :func:`tclose_merge` (without ``engine``); ``t`` is
    required and positive here, since it sets the cell size
    ``k' = max(k, ceil(n / (2 (n - 1) t + 1)))`` (:func:`tfirst_cluster_size`).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(2)
    >>> X = rng.standard_normal((100, 2))
    >>> np.bincount(tclose_tfirst(X, 2, S=rng.standard_normal(100), t=0.1)).tolist()[:3]
    [5, 5, 5]

    References
    ----------
    Soria-Comas et al. (TKDE 2015), algorithm 3; digest section 2.3.
    """
    X = np.asarray(X, dtype=np.float64)
    S, kinds, t, l = _privacy_parameters(X.shape[0], S, t, l, kinds)  # noqa: E741
    if t is None or t <= 0.0:
        raise ParameterError("tclose_tfirst needs t > 0: t sets its cell size "
                             "k' = ceil(n / (2 (n - 1) t + 1))")
    labels = tfirst_cells(X, k, S, kinds, t, l, progress)
    return _final(X, labels, S, kinds, t, l, progress)
