"""The engine registry: registering, finding, checking and running engines by name.

Each engine module registers itself here (:func:`register`); :mod:`streamanon.engines` imports
them all and re-exports this module's names. Imports the core's leaves only (errors, metrics,
registry), never an engine module.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from streamanon.errors import InputError, ParameterError
from streamanon.metrics import check_partition
from streamanon.registry import EngineTags, Entry, Function, Registry

if TYPE_CHECKING:
    from streamanon.tuples import Tuples

EngineFunction = Callable[..., np.ndarray]
EngineInfo = Entry

_ENGINES = Registry("engine", "engine")
available_engines = _ENGINES.all
get_engine = _ENGINES.get
unregister = _ENGINES.unregister


def register(name: str, *, summary: str, source: str,
             parameters: dict[str, str] | None = None, per_record: tuple[str, ...] = (),
             runtime: tuple[str, ...] = (), mixed: bool = False, one_shot_loss: float = 1.0,
             cost_model: tuple[float, float] | None = None, auto: bool = False,
             warmup: Callable[[Any], dict[str, Any]] | None = None,
             ) -> Callable[[Function], Function]:
    """Decorator that registers an engine under ``name`` with its traits, kept on its entry as
    :class:`~streamanon.registry.EngineTags` (``entry.engine``: what each trait means)."""
    try:
        traits = EngineTags(mixed=mixed, one_shot_loss=float(one_shot_loss),
                            cost_model=None if cost_model is None else (float(cost_model[0]),
                                                                        float(cost_model[1])),
                            auto=auto, warmup=warmup)
    except ValueError as exc:
        raise ValueError(f"engine {name!r}: {exc}") from None
    return _ENGINES.register(name, summary=summary, source=source, parameters=parameters,
                             per_record=per_record, runtime=runtime, traits=traits)


def kernel_matrix(X: np.ndarray) -> np.ndarray:
    """``X`` as the compiled kernels take a matrix: float64, C-contiguous and writable.

    numba compiles a kernel once for each type of argument it is called with, and a read-only
    or Fortran-ordered array is a type of its own: such a matrix (a memory map, an Arrow or a
    pandas buffer) would compile an engine's kernels a second time, tens of seconds that
    ``python -m streamanon.warmup`` has not done ahead. It is copied; any other matrix is
    passed on as ``np.ascontiguousarray`` would pass it.

    >>> X = np.zeros((2, 2)); X.flags.writeable = False
    >>> kernel_matrix(X).flags.writeable
    True
    """
    return np.require(X, np.float64, ("C", "W", "E"))


def validate_input(X: np.ndarray, k: int) -> np.ndarray:
    """``X`` as :func:`kernel_matrix` makes it, after the checks every engine relies on."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise ParameterError(f"k must be an integer, got {k!r}")
    if k < 1:
        raise ParameterError(f"k must be at least 1, got {k}")
    X = np.asarray(X)
    if X.ndim != 2:
        raise InputError(f"expected a 2-D matrix of records, got {X.ndim} dimension(s)")
    if not (np.issubdtype(X.dtype, np.floating) or np.issubdtype(X.dtype, np.integer)):
        raise InputError(f"quasi-identifiers must be numeric, got dtype {X.dtype}")
    n, m = X.shape
    if m == 0:
        raise InputError("at least one quasi-identifier column is needed")
    if n < k:
        raise InputError(
            f"{n} records cannot form a cell of k = {k}: no {k}-anonymous release exists"
        )
    X = kernel_matrix(X)
    if not np.isfinite(X).all():
        raise InputError("quasi-identifiers contain NaN or infinite values")
    return X


def check_parameters(name: str, params: Mapping[str, object]) -> Entry:
    """Engine ``name``'s entry, after checking that it accepts every one of ``params``
    (``progress`` is accepted by all); raises :class:`ParameterError` naming the others."""
    return _ENGINES.check_parameters(name, dict(params), frozenset({"progress"}))


def model_parameters(name: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters that select engine ``name``'s cost model: ``params`` without
    ``progress``, the per-record inputs (data, not settings), the runtime ones (how to run,
    e.g. a partitioned run's ``runner``) and the ones equal to the
    engine's defaults, with numbers as plain Python numbers (an integral float as an int), so
    ``max_rounds = 6.0`` in a TOML file, ``--param max_rounds=6`` and NumPy's ``int64(6)``
    select one model, and the defaults written out select the defaults' model."""
    info = check_parameters(name, params)
    defaults = {p.name: p.default for p in inspect.signature(info.function).parameters.values()
                if p.default is not inspect.Parameter.empty}
    out = {}
    for key, value in sorted(params.items()):
        value = _plain(value)
        if key == "progress" or key in info.per_record or key in info.runtime or (
                key in defaults and _plain(defaults[key]) == value):
            continue
        out[key] = value
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def run_engine(name: str, X: np.ndarray, k: int, *, collapse: bool = True,
               tuples: Tuples | None = None, **params: object) -> np.ndarray:
    """Validate ``X`` and ``k``, run engine ``name`` and check its partition.

    With ``collapse`` (the default) identical rows are collapsed first
    (:mod:`streamanon.engines.distinct`): a tuple held by k records or more is a cell of its
    own and the engine runs on the records of the smaller tuples only. Where no tuple is held
    by k records, or the engine takes per-record inputs (a class label, sensitive answers:
    such an engine collapses what it hands to its inner engine), the engine runs on every
    record, as it does with ``collapse=False``. ``tuples``: the distinct rows of ``X``
    (:func:`streamanon.tuples.collapse` of it) when the caller has them.

    Raises
    ------
    ParameterError
        Unknown engine, bad ``k`` or an unknown engine parameter.
    InputError
        ``X`` is not a finite numeric matrix with at least ``k`` rows.
    """
    info = check_parameters(name, params)
    X = validate_input(X, k)
    labels = None
    if collapse and k > 1 and not (info.per_record & set(params)):
        from streamanon.engines.distinct import distinct_labels

        ran = []

        def engine(rows: np.ndarray) -> np.ndarray:
            ran.append(len(rows))
            return info.function(rows, k, **params)

        labels = distinct_labels(X, k, engine, tuples)
        if labels is not None and not ran:  # every tuple held by k or more: the engine
            info.function(X[:k], k, **params)  # still refuses bad parameters
    if labels is None:
        labels = np.asarray(info.function(X, k, **params))
    check_partition(labels, X.shape[0], k)
    return labels
