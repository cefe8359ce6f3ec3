"""An epsilon-differentially private (or rho-zCDP) release through microaggregation.

Two mechanisms, both from the same group's papers, both with cells whose sizes follow from n
and k alone (``n // k`` cells, k records each, the last one also taking the ``n mod k`` left
over), and both drawing their noise exactly, through :mod:`streamanon.dp_noise` (OpenDP's
samplers, from a cryptographically secure generator, never seeded: tests and production draw
the same way). Every guarantee is for bounded differential privacy: the neighbours are two
survey data sets of the same size that differ in one respondent's answers (:data:`NEIGHBOURS`);
n is public, and so is whether someone took part.

**insensitive** (Soria-Comas, Domingo-Ferrer, Sánchez and Martínez, VLDB Journal 23(5), 2014):
the records are put in one total order of the declared domain, fixed before any data is seen:
the Z-order (Morton) curve through it (every attribute scaled to [0, 1] by its declared bounds
or levels and cut into ``2^b`` steps, the steps' bits interleaved: :func:`morton_keys`), ties
broken by the attributes' values in turn; the cells are consecutive runs of that order. The
paper orders by the distance to the domain's lower corner; any order fixed by the domain
alone keeps the argument below, and the curve keeps a cell's records close in every attribute
where the distance gathers records of one radius from all over the domain (on the GSS and CCES
extracts the cells alone lose about half as much: docs/benchmarks/differential-privacy.md).
Changing one record (the neighbouring data sets of bounded differential privacy: n is public)
removes it from one place of the order and inserts its new value at
another; every cell between the two loses one record to one neighbour and takes one from the
other, so each cell differs in at most one record, and no cell changes size. A cell's mean of
an attribute of width ``w`` (max - min) then moves by at most ``w / k``, and at most all
``C = n // k`` cells move: the L1 sensitivity of the attribute's list of cell means is
``C * w / k``, and Laplace noise of scale ``C * w / (k * epsilon_a)`` on each mean makes the
list epsilon_a-differentially private. An ordinal or a category is drawn per cell by the
exponential mechanism over its declared levels (utility: minus the members' rank distances
for an ordinal, which one record moves by at most ``L - 1``, the members' count for a
category, at most 1: integers, :func:`utility`), with ``epsilon_a / C`` per cell, epsilon_a in
all. The released table repeats each cell's noisy tuple once per member, its rows in
:func:`canonical_order` (sorted by the released values): a function of the noisy cell tuples
alone, so the **table is epsilon-differentially private** (epsilon the sum of the attributes'
shares, by sequential composition), and k-anonymous as well. The price: the noise grows with
``C = n / k``; it is smaller than each record's own noise only where k exceeds about sqrt(n),
which is what the paper found. With **one released attribute** the domain's order is that
attribute's own sorted order, so its cells are runs of its sorted values and its cell sums
telescope as in individual ranking below: L1 sensitivity ``w`` (``units`` on the grid), not
``C * w`` (:func:`sum_sensitivity`); a single ordinal or category still draws per cell.

**zCDP** (``rho``, or ``epsilon`` with ``delta``: :func:`budget_of`; Bun and Steinke, TCC
2016): the same cells, each attribute's cell sums with discrete Gaussian noise of sigma
``Delta_2 / sqrt(2 rho_a)``, ``Delta_2`` their L2 sensitivity: ``sqrt(C) * units`` for the
insensitive cells (each of the C sums moves by at most ``units``), ``units`` where they
telescope; rho is shared equally among the m attributes, which is the same as one Gaussian on
the joint vector of L2 sensitivity ``sqrt(C m) * units``. Ordinals and categories keep the
exponential mechanism per cell under bounded-range accounting (Cesar and Rogers 2021: an
epsilon_c draw is ``epsilon_c**2 / 8``-zCDP), C cells composing: ``epsilon_c = sqrt(8 rho_a /
C)``. The release is then (epsilon, delta)-differentially private by OpenDP's conversion
(:mod:`streamanon.dp_zcdp`).

**individual_ranking** (Sánchez, Domingo-Ferrer, Martínez and Soria-Comas, Information Fusion
30, 2016; privlib's ``Differential_privacy``): each attribute is sorted by its own value and
cut into cells of k. Changing one record from value a to value b shifts the cells between them
by one record each, every replaced value by a larger one (or every one by a smaller one): the
changes of the cells' sums add up to at most ``|b - a| <= w``, so the L1 sensitivity of the
attribute's cell means is ``w / k`` whatever n is, and the noise scale is ``w / (k
epsilon_a)``. An ordinal or a category is sorted by its level's index in the declared order, a
number of width ``L - 1``: its cells' mean indices get the same Laplace noise and are rounded
to a level. This changes far fewer values than the exponential mechanism per cell, whose
utilities the same telescoping sum bounds only loosely for a category (by ``L - 1``). Each
attribute's released values, as a multiset, are then epsilon_a-differentially private. **The
table is not**: which values share a row follows the data without noise. With two
attributes, n = 2k, and the k records lowest in one the k lowest in the other, the table never
has more than two distinct rows; move one record to the top of the second attribute and it
has four with a probability above 0 (isotonic pooling or clamping may still merge two noisy
means): an outcome possible for one data set and impossible for its neighbour, so no epsilon
bounds the ratio. The report says so, and never calls such a table differentially private.

**Post-processing** costs no privacy: every noisy mean is clamped to its declared bounds and an
``int`` rounded; in individual ranking the cell means of an attribute are ordered (its cells
are runs of its sorted values), so the noisy ones are projected back onto that order by
isotonic regression (weighted by the cells' sizes), which removes much of the noise; a level's
index is made monotone before it is rounded. An optimal univariate partition (cells of k to
2k - 1 where the data's gaps are) would lose less before the noise, but its sizes follow the data:
released, they would tell it without noise, so both mechanisms keep the fixed sizes.

**The noise is an integer, drawn exactly.** A textbook Laplace draw added to a float mean
leaves low-order bits that tell which mean it was added to (Mironov, CCS 2012). So each
record's value is first put on a grid of ``GRID_STEPS`` steps over its width (a function of the
record alone; a level index is its own grid), the cells' sums of grid steps are integers, and
each sum gets integer noise from the discrete Laplace distribution
(:func:`streamanon.dp_noise.discrete_laplace`) of scale ``C * units / epsilon_a`` (insensitive)
or ``units / epsilon_a`` (individual ranking, or one attribute), ``units`` the grid's steps
over the width: the same sensitivity as above, counted in steps and on sums rather than means.
The released mean is that noisy sum over the cell's size, a function of the integer outputs;
the report gives each attribute's scale as that of a k-record cell's mean, as above. The
exponential mechanism's output is a level, drawn by OpenDP's exact Gumbel noisy max on the
integer utilities.

**The domain** comes only from the schema: a number needs its declared ``min`` and ``max``, a
category its ``levels`` (a bool has two); free text, strings and times cannot go through either
mechanism and are refused. Where a field is not required, being missing is part of its
domain, coded record by record before the mechanism: a number's missing answer one width
(max - min) below its min, so that the cells of the missing sort apart from the answered (in
individual ranking they come first), and a released value below half that width under the min
is released as missing; an ordinal's is a level before the first, a category's a level after
the last. The width the noise is scaled to is then twice the declared one, the price of not
releasing a made-up answer for every missing one. ``scope="quasi_identifiers"`` runs the
mechanism on the
quasi-identifiers only and publishes the confidential answers as they are: privlib's setting,
reported as not differentially private.

Pure: arrays and frames in, a table and a report out; no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import isotonic_regression

from streamanon import dp_noise, dp_zcdp
from streamanon.errors import InputError, ParameterError
from streamanon.schema import DROPPED_ROLES, Schema

MECHANISMS = ("insensitive", "individual_ranking")
#: A number's values are put on a grid of this many steps over its width before the cell sums
#: get their integer noise (a level index is its own grid).
GRID_STEPS = 2 ** 20
#: The largest discrete Laplace scale drawn: its draws stay far inside 64-bit integers.
MAX_NOISE_SCALE = 2.0 ** 52
SCOPES = ("all", "quasi_identifiers")
#: Field types no mechanism here can release.
UNRELEASABLE = ("str", "text", "timestamp")
#: The delta at which a release given by rho alone is also read as (epsilon, delta)-DP.
REPORTED_DELTA = 1e-6
#: The neighbouring relation every guarantee here is stated for (bounded differential
#: privacy): n is public, and so is whether someone took part.
NEIGHBOURS = ("two survey data sets of the same size that differ in one respondent's answers "
              "(bounded differential privacy: the number of respondents is public, and "
              "whether someone took part is not protected)")
#: How the released table's rows are ordered (:func:`canonical_order`).
ROW_ORDER = ("sorted by the released values, column by column, missing values first: a "
             "function of the released values alone")


@dataclass(frozen=True)
class Attribute:
    """One released attribute's declared domain: a ``number`` in [low, high] (``integer``:
    released rounded), or an ``ordinal`` or ``category`` over ``levels``. A field that is not
    required (``missing``) has its missing answers in the domain: a number's are coded
    :attr:`gap` below ``low`` (and released as missing below half of it), an ordinal's are the
    level None before the first, a category's the level None after the last."""

    name: str
    kind: str
    low: float = 0.0
    high: float = 0.0
    levels: tuple[Any, ...] = ()
    integer: bool = False
    missing: bool = False

    @property
    def gap(self) -> float:
        """How far below ``low`` a missing number is coded: max - min (1 for a constant)."""
        return (self.high - self.low) or 1.0

    @property
    def floor(self) -> float:
        """A number's lowest code: ``low``, or a missing answer's code."""
        return self.low - self.gap if self.missing else self.low

    @property
    def width(self) -> float:
        """The codes' range: max - floor, or the number of levels less one (at least 1)."""
        if self.kind == "number":
            return self.high - self.floor
        return float(max(1, len(self.levels) - 1))


@dataclass(frozen=True)
class Budget:
    """A release's (or one attribute's share of its) privacy parameters: pure
    epsilon-differential privacy (``rho`` None), or rho-zCDP, which is (epsilon,
    delta)-differentially private with the ``epsilon`` and ``delta`` given (an attribute's
    share of a zCDP budget has its rho alone)."""

    epsilon: float | None
    rho: float | None = None
    delta: float | None = None

    @property
    def zcdp(self) -> bool:
        return self.rho is not None

    def share(self, attributes: int) -> Budget:
        """Each of ``attributes`` attributes' equal share: epsilon (pure) or rho (zCDP) over
        their number, both adding up again by composition (for rho: Bun and Steinke
        2016)."""
        if self.rho is None:
            assert self.epsilon is not None
            return Budget(self.epsilon / attributes)
        return Budget(None, self.rho / attributes)

    def to_json(self) -> dict[str, float]:
        return {name: value for name, value in (("epsilon", self.epsilon), ("rho", self.rho),
                                                ("delta", self.delta)) if value is not None}


@dataclass
class DPRelease:
    """The released table (rows in :func:`canonical_order`: row i is record ``order[i]``),
    the same rows in the input's order (for measuring the loss beside the original; never
    published) and the report."""

    table: pd.DataFrame
    table_in_input_order: pd.DataFrame
    report: dict[str, Any]
    order: np.ndarray


def released_columns(schema: Schema, scope: str = "all") -> list[str]:
    """The columns the mechanism releases: every column the release keeps, or the
    quasi-identifiers only."""
    if scope not in SCOPES:
        raise ParameterError(f"the scope is one of {', '.join(SCOPES)}, not {scope!r}")
    if scope == "quasi_identifiers":
        return list(schema.quasi_identifiers)
    return [name for name, spec in schema.fields.items() if spec.role not in DROPPED_ROLES]


def attributes_of(schema: Schema, columns: Sequence[str]) -> list[Attribute]:
    """Each column's :class:`Attribute` from its declaration; every column without a declared
    domain is named in one :class:`InputError`."""
    out, problems = [], []
    for name in columns:
        spec = schema.fields[name]
        if spec.type in UNRELEASABLE:
            problems.append(f"{name} is {spec.type}: no mechanism releases it; give it role = "
                            f"\"ignore\" to leave it out")
        elif spec.type == "bool":
            out.append(Attribute(name, "category", levels=(False, True) + (
                () if spec.required else (None,)), missing=not spec.required))
        elif spec.type in ("category", "ordinal"):
            if not spec.levels:
                problems.append(f"{name} declares no levels")
                continue
            levels = tuple(spec.levels)
            if not spec.required:  # missing: before an ordinal's first level, after the last
                levels = (None, *levels) if spec.type == "ordinal" else (*levels, None)
            out.append(Attribute(name, spec.type, levels=levels, missing=not spec.required))
        else:
            absent = [word for word, value in (("min", spec.min), ("max", spec.max))
                      if value is None]
            if absent:
                problems.append(f"{name} declares no {' or '.join(absent)}")
                continue
            out.append(Attribute(name, "number", low=float(spec.min), high=float(spec.max),
                                 integer=spec.type == "int", missing=not spec.required))
    if problems:
        raise InputError("an epsilon-differentially private release takes every attribute's "
                         "domain from the schema, never from the data (whose extremes would "
                         "tell about the records that reach them): " + "; ".join(problems))
    return out


def encode(frame: pd.DataFrame, attributes: Sequence[Attribute]) -> np.ndarray:
    """The records as an n x m float array: numbers as they are (clipped to their bounds, a
    missing one at its :attr:`Attribute.floor`), ordinals and categories as the index of
    their level (a missing one the level None). A missing answer where the field is required
    is an :class:`InputError`."""
    out = np.empty((len(frame), len(attributes)))
    for j, a in enumerate(attributes):
        column = frame[a.name]
        if a.kind == "number":
            values = pd.to_numeric(column, errors="coerce").to_numpy(dtype=float, copy=True)
            absent = np.isnan(values)
            if absent.any() and not a.missing:
                raise InputError(f"{a.name}: {int(absent.sum())} missing answer(s) where the "
                                 "field is required")
            out[:, j] = np.where(absent, a.floor, np.clip(values, a.low, a.high))
        else:
            out[:, j] = _level_codes(column, a)
    return out


def _level_codes(column: pd.Series, a: Attribute) -> np.ndarray:
    """Each value's level index (as it is, else as its text: a CSV's ``1`` for the level
    1), the level None's for a missing one; -1 where there is none."""
    exact = {level: i for i, level in enumerate(a.levels) if level is not None}
    spelled = {str(level): i for level, i in exact.items()}
    values = pd.Series(column.to_numpy(dtype=object))
    missing = values.isna().to_numpy()
    found = values.map(exact)
    unmatched = (found.isna().to_numpy() & ~missing)
    if unmatched.any():
        found[unmatched] = values[unmatched].astype(str).map(spelled)
    codes = found.to_numpy(dtype=float, na_value=-1.0, copy=True)
    if missing.any():
        codes[missing] = a.levels.index(None) if None in a.levels else -1
    unknown = int((codes < 0).sum())
    if unknown:
        raise InputError(f"{a.name}: {unknown} value(s) are not among its declared levels "
                         "(or missing where the field is required)")
    return codes


def _cells(order: np.ndarray, k: int) -> list[np.ndarray]:
    """Consecutive runs of ``order``: ``n // k`` cells of k, the last one taking the rest."""
    count = len(order) // k
    return [order[j * k:(j + 1) * k] if j < count - 1 else order[j * k:]
            for j in range(count)]


def insensitive_cells(codes: np.ndarray, attributes: Sequence[Attribute],
                      k: int) -> list[np.ndarray]:
    """The insensitive mechanism's cells (row indices): runs of k in the domain's fixed order,
    the Z-order curve through it (:func:`morton_keys`), ties by the attributes' values in
    turn. With one attribute that is its own sorted order."""
    scaled = np.column_stack([
        ((codes[:, j] - a.floor) / a.width if a.width > 0 else np.zeros(len(codes)))
        if a.kind == "number" else codes[:, j] / a.width for j, a in enumerate(attributes)])
    # lexsort's last key is its first: the curve, then the attributes in turn
    keys = [scaled[:, j] for j in reversed(range(scaled.shape[1]))]
    order = np.lexsort((*keys, morton_keys(scaled)))
    return _cells(order, k)


#: The most bits of one attribute in a Z-order key (:func:`morton_keys`).
MORTON_BITS = 20


def morton_keys(scaled: np.ndarray) -> np.ndarray:
    """Each row's place on the Z-order (Morton) curve through the unit cube: every coordinate
    of ``scaled`` (n x m, in [0, 1]) cut into ``2^b`` steps, ``b = 63 // m`` (at most
    :data:`MORTON_BITS`, at least 1), and the steps' bits interleaved from the most
    significant, the first attribute's first, into one unsigned 64-bit key (past 63
    attributes, the first 63). A function of each record's values and the declared domain
    alone; monotone in each coordinate, so with one attribute it is that attribute's order."""
    n, m = scaled.shape
    used = min(m, 63)
    bits = max(1, min(MORTON_BITS, 63 // used))
    steps = np.minimum(np.floor(scaled[:, :used] * (1 << bits)), (1 << bits) - 1)
    steps = steps.astype(np.uint64)
    key = np.zeros(n, dtype=np.uint64)
    one = np.uint64(1)
    for bit in range(bits - 1, -1, -1):
        shift = np.uint64(bit)
        for j in range(used):
            key = (key << one) | ((steps[:, j] >> shift) & one)
    return key


def ranked_cells(values: np.ndarray, k: int) -> list[np.ndarray]:
    """Individual ranking's cells of one attribute: runs of k of its sorted values."""
    return _cells(np.argsort(values, kind="stable"), k)


def _labels(cells: list[np.ndarray], n: int) -> np.ndarray:
    labels = np.empty(n, dtype=np.int64)
    for j, rows in enumerate(cells):
        labels[rows] = j
    return labels


def _level_counts(codes: np.ndarray, labels: np.ndarray, cells: int, levels: int) -> np.ndarray:
    counts = np.zeros((cells, levels), dtype=np.int64)
    np.add.at(counts, (labels, codes.astype(np.int64)), 1)
    return counts


def utility(a: Attribute, counts: np.ndarray) -> np.ndarray:
    """Each cell's integer utility of each level (cells x levels, from the members' level
    ``counts``): the members' count of it (a category), or minus the sum of their rank
    distances to it (an ordinal). One member changed moves a category's utilities by at most
    1 and an ordinal's by at most ``L - 1``: :func:`utility_sensitivity`."""
    if a.kind == "category":
        return counts
    ranks = np.arange(len(a.levels))
    return -(counts @ np.abs(ranks[:, None] - ranks[None, :]))


def utility_sensitivity(a: Attribute) -> int:
    """How far one cell member changed moves a level's :func:`utility`: 1 or ``L - 1``."""
    return 1 if a.kind == "category" else int(a.width)


def grid_of(a: Attribute) -> tuple[int, float, float]:
    """The integer grid a number's (or, in individual ranking, a level index's) cell sums are
    counted on: its ``units`` (steps over the width), the step and the origin. A record's
    grid value is ``rint((code - origin) / step)``, between 0 and ``units``."""
    units = GRID_STEPS if a.kind == "number" else int(a.width)
    step = a.width / units if a.width > 0 else 1.0
    origin = a.floor if a.kind == "number" else 0.0
    return units, step, origin


def cell_sums(a: Attribute, values: np.ndarray, cells: list[np.ndarray]) -> np.ndarray:
    """The cells' sums of the records' grid values (:func:`grid_of`): the integers the noise
    is added to."""
    _, step, origin = grid_of(a)
    labels = _labels(cells, len(values))
    grid = np.rint((values - origin) / step)
    return np.rint(np.bincount(labels, weights=grid, minlength=len(cells))).astype(np.int64)


def sum_sensitivity(cells: int, units: int, telescoped: bool) -> tuple[int, float]:
    """The L1 and L2 sensitivities of an attribute's vector of cell sums (grid units) between
    two data sets of the same size that differ in one record. ``telescoped``: the cells are
    runs of that attribute's own sorted values (individual ranking, or the insensitive
    mechanism releasing one attribute, whose domain order is then that attribute's order);
    the record's change from a to b shifts the cells between by one record each, every
    replaced value by a larger one (or every one by a smaller), so the changes telescope to
    at most ``|b - a| <= units`` in all: L1 and L2 ``units``. Otherwise (the insensitive cells
    of several attributes) each of the C cells differs in at most one record, whose grid value
    moves by at most ``units``: L1 ``C * units``, L2 ``sqrt(C) * units``."""
    if telescoped:
        return units, float(units)
    return cells * units, float(np.sqrt(cells)) * units


def _release_attribute(a: Attribute, values: np.ndarray, cells: list[np.ndarray],
                       budget: Budget, ranked: bool,
                       telescoped: bool) -> tuple[np.ndarray, dict[str, Any]]:
    """One attribute's released codes (per record) and its report: noisy cell means (numbers;
    in individual ranking also a level's index, a number of width ``L - 1``), or levels drawn
    per cell by the exponential mechanism (the insensitive cells' ordinals and categories).
    ``budget``: this attribute's share."""
    n, count = len(values), len(cells)
    labels = _labels(cells, n)
    sizes = np.bincount(labels, minlength=count).astype(float)
    k = int(sizes.min())
    info: dict[str, Any] = {"kind": a.kind, **budget.to_json()}
    if a.kind == "number" or ranked:
        # integer sums on a grid of ``units`` steps over the width, noised where no float
        # bit can leak (Mironov 2012), then read back as means
        units, step, origin = grid_of(a)
        sums = cell_sums(a, values, cells)
        l1, l2 = sum_sensitivity(count, units, telescoped)
        if budget.rho is None:
            scale = l1 / budget.epsilon
            noisy_sums = dp_noise.discrete_laplace(sums, scale)
            info.update(noise="discrete laplace on cell sums", norm="l1",
                        sensitivity=l1 * step / k)
        else:
            scale = l2 / np.sqrt(2.0 * budget.rho)
            noisy_sums = dp_noise.discrete_gaussian(sums, scale)
            info.update(noise="discrete gaussian on cell sums", norm="l2",
                        sensitivity=l2 * step / k, sigma=scale * step / k)
        noisy = origin + step * noisy_sums / sizes
        if ranked:  # the cells are runs of sorted values: their means are ordered
            noisy = isotonic_regression(noisy, weights=sizes).x
        low, high = (a.floor, a.high) if a.kind == "number" else (0.0, len(a.levels) - 1.0)
        noisy = np.clip(noisy, low, high)
        if a.kind != "number":
            noisy = np.rint(noisy)
            info["levels"] = len(a.levels)
        info.update(grid_step=step, telescoped=telescoped, scale=scale * step / k)
    else:
        # one record moves one member of each of at most the C cells: the C draws compose
        # (pure: epsilon_a / C each; zCDP: C draws of epsilon_c**2 / 8 each add up to rho_a)
        per_cell = (budget.epsilon / count if budget.rho is None
                    else float(np.sqrt(8.0 * budget.rho / count)))
        scores = utility(a, _level_counts(values, labels, count, len(a.levels)))
        noisy = dp_noise.exponential_mechanism(scores, per_cell,
                                               utility_sensitivity(a)).astype(float)
        info.update(noise="exponential", epsilon_per_cell=per_cell, levels=len(a.levels))
    return noisy[labels], info


def decode(codes: np.ndarray, a: Attribute) -> pd.Series:
    """Released codes back to the attribute's values: a number below half its gap under
    ``low`` is missing, the others clipped to the bounds (an ``int`` rounded); a level index
    is its level (None: missing)."""
    if a.kind == "number":
        absent = codes < a.low - a.gap / 2 if a.missing else np.zeros(len(codes), bool)
        values = np.clip(codes, a.low, a.high)
        if a.integer:
            values = np.rint(values)
        values[absent] = np.nan
        if a.integer:
            return pd.Series(pd.array(values, dtype="Int64") if a.missing
                             else values.astype(np.int64), name=a.name)
        return pd.Series(values, name=a.name)
    levels = np.array(a.levels, dtype=object)
    values = levels[codes.astype(np.int64)]
    if tuple(map(type, a.levels[:2])) == (bool, bool):  # a bool's; not levels 0 and 1
        return pd.Series(pd.array(values, dtype="boolean") if a.missing
                         else values.astype(bool), name=a.name)
    return pd.Series(values, name=a.name, dtype=object)


def check(n: int, k: int, epsilon: float | None, mechanism: str, attributes: int = 1,
          rho: float | None = None) -> None:
    """Refuse what no release can be drawn with: an unknown mechanism, k outside 1..n, an
    epsilon (pure) or rho (zCDP) that is not a finite positive number, or one so small that
    an attribute's noise (``n / k`` cells of ``GRID_STEPS`` steps over its share) would
    overflow its integers."""
    if mechanism not in MECHANISMS:
        raise ParameterError(f"the mechanism is one of {', '.join(MECHANISMS)}, not "
                             f"{mechanism!r}")
    if rho is None and not (epsilon is not None and epsilon > 0 and np.isfinite(epsilon)):
        raise ParameterError(f"epsilon must be a finite positive number, not {epsilon!r}")
    if rho is not None:
        dp_zcdp.check_rho(rho)
    if not 1 <= k <= n:
        raise ParameterError(f"k = {k} needs 1 <= k <= n = {n} records")
    if rho is None:
        scale, what = (n // k) * GRID_STEPS / (epsilon / attributes), f"epsilon = {epsilon:g}"
    else:
        scale = np.sqrt(n // k) * GRID_STEPS / np.sqrt(2 * rho / attributes)
        what = f"rho = {rho:g}"
    if not scale <= MAX_NOISE_SCALE:
        raise ParameterError(f"{what} over {attributes} attribute(s) is too small for a "
                             f"release of {n} records in cells of {k}: its noise would drown "
                             "every value (and overflow)")


def budget_of(epsilon: float | None = None, delta: float | None = None,
              rho: float | None = None) -> Budget:
    """A release's privacy parameters from what its caller gives: ``epsilon`` alone, pure
    epsilon-differential privacy; ``epsilon`` and ``delta``, rho-zCDP with the largest rho
    that is (epsilon, delta)-differentially private (:func:`streamanon.dp_zcdp.rho_for`);
    ``rho``, rho-zCDP, reported as (epsilon, delta)-differential privacy at ``delta``
    (default :data:`REPORTED_DELTA`). ``rho`` and ``epsilon`` together are refused."""
    if rho is not None and epsilon is not None:
        raise ParameterError("give epsilon (with delta for zCDP calibrated to (epsilon, "
                             "delta)) or rho, not both")
    if rho is not None:
        dp_zcdp.check_rho(rho)
        at = REPORTED_DELTA if delta is None else delta
        return Budget(dp_zcdp.epsilon_of(rho, at), rho, at)
    if epsilon is None:
        raise ParameterError("a differentially private release needs epsilon (pure, or with "
                             "delta for zCDP) or rho (zCDP)")
    if not (epsilon > 0 and np.isfinite(epsilon)):
        raise ParameterError(f"epsilon must be a finite positive number, not {epsilon!r}")
    if delta is None:
        return Budget(float(epsilon))
    return Budget(float(epsilon), dp_zcdp.rho_for(epsilon, delta), float(delta))


def canonical_order(table: pd.DataFrame) -> np.ndarray:
    """The published table's row order: the rows sorted by their released values, column by
    column in the table's order, missing values first in every column (a stable sort: equal
    rows, which nobody can tell apart, keep the input's order). A function of the released
    values alone: unlike a shuffle it needs no randomness, and it tells nothing the values do
    not. Returns ``order``: row i of the sorted table is row ``order[i]`` of ``table``."""
    keys = [_sort_key(table[name]) for name in reversed(table.columns)]
    return np.lexsort(keys) if keys else np.arange(len(table))


def _sort_key(column: pd.Series) -> np.ndarray:
    """Each value's rank among the column's distinct values, -1 for a missing one."""
    try:
        codes, _ = pd.factorize(column, sort=True)
    except TypeError:  # values of several types (published as they are): by their text
        codes, _ = pd.factorize(column.astype(str).where(column.notna()), sort=True)
    return codes


def release(frame: pd.DataFrame, schema: Schema, k: int, epsilon: float | None = None,
            mechanism: str = "insensitive", scope: str = "all", *,
            delta: float | None = None, rho: float | None = None) -> DPRelease:
    """The release of ``frame`` (columns as ``schema`` declares them; identifiers and ignored
    columns dropped) through ``mechanism``. The budget (:func:`budget_of`): ``epsilon``
    alone for pure epsilon-differential privacy, ``epsilon`` and ``delta`` for zCDP
    calibrated to (epsilon, delta), or ``rho`` for rho-zCDP; shared equally among the
    released attributes. The noise is drawn by :mod:`streamanon.dp_noise`, never seeded."""
    budget = budget_of(epsilon, delta, rho)
    check(len(frame), k, budget.epsilon, mechanism, rho=budget.rho)
    columns = released_columns(schema, scope)
    if not columns:
        raise InputError("nothing to release: the schema declares no attribute in scope")
    attributes = attributes_of(schema, columns)
    check(len(frame), k, budget.epsilon, mechanism, len(attributes), rho=budget.rho)
    codes = encode(frame, attributes)
    share = budget.share(len(attributes))
    ranked = mechanism == "individual_ranking"
    # one attribute's insensitive cells are runs of its own sorted values: its sums telescope
    telescoped = ranked or len(attributes) == 1
    cells = None if ranked else insensitive_cells(codes, attributes, k)
    kept = [c for c in frame.columns if c in schema.fields
            and schema.fields[c].role not in DROPPED_ROLES]
    out = frame[kept].reset_index(drop=True).copy()
    attrs: dict[str, Any] = {}
    for j, a in enumerate(attributes):
        mine = ranked_cells(codes[:, j], k) if ranked else cells
        released, attrs[a.name] = _release_attribute(a, codes[:, j], mine, share, ranked,
                                                     telescoped)
        out[a.name] = decode(released, a).array  # nullable Int64 and boolean kept
    order = canonical_order(out)
    table = out.iloc[order].reset_index(drop=True)
    private = scope == "all" and not ranked
    key = [name for name in schema.quasi_identifiers if name in out.columns]
    smallest = int(out.groupby(key, dropna=False).size().min()) if key else len(out)
    report = {**budget.to_json(), "privacy": "zcdp" if budget.zcdp else "pure",
              "k": k, "mechanism": mechanism, "scope": scope,
              "differentially_private": private, "neighbours": NEIGHBOURS,
              "guarantee": guarantee(budget.epsilon, mechanism, scope, budget.rho,
                                     budget.delta),
              "covers": "the released table; this report's information_loss is measured on "
                        "the raw answers, for the data holder, not for publication",
              "row_order": ROW_ORDER,
              # measured on the released keys: the insensitive cells share one noisy tuple
              "k_anonymous": smallest >= k, "smallest_group": smallest,
              "cells": len(cells) if cells is not None else len(frame) // k,
              "attributes": attrs,
              "warnings": drowned(attributes, attrs, k),
              "information_loss": information_loss(codes, encode(out, attributes),
                                                   attributes)}
    return DPRelease(table, out, report, order)


def release_as(frame: pd.DataFrame, schema: Schema, report: dict[str, Any]) -> DPRelease:
    """A release of ``frame`` drawn as the one ``report`` describes (its k, mechanism, scope
    and budget: epsilon, or rho for zCDP), with fresh noise: the held-out attacks' second
    draw."""
    zcdp = report.get("privacy") == "zcdp"
    return release(frame, schema, report["k"], None if zcdp else report["epsilon"],
                   report["mechanism"], report["scope"],
                   rho=report["rho"] if zcdp else None,
                   delta=report["delta"] if zcdp else None)


def drowned(attributes: Sequence[Attribute], noise: dict[str, dict[str, Any]],
            k: int) -> list[str]:
    """The attributes whose noise drowns them, in words: a mean's Laplace scale as wide as the
    attribute's whole domain, or an exponential mechanism that draws a cell's own level less
    than twice as often as any other. From the settings alone (no data), so a warning tells
    nothing about the answers."""
    out = []
    for a in attributes:
        info = noise[a.name]
        if info["noise"] == "exponential":
            if info["epsilon_per_cell"] * k / 2 < np.log(2):
                out.append(f"{a.name}: with epsilon {info['epsilon_per_cell']:.3g} per cell, a "
                           "cell's own level is drawn less than twice as often as any other")
        elif info["scale"] >= a.width:
            out.append(f"{a.name}: the noise on a cell's mean (Laplace scale "
                       f"{info['scale']:.3g}) is as wide as its whole domain ({a.width:.3g}): "
                       "its released values are mostly noise")
    if out:
        out.append("larger cells (k), fewer released columns or a larger epsilon lose less")
    return out


def engine_name(mechanism: str) -> str:
    """How reports, pages and the manifest name a release drawn by ``mechanism``."""
    return f"dp_{mechanism}"


def guarantee(epsilon: float, mechanism: str, scope: str, rho: float | None = None,
              delta: float | None = None) -> str:
    """What the release guarantees, in one sentence for its report, naming the neighbouring
    relation (:data:`NEIGHBOURS`). ``rho`` (and the ``delta`` at which ``epsilon`` was read):
    a zCDP release."""
    budget = (f"epsilon = {epsilon:g}" if rho is None else
              f"rho = {rho:.4g} (zero-concentrated), so epsilon = {epsilon:.4g} at delta = "
              f"{delta:g}")
    if scope == "quasi_identifiers":
        return (f"not differentially private: the quasi-identifiers went through "
                f"{mechanism.replace('_', ' ')} with {budget}, and the confidential answers "
                f"are published as they are")
    if mechanism == "individual_ranking":
        return (f"not differentially private as a table: each attribute's released values "
                f"are differentially private ({budget} over all of them) for {NEIGHBOURS}, "
                f"but which values share a row follows the data without noise")
    if rho is None:
        return (f"epsilon-differentially private with epsilon = {epsilon:g} for {NEIGHBOURS}:"
                f" changing one respondent's answers changes the probability of any release "
                f"by a factor of at most e^{epsilon:g}; and k-anonymous")
    return (f"rho-zero-concentrated differentially private with rho = {rho:.4g} (Bun and "
            f"Steinke 2016), hence (epsilon, delta)-differentially private with epsilon = "
            f"{epsilon:.4g} and delta = {delta:g}, for {NEIGHBOURS}: changing one "
            f"respondent's answers changes the probability of any set of releases by a "
            f"factor of at most e^{epsilon:.4g}, plus {delta:g}; and k-anonymous")


def information_loss(original: np.ndarray, released: np.ndarray,
                     attributes: Sequence[Attribute]) -> dict[str, float]:
    """The loss the release causes, from coded arrays: ``il`` (percent) is the sum of squared
    changes over the total sum of squares of the numbers and ordinal ranks, each column scaled
    by its standard deviation (the IL of the k-anonymous releases), and ``categories_changed``
    (percent) the share of category values released as another level."""
    ordered = [j for j, a in enumerate(attributes) if a.kind != "category"]
    nominal = [j for j, a in enumerate(attributes) if a.kind == "category"]
    out: dict[str, float] = {}
    if ordered:
        x, y = original[:, ordered], released[:, ordered]
        sd = x.std(axis=0)
        sd[sd == 0] = 1.0
        sst = (((x - x.mean(axis=0)) / sd) ** 2).sum()
        out["il"] = float(100 * (((x - y) / sd) ** 2).sum() / sst) if sst > 0 else 0.0
    if nominal:
        out["categories_changed"] = float(
            100 * (original[:, nominal] != released[:, nominal]).mean())
    return out
