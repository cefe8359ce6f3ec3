"""Mixed survey data's codes and embedding: categorical, ordinal, integer and missing
quasi-identifiers as numbers (specification section 9; Domingo-Ferrer & Torra 2005, "Ordinal,
continuous and heterogeneous k-anonymity through microaggregation", Data Min. Knowl. Disc. 11).

The engines stay the fast Euclidean ones: a record is **embedded** in a Euclidean space whose
squared distances are the mixed distance, the engines run there, and each cell's released value
is computed per type afterwards (:mod:`streamanon.released_values`). The groups cells never
cross, strata and missing-value patterns, are :mod:`streamanon.strata`; the information loss
per type is :mod:`streamanon.type_loss`.

Codes (:meth:`Encoding.codes`): one float per quasi-identifier, NaN when missing: the value
(``float``, ``int``), the level's position (``ordinal``: its rank; ``category``, ``bool``: an
index). Embedding (:func:`embed`): a numeric or ordinal code standardised (mean 0, population
standard deviation 1 over the observed values: for ordinals this is the rank-based distance);
a nominal code as its indicator vector, centred on the level frequencies ``p`` and scaled by
``s = sqrt(1 - sum p^2)``, so that the block has total variance 1 like a standardised column.
The mixed distance of two complete records ``x``, ``y`` is therefore

    d^2(x, y) = sum_numeric ((x_j - y_j) / sigma_j)^2 + sum_ordinal ((r_j(x) - r_j(y)) / sigma_rj)^2
              + sum_nominal 2 [x_j != y_j] / (1 - sum_l p_jl^2)

(:func:`mixed_distance`; a property test checks it equals the embedded squared distance). A
missing value is embedded at the column's mean (zero), so it pulls its record nowhere.

The sensitive answers are coded here too (:func:`sensitive_codes`): ranks for the EMD of
:mod:`streamanon.privacy`, with each column's ground distance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from streamanon.errors import InputError, ParameterError
from streamanon.metrics import Standardisation, fit_standardisation
from streamanon.schema import Schema

if TYPE_CHECKING:
    from streamanon.tuples import Tuples

NOMINAL = ("category", "bool")


@dataclass(frozen=True)
class Column:
    """A quasi-identifier: its kind (``float``, ``int``, ``bool``, ``category``, ``ordinal``),
    its levels (nominal and ordinal kinds) and its missing-value policy."""

    name: str
    kind: str
    levels: tuple[Any, ...] = ()
    missing: str = "group"
    required: bool = True

    @property
    def nominal(self) -> bool:
        return self.kind in NOMINAL

    @property
    def width(self) -> int:
        """Columns of the embedding: one, or one per level for a nominal attribute."""
        return len(self.levels) if self.nominal else 1


@dataclass(frozen=True)
class Encoding:
    """How the quasi-identifiers of a table become codes and an embedding, and back."""

    columns: tuple[Column, ...]

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def numeric_only(self) -> bool:
        """Every quasi-identifier a number: the embedding is today's standardised matrix."""
        return all(c.kind in ("float", "int") for c in self.columns)

    @property
    def has_nominal(self) -> bool:
        return any(c.nominal for c in self.columns)

    @property
    def slices(self) -> list[slice]:
        out, at = [], 0
        for c in self.columns:
            out.append(slice(at, at + c.width))
            at += c.width
        return out

    def codes(self, frame: pd.DataFrame) -> np.ndarray:
        """The n x m codes of ``frame``'s quasi-identifiers (NaN: missing).

        Raises
        ------
        InputError
            A value that is not a number (numeric kinds), not an integer (``int``), outside
            the levels, infinite, or missing in a required field. Messages name the column
            and a count, never a value.
        """
        n = len(frame)
        C = np.empty((n, len(self.columns)), dtype=np.float64)
        for j, col in enumerate(self.columns):
            C[:, j] = _codes(frame[col.name], col)
        return C

    def check_required(self, C: np.ndarray) -> None:
        """Raise :class:`InputError` when a required quasi-identifier has a missing value."""
        bad = [(j, c) for j, c in enumerate(self.columns) if c.required]
        if not bad:
            return
        cols = [j for j, _ in bad]
        if not missing_columns(C)[cols].any():
            return
        miss = np.isnan(C[:, cols])
        if miss.any():
            rows, which = np.nonzero(miss)
            names = sorted({self.columns[cols[j]].name for j in which})
            raise InputError(
                f"{len(rows)} missing, NaN or infinite value(s) in quasi-identifier column(s) "
                f"{', '.join(names)} (first at row {int(rows.min()) + 1}); clean or impute "
                "them first, or allow them: --missing group|impute (quick form), "
                "missing= (API), required = false (schema)")

    def decode(self, C: np.ndarray, like: pd.DataFrame | None = None) -> dict[str, pd.Series]:
        """Released codes back to columns: floats, integers (nullable ``Int64`` when a value
        is missing), booleans, levels (a ``Categorical`` when ``like`` has one, else objects)."""
        out: dict[str, pd.Series] = {}
        for j, col in enumerate(self.columns):
            values = C[:, j]
            missing = np.isnan(values)
            if col.kind == "float":
                out[col.name] = pd.Series(values)
            elif col.kind == "int":
                ints = np.where(missing, 0, values).astype(np.int64)
                out[col.name] = (pd.Series(pd.arrays.IntegerArray(ints, missing))
                                 if missing.any() else pd.Series(ints))
            else:
                codes = np.where(missing, -1, values).astype(np.int64)
                original = None if like is None else like[col.name]
                if original is not None and isinstance(original.dtype, pd.CategoricalDtype):
                    dtype = original.dtype
                    if not set(col.levels) <= set(dtype.categories):  # declared, never seen
                        dtype = pd.CategoricalDtype(list(col.levels), ordered=dtype.ordered)
                    where = {level: i for i, level in enumerate(dtype.categories)}
                    mapped = np.array([*(where[lv] for lv in col.levels), -1])[codes]
                    out[col.name] = pd.Series(pd.Categorical.from_codes(mapped, dtype=dtype))
                elif col.kind == "bool" and not missing.any():
                    out[col.name] = pd.Series(codes.astype(bool))
                elif _arrow_text(original, col.levels):  # text kept as the table keeps it
                    out[col.name] = _take_text(col.levels, codes, original.dtype)
                else:
                    levels = np.array([*col.levels, None], dtype=object)
                    out[col.name] = pd.Series(levels[codes])
        return out


def missing_columns(C: np.ndarray) -> np.ndarray:
    """Per column of the codes ``C``, whether a value is missing (NaN), found by a sum over
    each column (a NaN makes it NaN) without a copy of the matrix; only where a sum is NaN
    are the values looked at."""
    C = np.asarray(C, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        maybe = np.isnan(C.sum(axis=0))
    if maybe.any():  # a NaN, or infinities of both signs: look
        maybe[maybe] = np.isnan(C[:, maybe]).any(axis=0)
    return maybe


def _arrow_text(original: pd.Series | None, levels: tuple[Any, ...]) -> bool:
    """Whether ``original`` is text stored by Arrow (pandas' ``str``, what a CSV read gives)
    and every level is text: the released column is then built by Arrow, without a Python
    string per record."""
    return (original is not None and isinstance(original.dtype, pd.StringDtype)
            and original.dtype.storage == "pyarrow"
            and all(isinstance(level, str) for level in levels))


def _take_text(levels: tuple[Any, ...], codes: np.ndarray, dtype: Any) -> pd.Series:
    """Each code's level (-1: missing) as a text column of ``dtype``, taken by Arrow."""
    import pyarrow as pa
    import pyarrow.compute as pc

    taken = pc.take(pa.array([*levels, None], type=pa.large_string()),
                    pa.array(np.where(codes < 0, len(levels), codes)))
    return pd.Series(pd.array(taken, dtype=dtype))


def _levels_seen(series: pd.Series) -> tuple[Any, ...]:
    if isinstance(series.dtype, pd.CategoricalDtype):
        return tuple(series.cat.categories)
    values = pd.unique(series.dropna())
    try:
        return tuple(sorted(values))
    except TypeError:  # mixed types: sort by their text
        return tuple(sorted(values, key=repr))


def _codes(series: pd.Series, col: Column) -> np.ndarray:
    missing = series.isna().to_numpy()
    if col.kind in ("float", "int"):
        if (isinstance(series.dtype, pd.CategoricalDtype)
                or not (pd.api.types.is_numeric_dtype(series) or missing.all())
                or pd.api.types.is_bool_dtype(series)):
            raise InputError(f"quasi-identifier column {col.name} is not numeric; declare it "
                             "as category or ordinal in a schema (--schema)")
        values = series.to_numpy(dtype=np.float64, na_value=np.nan)
        if np.isinf(values).any():
            raise InputError(f"{int(np.isinf(values).sum())} infinite value(s) in "
                             f"quasi-identifier column {col.name}")
        if col.kind == "int":
            frac = ~missing & (values != np.round(values))
            if frac.any():
                raise InputError(f"{int(frac.sum())} value(s) of {col.name} are not integers "
                                 "(the schema says int)")
        return values
    where = {level: float(i) for i, level in enumerate(col.levels)}
    # Each distinct value is looked up once (a survey column has a handful of them).
    seen, distinct = pd.factorize(series, use_na_sentinel=True)
    code_of = np.full(len(distinct) + 1, np.nan)  # the last: missing
    for i, value in enumerate(distinct):
        code = where.get(value)
        if code is None and isinstance(value, str) and col.kind == "bool":
            code = where.get({"true": True, "false": False}.get(value.strip().lower()))
        code_of[i] = np.inf if code is None else code
    out = code_of[np.where(missing, len(distinct), seen)]
    unknown = int(np.isinf(out).sum())
    out[np.isinf(out)] = np.nan
    if unknown:
        raise InputError(f"{unknown} value(s) of {col.name} are not among its "
                         f"{len(col.levels)} levels")
    return out


def encoding_for(frame: pd.DataFrame, schema: Schema) -> Encoding:
    """The encoding of ``schema``'s quasi-identifiers; a ``category`` without levels takes the
    values seen in ``frame`` (sorted; a ``Categorical``'s own categories)."""
    columns = []
    for name in schema.quasi_identifiers:
        spec = schema.fields[name]
        kind = spec.type or "float"
        if kind == "bool":
            levels: tuple[Any, ...] = (False, True)
        elif kind in ("category", "ordinal"):
            levels = tuple(spec.levels) if spec.levels else _levels_seen(frame[name])
        else:
            levels = ()
        columns.append(Column(name, kind, levels, spec.missing, spec.required))
    return Encoding(tuple(columns))


def mixed_engines() -> frozenset[str]:
    """The engines that work on the embedding of nominal data: those registered with
    ``mixed`` (they use Euclidean distances and centroids only; the others cut single
    coordinates, as the Mondrian family does, where one indicator column is one level and not
    the attribute, or take per-record inputs that assume numeric data)."""
    from streamanon.engines import available_engines

    return frozenset(entry.name for entry in available_engines()
                     if entry.engine is not None and entry.engine.mixed)


def check_engine(engine: str, encoding: Encoding) -> None:
    """Refuse an engine that does not work on nominal data, with the ones that do."""
    if encoding.has_nominal:
        mixed = mixed_engines()
        if engine in mixed:
            return
        nominal = [c.name for c in encoding.columns if c.nominal]
        raise ParameterError(
            f"engine {engine} works on numeric and ordinal quasi-identifiers only, and "
            f"{', '.join(nominal)} are categorical; engines for mixed data: "
            f"{', '.join(sorted(mixed))}")


def expand(C: np.ndarray, encoding: Encoding) -> np.ndarray:
    """Codes -> the unscaled embedding: numbers and ranks as they are (NaN stays), a nominal
    code as its indicator vector (all zeros when missing). Without nominal columns, ``C``
    itself when it is a C-contiguous float matrix already (read only, never written)."""
    if not encoding.has_nominal:
        return np.asarray(C, dtype=np.float64, order="C")
    n = C.shape[0]
    E = np.zeros((n, sum(c.width for c in encoding.columns)))
    for j, (col, part) in enumerate(zip(encoding.columns, encoding.slices, strict=True)):
        if col.nominal:
            code = C[:, j]
            seen = ~np.isnan(code)
            E[np.flatnonzero(seen), part.start + code[seen].astype(np.int64)] = 1.0
        else:
            E[:, part.start] = C[:, j]
    return E


def fit_embedding(C: np.ndarray, encoding: Encoding) -> Standardisation:
    """The affine map of the expanded codes: numeric and ordinal columns standardised over
    their observed values, a nominal block centred on its level frequencies and scaled by
    ``sqrt(1 - sum p^2)``. Complete numeric data: exactly :func:`fit_standardisation`."""
    if not encoding.has_nominal and not missing_columns(C).any():
        return fit_standardisation(expand(C, encoding))
    width = sum(c.width for c in encoding.columns)
    mean = np.zeros(width)
    scale = np.ones(width)
    missing = missing_columns(C)
    for j, (col, part) in enumerate(zip(encoding.columns, encoding.slices, strict=True)):
        if missing[j]:
            seen = ~np.isnan(C[:, j])
            if not seen.any():
                continue
            values = C[seen, j]
        else:  # the same values, without a mask over every record
            values = np.ascontiguousarray(C[:, j])
        if col.nominal:  # each level's share: the mean of its indicator column
            counts = np.bincount(values.astype(np.int64), minlength=col.width)
            p = counts[: col.width] / float(len(values))
            mean[part] = p
            spread = float(np.sqrt(max(1.0 - float(np.sum(p * p)), 0.0)))
            scale[part] = spread if spread > 0 else 1.0
        else:
            fit = fit_standardisation(values[:, None])
            mean[part], scale[part] = fit.mean, fit.scale
    return Standardisation(mean=mean, scale=scale)


#: Work on the distinct code tuples, not on every record, for a table of at least this many
#: records whose distinct tuples are at most this share of them (the same numbers: each
#: tuple's row is computed as every record's would be). Real survey keys repeat: 1.4 million
#: people's six military answers hold 1,646 tuples, and their 24-column embedding took 2 s.
DISTINCT_WORK = (10_000, 0.25)


def embed(C: np.ndarray, encoding: Encoding, scaling: Standardisation,
          tuples: Tuples | None = None) -> np.ndarray:
    """The embedded records (n x d), missing values at the column mean (zero); each distinct
    row of ``C`` embedded once where the keys repeat (``tuples``: its distinct rows, when the
    caller has them; else :func:`repeated_tuples`)."""
    C = np.asarray(C, dtype=np.float64)
    tuples = repeated_tuples(C) if tuples is None else tuples
    if tuples is not None:
        return _embed(C[tuples.first], encoding, scaling)[tuples.inverse]
    return _embed(C, encoding, scaling)


def repeated_tuples(C: np.ndarray) -> Tuples | None:
    """The distinct tuples of the codes ``C`` where the keys repeat (:data:`DISTINCT_WORK`),
    else None."""
    from streamanon.tuples import collapse_codes

    n = C.shape[0]
    if n < DISTINCT_WORK[0] or C.shape[1] == 0:
        return None
    tuples = collapse_codes(C)
    return tuples if tuples.n_distinct <= DISTINCT_WORK[1] * n else None


def _embed(C: np.ndarray, encoding: Encoding, scaling: Standardisation) -> np.ndarray:
    E = expand(C, encoding)
    Z = scaling.apply(E)
    if encoding.has_nominal or np.isnan(Z).any():
        np.nan_to_num(Z, copy=False, nan=0.0)
        for j, (col, part) in enumerate(zip(encoding.columns, encoding.slices, strict=True)):
            if col.nominal:
                Z[np.isnan(C[:, j]), part] = 0.0
    return Z


def mixed_distance(x: np.ndarray, y: np.ndarray, encoding: Encoding,
                   scaling: Standardisation) -> float:
    """The squared mixed distance of two complete records (codes), by its definition."""
    total = 0.0
    for j, (col, part) in enumerate(zip(encoding.columns, encoding.slices, strict=True)):
        if col.nominal:
            s = float(scaling.scale[part.start])
            total += 0.0 if x[j] == y[j] else 2.0 / (s * s)
        else:
            total += ((x[j] - y[j]) / float(scaling.scale[part.start])) ** 2
    return total


def sensitive_codes(frame: pd.DataFrame, schema: Schema, names: Sequence[str],
                    kinds: dict[str, str] | None = None) -> tuple[np.ndarray, tuple[str, ...]]:
    """The sensitive answers ``names`` of ``frame`` as codes for the EMD: the rank of each
    value in its column's sorted domain (an ordinal's levels in their order), a missing answer
    the last value of its own; and each column's ground distance, ``ordered`` for numbers and
    ordinals, ``equal`` for categories, booleans and text (``kinds`` overrides)."""
    S = np.empty((len(frame), len(names)))
    out_kinds = []
    for j, name in enumerate(names):
        if name not in frame.columns:
            raise InputError(f"sensitive column {name} is not in the data")
        column = frame[name]
        spec = schema.fields.get(name)
        kind_of = spec.type if spec is not None else None
        numeric = (pd.api.types.is_numeric_dtype(column)
                   and not pd.api.types.is_bool_dtype(column))
        if kind_of == "ordinal" and spec is not None and spec.levels:
            where = {level: i for i, level in enumerate(spec.levels)}
            codes = np.array([where.get(v, len(where)) if not pd.isna(v) else len(where)
                              for v in column.astype(object)], dtype=np.float64)
            kind = "ordered"
        else:
            codes, _ = pd.factorize(column, sort=True, use_na_sentinel=True)
            codes = np.where(codes < 0, codes.max(initial=-1) + 1, codes).astype(np.float64)
            kind = "ordered" if numeric and kind_of not in ("category", "bool") else "equal"
        S[:, j] = codes
        out_kinds.append((kinds or {}).get(name, kind))
    return S, tuple(out_kinds)
