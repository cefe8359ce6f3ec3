"""Dependence-preserving microaggregation: partition on (x, beta * y).

Plain microaggregation looks only at the quasi-identifiers ``x`` and minimises their distortion
``D_X``; the confidential attributes ``y``, published untouched, may then be poorly predictable
from the released cell of a record. This engine minimises the Lagrangian
``D = (1 - lam) D_X + lam D_Y``, where ``D_Y`` is the error of predicting the standardised ``y``
by its cell mean. Paper 002 shows that this needs no new algorithm: any microaggregation engine
run on the extended points ``(x, beta * y)`` with ``beta = sqrt(lam / (1 - lam) * m_X / m_Y)``
minimises exactly that cost, since the extended squared error is ``m_X / (1 - lam) * n * D``.

The wrapped engine is any registered one (MDAV by default). Only the partition is returned: the
release replaces ``x`` by its cell means and publishes ``y`` unchanged. ``lam = 0`` is the
wrapped engine on ``x``; ``lam = 1`` (``beta`` infinite) designs the partition on ``y`` alone.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping

import numpy as np

from streamanon.engines.base import get_engine, register, run_engine
from streamanon.errors import InputError, ParameterError
from streamanon.metrics import aggregate, standardise
from streamanon.progress import Progress


def _standardised_block(values: np.ndarray, name: str) -> np.ndarray:
    """A 2-D float64 copy of ``values`` (a vector is one column), standardised."""
    A = np.asarray(values)
    if A.ndim == 1:
        A = A[:, None]
    if A.ndim != 2 or A.shape[0] == 0 or A.shape[1] == 0:
        raise InputError(f"{name} must be a non-empty n x m matrix, got shape {A.shape}")
    if not (np.issubdtype(A.dtype, np.floating) or np.issubdtype(A.dtype, np.integer)):
        raise InputError(f"{name} must be numeric, got dtype {A.dtype}")
    A = A.astype(np.float64)
    if not np.isfinite(A).all():
        raise InputError(f"{name} contains NaN or infinite values")
    return standardise(A)


def _per_dimension_error(Z: np.ndarray, labels: np.ndarray) -> float:
    """``(1 / (n m)) * sum_j |z_j - cell mean of z_j|^2``."""
    labels = np.asarray(labels)
    if labels.shape != (Z.shape[0],):
        raise InputError(f"{labels.shape} labels for {Z.shape[0]} records; give one per record")
    return float(np.sum((Z - aggregate(Z, labels)) ** 2) / Z.size)


def quasi_identifier_distortion(X: np.ndarray, labels: np.ndarray) -> float:
    """``D_X``: mean squared error per dimension of the standardised quasi-identifiers
    reconstructed by their cell means.

    ``D_X = (1 / (n m_X)) * sum_j |x_j - xhat_q(j)|^2`` with every column of ``X`` first
    standardised (mean 0, population standard deviation 1; this is a no-op on ``X`` that is
    already standardised). Since ``SST_X = n m_X`` after standardisation, this is
    ``SSE_X / SST_X`` and equals :func:`streamanon.metrics.distortion` when no column is
    constant; a constant column counts in ``m_X`` and contributes no error.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0], [2.0], [10.0], [12.0]])
    >>> quasi_identifier_distortion(X, np.array([0, 0, 1, 1]))  # 4 / SST (= 104)
    0.038461538461538464

    References
    ----------
    Rebollo-Monedero et al. 2015, section III.A.
    """
    return _per_dimension_error(_standardised_block(X, "X"), labels)


def confidential_distortion(Y: np.ndarray, labels: np.ndarray) -> float:
    """``D_Y``: mean squared error per dimension of the standardised confidential attributes
    predicted by their cell means.

    ``D_Y = (1 / (n m_Y)) * sum_j |y_j - yhat_q(j)|^2`` with ``yhat_q`` the mean of the
    standardised ``y`` over cell ``q`` (the best predictor of ``y`` from the released cell).
    Equivalently ``D_Y = 1 - (between-cell share of the variance of y)``: 1 when the cells say
    nothing about ``y``, 0 when ``y`` is constant in every cell. Lower is better preservation of
    the dependence between the released quasi-identifiers and ``y``. A vector ``Y`` is one
    attribute.

    Examples
    --------
    >>> import numpy as np
    >>> y = np.array([1.0, 1.0, 5.0, 5.0])
    >>> confidential_distortion(y, np.array([0, 0, 1, 1]))
    0.0
    >>> confidential_distortion(y, np.array([0, 1, 0, 1]))
    1.0

    References
    ----------
    Rebollo-Monedero et al. 2015, section III.B.
    """
    return _per_dimension_error(_standardised_block(Y, "Y"), labels)


def dependence_beta(lam: float, m_x: int, m_y: int) -> float:
    """``beta = sqrt(lam / (1 - lam) * m_X / m_Y)``, the weight of ``y`` in the extended points;
    0 at ``lam = 0`` and infinite at ``lam = 1``.

    Examples
    --------
    >>> round(dependence_beta(0.5, 6, 7), 4)
    0.9258

    References
    ----------
    Rebollo-Monedero et al. 2015, section IV.A.
    """
    if lam >= 1.0:
        return math.inf
    return math.sqrt(lam / (1.0 - lam) * m_x / m_y)


def _check_lambda(lam: object) -> float:
    if isinstance(lam, bool) or not isinstance(lam, numbers.Real):
        raise ParameterError(f"lam must be a number in [0, 1], got {lam!r}")
    lam = float(lam)
    if not 0.0 <= lam <= 1.0:
        raise ParameterError(
            f"lam must be in [0, 1] (0: quasi-identifiers only, 1: confidential attributes "
            f"only), got {lam}")
    return lam


@register(
    "dependence",
    summary="any engine on (x, beta*y): trade QI distortion for predictability of y by lambda",
    source="Rebollo-Monedero et al. 2015 (paper 002), sec. IV.A",
    parameters={
        "Y": "confidential attributes, n x m_Y (standardised by the engine); required",
        "lam": "lambda in [0, 1]: weight of D_Y against D_X (default 0.5)",
        "engine": "wrapped engine name (default mdav; any registered engine but dependence)",
        "engine_params": "parameters of the wrapped engine (dict, default none)",
    },
    per_record=("Y",),
    warmup=lambda X: {"Y": np.random.default_rng(1).integers(0, 4, len(X)).astype(np.float64)},
)
def dependence(
    X: np.ndarray,
    k: int,
    *,
    Y: np.ndarray | None = None,
    lam: float = 0.5,
    engine: str = "mdav",
    engine_params: Mapping[str, object] | None = None,
    progress: Progress | None = None,
) -> np.ndarray:
    """Partition ``X`` with ``engine`` run on ``(X, beta * Y)``, minimising
    ``(1 - lam) D_X + lam D_Y``.

    ``Y`` is standardised here (:func:`streamanon.metrics.standardise`), as ``X`` already is,
    so that ``D_X`` and ``D_Y`` are both per-dimension errors on unit-variance columns and
    ``beta = sqrt(lam / (1 - lam) * m_X / m_Y)`` (:func:`dependence_beta`) weights them as the
    Lagrangian does. The end points are taken as the limits, not as an extended matrix:
    ``lam = 0`` (``beta = 0``) runs ``engine`` on ``X`` itself, so the partition is exactly the
    wrapped engine's; ``lam = 1`` (``beta`` infinite, where ``x`` only breaks ties that ``y``
    leaves) runs ``engine`` on the standardised ``Y`` alone, as paper 002 does.

    Parameters
    ----------
    X
        Standardised quasi-identifiers, n x m_X, finite.
    k
        Minimum cell size, ``1 <= k <= n``.
    Y
        Confidential attributes of the same n records, n x m_Y (a vector is one attribute),
        finite, in any units. Required.
    lam
        Lagrange weight ``lambda`` in ``[0, 1]``: 0 minimises ``D_X`` only, 1 ``D_Y`` only.
    engine
        Name of the wrapped engine: any registered engine except ``dependence``.
    engine_params
        Keyword parameters of the wrapped engine.
    progress
        Optional :class:`~streamanon.progress.Progress`, passed to the wrapped engine.

    Returns
    -------
    numpy.ndarray
        int64 cell labels from the wrapped engine; every cell has at least ``k`` records.

    Raises
    ------
    ParameterError
        ``Y`` missing, ``lam`` outside ``[0, 1]``, ``engine`` unknown or ``dependence``,
        ``engine_params`` not a mapping or not accepted by ``engine``.
    InputError
        ``Y`` is not a finite numeric matrix with one row per record.

    Examples
    --------
    >>> import numpy as np
    >>> from streamanon.engines.mdav import mdav
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((60, 2))
    >>> Y = X[:, :1] ** 2 + 0.1 * rng.standard_normal((60, 1))
    >>> bool((dependence(X, 5, Y=Y, lam=0.0) == mdav(X, 5)).all())
    True
    >>> cells = dependence(X, 5, Y=Y, lam=0.9)
    >>> confidential_distortion(Y, cells) < confidential_distortion(Y, mdav(X, 5))
    True

    References
    ----------
    Rebollo-Monedero et al. 2015, "k-Anonymous Microaggregation with Preservation of
    Statistical Dependence" (docs/design/references.md), section III.B (the Lagrangian) and
    section IV.A (the equivalence).
    """
    X = np.asarray(X, dtype=np.float64)
    if Y is None:
        raise ParameterError("dependence needs Y=: the confidential attributes, one row per "
                             "record")
    Ys = _standardised_block(Y, "Y")
    if Ys.shape[0] != X.shape[0]:
        raise InputError(f"Y has {Ys.shape[0]} rows for {X.shape[0]} records; give one per "
                         f"record")
    lam = _check_lambda(lam)
    if not isinstance(engine, str):
        raise ParameterError(f"engine must be an engine name, got {engine!r}")
    if engine == "dependence":
        raise ParameterError("dependence cannot wrap itself; choose another engine, e.g. mdav")
    get_engine(engine)
    if engine_params is None:
        engine_params = {}
    if not isinstance(engine_params, Mapping):
        raise ParameterError(f"engine_params must be a dict of {engine!r} parameters, got "
                             f"{type(engine_params).__name__}")
    params = dict(engine_params)
    if progress is not None:
        params["progress"] = progress

    if lam == 0.0:
        extended = X
    elif lam == 1.0:
        extended = Ys
    else:
        beta = dependence_beta(lam, X.shape[1], Ys.shape[1])
        extended = np.hstack([X, beta * Ys])
    return run_engine(engine, extended, k, **params)
