"""An answer outside its survey's declared domain (``[surveys] out_of_domain``): what a
differentially private survey that clamps makes of it (:func:`clamp`), and which dead letters
refuse the release of one that refuses (:func:`refuses_for_domain`).

Clamping is part of validation (:class:`~.validation.Validator` calls :func:`clamp` on each
parsed response before its checks), so that no answer's value decides whether it is stored:
dead-lettering it would change n between two neighbouring surveys. Pure: responses in,
responses out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from streamanon.service.config import SurveyConfig

#: The reasons of an answer outside its declared domain: what an epsilon survey with
#: ``out_of_domain = "refuse"`` notes in the store (``Store.note_refused``) and refuses its
#: release for.
OUT_OF_DOMAIN = ("out_of_bounds", "out_of_levels", "not_finite")


def refuses_for_domain(survey: SurveyConfig, reasons: Sequence[str]) -> bool:
    """Whether dead letters with ``reasons`` refuse ``survey``'s release: a survey with
    ``out_of_domain = "refuse"`` that refused an answer outside its declared domain. Every
    intake notes it in the store (``Store.note_refused``) before its offsets are committed or
    its answer sent, so that the release reads it whatever restarted or which instance took
    the answer."""
    return survey.out_of_domain == "refuse" and any(r in OUT_OF_DOMAIN for r in reasons)


def clamp(domain: list[tuple[str, float, float, Any]], fields: Mapping[str, Any],
          obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with every answer outside its declared ``domain`` (:func:`domains`) put in it:
    a number (an int or a float, infinite included) at its nearest bound, as the field's type
    (an integer beyond 64 bits, which JSON gives as a float, included); any scalar that is
    not one of a level field's levels as missing (None). A number's value of another type (a
    string, a bool) stays as it is, for the checks to name (``wrong_type``: the message's
    shape, not its value). ``obj`` itself is never changed."""
    out = None
    for name, low, high, levels in domain:
        value = obj.get(name)
        if value is None or isinstance(value, (dict, list)):
            continue
        if levels is not None:
            fixed = value if (type(value), value) in levels else None
        elif type(value) in (int, float) and not math.isnan(value):
            fixed = value if low <= value <= high else min(max(value, low), high)
            if fixed is not value:  # the field's own type: an int's bounds are ints
                fixed = int(fixed) if fields[name].type == "int" else float(fixed)
        else:
            continue
        if fixed is not value:
            out = dict(obj) if out is None else out
            out[name] = fixed
    return obj if out is None else out


def domains(fields: dict[str, Any]) -> list[tuple[str, float, float, Any]]:
    """Each field with a declared domain as (name, min, max, levels): a number's bounds (an
    int's as ints, so that a clamped int stays an int) or the set of (type, value) of its
    levels (a bool's two)."""
    out: list[tuple[str, float, float, Any]] = []
    for name, spec in fields.items():
        if spec.role in ("identifier", "ignore"):  # not released: checked as declared
            continue
        if spec.type in ("category", "ordinal", "bool"):
            levels = [False, True] if spec.type == "bool" else spec.levels or []
            out.append((name, 0.0, 0.0, {(type(v), v) for v in levels}))
        elif spec.min is not None and spec.max is not None:
            integer = spec.type == "int"
            out.append((name, math.ceil(spec.min) if integer else spec.min,
                        math.floor(spec.max) if integer else spec.max, None))
    return out
