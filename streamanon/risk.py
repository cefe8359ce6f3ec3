"""Disclosure risk and utility of a release, measured against its original (specification
section 9, docs/design/specification.md).

:func:`measure` compares an original table with a released one on the schema's
quasi-identifiers (the **key**) and returns :class:`Measures`; :meth:`Measures.to_json` is the
report's ``risk`` and ``utility`` sections. Pure: tables in, numbers out.

Risk
----
Groups are the records sharing a tuple of values on the full key, compared exactly, a missing
value being a value of its own (as :func:`streamanon.metrics.check_table_k_anonymity`). For the
original (``before``) and the release (``after``): the share of **sample uniques** (records
alone in their group), the **records in groups below k**, the **smallest group** and the number
of **groups**.

When the tables are **aligned** (row i of the release is the release of row i of the original;
the release path has this link before the shuffle, and never publishes it):

- **record linkage** (distance-based record linkage, DBRL): an intruder links each original
  record to its nearest released record on the key, in the mixed distance of
  :mod:`streamanon.mixed` (numeric and ordinal values standardised, a nominal mismatch
  ``2 / (1 - sum p^2)``, a missing value at the column mean), with the original's scaling. The
  released records of a group are identical, so the intruder picks one of the records of the
  nearest released tuple (of the nearest tuples, on a tie) at random; the measure is the
  expected share of correctly linked records: the mean over records of
  ``1 / (records at the nearest distance)`` when their own released tuple is among the nearest,
  else 0. Found with a k-d tree on the distinct released tuples.
- **interval disclosure** (Domingo-Ferrer, Mateo-Sanz & Torra 2001): the share of (record,
  numeric key attribute) pairs, over the observed original values, whose original value lies
  within ``p`` % of the attribute's range (over the original's observed values; ``p = 10``)
  of its released value: ``|x - x'| <= p / 100 * (max x - min x)``. A withheld value discloses
  nothing. None without a numeric key attribute.

Both are None when the tables are not aligned.

For each **sensitive** attribute, over the release's groups: **l** (distinct l-diversity: the
smallest number of distinct values in a group) and **t** (t-closeness, Li, Li &
Venkatasubramanian, ICDE 2007: the largest Earth Mover's Distance of a group's distribution to
the whole release's), with the ground distance ``ordered`` (numbers and ordinals, over the
sorted distinct values) or ``equal`` (categories, booleans, text), unless ``kinds`` says; a
missing answer is a value of its own. The codes and the EMD are those of the release gate
(:func:`streamanon.mixed.sensitive_codes`, :mod:`streamanon.privacy`).

Utility
-------
Per quasi-identifier and numeric or ordinal confidential attribute (an ordinal by its level's
rank): the means and population variances before and after (None for a nominal attribute) and,
aligned, the information loss ``il`` and the ``changed_share`` (records whose value changed, a
value withheld or filled counting as changed). ``il`` is, as in
:func:`streamanon.type_loss.loss_by_type`: numeric, SSE / SST over the observed original values
(a withheld value counted as released at the mean; standardising does not change the ratio);
ordinal, the mean rank shift over ``levels - 1``; nominal, the share of values changed (both
over the values observed before and after).

The Pearson correlations of the numeric and ordinal attributes before and after (pairwise
complete), and the **largest change** among the means (in the attribute's standard deviations
before), the variances (relative to the variance before) and the correlations (absolute).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy.spatial import cKDTree

from streamanon.errors import InputError, ParameterError
from streamanon.metrics import _qi_group_keys
from streamanon.mixed import Encoding, embed, encoding_for, fit_embedding, sensitive_codes
from streamanon.schema import Schema
from streamanon.tuples import collapse_codes

#: ``p`` of interval disclosure: the interval is +-p % of the attribute's range.
INTERVAL_PERCENT = 10.0
NUMERIC = ("float", "int")
KINDS = ("ordered", "equal")


@dataclass(frozen=True)
class GroupRisk:
    """The groups of one table on the key."""

    sample_uniques: float
    records_in_groups_below_k: int
    smallest_group: int
    groups: int


@dataclass(frozen=True)
class Sensitive:
    """l-diversity and t-closeness of one sensitive attribute in the release."""

    kind: str
    l: int  # noqa: E741 (the model's name)
    t: float


@dataclass(frozen=True)
class Attribute:
    """One attribute's utility: None where it does not apply."""

    type: str
    il: float | None
    mean_before: float | None
    mean_after: float | None
    var_before: float | None
    var_after: float | None
    changed_share: float | None


@dataclass(frozen=True)
class Measures:
    """What :func:`measure` found; :meth:`to_json` is its report form."""

    n_original: int
    n_release: int
    key: list[str]
    before: GroupRisk
    after: GroupRisk
    record_linkage: float | None
    interval_disclosure: float | None
    sensitive: dict[str, Sensitive]
    attributes: dict[str, Attribute]
    correlation_columns: list[str]
    correlation_before: np.ndarray
    correlation_after: np.ndarray
    largest_change: tuple[str, float]

    def to_json(self) -> dict[str, Any]:
        """Plain types only (a correlation that is not defined is None)."""
        return {
            "n_original": self.n_original,
            "n_release": self.n_release,
            "key": list(self.key),
            "risk": {
                "before": vars(self.before).copy(),
                "after": vars(self.after).copy(),
                "record_linkage": self.record_linkage,
                "interval_disclosure": self.interval_disclosure,
                "sensitive": {name: vars(s).copy() for name, s in self.sensitive.items()},
            },
            "utility": {
                "attributes": {name: vars(a).copy() for name, a in self.attributes.items()},
                "correlation_columns": list(self.correlation_columns),
                "correlation_before": _matrix_json(self.correlation_before),
                "correlation_after": _matrix_json(self.correlation_after),
                "largest_change": {"what": self.largest_change[0],
                                   "value": self.largest_change[1]},
            },
        }


def measure(original: pd.DataFrame, release: pd.DataFrame, schema: Schema, k: int, *,
            aligned: bool, sensitive: Sequence[str] = (),
            kinds: Mapping[str, str] | None = None,
            interval_percent: float = INTERVAL_PERCENT,
            codes: tuple[Encoding, np.ndarray, np.ndarray] | None = None) -> Measures:
    """The disclosure risk and utility of ``release`` against ``original`` (module docstring).

    Parameters
    ----------
    original, release
        The tables; the release has the original's quasi-identifiers (in its values' levels).
    schema
        Roles and types; the quasi-identifiers are the key.
    k
        The k of "records in groups below k".
    aligned
        Row i of ``release`` is the release of row i of ``original``: record linkage, interval
        disclosure, information loss and changed shares are measured; else they are None.
    sensitive
        Columns of the release whose l-diversity and t-closeness are measured.
    kinds
        The EMD ground distance per sensitive column (``ordered`` or ``equal``), overriding
        the type's.
    interval_percent
        ``p`` of interval disclosure.
    codes
        The key's encoding and its codes in ``original`` and in ``release``
        (:meth:`streamanon.mixed.Encoding.codes` of each), when the caller has them (a
        release has: :func:`streamanon.release.release_prepared`): the key columns of the
        tables are then not read, and the groups of equal keys are found on the codes.

    Raises
    ------
    InputError
        An empty table, a key column missing from a table, a value outside its levels,
        aligned tables of different lengths, a sensitive column not in the release.
    ParameterError
        ``k`` below 1, an unknown kind, ``interval_percent`` negative.
    """
    if k < 1:
        raise ParameterError(f"k must be at least 1, got {k}")
    if interval_percent < 0:
        raise ParameterError(f"interval_percent must be >= 0, got {interval_percent}")
    bad = {name: kind for name, kind in (kinds or {}).items() if kind not in KINDS}
    if bad:
        raise ParameterError(f"unknown EMD kind(s) {bad}; use one of {', '.join(KINDS)}")
    if len(original) == 0 or len(release) == 0:
        raise InputError(f"the {'original' if len(original) == 0 else 'released'} table is "
                         "empty; nothing to measure")
    if aligned and len(release) != len(original):
        raise InputError(f"aligned tables need one released row per original row: "
                         f"{len(release)} released, {len(original)} original")
    key = schema.quasi_identifiers
    if codes is None:
        enc = encoding_for(original, schema)
        groups_before = _qi_group_keys(original, key)
        groups_after = _qi_group_keys(release, key)
        C = enc.codes(original)
        R = enc.codes(release)
    else:  # a code stands for one value: equal codes are equal values
        enc, C, R = codes
        groups_before = collapse_codes(C).inverse
        groups_after = collapse_codes(R).inverse
    linkage = interval = None
    if aligned:
        linkage = record_linkage(C, R, groups_after, enc)
        interval = interval_disclosure(C, R, enc, interval_percent)
    names, before, after, types, spans = _utility_values(original, release, schema, C, R, enc)
    attributes = {name: _attribute(before[name], after[name], types[name], aligned,
                                   spans.get(name, 1)) for name in names}
    ordered = [name for name in names if types[name] in (*NUMERIC, "ordinal")]
    corr_before = _correlation(before, ordered)
    corr_after = _correlation(after, ordered)
    return Measures(
        n_original=len(original), n_release=len(release), key=list(key),
        before=_group_risk(groups_before, k), after=_group_risk(groups_after, k),
        record_linkage=linkage, interval_disclosure=interval,
        sensitive=_sensitive(release, schema, groups_after, sensitive, kinds),
        attributes=attributes, correlation_columns=ordered,
        correlation_before=corr_before, correlation_after=corr_after,
        largest_change=_largest_change(attributes, ordered, corr_before, corr_after))


# --- risk ------------------------------------------------------------------------------------


def _group_risk(groups: np.ndarray, k: int) -> GroupRisk:
    if groups.size == 0:
        return GroupRisk(0.0, 0, 0, 0)
    sizes = np.bincount(groups)
    return GroupRisk(sample_uniques=float(sizes[sizes == 1].sum() / groups.size),
                     records_in_groups_below_k=int(sizes[sizes < k].sum()),
                     smallest_group=int(sizes.min()), groups=int(sizes.size))


LINKAGE_SAMPLE = 5_000  # records whose linkage is measured, at most (record_linkage)


def record_linkage(C: np.ndarray, R: np.ndarray, groups: np.ndarray,
                   encoding: Encoding) -> float:
    """The expected share of records that distance-based record linkage links to their own
    released record: original codes ``C``, released codes ``R`` (aligned rows), ``groups``
    the release's group of each row (equal released tuples).

    Over ``LINKAGE_SAMPLE`` records, the share is estimated on a uniform sample of that many
    (fixed seed; standard error at most 0.007): each linkage searches every released tuple,
    and all of a million records take minutes where the sample takes seconds."""
    scaling = fit_embedding(C, encoding)
    sizes = np.bincount(groups)
    _, first = np.unique(groups, return_index=True)
    T = embed(R[first], encoding, scaling)  # one point per distinct released tuple
    if len(C) > LINKAGE_SAMPLE:
        rows = np.sort(np.random.default_rng(0).choice(len(C), LINKAGE_SAMPLE, replace=False))
        C, groups = C[rows], groups[rows]
    Z = embed(C, encoding, scaling)
    tree = cKDTree(T, balanced_tree=False, compact_nodes=False)  # sliding midpoint: faster here
    nearest, _ = tree.query(Z, k=min(2, len(T)), workers=-1)
    nearest = nearest.reshape(len(Z), -1)
    reach = nearest[:, 0] * (1 + 1e-9) + 1e-9  # distances equal up to rounding tie
    own = np.sqrt(np.sum((Z - T[groups]) ** 2, axis=1))
    hit = own <= reach
    tied = hit & (nearest[:, 1] <= reach) if nearest.shape[1] > 1 else np.zeros_like(hit)
    chance = np.where(hit, 1.0 / sizes[groups], 0.0)
    if tied.any():
        rows = np.flatnonzero(tied)
        for i, near in zip(rows, tree.query_ball_point(Z[rows], reach[rows]), strict=True):
            chance[i] = 1.0 / sizes[near].sum()
    return float(chance.mean())


def interval_disclosure(C: np.ndarray, R: np.ndarray, encoding: Encoding,
                        percent: float = INTERVAL_PERCENT) -> float | None:
    """The share of observed (record, numeric key attribute) values within ``percent`` % of
    the attribute's range of their released value; None without a numeric key attribute."""
    inside = observed = 0
    for j, col in enumerate(encoding.columns):
        if col.kind not in NUMERIC:
            continue
        x, r = C[:, j], R[:, j]
        seen = ~np.isnan(x)
        if not seen.any():
            continue
        width = percent / 100 * (np.max(x[seen]) - np.min(x[seen]))
        with np.errstate(invalid="ignore"):
            inside += int(np.sum(seen & (np.abs(x - r) <= width)))
        observed += int(seen.sum())
    return inside / observed if observed else None


def _sensitive(release: pd.DataFrame, schema: Schema, groups: np.ndarray,
               names: Sequence[str], kinds: Mapping[str, str] | None) -> dict[str, Sensitive]:
    if not names:
        return {}
    from streamanon.privacy import cell_distinct, cell_emds

    S, out_kinds = sensitive_codes(release, schema, list(names), dict(kinds or {}))
    return {name: Sensitive(kind=kind, l=int(cell_distinct(groups, S[:, j]).min()),
                            t=float(cell_emds(groups, S[:, j], kind).max()))
            for j, (name, kind) in enumerate(zip(names, out_kinds, strict=True))}


# --- utility ---------------------------------------------------------------------------------


def _utility_values(original: pd.DataFrame, release: pd.DataFrame, schema: Schema,
                    C: np.ndarray, R: np.ndarray, enc: Encoding
                    ) -> tuple[list[str], dict[str, np.ndarray], dict[str, np.ndarray],
                               dict[str, str], dict[str, int]]:
    """The attributes measured, their values as numbers (level codes for levels), their
    types, and each ordinal's levels - 1 (at least 1: the rank shift's scale)."""
    before = {name: C[:, j] for j, name in enumerate(enc.names)}
    after = {name: R[:, j] for j, name in enumerate(enc.names)}
    types = {col.name: col.kind for col in enc.columns}
    spans = {col.name: max(len(col.levels) - 1, 1) for col in enc.columns
             if col.kind == "ordinal"}
    for name in schema.names("confidential"):
        spec = schema.fields[name]
        if name not in original.columns or name not in release.columns:
            continue
        if spec.type == "ordinal" and spec.levels:
            where = {level: float(i) for i, level in enumerate(spec.levels)}
            before[name] = _level_codes(original[name], where)
            after[name] = _level_codes(release[name], where)
            spans[name] = max(len(spec.levels) - 1, 1)
        elif spec.type in NUMERIC or (spec.type is None and _is_number(original[name])):
            before[name] = _numbers(original[name])
            after[name] = _numbers(release[name])
        else:
            continue
        types[name] = spec.type or "float"
    return list(before), before, after, types, spans


def _is_number(series: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)


def _numbers(series: pd.Series) -> np.ndarray:
    return pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def _level_codes(series: pd.Series, where: Mapping[Any, float]) -> np.ndarray:
    return series.astype(object).map(where).to_numpy(dtype=np.float64, na_value=np.nan)


def _attribute(x: np.ndarray, r: np.ndarray, kind: str, aligned: bool, span: int) -> Attribute:
    ordered = kind in (*NUMERIC, "ordinal")
    mean_b, var_b = _moments(x) if ordered else (None, None)
    mean_a, var_a = _moments(r) if ordered else (None, None)
    il = changed = None
    if aligned:
        seen, released = ~np.isnan(x), ~np.isnan(r)
        changed = float(np.mean((seen != released) | (seen & released & (x != r))))
        both = seen & released
        if kind in NUMERIC:
            il = _sse_sst(x[seen], r[seen])
        elif kind == "ordinal":
            il = float(np.mean(np.abs(x[both] - r[both])) / span) if both.any() else None
        else:
            il = float(np.mean(x[both] != r[both])) if both.any() else None
    return Attribute(type=kind, il=il, mean_before=mean_b, mean_after=mean_a,
                     var_before=var_b, var_after=var_a, changed_share=changed)


def _moments(values: np.ndarray) -> tuple[float | None, float | None]:
    seen = values[~np.isnan(values)]
    if seen.size == 0:
        return None, None
    return float(seen.mean()), float(seen.var())


def _sse_sst(x: np.ndarray, r: np.ndarray) -> float | None:
    """SSE / SST of released ``r`` against observed ``x`` (a withheld value at the mean)."""
    if x.size == 0:
        return None
    centre = x.mean()
    sse = float(np.sum((x - np.where(np.isnan(r), centre, r)) ** 2))
    sst = float(np.sum((x - centre) ** 2))
    if sst > 0:
        return sse / sst
    return 0.0 if sse == 0 else None


def _correlation(values: Mapping[str, np.ndarray], names: Sequence[str]) -> np.ndarray:
    if not names:
        return np.zeros((0, 0))
    return pd.DataFrame({name: values[name] for name in names}).corr(method="pearson").to_numpy()


def _largest_change(attributes: Mapping[str, Attribute], names: Sequence[str],
                    before: np.ndarray, after: np.ndarray) -> tuple[str, float]:
    """The largest of: |mean change| / sd before, |variance change| / variance before,
    |correlation change|; ("none", 0.0) when nothing is comparable."""
    found: list[tuple[float, str]] = []
    for name in names:
        a = attributes[name]
        if a.var_before is None or a.var_after is None or not a.var_before > 0:
            continue
        found.append((abs(a.mean_after - a.mean_before) / np.sqrt(a.var_before),
                      f"mean {name}"))
        found.append((abs(a.var_after - a.var_before) / a.var_before, f"variance {name}"))
    for i in range(len(names)):
        for j in range(i + 1, len(names)):
            change = abs(after[i, j] - before[i, j])
            if np.isfinite(change):
                found.append((change, f"correlation {names[i]}~{names[j]}"))
    if not found:
        return "none", 0.0
    value, what = max(found, key=lambda f: f[0])
    return what, float(value)


def _matrix_json(M: np.ndarray) -> list[list[float | None]]:
    return [[float(v) if np.isfinite(v) else None for v in row] for row in M]
