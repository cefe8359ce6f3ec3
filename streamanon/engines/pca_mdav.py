"""MDAV on the dominant principal components, on all records or on the proximal ones only.

Paper 000 speeds MDAV up without touching it: it changes the data MDAV sees. ``pca_mdav``
(Algorithm B) rotates the standardised records onto their principal axes, keeps the ``m_tilde``
axes that hold all but a fraction ``epsilon**2`` of the energy, and runs MDAV on those
coordinates; the cells are then applied to the original records, where the caller computes the
centroids and the distortion. Fewer coordinates make every distance cheaper; discarding some of
the energy perturbs the distances and so the partition.

``pca_mdav_proximal`` (Algorithm C) first cuts the records into macrocells of ``K`` records with
MDAV, ranks the macrocells by their distortion, and keeps the ``C_D`` most distorted ("distal")
ones out of the PCA: their records get plain MDAV, the other ("proximal") records get PCA and
MDAV. Splitting the records in two also saves time of its own, since MDAV's cost grows roughly
with the square of the number of records.

References
----------
Rebollo-Monedero, Mohamad Mezher, Casanova Colome, Forne and Soriano, "Efficient k-anonymous
microaggregation of multivariate numerical data via principal component analysis"
(Rebollo-Monedero et al. 2019 in docs/design/references.md), sections III-C, IV-A (Algorithm B),
IV-B (Algorithm C) and Fig. 10.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streamanon.engines.base import register
from streamanon.engines.mdav import mdav
from streamanon.errors import ParameterError
from streamanon.metrics import cell_means
from streamanon.progress import Progress

DEFAULT_ENERGY = 0.1
# Paper 000 sec. V: K = 1000 for k = 2..100 on Census (K/k = 100 at k = 10).
DEFAULT_MACROCELL_SIZE = 1000
DEFAULT_MACROCELL_RATIO = 10
SCOPES = ("pooled", "macrocell")
# Cumulative energies are sums of floating-point eigenvalues: a threshold met up to rounding is met.
_ENERGY_TOLERANCE = 1e-12


@dataclass(frozen=True)
class PrincipalComponents:
    """The principal axes of a set of records and the ones kept.

    ``eigenvalues`` are all ``m`` eigenvalues of the population covariance, largest first and
    clipped at 0; ``axes`` holds the ``n_components`` dominant unit eigenvectors as columns.
    """

    mean: np.ndarray
    eigenvalues: np.ndarray
    axes: np.ndarray

    @property
    def n_components(self) -> int:
        return self.axes.shape[1]

    @property
    def kept_energy(self) -> float:
        """``1 - epsilon**2``: the fraction of the total energy on the kept axes (1 if none)."""
        total = float(self.eigenvalues.sum())
        return float(self.eigenvalues[: self.n_components].sum()) / total if total > 0 else 1.0

    def project(self, X: np.ndarray) -> np.ndarray:
        """The coordinates of ``X`` (n x m) on the kept axes, n x ``n_components``."""
        return np.ascontiguousarray((np.asarray(X, dtype=np.float64) - self.mean) @ self.axes)


def components_for_energy(eigenvalues: np.ndarray, energy: float) -> int:
    """The smallest ``m_tilde >= 1`` whose ``m_tilde`` largest eigenvalues hold at least
    ``1 - energy`` of their sum.

    This is the paper's rule "select m_tilde dominant eigenvalues to satisfy a constraint on the
    preserved normalised energy 1 - epsilon**2 = (1/m) sum_{i <= m_tilde} lambda_i" read as "at
    least": it reproduces the paper's m_tilde = 6 for Census (5 axes hold about 89 %, 6 hold
    92.9 %) and m_tilde = 7 for Forest at epsilon**2 = 0.1 (paper sec. III-C, Fig. 10). The
    total is the trace of the covariance, ``m`` on standardised data, so the rule also applies
    to a subset of the records. With ``energy = 0`` it keeps the numerical rank (zero
    eigenvalues are redundant attributes, Fig. 10); with no energy at all (identical records)
    it keeps one axis.

    Parameters
    ----------
    eigenvalues
        Non-negative eigenvalues, largest first.
    energy
        ``epsilon**2``, the fraction of the energy that may be discarded, ``0 <= energy < 1``.

    Examples
    --------
    >>> components_for_energy(np.array([7.0, 2.0, 0.6, 0.4]), 0.1)  # 7 + 2 = 90 %
    2
    >>> components_for_energy(np.array([7.0, 2.0, 0.6, 0.4]), 0.09)
    3

    References
    ----------
    Rebollo-Monedero et al. 2019, sec. III-C and Fig. 10 ("choosing m~").
    """
    eigenvalues = np.asarray(eigenvalues, dtype=np.float64)
    total = float(eigenvalues.sum())
    if not total > 0:
        return 1
    kept = np.cumsum(eigenvalues) / total
    first = int(np.searchsorted(kept, 1.0 - energy - _ENERGY_TOLERANCE, side="left"))
    return min(first + 1, len(eigenvalues))


def fit_principal_components(
    X: np.ndarray, *, energy: float | None = None, components: int | None = None
) -> PrincipalComponents:
    """The principal axes of the records ``X`` (n x m), keeping ``components`` of them or, if
    that is None, as many as :func:`components_for_energy` needs for ``energy`` (default 0.1).

    The covariance is the population one, ``(1/n) sum (x - mean)(x - mean)^T``, and the axes are
    its eigenvectors (``numpy.linalg.eigh``), so the projection is deterministic for a given
    input. Its cost, O(n m^2 + m^3), is small next to MDAV's.

    Parameters
    ----------
    X
        Records, n x m, finite.
    energy
        ``epsilon**2``, the fraction of the energy that may be discarded, ``0 <= energy < 1``.
    components
        Number of axes to keep, ``1 <= components <= m``; excludes ``energy``.

    References
    ----------
    Rebollo-Monedero et al. 2019, sec. III-C (spectral decomposition, compression
    ``X~ = U~^T X``) and Fig. 10.
    """
    X = np.asarray(X, dtype=np.float64)
    m = X.shape[1]
    energy = _check_energy_and_components(energy, components, m)
    mean = X.mean(axis=0)
    centred = X - mean
    covariance = centred.T @ centred / X.shape[0]
    eigenvalues, vectors = np.linalg.eigh(covariance)
    # eigh sorts ascending; the dominant axes come first from here on.
    eigenvalues = np.clip(eigenvalues[::-1], 0.0, None)
    vectors = vectors[:, ::-1]
    kept = components if components is not None else components_for_energy(eigenvalues, energy)
    return PrincipalComponents(mean=mean, eigenvalues=eigenvalues,
                               axes=np.ascontiguousarray(vectors[:, :kept]))


@register(
    "pca_mdav",
    summary="MDAV on the dominant principal components (energy threshold epsilon^2)",
    source="Rebollo-Monedero et al. 2019 (paper 000), sec. IV-A, Algorithm B",
    parameters={
        "energy": "epsilon^2, fraction of the energy that may be discarded (default 0.1)",
        "components": "keep this many principal components instead (default: chosen by energy)",
    },
    mixed=True,
)
def pca_mdav(
    X: np.ndarray,
    k: int,
    *,
    energy: float | None = None,
    components: int | None = None,
    progress: Progress | None = None,
) -> np.ndarray:
    """Partition the standardised records ``X`` with MDAV on their dominant principal components.

    The records are projected on the smallest number of principal axes that keeps at least
    ``1 - energy`` of the total energy (:func:`components_for_energy`), or on ``components``
    axes, and MDAV-generic (:func:`~streamanon.engines.mdav.mdav`, unchanged) partitions the
    projection. The labels apply to the original records: centroids and distortion belong in
    the original standardised space (paper sec. IV-A, step 3). Keeping every axis
    (``energy=0`` on full-rank data, or ``components=m``) only rotates the records, which
    preserves every distance, so the partition is MDAV's up to floating-point near-ties.

    Parameters
    ----------
    X
        Standardised quasi-identifiers, n x m, finite.
    k
        Minimum cell size, ``1 <= k <= n``.
    energy
        ``epsilon**2``, the fraction of the energy that may be discarded, ``0 <= energy < 1``;
        default 0.1 (the paper's setting for Tables I-IV).
    components
        Keep exactly this many axes, ``1 <= components <= m``, instead of choosing by energy.
    progress
        Optional :class:`~streamanon.progress.Progress`, advanced by the inner MDAV.

    Returns
    -------
    numpy.ndarray
        int64 labels ``0..c-1``; every label occurs ``k`` times except the last, which occurs
        ``k`` to ``2k - 1`` times (``n`` times when ``n < 2k``).

    Examples
    --------
    >>> X = np.array([[0.0, 0.1], [0.2, 0.1], [5.0, 5.1], [5.2, 5.0], [9.0, 9.1], [9.3, 9.2]])
    >>> pca_mdav(X, 2, components=1).tolist()
    [0, 0, 2, 2, 1, 1]

    References
    ----------
    Rebollo-Monedero et al. 2019 (docs/design/references.md), sec. IV-A, Algorithm B ("MDAV
    with PCA"), and Fig. 10.
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    pcs = fit_principal_components(X, energy=energy, components=components)
    return mdav(pcs.project(X), k, progress=progress)


@register(
    "pca_mdav_proximal",
    summary="macrocells by MDAV; distal ones plain MDAV, proximal ones PCA + MDAV",
    source="Rebollo-Monedero et al. 2019 (paper 000), sec. IV-B, Algorithm C",
    parameters={
        "macrocell_size": "K, records per macrocell (default max(1000, 10 k))",
        "distal_cells": "C_D, most distorted macrocells kept out of the PCA "
                        "(default: the cost-balanced count m~/(m~+m) of the records)",
        "energy": "epsilon^2 for the proximal PCA (default 0.1)",
        "components": "keep this many principal components instead (default: chosen by energy)",
        "scope": "'pooled' (paper: one MDAV per part) or 'macrocell' (MDAV within each "
                 "macrocell)",
    },
    mixed=True, warmup=lambda X: {"macrocell_size": 60},
)
def pca_mdav_proximal(
    X: np.ndarray,
    k: int,
    *,
    macrocell_size: int | None = None,
    distal_cells: int | None = None,
    energy: float | None = None,
    components: int | None = None,
    scope: str = "pooled",
    progress: Progress | None = None,
) -> np.ndarray:
    """Partition the standardised records ``X`` with MDAV, using PCA on the proximal records.

    MDAV with cell size ``K = macrocell_size`` cuts the records into ``floor(n / K)``
    macrocells (one of them ``K`` to ``2K - 1`` records; a single macrocell when ``n < K``).
    The ``C_D = distal_cells`` macrocells with the largest sum of squared errors to their
    centroid are *distal* (ties: lower macrocell first), the rest *proximal*. With
    ``scope="pooled"`` (the paper's Algorithm C) all proximal records are projected on the
    principal axes of the proximal records (:func:`fit_principal_components`, ``energy`` or
    ``components`` applied to their own spectrum) and partitioned by one MDAV; all distal
    records are partitioned by one plain MDAV. ``C_D = 0`` is then exactly :func:`pca_mdav`
    and ``C_D = floor(n / K)`` exactly MDAV. With ``scope="macrocell"`` MDAV runs inside each
    macrocell instead (proximal ones on the same projection), the divide and conquer of the
    paper's sec. VI, which costs O(n K) rather than O(n^2) and never lets a cell cross a
    macrocell boundary.

    Every cell has at least ``k`` records: each part handed to MDAV is a union of macrocells of
    at least ``K >= k`` records, and MDAV makes cells of ``k`` with one of ``k`` to ``2k - 1``
    in each part, so a macrocell size that is not a multiple of ``k`` only lengthens that one
    cell per part (per macrocell with ``scope="macrocell"``).

    When ``distal_cells`` is None it is chosen by balancing cost (:func:`auto_distal_cells`):
    with MDAV's time ``~ n^2 m`` (paper sec. III-B and Fig. 10), the pooled split costs
    ``(1 - nu)^2 m_tilde + nu^2 m`` for a distal fraction ``nu`` of the records, least at
    ``nu* = m_tilde / (m_tilde + m)``; a smaller ``nu`` is slower *and* puts more records
    through the PCA, so it is never worth it. ``m_tilde`` is the count the energy rule gives
    on all records. The distal macrocells are taken in decreasing distortion until their
    records come nearest ``nu* n`` (Census-like data, ``m_tilde = 6`` of 13: ``nu* = 0.32``;
    the paper's hand-picked ``C_D = 59`` of 149 is ``nu = 0.40``).

    Parameters
    ----------
    X
        Standardised quasi-identifiers, n x m, finite.
    k
        Minimum cell size, ``1 <= k <= n``.
    macrocell_size
        ``K >= k``, records per macrocell; default ``max(1000, 10 k)`` (the paper: 1000 on
        Census for k = 2..100, 10,000 on Forest).
    distal_cells
        ``C_D``, number of macrocells, ``0..floor(n / K)``, kept out of the PCA; default by the
        cost balance above.
    energy, components
        As for :func:`pca_mdav`, applied to the proximal records.
    scope
        ``"pooled"`` (default, the paper) or ``"macrocell"``.
    progress
        Optional :class:`~streamanon.progress.Progress`, advanced after each MDAV run.

    Returns
    -------
    numpy.ndarray
        int64 labels ``0..c-1``: with ``scope="pooled"`` the proximal cells first, then the
        distal ones; with ``scope="macrocell"`` macrocell by macrocell.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((600, 4))
    >>> labels = pca_mdav_proximal(X, 5, macrocell_size=100, distal_cells=2)
    >>> int(np.bincount(labels).min()) >= 5
    True

    References
    ----------
    Rebollo-Monedero et al. 2019 (docs/design/references.md), sec. IV-B (proximal-distal
    prepartitioning, Algorithm C "MDAV with PCA on proximal data"), sec. V (K = 1000, C_D = 59
    on Census) and sec. VI (recursion).
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    n, m = X.shape
    size = _check_macrocell_size(macrocell_size, k)
    if scope not in SCOPES:
        raise ParameterError(f"scope must be one of {', '.join(SCOPES)}; got {scope!r}")
    _check_energy_and_components(energy, components, m)

    macro = mdav(X, min(size, n))
    n_macrocells = int(macro.max()) + 1
    distortion_rank = rank_macrocells(X, macro)
    if distal_cells is None:
        all_records = fit_principal_components(X, energy=energy, components=components)
        distal_cells = auto_distal_cells(np.bincount(macro)[distortion_rank],
                                         all_records.n_components, m)
    elif (isinstance(distal_cells, bool) or not isinstance(distal_cells, (int, np.integer))
          or not 0 <= distal_cells <= n_macrocells):
        raise ParameterError(
            f"distal_cells must be an integer from 0 to the number of macrocells, "
            f"{n_macrocells} here ({n} records, macrocell_size {size}); got {distal_cells!r}")
    is_distal_cell = np.zeros(n_macrocells, dtype=bool)
    is_distal_cell[distortion_rank[: int(distal_cells)]] = True
    is_distal = is_distal_cell[macro]

    if progress is not None:
        progress.start(n)
    labels = np.empty(n, dtype=np.int64)
    proximal = np.flatnonzero(~is_distal)
    projected = None
    if proximal.size:
        pcs = fit_principal_components(X[proximal], energy=energy, components=components)
        projected = np.empty((n, pcs.n_components))
        projected[proximal] = pcs.project(X[proximal])
    if scope == "pooled":
        parts = [proximal, np.flatnonzero(is_distal)]
    else:
        parts = [np.flatnonzero(macro == c) for c in range(n_macrocells)]
    next_label = 0
    for rows in parts:
        if rows.size == 0:
            continue
        data = X[rows] if is_distal[rows[0]] else projected[rows]
        part_labels = mdav(data, k)
        labels[rows] = part_labels + next_label
        next_label += int(part_labels.max()) + 1
        if progress is not None:
            progress.counter[0] += rows.size
    return labels


def rank_macrocells(X: np.ndarray, macro: np.ndarray) -> np.ndarray:
    """Macrocell labels in decreasing order of their sum of squared errors (ties: lower label).

    The paper ranks macrocells by their distortion ``D`` (Fig. 13), which is each macrocell's
    SSE over the same SST, so the order is the same.
    """
    means, _ = cell_means(X, macro)
    sse = np.bincount(macro, weights=((X - means[macro]) ** 2).sum(axis=1),
                      minlength=len(means))
    return np.argsort(-sse, kind="stable")


def auto_distal_cells(ranked_sizes: np.ndarray, n_components: int, m: int) -> int:
    """The number of distal macrocells whose records come nearest ``nu* n``,
    ``nu* = n_components / (n_components + m)``.

    ``ranked_sizes`` are the macrocell sizes in decreasing order of distortion. Under MDAV's
    cost ``~ n^2 m`` the pooled split of Algorithm C costs ``(1 - nu)^2 m_tilde + nu^2 m``
    (relative to MDAV), minimised at ``nu*``; ties between two counts go to the smaller one.

    Examples
    --------
    >>> auto_distal_cells(np.full(149, 1000), 6, 13)  # Census in the paper: nu* = 0.32
    47
    >>> auto_distal_cells(np.array([1500, 1000]), 13, 13)  # no reduction: nu* = 1/2
    1
    """
    target = n_components / (n_components + m) * float(np.sum(ranked_sizes))
    distal_records = np.concatenate([[0], np.cumsum(ranked_sizes)])
    return int(np.argmin(np.abs(distal_records - target)))


def _check_energy_and_components(energy: object, components: object, m: int) -> float:
    """``energy`` as a float (the default if both are None), after the checks."""
    if energy is not None and components is not None:
        raise ParameterError("give either energy (epsilon^2) or components, not both")
    if components is not None:
        if isinstance(components, bool) or not isinstance(components, (int, np.integer)):
            raise ParameterError(f"components must be an integer, got {components!r}")
        if not 1 <= components <= m:
            raise ParameterError(
                f"components must be from 1 to the number of quasi-identifiers, {m}; "
                f"got {components}")
        return DEFAULT_ENERGY
    if energy is None:
        return DEFAULT_ENERGY
    if isinstance(energy, bool) or not isinstance(energy, (int, float, np.integer, np.floating)):
        raise ParameterError(f"energy must be a number, got {energy!r}")
    if not 0.0 <= float(energy) < 1.0:
        raise ParameterError(
            f"energy is epsilon^2, the fraction of the energy that may be discarded: it must be "
            f"at least 0 and below 1 (0.1 keeps 90 %); got {energy}")
    return float(energy)


def _check_macrocell_size(macrocell_size: object, k: int) -> int:
    if macrocell_size is None:
        return max(DEFAULT_MACROCELL_SIZE, DEFAULT_MACROCELL_RATIO * int(k))
    if isinstance(macrocell_size, bool) or not isinstance(macrocell_size, (int, np.integer)):
        raise ParameterError(f"macrocell_size must be an integer, got {macrocell_size!r}")
    if macrocell_size < k:
        raise ParameterError(
            f"macrocell_size (K) must be at least k = {k}, and is best much larger "
            f"(the paper uses K = 1000 with k up to 100); got {macrocell_size}")
    return int(macrocell_size)
