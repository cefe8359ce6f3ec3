"""Release files for statisticians: SPSS (``.sav``) and Stata (``.dta``) with labels, and the
categorical columns of a Parquet release.

A statistician opens a release in SPSS, Stata, R or pandas and expects a categorical answer to
be a labelled variable there, not a column of text. Both SPSS and Stata store such a variable as
numbers with *value labels*, and Stata only labels integers: each ``category`` or ``ordinal``
field is written as the codes 1 to L of its L levels (an ordinal's in its declared order, so
the codes keep the order; a category's in its declared order, or sorted when the schema lists
no levels), with one value label per level; a ``bool`` field as 0 and 1 labelled ``false`` and
``true``. Every variable gets a *variable label*: the field's ``description`` in the schema,
else the column's name. SPSS also gets each variable's measurement level (``nominal``,
``ordinal``, ``scale``). The files are written with pyreadstat (the ReadStat library).

Variable names follow the stricter rules of the two programs, one deterministic rule for both
(:func:`variable_name`): letters are stripped of their accents, any character other than an
ASCII letter, digit or underscore becomes ``_``, a name that does not start with a letter gets
a leading ``v``, the name is cut to 32 characters (Stata) or 64 (SPSS), and a reserved word gets
a trailing ``_``. Two columns that end up with the same name (in SPSS, whatever the case) are
refused with both names: rename one in the data and the schema.

For Parquet, :func:`categorical_columns` makes the same fields pandas ``Categorical`` columns
(ordered for an ordinal), which Arrow stores dictionary-encoded: R's arrow reads them as factors
and pandas as categoricals, with every declared level.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamanon.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

    from streamanon.schema import FieldSpec, Schema

SPSS, STATA = ".sav", ".dta"


@dataclass(frozen=True)
class FileRules:
    """What a format allows: the longest variable name, the reserved words (compared without
    case where names are case-insensitive) and the longest labels, in UTF-8 bytes."""

    program: str
    max_name: int
    reserved: frozenset[str]
    case_insensitive: bool
    max_variable_label: int
    max_value_label: int


RULES = {
    # IBM SPSS Statistics, "Variable names": at most 64 bytes, case-insensitive, reserved
    # keywords; labels: 256 bytes for a variable, 120 for a value.
    SPSS: FileRules("SPSS", 64, frozenset({"ALL", "AND", "BY", "EQ", "GE", "GT", "LE", "LT",
                                           "NE", "NOT", "OR", "TO", "WITH"}), True, 256, 120),
    # Stata [U] 11.3 "Naming conventions": at most 32 characters, case-sensitive, reserved
    # names (those starting with "_" cannot occur here, nor str1 to str2045: see variable_name);
    # labels: 80 bytes for a variable, 32,000 for a value.
    STATA: FileRules("Stata", 32, frozenset({"byte", "double", "float", "if", "in", "int",
                                             "long", "strL", "using", "with"}), False, 80,
                     32_000),
}

_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_]")
_STATA_STR = re.compile(r"str[0-9]+")


def variable_name(column: str, fmt: str) -> str:
    """The variable name of ``column`` in an SPSS (``.sav``) or Stata (``.dta``) file.

    >>> variable_name("household/age", ".dta"), variable_name("1st visit", ".sav")
    ('household_age', 'v1st_visit')
    >>> variable_name("âge", ".dta"), variable_name("in", ".dta"), variable_name("BY", ".sav")
    ('age', 'in_', 'BY_')
    """
    rules = RULES[fmt]
    decomposed = unicodedata.normalize("NFKD", str(column))
    name = _NOT_ALLOWED.sub("_", "".join(c for c in decomposed
                                         if not unicodedata.combining(c)))
    if not name[:1].isalpha():
        name = "v" + name
    name = name[:rules.max_name]
    reserved = name.upper() in rules.reserved if rules.case_insensitive else (
        name in rules.reserved or _STATA_STR.fullmatch(name) is not None)
    return name + "_" if reserved else name


def variable_names(columns: Sequence[str], fmt: str) -> dict[str, str]:
    """Each column's variable name (:func:`variable_name`), or an :class:`InputError` naming
    two columns that would share one."""
    rules = RULES[fmt]
    names: dict[str, str] = {}
    taken: dict[str, str] = {}
    for column in map(str, columns):
        name = variable_name(column, fmt)
        key = name.upper() if rules.case_insensitive else name
        if key in taken:
            raise InputError(
                f"columns {taken[key]!r} and {column!r} both become the {rules.program} "
                f"variable {name!r} (at most {rules.max_name} letters, digits or underscores, "
                "starting with a letter" + (", whatever the case" if rules.case_insensitive
                                             else "") + "): rename one in the data and the "
                "schema")
        taken[key] = column
        names[column] = name
    return names


def release_levels(series: pd.Series, spec: FieldSpec) -> list[Any]:
    """The levels of a ``category`` or ``ordinal`` column, in code order: the declared ones,
    else a ``Categorical``'s own, else the values seen, sorted."""
    import pandas as pd

    if spec.levels:
        return list(spec.levels)
    if isinstance(series.dtype, pd.CategoricalDtype):
        return list(series.cat.categories)
    seen = list(pd.unique(series.dropna()))
    try:
        return sorted(seen)
    except TypeError:  # numbers and text mixed
        return sorted(seen, key=str)


def level_codes(series: pd.Series, levels: Sequence[Any], column: str) -> pd.Series:
    """The codes 1 to L of ``series``'s values among ``levels`` (nullable integers, a missing
    value missing); a value outside them is an :class:`InputError` naming the column."""
    import numpy as np
    import pandas as pd

    values = series.astype(object).where(series.notna(), None)
    codes = pd.Index(list(levels), dtype=object).get_indexer(values)
    stray = (codes < 0) & series.notna().to_numpy()
    if stray.any():
        raise InputError(f"column {column!r}: {int(stray.sum()):,} value(s) not among its "
                         f"{len(levels)} levels; declare them in the schema's levels")
    out = pd.array(np.where(codes < 0, 0, codes + 1), dtype="Int64")
    out[codes < 0] = pd.NA
    return pd.Series(out, index=series.index, name=series.name)


def categorical_columns(frame: pd.DataFrame, schema: Schema | None) -> pd.DataFrame:
    """``frame`` with each ``category`` and ``ordinal`` field of ``schema`` as a pandas
    ``Categorical`` of its levels (:func:`release_levels`; ordered for an ordinal), for a
    Parquet file whose readers see factors. A value outside the levels is an error."""
    import pandas as pd

    if schema is None:
        return frame
    out = frame
    for column in frame.columns:
        spec = schema.fields.get(str(column))
        if spec is None or spec.type not in ("category", "ordinal"):
            continue
        if out is frame:  # a copy for the first column replaced (the values are not copied)
            out = frame.copy(deep=False)
        series = frame[column]
        levels = release_levels(series, spec)
        codes = level_codes(series, levels, str(column)).to_numpy(dtype=float, na_value=0.0)
        dtype = pd.CategoricalDtype(pd.Index(list(levels), dtype=object),
                                    ordered=spec.type == "ordinal")
        out[column] = pd.Categorical.from_codes(codes.astype(int) - 1, dtype=dtype)
    return out


def _truncated(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, never inside a character."""
    return text.encode("utf-8")[:limit].decode("utf-8", errors="ignore")


_TRUE_FALSE = {"true": True, "false": False}


def _bool_codes(series: pd.Series) -> pd.Series:
    """A boolean column (``True``/``False`` or their text) as 1 and 0, missing kept."""
    import pandas as pd

    def code(value: Any) -> Any:
        if value is None or (isinstance(value, float) and value != value) or value is pd.NA:
            return pd.NA
        if isinstance(value, str):
            value = _TRUE_FALSE.get(value.strip().lower(), value)
        return int(bool(value))

    return pd.Series(pd.array([code(v) for v in series.astype(object)], dtype="Int64"),
                     index=series.index, name=series.name)


def labelled_table(frame: pd.DataFrame, schema: Schema | None,
                   fmt: str) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The table an SPSS or Stata file holds, with its variable names, and pyreadstat's
    ``column_labels``, ``variable_value_labels`` and (SPSS) ``variable_measure``."""
    import pandas as pd

    rules = RULES[fmt]
    names = variable_names(list(frame.columns), fmt)
    columns: dict[str, Any] = {}
    variable_labels: dict[str, str] = {}
    value_labels: dict[str, dict[int, str]] = {}
    measures: dict[str, str] = {}
    for column in frame.columns:
        spec = schema.fields.get(str(column)) if schema is not None else None
        kind = spec.type if spec is not None else None
        name = names[str(column)]
        series = frame[column]
        if spec is not None and kind in ("category", "ordinal"):
            levels = release_levels(series, spec)
            columns[name] = level_codes(series, levels, str(column))
            labels = [_truncated(str(level), rules.max_value_label) for level in levels]
            if len(set(labels)) != len(labels):
                raise InputError(f"column {column!r}: two of its levels share their first "
                                 f"{rules.max_value_label} bytes, the longest {rules.program} "
                                 "value label: shorten them in the data and the schema")
            value_labels[name] = {i + 1: label for i, label in enumerate(labels)}
            measures[name] = "ordinal" if kind == "ordinal" else "nominal"
        elif kind == "bool" or pd.api.types.is_bool_dtype(series):
            columns[name] = _bool_codes(series)
            value_labels[name] = {0: "false", 1: "true"}
            measures[name] = "nominal"
        else:
            if isinstance(series.dtype, pd.DatetimeTZDtype):  # neither program keeps a zone
                series = series.dt.tz_convert("UTC").dt.tz_localize(None)
            columns[name] = series
            numeric = (pd.api.types.is_numeric_dtype(series)
                       and not pd.api.types.is_bool_dtype(series))
            measures[name] = "scale" if numeric else "nominal"
        label = (spec.description if spec is not None and spec.description else str(column))
        variable_labels[name] = _truncated(label, rules.max_variable_label)
    options: dict[str, Any] = {"column_labels": variable_labels,
                               "variable_value_labels": value_labels}
    if fmt == SPSS:
        options["variable_measure"] = measures
    return pd.DataFrame(columns, index=frame.index), options


def write_labelled(frame: pd.DataFrame, path: str | os.PathLike[str], schema: Schema | None,
                   fmt: str) -> None:
    """Write ``frame`` to the SPSS (``fmt`` ``.sav``) or Stata (``.dta``) file ``path``, with
    variable and value labels (:func:`labelled_table`)."""
    import pyreadstat

    table, options = labelled_table(frame, schema, fmt)
    write = pyreadstat.write_sav if fmt == SPSS else pyreadstat.write_dta
    try:
        write(table, path, file_label="k-anonymous release (streamanon)", **options)
    except Exception as exc:  # pyreadstat's own classes; a message may quote a value
        raise InputError(f"cannot write the {RULES[fmt].program} file: pyreadstat refused "
                         f"the table ({type(exc).__name__})") from exc


def read_labelled(path: str | os.PathLike[str], fmt: str) -> pd.DataFrame:
    """An SPSS or Stata file as a table, labelled values as their labels (categoricals)."""
    import pyreadstat

    read = pyreadstat.read_sav if fmt == SPSS else pyreadstat.read_dta
    frame, _ = read(path, apply_value_formats=True)
    return frame
