"""The one way to describe a data set: every field's role and type (specification section 6).

The service's ``[surveys.schema]`` table, a schema file for ``streamanon anonymize --schema``
and ``microaggregate(df, schema=...)`` all use this format: a mapping of field name to a
:class:`FieldSpec` (``role``, ``type``, bounds, ``levels``, ``required``, ``missing``). A
schema file is TOML with a ``[schema]`` table and, optionally, ``strata = ["region"]``::

    strata = ["region"]

    [schema]
    respondent_id = {role = "identifier"}
    age = {role = "quasi_identifier", type = "int", min = 16, max = 110}
    region = {role = "quasi_identifier", type = "category"}
    education = {role = "quasi_identifier", type = "ordinal",
                 levels = ["primary", "secondary", "tertiary"]}
    income = {role = "quasi_identifier", type = "float", required = false}
    q1 = {role = "confidential", type = "int", required = false}
    weight = {role = "weight", type = "float"}

Roles: ``identifier`` (removed from the release; the service keeps only its HMAC),
``quasi_identifier`` (microaggregated), ``confidential`` (published unchanged), ``label``
(the service's published label; a confidential column elsewhere), ``weight`` (a sampling
weight: weighted cell means, published unchanged), ``ignore`` (removed; the service accepts
and discards it). Any field may have a ``description`` (the question asked): the variable label
of an SPSS or Stata release (``streamanon.spss_stata``). Pure: no I/O but :func:`load_schema`,
which reads the file it is given.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from streamanon.errors import InputError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

ROLES = ("identifier", "quasi_identifier", "confidential", "label", "weight", "ignore")
TYPES = ("int", "float", "str", "bool", "category", "ordinal", "timestamp", "text")
#: Types a quasi-identifier may have (None: a number, as in the all-numeric quick form).
QI_TYPES = (None, "int", "float", "bool", "category", "ordinal")
#: Roles whose columns are removed from a released table.
DROPPED_ROLES = ("identifier", "ignore")

Level = str | int | float | bool


class FieldSpec(BaseModel):
    """One field (column) of a data set."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["identifier", "quasi_identifier", "confidential", "label", "weight", "ignore"]
    type: Literal["int", "float", "str", "bool", "category", "ordinal", "timestamp",
                  "text"] | None = None
    min: float | None = None
    max: float | None = None
    #: The values of a ``category`` (optional: otherwise the values seen) or, in order, of an
    #: ``ordinal`` (required).
    levels: list[Level] | None = None
    required: bool = True
    #: What a missing quasi-identifier value becomes (see ``streamanon.strata``): ``group``
    #: (kept missing; microaggregated with records of the same missingness pattern) or
    #: ``impute`` (filled with its cell's value).
    missing: Literal["group", "impute"] = "group"
    #: A confidential answer whose disclosure the release must limit beyond k-anonymity:
    #: l-diversity and t-closeness (``streamanon.privacy``) are checked on it.
    sensitive: bool = False
    #: What the field is, in words (the question asked): the variable label of an SPSS or
    #: Stata release (``streamanon.spss_stata``), which otherwise is the field's name.
    description: str | None = None

    def bounds_text(self) -> str:
        """The declared bounds in words: ``outside its bounds (min 16, max 80)``."""
        parts = [f"{word} {value:g}" for word, value in (("min", self.min), ("max", self.max))
                 if value is not None]
        if self.role == "weight":
            parts.insert(0, "> 0")
        return f"outside its bounds ({', '.join(parts)})"

    def problems(self, name: str) -> list[str]:
        """What is wrong with this field's declaration, each naming ``name``."""
        out = []
        if self.role == "quasi_identifier" and self.type not in QI_TYPES:
            out.append(f"{name}.type: a quasi-identifier is int, float, bool, category or "
                       f"ordinal, not {self.type}")
        if self.type == "ordinal" and not self.levels:
            out.append(f"{name}.levels: an ordinal field needs its levels, in order")
        if self.levels is not None:
            if self.type not in ("category", "ordinal"):
                out.append(f"{name}.levels: only category and ordinal fields have levels")
            elif len(set(map(repr, self.levels))) != len(self.levels):
                out.append(f"{name}.levels: a level is listed twice")
            elif not self.levels:
                out.append(f"{name}.levels: the list is empty")
        if self.min is not None and self.max is not None and self.min > self.max:
            out.append(f"{name}: min is larger than max")
        if (self.min is not None or self.max is not None) and self.type not in (
                "int", "float") and not (self.type is None and self.role in (
                    "quasi_identifier", "weight")):
            out.append(f"{name}: bounds need a numeric type (int or float)")
        if self.sensitive and self.role not in ("confidential", "label"):
            out.append(f"{name}.sensitive: only a confidential answer is sensitive (a "
                       f"{self.role} is not published as it is)")
        if self.role == "weight" and self.type not in (None, "int", "float"):
            out.append(f"{name}.type: a weight is a number (int or float)")
        return out


@dataclass(frozen=True)
class Schema:
    """The fields of a data set, in order, and the strata (fields whose values split it)."""

    fields: Mapping[str, FieldSpec]
    strata: tuple[str, ...] = ()

    def names(self, *roles: str) -> list[str]:
        return [name for name, spec in self.fields.items() if spec.role in roles]

    @property
    def quasi_identifiers(self) -> list[str]:
        return self.names("quasi_identifier")

    @property
    def dropped(self) -> list[str]:
        return self.names(*DROPPED_ROLES)

    @property
    def sensitive(self) -> list[str]:
        return [name for name, spec in self.fields.items() if spec.sensitive]

    @property
    def weight(self) -> str | None:
        names = self.names("weight")
        return names[0] if names else None

    def problems(self) -> list[str]:
        out = [p for name, spec in self.fields.items() for p in spec.problems(name)]
        if not self.quasi_identifiers:
            out.append("no field has role 'quasi_identifier'")
        if len(self.names("weight")) > 1:
            out.append(f"more than one weight field: {', '.join(self.names('weight'))}")
        for name in self.strata:
            spec = self.fields.get(name)
            if spec is None:
                out.append(f"strata: {name!r} is not a field of the schema")
            elif spec.role in DROPPED_ROLES or spec.role == "weight":
                out.append(f"strata: {name!r} has role {spec.role}; a stratum is a "
                           "quasi-identifier or confidential field")
        if len(set(self.strata)) != len(self.strata):
            out.append("strata: a field is listed twice")
        return out

    def check_columns(self, columns: Sequence[str],
                      hint: str = "give each a role in the schema") -> None:
        """Raise :class:`InputError` unless every column has a role and every required field
        is a column; ``hint`` says where roles are given."""
        have = [str(c) for c in columns]
        no_role = [c for c in have if c not in self.fields]
        if no_role:
            raise InputError(f"column(s) {', '.join(no_role)} have no role; {hint} "
                             "(identifiers must be dropped explicitly)")
        absent = [n for n, spec in self.fields.items() if n not in have and spec.required]
        if absent:
            raise InputError(f"required field(s) {', '.join(absent)} are not columns of the "
                             f"data; it has: {', '.join(have)}")


def parse_schema(mapping: Mapping[str, Any], strata: Sequence[str] = (),
                 source: str = "schema") -> Schema:
    """A :class:`Schema` from a mapping of field name to spec (dicts or :class:`FieldSpec`).

    Raises
    ------
    InputError
        Naming every problem, each with its field.
    """
    if not isinstance(mapping, Mapping) or not mapping:
        raise InputError(f"{source}: expected a non-empty table of fields")
    if isinstance(strata, str):
        strata = [strata]
    fields: dict[str, FieldSpec] = {}
    problems: list[str] = []
    for name, raw in mapping.items():
        if isinstance(raw, FieldSpec):
            fields[str(name)] = raw
            continue
        try:
            fields[str(name)] = FieldSpec.model_validate(raw)
        except ValidationError as exc:
            for error in exc.errors():
                where = ".".join(str(p) for p in error["loc"])
                problems.append(f"{name}{'.' + where if where else ''}: {error['msg']}")
    schema = Schema(fields=fields, strata=tuple(str(s) for s in strata))
    if not problems:
        problems = schema.problems()
    if problems:
        raise InputError(f"invalid {source} ({len(problems)} problem(s)): "
                         + "; ".join(problems))
    return schema


def load_schema(path: str | os.PathLike[str]) -> Schema:
    """The schema in a TOML file: a ``[schema]`` table and optionally ``strata = [...]``."""
    p = Path(path)
    try:
        raw = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: no such schema file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, IsADirectoryError) as exc:
        raise InputError(f"{path}: not a TOML schema file: {exc}") from None
    unknown = sorted(set(raw) - {"schema", "strata"})
    if unknown or "schema" not in raw:
        raise InputError(f"{path}: a schema file has a [schema] table and optionally "
                         f"strata = [...]" + (f"; unknown key(s) {', '.join(unknown)}"
                                              if unknown else ""))
    return parse_schema(raw["schema"], raw.get("strata", ()), source=f"schema {path}")


def as_schema(schema: Schema | Mapping[str, Any] | str | os.PathLike[str],
              strata: Sequence[str] = ()) -> Schema:
    """A :class:`Schema` from a schema, a mapping of fields, or a schema file's path."""
    if isinstance(schema, Schema):
        if strata:
            return parse_schema(schema.fields, strata)
        return schema
    if isinstance(schema, (str, os.PathLike)):
        loaded = load_schema(schema)
        return parse_schema(loaded.fields, strata) if strata else loaded
    if isinstance(schema, Mapping) and "schema" in schema and isinstance(
            schema["schema"], Mapping) and not isinstance(schema.get("schema"), FieldSpec) \
            and "role" not in schema["schema"]:
        return parse_schema(schema["schema"], strata or schema.get("strata", ()))
    return parse_schema(schema, strata)


def quick_schema(columns: Sequence[str], qi: Sequence[str], confidential: Sequence[str] = (),
                 drop: Sequence[str] = (), *, weight: str | None = None,
                 missing: str | None = None, strata: Sequence[str] = ()) -> Schema:
    """The schema the quick form (``--qi/--confidential/--drop``) describes: numeric
    quasi-identifiers (``required`` unless ``missing`` is given), the rest by name.

    Raises
    ------
    InputError
        A column named twice, a name that is not a column.
    """
    roles: dict[str, str] = {}
    for role, names in (("quasi_identifier", qi), ("confidential", confidential),
                        ("identifier", drop), ("weight", [weight] if weight else [])):
        for name in names:
            if name in roles:
                raise InputError(f"column {name!r} is given two roles: {roles[name]} and "
                                 f"{role}")
            roles[name] = role
    have = [str(c) for c in columns]
    unknown = [c for c in roles if c not in have]
    if unknown:
        raise InputError(f"unknown column(s): {', '.join(unknown)}; the data has: "
                         f"{', '.join(have)}")
    fields: dict[str, Any] = {}
    for name in have:
        if name not in roles:
            continue
        spec: dict[str, Any] = {"role": roles[name]}
        if roles[name] == "quasi_identifier" and missing is not None:
            spec |= {"required": False, "missing": missing}
        fields[name] = spec
    return parse_schema(fields, strata, source="columns")


@dataclass(frozen=True)
class Violation:
    """The rows of one column whose values break its field's declaration.

    ``reason`` is the service's dead-letter reason for the same value (``wrong_type``,
    ``not_finite``, ``out_of_bounds``, ``out_of_levels``); ``rows`` are positions in the
    table (0-based); ``detail`` says what the declaration asks, never a value.
    """

    column: str
    reason: str
    rows: np.ndarray
    detail: str


def violations(frame: pd.DataFrame, schema: Schema) -> list[Violation]:
    """Every value of ``frame`` that its field's type, levels or bounds forbid, as the
    service's validation (``streamanon.service.validation``) forbids it in a response.

    A table has no JSON types: a number written as text is a number, an integral float an
    integer, ``true``/``false`` a boolean. A missing value is not checked here (whether it
    may be missing is the field's ``required``). Identifiers and ignored columns, removed
    from a release, are not checked; nor are columns the table does not have.
    """
    import numpy as np
    import pandas as pd

    out: list[Violation] = []

    def add(name: str, reason: str, mask: np.ndarray, detail: str) -> None:
        if mask.any():
            out.append(Violation(name, reason, np.flatnonzero(mask), detail))

    for name, spec in schema.fields.items():
        if spec.role in DROPPED_ROLES or name not in frame.columns:
            continue
        series = frame[name]
        present = series.notna().to_numpy()
        kind = spec.type or ("float" if spec.role in ("quasi_identifier", "weight") else None)
        if kind in ("int", "float"):
            if pd.api.types.is_bool_dtype(series):
                numbers = np.full(len(series), np.nan)
            else:
                numbers = pd.to_numeric(series, errors="coerce").to_numpy(
                    dtype=np.float64, na_value=np.nan)
            typed = present & ~np.isnan(numbers)
            add(name, "wrong_type", present & ~typed,
                "not an integer" if kind == "int" else "not a number")
            finite = typed & np.isfinite(numbers)
            add(name, "not_finite", typed & ~finite, "not a finite number")
            if kind == "int":
                fraction = finite & (numbers != np.round(numbers))
                add(name, "wrong_type", fraction, "not an integer")
                finite &= ~fraction
            outside = np.zeros(len(series), dtype=bool)
            with np.errstate(invalid="ignore"):
                if spec.min is not None:
                    outside |= finite & (numbers < spec.min)
                if spec.max is not None:
                    outside |= finite & (numbers > spec.max)
                if spec.role == "weight":
                    outside |= finite & ~(numbers > 0)
            add(name, "out_of_bounds", outside, spec.bounds_text())
        elif kind == "bool" or (kind in ("category", "ordinal") and spec.levels):
            levels = (False, True) if kind == "bool" else tuple(spec.levels or ())
            wrong = _outside_levels(series, present, set(levels), kind == "bool")
            if kind == "bool":
                add(name, "wrong_type", wrong, "not true or false")
            else:
                add(name, "out_of_levels", wrong, f"not one of its {len(levels)} levels")
    return out


def _outside_levels(series: pd.Series, present: np.ndarray, known: set[Any],
                    boolean: bool) -> np.ndarray:
    """Which present values of ``series`` are not among ``known`` (``boolean``: ``true`` and
    ``false`` as text are booleans); each distinct value is checked once, since a survey
    column has a handful of them (1.4 million answers a second rather than one)."""
    import numpy as np
    import pandas as pd

    def wrong(value: Any) -> bool:
        if boolean and isinstance(value, str):
            value = {"true": True, "false": False}.get(value.strip().lower(), value)
        try:
            return value not in known
        except TypeError:  # unhashable
            return True

    try:
        seen, distinct = pd.factorize(series, use_na_sentinel=True)
    except TypeError:  # an unhashable value: each value on its own
        values = series.astype(object).to_numpy()
        return np.array([bool(p) and wrong(v) for p, v in zip(present, values, strict=True)],
                        dtype=bool)
    wrong_value = np.array([*(wrong(v) for v in distinct), False])  # the last: missing
    return wrong_value[np.where(present & (seen >= 0), seen, len(distinct))]
