"""The Python API for one-shot microaggregation: :func:`microaggregate`, and its three option
values: :class:`BeyondK` (l-diversity and t-closeness on the sensitive answers),
:class:`TwoStage` (a two-stage release) and :class:`Output` (the row order, the index and
the risk measures of what comes back).

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

import numbers
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streamanon.engines import get_engine, run_engine, validate_input
from streamanon.errors import InputError, ParameterError
from streamanon.mixed import sensitive_codes
from streamanon.progress import Progress
from streamanon.release import (  # noqa: F401 (shuffle_rows: API)
    Privacy,
    prepare,
    release_prepared,
    shuffle_rows,
)
from streamanon.schema import Schema, as_schema, quick_schema
from streamanon.strata import partition_groups

try:  # pandas is a dependency, but keep the numerical API importable without it
    import pandas as pd
except ImportError:  # pragma: no cover
    pd = None


@dataclass(frozen=True, kw_only=True)
class BeyondK:
    """Beyond k-anonymity (:mod:`streamanon.privacy`): the sensitive answers and the distinct
    l-diversity and the t-closeness every cell must have.

    Parameters
    ----------
    sensitive
        Confidential columns whose answers are protected, besides those a schema marks
        ``sensitive = true``. A single name is one column.
    l
        Distinct answers per cell, on each sensitive column.
    t
        The largest Earth Mover's Distance of a cell's answers to the whole release's.
    """

    sensitive: Sequence[str] | str = ()
    l: int | None = None  # noqa: E741 (the privacy model's name)
    t: float | None = None


@dataclass(frozen=True, kw_only=True)
class TwoStage:
    """A two-stage release (paper 001): row order is arrival order, the first ``1 - nu`` of the
    rows are the base snapshot microaggregated by the engine, the rest join through the
    incremental stage.

    Parameters
    ----------
    incremental
        The incremental stage's name (:mod:`streamanon.incremental`).
    nu
        The late share: the last ``nu`` of the rows join through the stage.
    incremental_params
        The stage's parameters.
    compare_one_shot
        Also run the one-shot reference, for delta and the relative times.
    """

    incremental: str
    nu: float = 0.0
    incremental_params: dict[str, Any] | None = None
    compare_one_shot: bool = False


@dataclass(frozen=True, kw_only=True)
class Output:
    """What comes back besides the cells: the row order, the index and the risk measures.

    Parameters
    ----------
    shuffle
        A DataFrame comes back in a random row order with a fresh index (the default, None:
        shuffled for a DataFrame, not for a matrix, which is the quasi-identifiers only and
        whose ``labels`` follow its rows).
    seed
        The shuffle's seed.
    keep_index
        Keep the DataFrame's index (which may be a respondent id).
    risk
        Measure disclosure risk and utility before and after (:mod:`streamanon.risk`).
    """

    shuffle: bool | None = None
    seed: int | None = None
    keep_index: bool = False
    risk: bool = True


#: The keywords :func:`microaggregate` took before its options were grouped, and where each
#: is now: such a keyword is refused with this place, never taken as an engine parameter.
MOVED = {
    **{name: f"privacy=BeyondK({name}=...)" for name in ("sensitive", "l", "t")},
    **{name: f"two_stage=TwoStage({name}=...)"
       for name in ("incremental", "nu", "incremental_params", "compare_one_shot")},
    **{name: f"output=Output({name}=...)" for name in ("shuffle", "seed", "keep_index", "risk")},
}


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
    columns: dict[str, dict[str, Any]] = field(default_factory=dict)
    loss: dict[str, Any] = field(default_factory=dict)
    strata: list[str] = field(default_factory=list)
    strata_merged: list[dict[str, Any]] = field(default_factory=list)
    weight: str | None = None
    privacy: dict[str, Any] | None = None
    risk: dict[str, Any] | None = None

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
            "columns": self.columns,
            "information_loss_by_type": {
                kind: (None if self.loss.get(kind) is None else 100.0 * self.loss[kind])
                for kind in ("numeric", "ordinal", "nominal")},
            "values_withheld": self.loss.get("withheld", 0),
            "values_imputed": self.loss.get("imputed", 0),
            "strata": list(self.strata),
            "strata_merged": list(self.strata_merged),
            "weight": self.weight,
            "privacy": self.privacy,
            "risk": self.risk,
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
    engine: str | None = None,
    *,
    schema: Any = None,
    qi: Sequence[str] | str | None = None,
    confidential: Sequence[str] | str = (),
    drop: Sequence[str] | str = (),
    strata: Sequence[str] | str = (),
    weight: str | None = None,
    missing: str | None = None,
    privacy: BeyondK | None = None,
    two_stage: TwoStage | None = None,
    output: Output | None = None,
    progress: Progress | None = None,
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
        Registered engine name (``streamanon engines``); default ``mdav``, or
        ``tclose_kfirst`` when ``privacy`` asks ``l`` or ``t``: of the three t-closeness engines it
        has the lowest information loss on the benchmark files (the t-closeness benchmark
        page), it takes ``t``, ``l`` or both, on any number of sensitive columns, and with
        ``t`` alone it runs compiled (faster and with less loss than privlib's t-closeness on
        the survey of the "t-closeness against privlib" page).
    schema
        The data set's schema (:mod:`streamanon.schema`: a mapping of column name to role,
        type, levels, ``required``, ``missing``; or a schema file's path): categorical,
        ordinal, integer, boolean and missing quasi-identifiers, a weight, strata. Every
        column needs a role.
    qi, confidential, drop
        The quick form for numeric data without a schema: quasi-identifier columns (default
        every column not named elsewhere), columns published unchanged, columns removed
        (identifiers). A single name is one column. A column named in none of them is an
        error.
    strata, weight, missing
        Microaggregate within each stratum (strata under k records join the most similar);
        a sampling-weight column (weighted cell values and losses, published unchanged); the
        quick form's policy for missing quasi-identifier values (``"group"`` or ``"impute"``;
        default: a missing value is an error).
    privacy
        Beyond k-anonymity (:class:`BeyondK`, :mod:`streamanon.privacy`): the sensitive answers
        (confidential columns; a schema marks them ``sensitive = true``), and the distinct
        l-diversity and the t-closeness (Earth Mover's Distance of each cell's answers to the
        whole release's) every cell must have. Cells are merged where needed (Soria-Comas et
        al. 2015), or the ``tclose_*`` engines build them so; the gate checks the release.
    two_stage
        A two-stage release (:class:`TwoStage`, paper 001): row order is arrival order, the
        first ``1 - nu`` of the rows are the base snapshot microaggregated by ``engine``, the
        rest join through the incremental stage (``streamanon.incremental``). ``distortion``
        is then D_T over the whole release; ``compare_one_shot`` also runs the one-shot
        reference for delta and the relative times.
    output
        What comes back (:class:`Output`). A DataFrame comes back in a random row order
        (``seed``) with a fresh index, so that neither order nor index (which may be a
        respondent id) tells anything; ``shuffle=False`` keeps the input order,
        ``keep_index=True`` the index. A matrix is not shuffled by default (it is the
        quasi-identifiers only; ``labels`` follow its rows). ``risk`` (default true) measures
        disclosure risk and utility before and after (:mod:`streamanon.risk`: sample uniques,
        groups under k, l and t, record linkage, interval disclosure, IL per attribute,
        moments and correlations): ``result.risk`` and the report.
    progress
        Optional progress counter the engine advances.
    engine_params, **params
        Engine parameters (a dict for names that clash with this function's own, such as
        ``dependence``'s ``engine``, or with the options' names, such as the ``tclose_*``
        engines' ``l`` and ``t``). Per-record parameters (``streamanon engines`` shows them
        as ``COLUMN``) may name DataFrame columns: ``labels="smoker"``, ``Y="a,b"``.

    Examples
    --------
    >>> import numpy as np
    >>> from streamanon import Output, microaggregate
    >>> X = np.array([[1.0, 10.0], [2.0, 11.0], [9.0, 50.0], [10.0, 52.0]])
    >>> microaggregate(X, 2, output=Output(risk=False)).risk is None
    True

    Notes
    -----
    ``labels`` are in the input's row order, also when ``data`` comes back shuffled.

    Raises
    ------
    InputError, ParameterError, KAnonymityError
        With a message naming the problem (unknown column, a column without a role,
        non-numeric quasi-identifier in the quick form, a value outside its levels, a missing
        value in a required field, fewer than ``k`` rows, bad ``k`` or engine, an option
        outside its value: ``seed=`` is ``output=Output(seed=...)``).
    """
    _check_options(params, privacy=(privacy, BeyondK), two_stage=(two_stage, TwoStage),
                   output=(output, Output))
    output = Output() if output is None else output
    engine = default_engine(privacy) if engine is None else engine
    info = get_engine(engine)
    params = {**(engine_params or {}), **params}
    report_params = {key: value for key, value in params.items()  # a runner is no setting
                     if key not in info.runtime}
    frame_input = pd is not None and isinstance(data, pd.DataFrame)
    if not frame_input:
        if schema is not None or qi is not None or drop or confidential or strata or weight:
            raise ParameterError("schema=, qi=, confidential=, drop=, strata= and weight= "
                                 "describe DataFrame columns; pass a DataFrame")
        values = np.asarray(data)
        if missing is None:
            values = validate_input(values, k)
        elif values.ndim != 2 or not np.issubdtype(values.dtype, np.number):
            raise InputError(f"expected a numeric 2-D matrix of records, got shape "
                             f"{values.shape} of {values.dtype}")
        frame = pd.DataFrame(values.astype(np.float64),
                             columns=[f"x{j}" for j in range(values.shape[1])])
        spec = quick_schema(list(frame.columns), list(frame.columns),
                            missing=missing)
    else:
        frame = data
        spec = _schema_of(frame, schema, qi, confidential, drop, strata, weight, missing)
        params = _resolve_per_record(info, params, frame)
    _enter(progress, "prepare the quasi-identifiers")
    prepared = prepare(frame, spec, k, engine)
    gate = _privacy_of(frame, spec, privacy or BeyondK())
    if gate is not None and "S" in info.per_record:
        params.update(S=gate.S, kinds=list(gate.kinds), t=gate.t, l=gate.l)
    staged = None  # the two-stage report
    started = time.perf_counter()
    _enter(progress, f"engine {engine}")
    if two_stage is None:
        if prepared.groups is None:
            labels = run_engine(engine, prepared.Z, k, progress=progress,
                                tuples=prepared.embedded_tuples(), **params)
        else:
            labels = partition_groups(
                prepared.Z, prepared.groups, prepared.encoding,
                lambda rows, Zg: run_engine(engine, Zg, k, **_rows_of(info, params, rows)))
    else:
        from streamanon.incremental.run import TwoStageRun, split_by_ratio

        if prepared.groups is not None and two_stage.compare_one_shot:
            raise ParameterError("compare_one_shot works on data without strata or "
                                 "missing-value groups")
        run = TwoStageRun(k, engine, two_stage.incremental, engine_params=params,
                          incremental_params=two_stage.incremental_params)
        nu = two_stage.nu
        n_base = split_by_ratio(len(prepared.Z), nu)
        if prepared.groups is None:
            result = run.run(prepared.Z, n_base, compare_one_shot=two_stage.compare_one_shot)
            labels, staged = result.labels, result.report()
        else:
            labels = partition_groups(
                prepared.Z, prepared.groups, prepared.encoding,
                lambda rows, Zg: run.partition(Zg, int(np.sum(rows < n_base))).labels)
            staged = {"nu": nu, "n_0": n_base, "n_plus": len(prepared.Z) - n_base}
    if gate is not None:
        _enter(progress, "l-diversity and t-closeness")
        labels = gate.enforce(prepared.Z, labels)
    seconds = time.perf_counter() - started
    _enter(progress, "release table, gate and measures")

    shuffle = frame_input if output.shuffle is None else output.shuffle
    released = release_prepared(frame, prepared, labels, k, seed=output.seed, shuffle=shuffle,
                                keep_index=output.keep_index, privacy=gate,
                                risk=output.risk)
    if staged is not None and "distortion_two_stage" in staged:
        staged["distortion_two_stage"] = released.distortion
    return Microaggregation(
        data=released.table if frame_input else released.table.to_numpy(dtype=np.float64),
        labels=labels,
        k=int(k),
        engine=engine,
        params=report_params,
        qi=list(spec.quasi_identifiers),
        distortion=released.distortion,
        seconds=seconds,
        dropped=list(spec.dropped),
        incremental=None if two_stage is None else two_stage.incremental,
        two_stage=staged,
        columns={name: {"role": f.role, "type": f.type or
                        ("float" if f.role == "quasi_identifier" else None)}
                 for name, f in spec.fields.items()},
        loss=released.loss,
        strata=list(spec.strata),
        strata_merged=[] if prepared.groups is None else prepared.groups.merged_strata,
        weight=spec.weight,
        privacy=None if gate is None else {
            "l": gate.l, "t": gate.t, "sensitive": released.privacy},
        risk=released.risk,
    )


def _enter(progress: Progress | None, phase: str) -> None:
    if progress is not None:
        progress.enter(phase)


def _check_options(params: dict[str, Any], **given: tuple[Any, type]) -> None:
    """Refuse a keyword of an option value given to :func:`microaggregate` itself (where
    it would pass for an engine parameter), and an option value of the wrong kind."""
    moved = [name for name in MOVED if name in params]
    if moved:
        raise ParameterError(
            "; ".join(f"{name}= is {MOVED[name]}" for name in moved)
            + ": microaggregate's options are grouped (an engine's own parameter of that name "
            "goes in engine_params=)")
    for name, (value, kind) in given.items():
        if value is not None and not isinstance(value, kind):
            raise ParameterError(f"{name}= takes {kind.__name__}(...) from streamanon, "
                                 f"got {value!r}")


def default_engine(privacy: BeyondK | None = None) -> str:
    """The engine when none is named: ``tclose_kfirst`` for l-diversity or t-closeness (it
    takes both, on several sensitive columns; compiled when only ``t`` is asked), ``mdav``
    otherwise."""
    if privacy is None or (privacy.l is None and privacy.t is None):
        return "mdav"
    return "tclose_kfirst"


def _privacy_of(frame: Any, spec: Schema, asked: BeyondK) -> Privacy | None:
    """The sensitive answers and the l and t asked for, or None when there are none."""
    sensitive, l, t = asked.sensitive, asked.l, asked.t  # noqa: E741
    extra = [sensitive] if isinstance(sensitive, str) else list(sensitive)
    names = spec.sensitive + [s for s in extra if s not in spec.sensitive]
    if l is not None and (isinstance(l, (bool, np.bool_)) or not isinstance(l, numbers.Integral)
                          or l < 1):
        raise ParameterError(f"l must be a positive integer, got {l!r}")
    if t is not None and (isinstance(t, (bool, np.bool_)) or not isinstance(t, numbers.Real)
                          or not 0 <= t <= 1):
        raise ParameterError(f"t must be between 0 and 1, got {t!r}")
    l = None if l is None else int(l)  # noqa: E741
    t = None if t is None else float(t)
    if not names:
        if l is not None or t is not None:
            raise ParameterError("l and t are about sensitive answers: mark them "
                                 "sensitive = true in the schema, or name them (sensitive=, "
                                 "--sensitive)")
        return None
    roles = {n: spec.fields[n].role if n in spec.fields else None for n in names}
    wrong = [n for n, role in roles.items() if role not in ("confidential", "label")]
    if wrong:
        raise InputError(f"sensitive column(s) {', '.join(wrong)} must be confidential answers "
                         "(published unchanged)")
    S, kinds = sensitive_codes(frame, spec, names)
    if l is not None:
        few = [f"{n} has {len(np.unique(S[:, j]))}" for j, n in enumerate(names)
               if len(np.unique(S[:, j])) < l]
        if few:
            raise ParameterError(f"l = {l} distinct answers per cell cannot be met: "
                                 f"{', '.join(few)} distinct answer(s) in all")
    return Privacy(tuple(names), S, kinds, l, t)


def _schema_of(frame: Any, schema: Any, qi: Any, confidential: Any, drop: Any, strata: Any,
               weight: str | None, missing: str | None) -> Schema:
    """The schema of ``frame``: the one given (every column needs a role), or the quick
    form's."""
    strata = [strata] if isinstance(strata, str) else list(strata)
    columns = [str(c) for c in frame.columns]
    twice = sorted({c for c in columns if columns.count(c) > 1})
    if twice:
        raise InputError(f"column name(s) {', '.join(twice)} occur more than once; rename "
                         "them so that each column has one role")
    if schema is not None:
        if qi is not None or drop or confidential or missing is not None:
            raise ParameterError("give either schema= or the quick form (qi=, confidential=, "
                                 "drop=, missing=), not both")
        spec = as_schema(schema, strata)
        if weight is not None:
            raise ParameterError("with schema=, the weight is the field of role 'weight'")
        spec.check_columns(columns)
        return spec
    def one(names: Any) -> list[str]:
        return [names] if isinstance(names, str) else list(names)

    drop, confidential = one(drop), one(confidential)
    named = set(drop) | set(confidential) | set(strata) | ({weight} if weight else set())
    qi_cols = one(qi) if qi is not None else [c for c in columns if c not in named]
    if not qi_cols:
        raise InputError("no quasi-identifier columns given")
    roles = set(qi_cols) | set(drop) | set(confidential) | ({weight} if weight else set())
    spec = quick_schema(columns, qi_cols, confidential, drop, weight=weight, missing=missing,
                        strata=[s for s in strata if s in roles] or ())
    extra = [s for s in strata if s not in roles]
    if extra:
        raise InputError(f"stratum column(s) {', '.join(extra)} have no role; name them in "
                         "qi= or confidential=")
    spec.check_columns(columns, "name each in qi=, confidential= or drop=")
    return spec


def _rows_of(info: Any, params: dict[str, Any], rows: np.ndarray) -> dict[str, Any]:
    """Engine parameters for some records: per-record ones cut to those rows."""
    return {name: (np.asarray(value)[rows] if name in info.per_record else value)
            for name, value in params.items()}


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
