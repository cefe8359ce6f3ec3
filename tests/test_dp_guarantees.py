"""What the epsilon-differentially private release (streamanon.dp) promises, measured on what it
draws: the Laplace spread of the cell means, the exponential mechanism's odds, the cells of
neighbouring data sets, and the privacy loss between two neighbours.

Every release here is drawn unseeded, as a real one is (the noise cannot be replayed), so each
check is statistical. Each states its false-failure probability beside the bound; all are
below 1e-6. Each also states what a broken mechanism does to it: noise C = n // k times too
small, or a cell's level drawn with epsilon_a instead of epsilon_a / C (a table C times less
private than its report says), fails with a probability indistinguishable from 1.
"""

from __future__ import annotations

from collections import Counter
from datetime import date

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from streamanon import dp
from streamanon.errors import InputError, ParameterError
from streamanon.schema import parse_schema

#: Each two-sided statistical check fails a correct mechanism with probability at most
#: 2 * TAIL (one TAIL per side).
TAIL = 1e-7


# -- the Laplace noise on a cell's mean --------------------------------------------------------

NUMBERS = parse_schema({
    "x": {"role": "quasi_identifier", "type": "float", "min": -1024, "max": 1024},
    # not required: missing answers are in the domain, coded one width below min, so the
    # noise is scaled to twice the declared width
    "y": {"role": "confidential", "type": "float", "min": -1024, "max": 1024,
          "required": False},
})


def cells_of_constant_tuples(cells: int, k: int) -> pd.DataFrame:
    """``cells`` groups of k identical records, integer tuples in [-512, 512]: on the grid,
    so every cell's true mean is its tuple exactly (the insensitive order keeps identical
    records together, and each group fills one cell)."""
    rng = np.random.default_rng(cells * 1000 + k)  # the data only; the releases are unseeded
    x = rng.integers(-512, 513, cells).astype(float)
    y = rng.integers(-512, 513, cells).astype(float)
    return pd.DataFrame({"x": np.repeat(x, k), "y": np.repeat(y, k)})


def deviations_per_cell(frame: pd.DataFrame, schema, k: int, epsilon: float | None,
                        releases: int, rho: float | None = None
                        ) -> tuple[dict[str, np.ndarray], dict]:
    """Each attribute's released-minus-true cell means, one per cell and release (a cell's rows
    share one noisy tuple), and the last release's report; ``rho``: a zCDP release."""
    attrs = dp.attributes_of(schema, dp.released_columns(schema, "all"))
    cells = dp.insensitive_cells(dp.encode(frame, attrs), attrs, k)
    first = np.array([rows[0] for rows in cells])
    out: dict[str, list[np.ndarray]] = {a.name: [] for a in attrs}
    for _ in range(releases):
        drawn = dp.release(frame, schema, k=k, epsilon=epsilon, rho=rho)
        released = drawn.table_in_input_order
        for a in attrs:
            values = released[a.name].to_numpy(dtype=float)
            for rows in cells:  # one noisy value per cell, repeated for its members
                assert (values[rows] == values[rows[0]]).all()
            true = np.array([frame[a.name].to_numpy(dtype=float)[rows].mean() for rows in cells])
            out[a.name].append(values[first] - true)
    return {name: np.concatenate(d) for name, d in out.items()}, drawn.report


def assert_laplace_of_scale(deviations: np.ndarray, scale: float) -> None:
    """The deviations are Laplace(0, scale): for N of them, sum |d| / scale is Gamma(N, 1),
    and the bounds below are its TAIL and 1 - TAIL quantiles (false failure 2e-7; the
    discrete Laplace of the grid differs from the continuous one by a relative 1e-9 at the
    scales here, thousands of grid steps). With N >= 2000 the band is within 12% of 1: noise
    1.5 times too small (ratio 0.67) fails with probability below 1e-100. A Kolmogorov-Smirnov
    test against Laplace(0, scale) adds the shape and the centre (p below TAIL with
    probability TAIL under the null)."""
    n = len(deviations)
    ratio = np.abs(deviations).sum() / scale
    low, high = stats.gamma.ppf(TAIL, n), stats.gamma.isf(TAIL, n)
    assert low <= ratio <= high, (
        f"mean |deviation| is {ratio / n:.3f} times the scale {scale:g} epsilon requires "
        f"(a correct mechanism lies in [{low / n:.3f}, {high / n:.3f}])")
    assert stats.kstest(deviations / scale, stats.laplace().cdf).pvalue > TAIL


@pytest.mark.parametrize("cells, k, epsilon, releases", [
    (1000, 10, 1e5, 1),  # C = 1000: the scales are 8.2 (x) and 16.4 (y)
    (100, 50, 500.0, 10),  # C = 100: 16.4 and 32.8
])
def test_cell_means_get_laplace_noise_of_scale_c_w_over_k_epsilon_a(cells, k, epsilon,
                                                                     releases):
    """Every cell's mean gets Laplace noise of scale C * w / (k * epsilon_a) (the module's
    docstring: one record moves each of the C cells' means by w / k), epsilon_a = epsilon / 2
    for two attributes, w = 2048 for x and twice that for y (missing answers in its domain).
    The true means lie in [-512, 512] and the scales below 33, so a draw reaches the clamps at
    +-1024 (or y's missing code) with probability below exp(-15) per cell."""
    frame = cells_of_constant_tuples(cells, k)
    deviations, report = deviations_per_cell(frame, NUMBERS, k, epsilon, releases)
    share = epsilon / 2
    for name, width in (("x", 2048.0), ("y", 4096.0)):
        assert len(deviations[name]) == cells * releases >= 1000
        want = cells * width / (k * share)
        assert want < 33
        assert_laplace_of_scale(deviations[name], want)
        # the report states the scale the noise was drawn with (checked above against the
        # draws themselves, not against the variable the code drew from)
        assert report["attributes"][name]["scale"] == pytest.approx(want)
        assert report["attributes"][name]["sensitivity"] == pytest.approx(cells * width / k)
        assert report["attributes"][name]["epsilon"] == pytest.approx(share)
    assert report["epsilon"] == epsilon and report["cells"] == cells
    assert report["differentially_private"] is True


def test_zcdp_cell_means_get_gaussian_noise_of_sigma_sqrt_c_w_over_k_sqrt_2_rho_a():
    """Under rho-zCDP every cell's mean gets (discrete) Gaussian noise of standard deviation
    sqrt(C) * w / (k * sqrt(2 rho_a)) (one record moves each of the C cells' sums by at most
    w: L2 sensitivity sqrt(C) w), rho_a = rho / 2 for two attributes. For N deviations,
    sum d^2 / sigma^2 is chi-square with N degrees of freedom: the bounds are its TAIL and
    1 - TAIL quantiles (false failure 2e-7; the discrete Gaussian on a grid of thousands of
    steps per sigma has the continuous one's variance to a relative 1e-6). With N = 1000 the
    band is within 25 % of 1 in variance: sigma 1.5 times too small (variance 0.44) fails
    with probability below 1e-100, and so does the L1 sensitivity's C in place of sqrt(C)
    (the noise sqrt(C) = 32 times larger). Sigmas below 11, so clamping at +-1024 has
    probability below exp(-1000)."""
    cells, k, rho = 1000, 10, 2e6
    frame = cells_of_constant_tuples(cells, k)
    deviations, report = deviations_per_cell(frame, NUMBERS, k, None, 1, rho=rho)
    assert report["privacy"] == "zcdp" and report["rho"] == rho
    for name, width in (("x", 2048.0), ("y", 4096.0)):
        sigma = np.sqrt(cells) * width / (k * np.sqrt(2 * rho / 2))
        assert sigma < 11
        d = deviations[name]
        ratio = (d ** 2).sum() / sigma ** 2
        low, high = stats.chi2.ppf(TAIL, len(d)), stats.chi2.isf(TAIL, len(d))
        assert low <= ratio <= high, (
            f"{name}: variance {ratio / len(d):.3f} times the one rho requires (a correct "
            f"mechanism lies in [{low / len(d):.3f}, {high / len(d):.3f}])")
        assert stats.kstest(d / sigma, stats.norm().cdf).pvalue > TAIL
        assert report["attributes"][name]["sigma"] == pytest.approx(sigma)


def test_the_reported_scale_is_the_spread_of_what_was_drawn():
    """The report's scale, read as a prediction, matches the empirical mean absolute deviation
    of the released cell means: the same Gamma bound as above, with the report's number in
    place of the formula (false failure 2e-7)."""
    frame = cells_of_constant_tuples(2000, 5)
    deviations, report = deviations_per_cell(frame, NUMBERS, 5, 4e5, 1)
    for name in ("x", "y"):
        assert_laplace_of_scale(deviations[name], report["attributes"][name]["scale"])


# -- the exponential mechanism's odds ----------------------------------------------------------

def one_level_cells(cells: int, k: int, first: str, last: str) -> pd.DataFrame:
    """``cells`` cells of k records, the first half all ``first``, the others all ``last``."""
    half = cells // 2
    return pd.DataFrame({"c": [first] * (half * k) + [last] * ((cells - half) * k)})


#: (kind, levels, the odds of a cell's own level over the nearest other, the probability of
#: drawing its own level) under the exponential mechanism with epsilon_cell = epsilon_a / C.
#: A category: utility the members' count (k for its own level, 0 for the others), one
#: member moving it by 1, weights exp(epsilon_cell * u / 2). An ordinal of L levels: utility
#: minus the members' rank distances (0, -k, -2k, ... from an end), one member moving it by
#: L - 1, weights exp(epsilon_cell * u / (2 (L - 1))).
ODDS = [("category", ["a", "b"], 3.0, 3 / 4),
        ("category", ["a", "b", "c", "d"], 3.0, 1 / 2),
        ("ordinal", ["low", "mid", "high"], 3.0, 9 / 13)]


@pytest.mark.parametrize("kind, levels, odds, p", ODDS)
@pytest.mark.parametrize("k", [4, 10])
def test_a_cells_own_level_is_drawn_with_odds_exp_of_its_share_of_epsilon_times_k_over_two(
        kind, levels, odds, p, k):
    """A cell whose k members all answer the first level (or all the last) draws it with the
    odds over the nearest other level that epsilon_cell = epsilon_a / C gives (:data:`ODDS`):
    the settings make them 3. N = 4000 cells give a binomial count of own levels whose TAIL
    and 1 - TAIL quantiles bound it (false failure 2e-7; the band is p +- 0.04). With
    epsilon_a per cell instead (a table C times less private than reported) the odds are 3^C
    and the count is N; a mechanism spending half its budget has odds sqrt(3) (p = 0.63,
    0.37, 0.55); an ordinal drawn with a category's sensitivity 1 has odds 9 (p = 0.89), a
    category drawn with an ordinal's L - 1 odds 3^(1/3) (p = 0.32): all fail with
    probability below 1e-20."""
    cells, releases = 1000, 4
    ordinal = kind == "ordinal"
    per_cell = 2 * np.log(odds) * (len(levels) - 1 if ordinal else 1) / k
    epsilon = per_cell * cells  # one attribute: epsilon_a = epsilon
    schema = parse_schema({"c": {"role": "quasi_identifier", "type": kind,
                                 "levels": levels}})
    frame = one_level_cells(cells, k, levels[0], levels[-1])
    own, total = 0, 0
    for _ in range(releases):
        drawn = dp.release(frame, schema, k=k, epsilon=epsilon)
        released = drawn.table_in_input_order["c"].to_numpy()
        own += int((released == frame["c"].to_numpy()).sum()) // k  # one level per cell
        total += cells
        assert drawn.report["attributes"]["c"]["epsilon_per_cell"] == pytest.approx(per_cell)
    low, high = stats.binom.ppf(TAIL, total, p), stats.binom.isf(TAIL, total, p)
    assert low <= own <= high, (
        f"a cell's own level was drawn {own} times in {total}, not about {p * total:.0f}: "
        f"epsilon per cell is not {per_cell:.3g}")


# -- neighbouring data sets --------------------------------------------------------------------

SURVEY = parse_schema({
    "age": {"role": "quasi_identifier", "type": "int", "min": 16, "max": 99},
    "income": {"role": "quasi_identifier", "type": "float", "min": 0, "max": 200_000,
               "required": False},
    "education": {"role": "quasi_identifier", "type": "ordinal",
                  "levels": ["primary", "secondary", "tertiary"], "required": False},
    "region": {"role": "quasi_identifier", "type": "category",
               "levels": ["north", "south", "east", "west"], "required": False},
    "visits": {"role": "confidential", "type": "int", "min": 0, "max": 9, "required": False},
    "smoker": {"role": "confidential", "type": "bool", "required": False},
})
EXTREMES = {  # the domain's lower and upper corners, and a record missing every answer it may
    "low": {"age": 16, "income": 0.0, "education": "primary", "region": "north", "visits": 0,
            "smoker": False},
    "high": {"age": 99, "income": 200_000.0, "education": "tertiary", "region": "west",
             "visits": 9, "smoker": True},
    "missing": {"age": 16, "income": np.nan, "education": None, "region": None,
                "visits": None, "smoker": None},
}


def skewed_survey(n: int, seed: int) -> pd.DataFrame:
    """Real-survey-like answers: skewed income rounded to the thousand (ties), a mode on one
    region, many exact duplicates, and missing answers in every field that allows them."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({
        "age": rng.choice([25, 40, 41, 65], n, p=[.4, .3, .2, .1]),
        "income": np.round(rng.lognormal(10, 1, n).clip(0, 200_000), -3),
        "education": rng.choice(["primary", "secondary", "tertiary"], n, p=[.1, .7, .2]),
        "region": rng.choice(["north", "south", "east", "west"], n, p=[.7, .1, .1, .1]),
        "visits": rng.poisson(0.5, n).clip(0, 9),
        "smoker": rng.random(n) < 0.2,
    }).astype({"education": object, "region": object, "visits": "Int64",
               "smoker": "boolean"})
    for name in ("income", "education", "region", "visits", "smoker"):
        frame.loc[rng.random(n) < 0.15, name] = None
    copies, sources = rng.integers(0, n, (2, n // 4))  # a quarter copy another's answers
    for name in frame.columns:
        frame.loc[copies, name] = frame[name].to_numpy()[sources]
    return frame


def cell_multisets(frame: pd.DataFrame, k: int) -> list[Counter]:
    attrs = dp.attributes_of(SURVEY, dp.released_columns(SURVEY, "all"))
    codes = dp.encode(frame, attrs)
    return [Counter(map(tuple, codes[rows])) for rows in dp.insensitive_cells(codes, attrs, k)]


def assert_each_cell_moves_by_at_most_one_record(before: pd.DataFrame, after: pd.DataFrame,
                                                 k: int) -> None:
    one, two = cell_multisets(before, k), cell_multisets(after, k)
    n = len(before)
    sizes = [k] * (n // k - 1) + [k + n % k]  # from n and k alone
    assert [sum(c.values()) for c in one] == [sum(c.values()) for c in two] == sizes
    moved = [sum((a - b).values()) for a, b in zip(one, two, strict=True)]
    assert max(moved) <= 1, f"cells moved by {moved}"


def neighbour(frame: pd.DataFrame, row: int, answers: dict) -> pd.DataFrame:
    out = frame.copy()
    for name, value in answers.items():
        out.loc[out.index[row], name] = value
    return out


@pytest.mark.parametrize("seed", range(12))
def test_a_random_neighbour_moves_each_cell_by_at_most_one_record_and_keeps_the_sizes(seed):
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(20, 300)), int(rng.integers(2, 12))
    frame = skewed_survey(n, seed)
    other = skewed_survey(n, seed + 1000).iloc[int(rng.integers(n))].to_dict()
    assert_each_cell_moves_by_at_most_one_record(
        frame, neighbour(frame, int(rng.integers(n)), other), k)


@pytest.mark.parametrize("k", [2, 3, 7])
@pytest.mark.parametrize("change", [
    ("low", "high"), ("high", "low"), ("low", "missing"), ("missing", "high"),
    ("high", "missing"), ("missing", "low"),
])
def test_an_adversarial_neighbour_moves_each_cell_by_at_most_one_record(k, change):
    """One record jumps across the whole order (lower corner to upper corner), or between an
    answer and missing every answer it may: into data that hold the corners' duplicates and
    the missing record's (it lands among ties), and into data whose answers stay inside the
    domain (it stretches the data's range: an order scaled by the data's own extremes instead
    of the declared domain would reshuffle every cell)."""
    start, end = change
    inside = skewed_survey(60, 7)
    inside["age"] = inside["age"].clip(17, 98)
    inside["income"] = inside["income"].clip(1000, 150_000)
    planted = inside.copy()
    for i, name in enumerate(("low", "high", "missing", "low", "high", "missing")):
        planted = neighbour(planted, 10 * i + 5, EXTREMES[name])
    for frame in (neighbour(planted, 0, EXTREMES[start]), neighbour(inside, 0, EXTREMES[start])):
        for row in (0, 35):  # the jumping record, and (planted) one of its duplicates
            assert_each_cell_moves_by_at_most_one_record(
                frame, neighbour(frame, row, EXTREMES[end]), k)


def test_records_tied_in_the_order_are_ordered_by_their_values_not_by_their_rows():
    """Records the order's first key may tie (x and y swapped: one distance from the lower
    corner, neighbouring places on a curve) are ordered by their values: the cells do not
    depend on which row holds which record, and each cell holds one tuple."""
    schema = parse_schema({
        "x": {"role": "quasi_identifier", "type": "int", "min": 0, "max": 10},
        "y": {"role": "quasi_identifier", "type": "int", "min": 0, "max": 10}})
    frame = pd.DataFrame({"x": [3, 4] * 6, "y": [4, 3] * 6})
    attrs = dp.attributes_of(schema, ["x", "y"])
    seen = []
    for rows in (np.arange(12), np.arange(12)[::-1], np.random.default_rng(0).permutation(12)):
        shuffled = frame.iloc[rows].reset_index(drop=True)
        codes = dp.encode(shuffled, attrs)
        cells = [sorted(map(tuple, codes[c])) for c in dp.insensitive_cells(codes, attrs, 3)]
        assert all(len(set(cell)) == 1 for cell in cells)
        seen.append(cells)
    assert seen[0] == seen[1] == seen[2]


# -- the privacy loss between two neighbours ---------------------------------------------------

def test_one_cells_privacy_loss_between_two_neighbours_is_at_most_its_share_of_epsilon():
    """The end-to-end bound where it can be computed exactly. One category with L = C + 1
    levels, cells of k = 2: in D1 cell j holds two answers j; D2 changes one answer 0 to C,
    which moves every cell by one record (cell j holds j and j + 1). The outcome that tells
    them apart most, cell j drawing j + 1, has probability
        P1 = 1 / (e^x + L - 1)   and   P2 = e^(x/2) / (2 e^(x/2) + L - 2),
    x = epsilon / C per cell: their ratio (1.29 at x = 0.5) must stay below e^x (1.65), and
    the C cells' ratios multiply to at most e^epsilon (sequential composition). Pooled over
    cells and releases the indicators are Bernoulli(P1) and Bernoulli(P2):
    - each count lies within its binomial TAIL quantiles (the exact distribution; false
      failure 4e-7 over both counts);
    - the likelihood-ratio check is conditional: given m = n1 + n2 indicators that fired, n2 is
      Binomial(m, P2 / (P1 + P2)), at most Binomial(m, e^x / (1 + e^x)) under ANY mechanism
      within its bound, so n2 above that's 1 - TAIL quantile fails one with probability at
      most 1e-7. With epsilon_a per cell instead, P1 = 0.006 and P2 = 0.37 (ratio 58): the
      check fails with probability above 1 - 1e-30.
    """
    cells, releases, x = 10, 100, 0.5
    levels = [f"l{j}" for j in range(cells + 1)]
    schema = parse_schema({"c": {"role": "quasi_identifier", "type": "category",
                                 "levels": levels}})
    one = pd.DataFrame({"c": [levels[j] for j in range(cells) for _ in range(2)]})
    two = one.copy()
    two.loc[0, "c"] = levels[cells]
    fired = []
    for frame in (one, two):
        attrs = dp.attributes_of(schema, ["c"])
        codes = dp.encode(frame, attrs)[:, 0]
        found = dp.insensitive_cells(dp.encode(frame, attrs), attrs, 2)
        assert [sorted(codes[rows]) for rows in found] == (
            [[j, j] for j in range(cells)] if frame is one
            else [[j, j + 1] for j in range(cells)])
        count = 0
        for _ in range(releases):
            released = dp.encode(dp.release(frame, schema, k=2, epsilon=x * cells)
                                 .table_in_input_order, attrs)[:, 0]
            count += sum(int(released[rows[0]] == min(codes[rows]) + 1) for rows in found)
        fired.append(count)
    n1, n2 = fired
    total = cells * releases
    p1 = 1 / (np.exp(x) + cells)
    p2 = np.exp(x / 2) / (2 * np.exp(x / 2) + cells - 1)
    for count, p in ((n1, p1), (n2, p2)):
        assert stats.binom.ppf(TAIL, total, p) <= count <= stats.binom.isf(TAIL, total, p)
    bound = np.exp(x) / (1 + np.exp(x))
    assert n2 <= stats.binom.isf(TAIL, n1 + n2, bound), (
        f"the neighbours' likelihood ratio is {n2 / max(n1, 1):.2f}, above e^{x:g} = "
        f"{np.exp(x):.2f} per cell")


def test_the_published_rows_follow_the_released_values_not_the_input_order():
    """The published table is a function of the noisy cell tuples alone: with an epsilon so
    large that every draw is 0 (a discrete Laplace draw of scale s is nonzero with probability
    below 2 exp(-1 / s); here s < 1e-3 grid steps, so below 1e-400) and cells whose members
    agree on their level (so that the exponential mechanism has one best level, the runner-up
    weighing exp(-1e11) as much), the same records in another input order publish the same
    table, row for row."""
    rng = np.random.default_rng(1)
    schema = parse_schema({
        "x": {"role": "quasi_identifier", "type": "float", "min": 0, "max": 100,
              "required": False},
        "c": {"role": "quasi_identifier", "type": "category", "levels": ["a", "b", "c"]}})
    groups = pd.DataFrame({"x": rng.integers(0, 100, 12).astype(float),
                           "c": rng.choice(["a", "b", "c"], 12)})
    groups.loc[3, "x"] = np.nan
    frame = groups.loc[np.repeat(np.arange(12), 5)].reset_index(drop=True)  # cells of 5
    one = dp.release(frame, schema, k=5, epsilon=1e13)
    other = frame.iloc[rng.permutation(60)].reset_index(drop=True)
    two = dp.release(other, schema, k=5, epsilon=1e13)
    pd.testing.assert_frame_equal(one.table, two.table)
    assert not one.table.equals(one.table_in_input_order)


def test_a_declared_constant_and_a_unit_domain_are_released_on_their_grid():
    """A number declared with min = max is released as that constant; one of width 1 or less
    on a grid of its own width (not of whole units). The epsilon makes the noise on a cell's
    mean Laplace of scale 1e-5 of the width (5e-6): it exceeds 1e-4 with probability
    exp(-20) = 2e-9 per cell, below 1e-8 for the four."""
    schema = parse_schema({
        "wave": {"role": "quasi_identifier", "type": "float", "min": 3, "max": 3},
        "share": {"role": "quasi_identifier", "type": "float", "min": 0, "max": 0.5}})
    frame = pd.DataFrame({"wave": [3.0] * 40, "share": np.repeat([0.1, 0.2, 0.3, 0.4], 10)})
    out = dp.release(frame, schema, k=10, epsilon=2 * 4 * 0.5 / (10 * 0.5 * 1e-5))
    assert (out.table["wave"] == 3.0).all()
    released = out.table_in_input_order["share"].to_numpy()
    assert np.abs(released - frame["share"].to_numpy()).max() < 1e-4


def test_answers_published_as_they_are_are_ordered_by_value_even_of_mixed_types():
    """With scope="quasi_identifiers" the confidential answers are published as they are, a
    column of types pandas cannot sort together included (numbers and dates: ordered by their
    text): their order follows the values, not the input's order. The epsilon makes every
    draw 0 (as above)."""
    rng = np.random.default_rng(2)
    schema = parse_schema({
        "x": {"role": "quasi_identifier", "type": "float", "min": 0, "max": 100},
        "note": {"role": "confidential", "type": "str"}})
    frame = pd.DataFrame({"x": np.repeat(np.arange(6.0) * 10, 5),
                          "note": pd.Series([1, "b", 2.5, None, date(2019, 5, 5), 3] * 5,
                                            dtype=object)})
    tables = [dp.release(frame.iloc[rows].reset_index(drop=True), schema, k=5,
                         epsilon=1e13, scope="quasi_identifiers").table
              for rows in (np.arange(30), rng.permutation(30), rng.permutation(30))]
    for table in tables[1:]:
        pd.testing.assert_frame_equal(table, tables[0])


def test_a_cell_mostly_answered_is_released_as_an_answer_inside_the_domain():
    """A cell mean between the missing code (min - width) and min is released as min when it
    is nearer the answers (above min - width / 2), as missing below that: never outside the
    declared domain. The noise on a cell's mean has scale at most C w / (k epsilon) = 1e-6:
    it moves a mean by 1e-3 with probability exp(-1000)."""
    schema = parse_schema({
        "x": {"role": "quasi_identifier", "type": "float", "min": 10, "max": 20,
              "required": False}})
    epsilon = 3 * 20 / (3 * 1e-6)  # C = 3 cells, coded width w = 20, k = 3
    # coded 0 (missing), 10, 10 | 10, 10, 10 | 15, 15, 15: the first cell's mean is 6.67
    mostly_answered = pd.DataFrame({"x": [np.nan, 10, 10, 10, 10, 10, 15, 15, 15]})
    released = dp.release(mostly_answered, schema, k=3, epsilon=epsilon).table_in_input_order
    assert released["x"].tolist() == pytest.approx([10.0] * 6 + [15.0] * 3, abs=1e-3)
    # coded 0, 0, 10 | ...: the first cell's mean is 3.33, released as missing
    mostly_missing = pd.DataFrame({"x": [np.nan, np.nan, 10, 10, 10, 10, 15, 15, 15]})
    released = dp.release(mostly_missing, schema, k=3, epsilon=epsilon).table_in_input_order
    assert released["x"].isna().tolist() == [True] * 3 + [False] * 6


def test_the_overflow_guard_refuses_exactly_the_budgets_whose_noise_would_not_fit():
    """An attribute's noise scale in grid steps is (n // k) * GRID_STEPS / epsilon_a (pure) or
    sqrt(n // k) * GRID_STEPS / sqrt(2 rho_a) (zCDP): a budget is refused when that exceeds
    MAX_NOISE_SCALE, and only then (k from 1 to n)."""
    n, k, attributes = 54, 5, 2  # n // k = 10 cells, n / k = 10.8
    edge = (n // k) * dp.GRID_STEPS * attributes / dp.MAX_NOISE_SCALE  # the smallest epsilon
    dp.check(n, k, edge * 1.01, "insensitive", attributes)
    with pytest.raises(ParameterError, match="too small"):
        dp.check(n, k, edge * 0.99, "insensitive", attributes)
    rho_edge = attributes * ((n // k) * dp.GRID_STEPS ** 2 / dp.MAX_NOISE_SCALE ** 2) / 2
    dp.check(n, k, None, "insensitive", attributes, rho=rho_edge * 1.01)
    with pytest.raises(ParameterError, match="too small"):
        dp.check(n, k, None, "insensitive", attributes, rho=rho_edge * 0.99)
    for good_k in (1, n):
        dp.check(n, good_k, 1.0, "insensitive", attributes)
    for bad_k in (0, n + 1):
        with pytest.raises(ParameterError, match="k = "):
            dp.check(n, bad_k, 1.0, "insensitive", attributes)
    # a release checks its budget per attribute: two attributes halve each one's share
    schema = parse_schema({name: {"role": "quasi_identifier", "type": "float", "min": 0,
                                  "max": 1} for name in ("x", "y")})
    frame = pd.DataFrame({"x": np.linspace(0, 1, n), "y": np.linspace(1, 0, n)})
    with pytest.raises(ParameterError, match="too small"):
        dp.release(frame, schema, k=k, epsilon=edge * 0.99)


def test_answers_outside_the_declared_levels_or_missing_where_required_are_refused():
    schema = parse_schema({"c": {"role": "quasi_identifier", "type": "category",
                                 "levels": [1, 2, 3]}})
    attrs = dp.attributes_of(schema, ["c"])
    assert dp.encode(pd.DataFrame({"c": [1, "2", 3]}), attrs)[:, 0].tolist() == [0, 1, 2]
    for bad in ([1, 4, 2], [1, None, 2], [1, "x", 2]):
        with pytest.raises(InputError, match="not among its declared levels"):
            dp.encode(pd.DataFrame({"c": bad}, dtype=object), attrs)


def test_answers_outside_the_declared_bounds_count_as_the_nearest_bound():
    """A number outside its declared [min, max] enters the cells and their sums clamped to
    the bound: a record can move a cell's sum by at most the width, which is what the noise is
    scaled to. Every draw is 0 at this epsilon (as above), so the released means are the
    clamped ones exactly."""
    schema = parse_schema({"x": {"role": "quasi_identifier", "type": "float", "min": 0,
                                 "max": 100}})
    for answers, means in (([-1e6, 100, 100, 100, 100] + [50] * 5, [40.0, 90.0]),
                           ([1e6, 0, 0, 0, 0] + [50] * 5, [10.0, 60.0])):
        released = dp.release(pd.DataFrame({"x": answers}), schema, k=5,
                              epsilon=1e13).table["x"]
        assert sorted(set(released.round(6))) == means
