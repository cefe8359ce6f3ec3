"""LDA-MDAV: MDAV in a space stretched along the Fisher discriminant of a binary class label.

When the released quasi-identifiers will be used to train a classifier for a binary label, a
cell that straddles the class boundary replaces records of both classes by one centroid, and the
classifier learns from a point that misrepresents them. LDA-MDAV rotates the standardised
records to an orthonormal basis whose first axis is Fisher's discriminant direction, multiplies
that coordinate by ``alpha >= 1`` and runs unchanged MDAV there. Distances across the class
boundary count ``alpha`` times more than distances along it, so the cells become thin along the
discriminant direction and rarely straddle the boundary.

The rotation alone changes no distance: with ``alpha = 1`` the partition is MDAV's. Only the
partition is returned; the release replaces every record by the mean of the *original* records
of its cell, exactly as for plain MDAV, and the class label is published untouched.
"""

from __future__ import annotations

import numbers

import numpy as np

from streamanon.engines.base import register
from streamanon.engines.mdav import mdav
from streamanon.errors import ParameterError
from streamanon.progress import Progress

# Ridge added to the within-class covariance, relative to its mean eigenvalue (see
# fisher_direction): negligible for a well-conditioned matrix, decisive for a singular one.
_RIDGE = 1e-9


def binary_classes(labels: object, n: int) -> np.ndarray:
    """``labels`` as a boolean array (True for the larger of the two class values).

    Raises
    ------
    ParameterError
        ``labels`` is missing, not one value per record, or does not hold exactly two classes.
    """
    if labels is None:
        raise ParameterError(
            "lda_mdav needs labels=: the binary class label of every record, one per row")
    y = np.asarray(labels)
    if y.ndim != 1:
        raise ParameterError(f"labels must be a 1-D array with one class per record, "
                             f"got shape {y.shape}")
    if len(y) != n:
        raise ParameterError(f"labels has {len(y)} values for {n} records; give one per record")
    if np.issubdtype(y.dtype, np.floating) and np.isnan(y).any():
        raise ParameterError("labels contain NaN; every record needs one of two class values")
    try:
        classes = np.unique(y)
    except TypeError:
        raise ParameterError("labels mix values that cannot be compared; use two class values "
                             "of one type") from None
    if len(classes) != 2:
        shown = ", ".join(repr(c) for c in classes[:5].tolist())
        raise ParameterError(f"lda_mdav needs exactly two classes in labels, got {len(classes)}"
                             + (f" ({shown}{', ...' if len(classes) > 5 else ''})"
                                if len(classes) else ""))
    return y == classes[1]


def fisher_direction(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Unit vector along ``U = Sigma_W^{-1} (mu_1 - mu_0)``, Fisher's discriminant direction.

    ``Sigma_W = (1 - p) Sigma_0 + p Sigma_1`` is the within-class covariance (population
    covariances; its scale does not matter since only the direction of ``U`` is used). It is
    singular when a column is constant within both classes, when columns are collinear, or when
    a class has fewer records than columns. The system is therefore solved with a tiny ridge,
    ``(Sigma_W + eps I) U = mu_1 - mu_0`` with ``eps = 1e-9`` times the mean eigenvalue of
    ``Sigma_W``: for a well-conditioned matrix this changes ``U`` by about ``1e-9`` relatively,
    and for a singular one it gives the limit ``eps -> 0``, which points into the null space
    of ``Sigma_W`` when the class means differ there (a direction of zero within-class spread
    separates the classes perfectly). A pseudo-inverse would instead drop exactly that
    direction. When ``Sigma_W = 0`` the limit is ``mu_1 - mu_0`` itself.

    Returns the zero vector when the two class means coincide: there is no discriminant
    direction then.

    Parameters
    ----------
    X
        Standardised quasi-identifiers, n x m.
    y
        Boolean class of every record; both classes non-empty.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 3.0], [1.0, 3.0]])
    >>> fisher_direction(X, np.array([False, False, True, True])).round(6).tolist()
    [0.0, 1.0]

    References
    ----------
    Rodriguez-Hoyos et al. 2019, section 3.2.1 (``Sigma_W``) and section 3.2.2 (``U``).
    """
    X = np.asarray(X, dtype=np.float64)
    m = X.shape[1]
    mu0, mu1 = X[~y].mean(axis=0), X[y].mean(axis=0)
    difference = mu1 - mu0
    if not difference.any():
        return np.zeros(m)
    centred = np.where(y[:, None], X - mu1, X - mu0)
    within = centred.T @ centred / len(X)  # (1 - p) Sigma_0 + p Sigma_1, p = mean(y)
    scale = np.trace(within) / m
    if scale > 0:
        U = np.linalg.solve(within + _RIDGE * scale * np.eye(m), difference)
    else:
        U = difference
    return U / np.linalg.norm(U)


def lda_operator(direction: np.ndarray, alpha: float) -> np.ndarray:
    """``T = S V^T``: rotate to the basis ``V`` whose first axis is ``direction``, then
    multiply the first coordinate by ``alpha`` (``S = diag(alpha, 1, ..., 1)``).

    ``V`` is the full QR completion of the unit vector ``direction``; its first column is
    ``+-direction``, and the sign changes no distance. Records ``X`` (rows) map to
    ``X @ T.T``.

    References
    ----------
    Rodriguez-Hoyos et al. 2019, section 3.2.2 ("Rotation", "Scaling").
    """
    m = len(direction)
    V, _ = np.linalg.qr(np.asarray(direction, dtype=np.float64)[:, None], mode="complete")
    S = np.ones(m)
    S[0] = alpha
    return S[:, None] * V.T


@register(
    "lda_mdav",
    summary="MDAV after rotating to a binary label's LDA direction and stretching it by alpha",
    source="Rodriguez-Hoyos et al. 2019 (paper 003), sec. 3.2.2",
    parameters={
        "labels": "binary class label of every record (two distinct values); required",
        "alpha": "stretch of the discriminant axis, >= 1 (default 1: plain MDAV)",
    },
    per_record=("labels",),
    warmup=lambda X: {"labels": (X[:, 0] > 0).astype(np.int64), "alpha": 2.0},
)
def lda_mdav(
    X: np.ndarray,
    k: int,
    *,
    labels: object = None,
    alpha: float = 1.0,
    progress: Progress | None = None,
) -> np.ndarray:
    """Partition ``X`` with MDAV in the LDA-rotated space stretched by ``alpha``.

    The transform is ``z = S V^T x`` (:func:`lda_operator`) with ``V`` the orthonormal basis
    whose first axis is the Fisher direction of ``labels`` (:func:`fisher_direction`, computed
    on ``X`` itself) and ``S = diag(alpha, 1, ..., 1)``; MDAV runs on ``z``. Equivalently, MDAV
    runs in the original space with the metric ``|d|^2 + (alpha^2 - 1) (u . d)^2``.

    ``alpha = 1`` returns ``mdav(X, k)`` without transforming: the rotation preserves distances
    only up to rounding, and on data with exact ties (integer-valued columns, duplicates) the
    rotated distances can break a tie the other way and change the partition. The short cut
    makes "``alpha = 1`` is MDAV" exact. When the two class means coincide there is no
    discriminant direction to stretch, and the result is also ``mdav(X, k)``.

    Parameters
    ----------
    X
        Standardised quasi-identifiers, n x m, finite.
    k
        Minimum cell size, ``1 <= k <= n``.
    labels
        The binary class label of every record: a 1-D array of length n holding exactly two
        distinct values of any type (the confidential attribute the release should keep
        predictable). Required.
    alpha
        Stretch factor of the discriminant coordinate, ``alpha >= 1``.
    progress
        Optional :class:`~streamanon.progress.Progress`, advanced by MDAV.

    Returns
    -------
    numpy.ndarray
        int64 cell labels ``0..c-1`` (MDAV's cells in the transformed space).

    Raises
    ------
    ParameterError
        ``labels`` missing, of the wrong length or without exactly two classes; ``alpha`` not a
        number of at least 1.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((40, 2))
    >>> y = X[:, 0] + X[:, 1] > 0
    >>> cells = lda_mdav(X, 5, labels=y, alpha=8.0)
    >>> int(np.bincount(cells).min())
    5
    >>> bool((lda_mdav(X, 5, labels=y) == mdav(X, 5)).all())
    True

    References
    ----------
    Rodriguez-Hoyos et al. 2019, "Preserving Empirical Data Utility in k-Anonymous
    Microaggregation via Linear Discriminant Analysis" (docs/design/references.md), sections
    3.2.1-3.2.3 and Fig. 9.
    """
    X = np.asarray(X, dtype=np.float64)
    y = binary_classes(labels, X.shape[0])
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise ParameterError(f"alpha must be a number >= 1, got {alpha!r}")
    alpha = float(alpha)
    if not alpha >= 1.0 or not np.isfinite(alpha):
        raise ParameterError(f"alpha must be a finite number >= 1 (1 = plain MDAV), got {alpha}")
    if alpha == 1.0:
        return mdav(X, k, progress=progress)
    direction = fisher_direction(X, y)
    if not direction.any():
        return mdav(X, k, progress=progress)
    Z = X @ lda_operator(direction, alpha).T
    return mdav(Z, k, progress=progress)
