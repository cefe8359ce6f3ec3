"""A survey's schema compiled into a msgspec type: a response parsed and checked in one C call.

:func:`compiled_schema` is the fast path of :class:`~.validation.Validator`; the validator's
per-field checks stay the reference, and name the reason for anything the compiled type
refuses. Pure: the survey's configuration in, a type out.
"""

from __future__ import annotations

import math
import sys
from typing import Annotated, Any, Literal

import msgspec

from streamanon.service.config import SurveyConfig

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_INT64 = msgspec.Meta(ge=_INT64_MIN, le=_INT64_MAX)


def _int_type(lo: float | None, hi: float | None, positive: bool = False) -> Any:
    """An int within int64, ``lo``/``hi`` and (``positive``) > 0, as a msgspec constraint;
    None where a bound is not exactly an int comparison on doubles (beyond 2**53)."""
    bounds = [b for b in (lo, hi) if b is not None]
    if any(abs(b) >= 2.0**53 for b in bounds):
        return None
    low = max(_INT64_MIN, math.ceil(lo) if lo is not None else _INT64_MIN, 1 if positive
              else _INT64_MIN)
    high = min(_INT64_MAX, math.floor(hi) if hi is not None else _INT64_MAX)
    return Annotated[int, msgspec.Meta(ge=low, le=high)]


def _float_type(lo: float | None, hi: float | None, magnitude: float | None = None,
                positive: bool = False) -> Any:
    """A finite float within ``lo``/``hi`` (and +-``magnitude``, and > 0 if ``positive``)."""
    low = max(-(magnitude or sys.float_info.max), -math.inf if lo is None else lo)
    high = min(magnitude or sys.float_info.max, math.inf if hi is None else hi)
    if positive and low <= 0:
        return Annotated[float, msgspec.Meta(gt=0.0, le=high)]
    return Annotated[float, msgspec.Meta(ge=low, le=high)]


def compiled_schema(survey: SurveyConfig, qi_max_magnitude: float) -> type | None:
    """A msgspec Struct type that accepts a subset of what the validator's per-field checks
    accept, with the same values: every field of the schema by its JSON name, no other, its
    type, bounds and finiteness (a quasi-identifier within +-``qi_max_magnitude``) checked
    while the JSON is parsed. Its attributes are ``f0``,
    ``f1``... in schema order. Integers are limited to 64 bits (orjson reads larger ones as
    floats, so a response with one goes the per-field way) and no value may be NaN or
    infinite. None for a schema with a field it does not express (float or bool levels, a
    bound beyond 2**53 on an integer): such a survey is validated field by field.

    What it rejects is not necessarily invalid: the per-field checks decide and name the
    reason."""
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for j, spec in enumerate(survey.fields.values()):
        kind = spec.type or ("float" if spec.role in ("quasi_identifier", "weight") else None)
        lo, hi = spec.min, spec.max
        kind_type: Any
        if spec.role == "identifier":
            text = Annotated[str, msgspec.Meta(min_length=1)]
            number = Annotated[int, _INT64]
            kind_type = {None: text | number, "str": text, "int": number}.get(spec.type)
            if kind_type is None:
                return None
        elif kind == "int":
            kind_type = _int_type(lo, hi, spec.role == "weight")
        elif kind == "float":
            kind_type = _float_type(lo, hi, qi_max_magnitude if spec.role == "quasi_identifier"
                                    else None, spec.role == "weight")
            if spec.role != "quasi_identifier":
                # an int answer stays an int in the stored JSON (a quasi-identifier becomes a
                # double either way)
                as_int = _int_type(lo, hi, spec.role == "weight")
                kind_type = None if as_int is None else kind_type | as_int
        elif kind in ("str", "timestamp", "text"):
            kind_type = str
        elif kind == "bool":
            kind_type = bool
        elif kind in ("category", "ordinal"):
            levels = spec.levels or []
            if not levels or any(type(v) not in (str, int) for v in levels) or any(
                    type(v) is int and not _INT64_MIN <= v <= _INT64_MAX for v in levels):
                return None
            kind_type = Literal[tuple(levels)]  # type: ignore[valid-type]
        elif kind is None:
            kind_type = str | Annotated[int, _INT64] | _float_type(None, None) | bool
        else:
            return None
        if kind_type is None:
            return None
        if spec.required:
            fields.append((f"f{j}", kind_type))
        else:
            fields.append((f"f{j}", kind_type | None, None))
    return msgspec.defstruct(
        "Response", fields, rename={f"f{j}": name for j, name in enumerate(survey.fields)},
        forbid_unknown_fields=True, kw_only=True, gc=False)
