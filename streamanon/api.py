"""The Python API for one-shot microaggregation: :func:`microaggregate`.

>>> import numpy as np
>>> from streamanon import microaggregate
>>> X = np.array([[1.0, 10.0], [2.0, 11.0], [9.0, 50.0], [10.0, 52.0]])
>>> result = microaggregate(X, k=2)
>>> result.data.tolist()
[[1.5, 10.5], [1.5, 10.5], [9.5, 51.0], [9.5, 51.0]]
>>> round(result.information_loss, 3)
0.845
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streamanon.engines import get_engine, run_engine, validate_input
from streamanon.errors import InputError, ParameterError
from streamanon.metrics import aggregate, distortion, fit_standardisation
from streamanon.progress import Progress

try:  # pandas is a dependency, but keep the numerical API importable without it
    import pandas as pd
except ImportError:  # pragma: no cover
    pd = None


@dataclass
class Microaggregation:
    """A k-anonymous release and how it was made.

    ``data`` has the input's type and row order: quasi-identifiers replaced by the mean of their
    cell in original units, dropped columns removed, every other column unchanged. Shuffle the
    rows (:func:`shuffle_rows`) before publishing so that row order reveals nothing.
    """

    data: Any
    labels: np.ndarray
    k: int
    engine: str
    params: dict[str, Any]
    qi: list[str]
    distortion: float
    seconds: float
    dropped: list[str] = field(default_factory=list)
    incremental: str | None = None
    two_stage: dict[str, Any] | None = None

    @property
    def information_loss(self) -> float:
        return 100.0 * self.distortion

    @property
    def n(self) -> int:
        return int(self.labels.shape[0])

    @property
    def m(self) -> int:
        return len(self.qi)

    def report(self) -> dict[str, Any]:
        """The JSON-ready report: sizes, engine, distortion and timing. No data values."""
        sizes = np.bincount(self.labels)
        return {
            "n": self.n,
            "m": self.m,
            "k": self.k,
            "engine": self.engine,
            "params": {key: _jsonable(value) for key, value in self.params.items()},
            "quasi_identifiers": list(self.qi),
            "dropped": list(self.dropped),
            "cells": int(sizes.size),
            "smallest_cell": int(sizes.min()),
            "largest_cell": int(sizes.max()),
            "distortion": self.distortion,
            "information_loss": self.information_loss,
            "seconds": self.seconds,
        } | ({"incremental": self.incremental, **self.two_stage} if self.two_stage else {})


def _jsonable(value: Any) -> Any:
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    if isinstance(value, np.ndarray) or (pd is not None and isinstance(value, pd.Series)):
        return f"<{' x '.join(map(str, np.shape(value)))} values>"  # per-record data: no values
    return value


def microaggregate(
    data: Any,
    k: int,
    engine: str = "mdav",
    *,
    qi: Sequence[str] | None = None,
    drop: Sequence[str] = (),
    progress: Progress | None = None,
    incremental: str | None = None,
    nu: float = 0.0,
    incremental_params: dict[str, Any] | None = None,
    compare_one_shot: bool = False,
    engine_params: dict[str, Any] | None = None,
    **params: Any,
) -> Microaggregation:
    """k-anonymous microaggregation of a numpy matrix or a pandas DataFrame.

    Parameters
    ----------
    data
        A numeric matrix (every column a quasi-identifier) or a DataFrame.
    k
        Minimum number of records per cell.
    engine
        Registered engine name (``streamanon engines`` lists them).
    qi
        DataFrame columns that are quasi-identifiers; default every column not in ``drop``.
    drop
        DataFrame columns to remove from the release (identifiers).
    progress
        Optional progress counter the engine advances.
    incremental, nu, incremental_params, compare_one_shot
        Two-stage release (paper 001): row order is arrival order, the first ``1 - nu`` of the
        rows are the base snapshot microaggregated by ``engine``, the rest join through the
        incremental stage ``incremental`` (``streamanon.incremental``). ``distortion`` is then
        D_T over the whole release; ``compare_one_shot`` also runs the one-shot reference for
        delta and the relative times.
    engine_params, **params
        Engine parameters (a dict for names that clash with this function's own, such as
        ``dependence``'s ``engine``). Per-record parameters (``streamanon engines`` shows them
        as ``COLUMN``) may name DataFrame columns: ``labels="smoker"``, ``Y="a,b"``.

    Raises
    ------
    InputError, ParameterError
        With a message naming the problem (unknown column, non-numeric or non-finite
        quasi-identifier, fewer than ``k`` rows, bad ``k`` or engine).
    """
    info = get_engine(engine)
    params = {**(engine_params or {}), **params}
    report_params = dict(params)
    if pd is not None and isinstance(data, pd.DataFrame):
        qi_cols = _resolve_columns(data, qi, drop)
        values = _numeric_matrix(data, qi_cols)
        params = _resolve_per_record(info, params, data)
    else:
        if qi is not None or drop:
            raise ParameterError("qi= and drop= name DataFrame columns; pass a DataFrame")
        values = np.asarray(data)
        qi_cols = [f"x{j}" for j in range(values.shape[1] if values.ndim == 2 else 0)]
    X = validate_input(values, k)

    scaling = fit_standardisation(X)
    Z = scaling.apply(X)
    two_stage = None
    started = time.perf_counter()
    if incremental is None:
        labels = run_engine(engine, Z, k, progress=progress, **params)
    else:
        from streamanon.incremental.run import TwoStageRun, split_by_ratio

        run = TwoStageRun(k, engine, incremental, engine_params=params,
                          incremental_params=incremental_params)
        result = run.run(Z, split_by_ratio(len(Z), nu), compare_one_shot=compare_one_shot)
        labels, two_stage = result.labels, result.report()
    seconds = time.perf_counter() - started
    released = aggregate(X, labels)

    if pd is not None and isinstance(data, pd.DataFrame):
        out = data.drop(columns=list(drop)).copy()
        out[qi_cols] = released
    else:
        out = released
    return Microaggregation(
        data=out,
        labels=labels,
        k=int(k),
        engine=engine,
        params=report_params,
        qi=list(qi_cols),
        distortion=distortion(Z, labels),
        seconds=seconds,
        dropped=list(drop),
        incremental=incremental,
        two_stage=two_stage,
    )


def shuffle_rows(data: Any, seed: int | None = None) -> Any:
    """Rows in a random order (numpy array or DataFrame, index reset), so that row order tells
    nothing about arrival order or cells."""
    rng = np.random.default_rng(seed)
    if pd is not None and isinstance(data, pd.DataFrame):
        order = rng.permutation(len(data))
        return data.iloc[order].reset_index(drop=True)
    return np.asarray(data)[rng.permutation(len(data))]


def _resolve_columns(frame: Any, qi: Sequence[str] | None, drop: Sequence[str]) -> list[str]:
    columns = [str(c) for c in frame.columns]
    named = list(qi or []) + list(drop)
    missing = [c for c in named if c not in columns]
    if missing:
        raise InputError(
            f"unknown column(s): {', '.join(missing)}; the data has: {', '.join(columns)}"
        )
    if qi is None:
        qi = [c for c in columns if c not in set(drop)]
    clash = sorted(set(qi) & set(drop))
    if clash:
        raise InputError(
            f"column(s) {', '.join(clash)} cannot be both quasi-identifier and dropped"
        )
    if not qi:
        raise InputError("no quasi-identifier columns given")
    return list(qi)


def _resolve_per_record(info: Any, params: dict[str, Any], frame: Any) -> dict[str, Any]:
    """Per-record engine parameters given as column names (``"label"`` or ``"a,b"`` or a
    list) replaced by the columns' values: one column as a vector, several as a matrix."""
    params = dict(params)
    for name in sorted(info.per_record & params.keys()):
        value = params[name]
        if isinstance(value, str):
            names = [c.strip() for c in value.split(",") if c.strip()]
        elif isinstance(value, (list, tuple)) and value and all(isinstance(c, str) for c in value):
            names = list(value)
        else:
            continue  # values given directly
        missing = [c for c in names if c not in frame.columns]
        if missing:
            raise InputError(f"{info.name} parameter {name}: unknown column(s) "
                             f"{', '.join(missing)}; the data has: "
                             f"{', '.join(str(c) for c in frame.columns)}")
        params[name] = (frame[names[0]].to_numpy() if len(names) == 1
                        else _numeric_matrix(frame, names, role=f"{name} column"))
    return params


def _numeric_matrix(frame: Any, columns: list[str],
                    role: str = "quasi-identifier column") -> np.ndarray:
    bad = [c for c in columns if not pd.api.types.is_numeric_dtype(frame[c])]
    if bad:
        raise InputError(f"{role}(s) are not numeric: {', '.join(bad)}")
    bool_cols = [c for c in columns if pd.api.types.is_bool_dtype(frame[c])]
    if bool_cols:
        raise InputError(
            f"{role}(s) are boolean, not numeric: {', '.join(bool_cols)}"
        )
    values = frame[columns].to_numpy(dtype=np.float64, na_value=np.nan)
    finite = np.isfinite(values)
    if not finite.all():
        rows, cols = np.nonzero(~finite)
        names = sorted({columns[j] for j in cols})
        raise InputError(
            f"{len(rows)} missing, NaN or infinite value(s) in {role}(s) "
            f"{', '.join(names)} (first at row {int(rows[0]) + 1}); clean or impute them first"
        )
    return values
