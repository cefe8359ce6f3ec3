"""The epsilon-differentially private release (streamanon.dp): the insensitivity of its cells,
the noise's distribution, the domain taken only from the schema."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from streamanon import dp
from streamanon.errors import InputError, ParameterError
from streamanon.schema import parse_schema

SCHEMA = parse_schema({
    "respondent_id": {"role": "identifier"},
    "age": {"role": "quasi_identifier", "type": "int", "min": 16, "max": 99},
    "income": {"role": "quasi_identifier", "type": "float", "min": 0, "max": 200_000},
    "education": {"role": "quasi_identifier", "type": "ordinal",
                  "levels": ["primary", "secondary", "tertiary"]},
    "region": {"role": "quasi_identifier", "type": "category",
               "levels": ["north", "south", "east", "west"]},
    "q1": {"role": "confidential", "type": "int", "min": 1, "max": 5},
    "smoker": {"role": "confidential", "type": "bool"},
})


def survey(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "respondent_id": [f"R{i}" for i in range(n)],
        "age": rng.integers(16, 100, n),
        "income": np.round(rng.gamma(2.0, 20_000, n).clip(0, 200_000), 2),
        "education": rng.choice(["primary", "secondary", "tertiary"], n, p=[.2, .5, .3]),
        "region": rng.choice(["north", "south", "east", "west"], n),
        "q1": rng.integers(1, 6, n),
        "smoker": rng.random(n) < 0.2,
    })


def random_point(attrs: list[dp.Attribute], rng: np.random.Generator) -> np.ndarray:
    """A record anywhere in the declared domain, coded as :func:`dp.encode` codes it."""
    out = []
    for a in attrs:
        if a.kind == "number":
            out.append(rng.uniform(a.low, a.high))
        else:
            out.append(float(rng.integers(0, len(a.levels))))
    return np.array(out)


def cells_as_multisets(codes: np.ndarray, cells: list[np.ndarray]) -> list[list[tuple]]:
    return [sorted(map(tuple, codes[rows])) for rows in cells]


def differing_records(a: list[tuple], b: list[tuple]) -> int:
    """How many records one multiset must swap to become the other."""
    from collections import Counter

    return sum((Counter(a) - Counter(b)).values())


@pytest.mark.parametrize("seed", range(20))
def test_neighbouring_data_sets_give_cells_that_differ_in_at_most_one_record(seed):
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(30, 200)), int(rng.integers(2, 9))
    frame = survey(n, seed)
    attrs = dp.attributes_of(SCHEMA, dp.released_columns(SCHEMA, "all"))
    codes = dp.encode(frame, attrs)
    other = codes.copy()
    other[rng.integers(n)] = random_point(attrs, rng)  # one record changed
    # the multivariate cells (one total order of the domain)
    before = cells_as_multisets(codes, dp.insensitive_cells(codes, attrs, k))
    after = cells_as_multisets(other, dp.insensitive_cells(other, attrs, k))
    assert len(before) == len(after) == n // k
    assert max(differing_records(b, a) for b, a in zip(before, after, strict=True)) <= 1
    # the individual-ranking cells, attribute by attribute
    for j in range(len(attrs)):
        before = cells_as_multisets(codes[:, [j]], dp.ranked_cells(codes[:, j], k))
        after = cells_as_multisets(other[:, [j]], dp.ranked_cells(other[:, j], k))
        assert max(differing_records(b, a) for b, a in zip(before, after, strict=True)) <= 1


def test_cells_have_k_to_2k_minus_1_records_and_cover_every_record_once():
    attrs = dp.attributes_of(SCHEMA, dp.released_columns(SCHEMA, "all"))
    for n, k in ((10, 3), (11, 5), (12, 4), (5, 5)):
        codes = dp.encode(survey(n, n), attrs)
        for cells in (dp.insensitive_cells(codes, attrs, k), dp.ranked_cells(codes[:, 0], k)):
            sizes = [len(c) for c in cells]
            assert min(sizes) >= k and max(sizes) <= 2 * k - 1
            assert sorted(np.concatenate(cells).tolist()) == list(range(n))


def test_released_means_are_noisy_integer_sums_on_the_grid_never_raw_floating_point():
    """A cell's released mean is (floor + step * (integer sum + integer noise) / size): the
    low-order bits of a float Laplace draw would tell which true mean it was added to
    (Mironov, CCS 2012); an integer sum on a fixed grid has none."""
    frame = survey(500, 3)
    attrs = dp.attributes_of(SCHEMA, ["income"])
    out = dp.release(frame, SCHEMA, k=10, epsilon=50.0)
    released = out.table_in_input_order["income"].to_numpy()
    inside = (released > 0) & (released < 200_000)
    # a cell mean's Laplace scale is 50 cells * 6 attributes * 200,000 / (10 * 50) =
    # 120,000; a true mean in [0, 200,000] lands strictly inside with probability at least
    # (1 - exp(-200,000 / 120,000)) / 2 = 0.405 (a mean at a bound), so none of the 50
    # independent cells does with probability below 0.595^50 = 6e-12
    assert inside.any()
    step = attrs[0].width / dp.GRID_STEPS
    released_attrs = dp.attributes_of(SCHEMA, dp.released_columns(SCHEMA, "all"))
    cells = dp.insensitive_cells(dp.encode(frame, released_attrs), released_attrs, 10)
    sizes = np.empty(len(frame))
    for rows in cells:
        sizes[rows] = len(rows)
    units = (released[inside] - attrs[0].floor) * sizes[inside] / step
    assert np.abs(units - np.rint(units)).max() < 1e-3


@pytest.mark.parametrize("field, why", [
    ({"role": "quasi_identifier", "type": "float", "min": 0}, "max"),
    ({"role": "quasi_identifier", "type": "float"}, "min"),
    ({"role": "confidential", "type": "int", "max": 5}, "min"),
    ({"role": "quasi_identifier", "type": "category"}, "levels"),
])
def test_a_schema_without_a_declared_domain_is_refused(field, why):
    schema = parse_schema({"x": field, "y": {"role": "quasi_identifier", "type": "int",
                                             "min": 0, "max": 9}})
    with pytest.raises(InputError, match=why) as caught:
        dp.attributes_of(schema, ["x"])
    assert "x" in str(caught.value) and "from the data" in str(caught.value)


def test_free_text_cannot_be_released_under_differential_privacy():
    schema = parse_schema({
        "age": {"role": "quasi_identifier", "type": "int", "min": 0, "max": 99},
        "essay": {"role": "confidential", "type": "str"}})
    with pytest.raises(InputError, match="essay"):
        dp.attributes_of(schema, dp.released_columns(schema, "all"))
    # protecting the quasi-identifiers only leaves it out of the mechanism
    assert dp.released_columns(schema, "quasi_identifiers") == ["age"]


@pytest.mark.parametrize("mechanism", dp.MECHANISMS)
def test_a_release_stays_in_the_domain_and_reports_its_guarantee(mechanism):
    frame = survey(600, 1)
    out = dp.release(frame, SCHEMA, k=10, epsilon=1.0, mechanism=mechanism)
    table, report = out.table, out.report
    assert list(table.columns) == [c for c in frame.columns if c != "respondent_id"]
    assert len(table) == len(frame)
    assert table["age"].between(16, 99).all() and (table["age"] == table["age"].round()).all()
    assert table["income"].between(0, 200_000).all()
    assert set(table["education"]) <= {"primary", "secondary", "tertiary"}
    assert set(table["region"]) <= {"north", "south", "east", "west"}
    assert table["q1"].between(1, 5).all()
    assert set(table["smoker"]) <= {True, False}
    assert report["epsilon"] == 1.0 and report["mechanism"] == mechanism
    assert sum(a["epsilon"] for a in report["attributes"].values()) == pytest.approx(1.0)
    assert report["differentially_private"] == (mechanism == "insensitive")
    if mechanism == "insensitive":
        # one noisy tuple per cell: k-anonymous as well
        assert table.value_counts().min() >= 10
    key = ["age", "income", "education", "region"]
    assert report["smallest_group"] == table.groupby(key).size().min()
    assert report["k_anonymous"] == (report["smallest_group"] >= 10)


def test_individual_ranking_noise_scale_is_the_range_over_k_epsilon_and_the_means_stay_ordered():
    frame = survey(2000, 2)
    out = dp.release(frame, SCHEMA, k=20, epsilon=72.0, mechanism="individual_ranking")
    income = out.report["attributes"]["income"]
    assert income["epsilon"] == pytest.approx(12.0)  # six attributes
    assert income["scale"] == pytest.approx(200_000 / (20 * 12.0))
    # isotonic post-processing: the released values, in the order of the true ones, never go
    # down (ties among equal true values aside)
    order = np.argsort(frame["income"].to_numpy(), kind="stable")
    released = out.table_in_input_order["income"].to_numpy()[order]
    assert (np.diff(released) >= -1e-9).all()
    # a level's index is a number of width L - 1 to individual ranking: a Laplace mean, made
    # monotone and rounded (far fewer values changed than the exponential mechanism per cell).
    # Its scale is at most 3 / (20 * 12) = 0.0125 levels: all 2 x 100 cells' noise stays
    # below half a level but with probability 200 exp(-0.5 / 0.0125) < 1e-15. Then the
    # isotonic fit stays within half a level of the true means (it is a contraction in the
    # largest deviation), a cell of one level keeps it, and only the L - 1 cells that mix two
    # levels change records: at most 3 x 20 of 2,000, 3 %
    attrs = dp.attributes_of(SCHEMA, ["education", "region"])
    codes = dp.encode(frame, attrs)
    released = dp.encode(out.table_in_input_order, attrs)
    for j, name in enumerate(["education", "region"]):
        levels = len(attrs[j].levels)
        assert out.report["attributes"][name]["scale"] == pytest.approx((levels - 1) / 240)
        order = np.argsort(codes[:, j], kind="stable")
        assert (np.diff(released[order, j]) >= 0).all()
        assert (released[:, j] != codes[:, j]).mean() < 0.05


def test_protecting_only_the_quasi_identifiers_is_never_called_differentially_private():
    frame = survey(300, 4)
    out = dp.release(frame, SCHEMA, k=10, epsilon=1.0, mechanism="individual_ranking",
                     scope="quasi_identifiers")
    assert out.report["differentially_private"] is False
    assert "not differentially private" in out.report["guarantee"]
    assert set(out.report["attributes"]) == {"age", "income", "education", "region"}
    # the confidential answers are published as they are
    assert (out.table_in_input_order["q1"].to_numpy() == frame["q1"].to_numpy()).all()


def test_every_release_draws_fresh_noise_and_takes_no_generator():
    """No seed, no generator: production and tests draw one way. Two releases coincide with
    probability below 1e-100: each of the 80 cells' income sums gets discrete Laplace noise
    of scale 80 * 6 * 2^20 / 1e5 = 5,033 grid steps, no value of which has probability
    above 1e-4."""
    frame = survey(400, 6)
    one = dp.release(frame, SCHEMA, k=5, epsilon=1e5).table
    two = dp.release(frame, SCHEMA, k=5, epsilon=1e5).table
    assert not one["income"].equals(two["income"])
    with pytest.raises(TypeError):
        dp.release(frame, SCHEMA, k=5, epsilon=1.0, rng=np.random.default_rng(0))


def test_epsilon_and_k_are_checked():
    frame = survey(50, 0)
    with pytest.raises(ParameterError, match="epsilon"):
        dp.release(frame, SCHEMA, k=5, epsilon=0)
    with pytest.raises(ParameterError, match="k"):
        dp.release(frame, SCHEMA, k=60, epsilon=1)
    with pytest.raises(ParameterError, match="mechanism"):
        dp.release(frame, SCHEMA, k=5, epsilon=1, mechanism="mdav")


def test_a_declared_constant_keeps_the_domain_order_finite():
    schema = parse_schema({
        "wave": {"role": "quasi_identifier", "type": "int", "min": 3, "max": 3},
        "age": {"role": "quasi_identifier", "type": "int", "min": 16, "max": 99}})
    frame = pd.DataFrame({"wave": [3] * 40, "age": np.arange(40) + 20})
    attrs = dp.attributes_of(schema, ["wave", "age"])
    with np.errstate(all="raise"):  # no division by a zero width
        cells = dp.insensitive_cells(dp.encode(frame, attrs), attrs, 5)
    # the order is still the domain's: by age, the one that varies
    assert [frame["age"].to_numpy()[c].max() for c in cells] == list(range(24, 60, 5))


@pytest.mark.parametrize("mechanism", dp.MECHANISMS)
def test_missing_answers_are_released_as_missing_not_as_the_middle_of_the_domain(mechanism):
    rng = np.random.default_rng(11)
    n = 2000
    frame = survey(n, 11)
    frame["income"] = frame["income"].astype(float)
    frame.loc[rng.random(n) < 0.3, "income"] = np.nan
    frame["education"] = frame["education"].astype(object)
    frame.loc[rng.random(n) < 0.2, "education"] = None
    schema = parse_schema({
        "income": {"role": "quasi_identifier", "type": "float", "min": 0, "max": 200_000,
                   "required": False},
        "education": {"role": "quasi_identifier", "type": "ordinal",
                      "levels": ["primary", "secondary", "tertiary"], "required": False}})
    # epsilon 1e6: a cell mean's noise has Laplace scale 16 (insensitive, 200 cells) or less,
    # 100,000 away from turning a missing income into an answer (probability exp(-6250)); an
    # ordinal's level is drawn with 2,500 per cell, its own level all but surely
    out = dp.release(frame[["income", "education"]], schema, k=10, epsilon=1e6,
                     mechanism=mechanism)
    released = out.table_in_input_order
    for name in ("income", "education"):
        was, now = frame[name].isna().to_numpy(), released[name].isna().to_numpy()
        # with next to no noise, a record's missingness changes only in the cells that mix
        # the missing with the answered (one per attribute, sorted apart, in individual
        # ranking; the insensitive order sorts them near its corner)
        assert (was != now).sum() <= (10 if mechanism == "individual_ranking" else 0.1 * n)
        assert now.sum() > 0.5 * was.sum()
    answered = released["income"].dropna()
    assert answered.between(0, 200_000).all()
    assert set(released["education"].dropna()) <= {"primary", "secondary", "tertiary"}


def test_nullable_answers_keep_their_types_and_a_single_level_is_released():
    schema = parse_schema({
        "age": {"role": "quasi_identifier", "type": "int", "min": 16, "max": 99},
        "smoker": {"role": "confidential", "type": "bool", "required": False},
        "visits": {"role": "confidential", "type": "int", "min": 0, "max": 9,
                   "required": False},
        "country": {"role": "confidential", "type": "category", "levels": ["fr"]}})
    rng = np.random.default_rng(5)
    frame = pd.DataFrame({"age": rng.integers(16, 100, 200),
                          "smoker": pd.array(rng.random(200) < 0.3, dtype="boolean"),
                          "visits": pd.array(rng.integers(0, 10, 200), dtype="Int64"),
                          "country": ["fr"] * 200})
    frame.loc[::7, "smoker"] = pd.NA
    frame.loc[::5, "visits"] = pd.NA
    for mechanism in dp.MECHANISMS:
        for _ in range(10):  # the single level is released whatever the noise
            table = dp.release(frame, schema, k=5, epsilon=0.5, mechanism=mechanism).table
            assert str(table["smoker"].dtype) == "boolean"
            assert str(table["visits"].dtype) == "Int64"
            assert set(table["country"]) == {"fr"}


def test_a_tiny_epsilon_is_refused():
    frame = survey(50, 0)
    for epsilon in (5e-324, 1e-320, float("inf"), float("nan")):
        with pytest.raises(ParameterError, match="epsilon"):
            dp.release(frame, SCHEMA, k=5, epsilon=epsilon)


def test_noise_that_drowns_an_attribute_is_named_from_the_settings_alone():
    frame = survey(600, 8)
    drowned = dp.release(frame, SCHEMA, k=5, epsilon=0.5).report["warnings"]
    names = {w.split(":")[0] for w in drowned}
    assert {"age", "income", "education", "region"} <= names
    assert "larger cells (k)" in drowned[-1]
    assert dp.release(frame, SCHEMA, k=100, epsilon=1e4).report["warnings"] == []


# -- the canonical row order -------------------------------------------------------------------

def test_the_rows_are_sorted_by_their_released_values_and_order_maps_them_to_records():
    schema = parse_schema({
        "age": {"role": "quasi_identifier", "type": "int", "min": 16, "max": 99},
        "income": {"role": "quasi_identifier", "type": "float", "min": 0, "max": 200_000,
                   "required": False},
        "region": {"role": "quasi_identifier", "type": "category",
                   "levels": ["north", "south", "east", "west"], "required": False},
        "q1": {"role": "confidential", "type": "int", "min": 1, "max": 5}})
    frame = survey(1000, 12)[["age", "income", "region", "q1"]]
    frame["income"] = frame["income"].astype(float).where(frame.index % 4 != 0)
    frame["region"] = frame["region"].astype(object).where(frame.index % 5 != 0)
    for mechanism in dp.MECHANISMS:
        out = dp.release(frame, schema, k=10, epsilon=1e4, mechanism=mechanism)
        table = out.table
        assert out.report["row_order"] == dp.ROW_ORDER
        # row i is record order[i]
        pd.testing.assert_frame_equal(
            out.table_in_input_order.iloc[out.order].reset_index(drop=True), table)
        # sorted by the released values, column by column, missing first
        expected = table.sort_values(list(table.columns), kind="stable",
                                     na_position="first").reset_index(drop=True)
        pd.testing.assert_frame_equal(table, expected)
        assert table["income"].isna().any() and table["region"].isna().any()
        # a function of the values alone: any order of the same rows sorts to the same table
        shuffled = table.sample(frac=1, random_state=0).reset_index(drop=True)
        pd.testing.assert_frame_equal(
            shuffled.iloc[dp.canonical_order(shuffled)].reset_index(drop=True), table)


# -- one released attribute: the telescoped sensitivity ----------------------------------------

ONE = parse_schema({"income": {"role": "quasi_identifier", "type": "float", "min": 0,
                               "max": 200_000, "required": False}})
TWO = parse_schema({"income": {"role": "quasi_identifier", "type": "float", "min": 0,
                               "max": 200_000, "required": False},
                    "age": {"role": "quasi_identifier", "type": "int", "min": 16, "max": 99}})


def with_missing_income(n: int, seed: int) -> pd.DataFrame:
    frame = survey(n, seed)[["income", "age"]]
    frame["income"] = frame["income"].astype(float)
    frame.loc[np.random.default_rng(seed).random(n) < 0.2, "income"] = np.nan
    return frame


def drawn_scales(monkeypatch, sampler: str) -> list[float]:
    """The scales :mod:`streamanon.dp_noise`'s ``sampler`` is called with, as they are drawn."""
    from streamanon import dp_noise

    scales: list[float] = []
    real = getattr(dp_noise, sampler)

    def spy(values, scale):
        scales.append(scale)
        return real(values, scale)

    monkeypatch.setattr(dp_noise, sampler, spy)
    return scales


@pytest.mark.parametrize("sampler, kwargs, ratio", [
    ("discrete_laplace", {"epsilon": 1.0}, lambda cells: cells),
    ("discrete_gaussian", {"rho": 0.5}, lambda cells: np.sqrt(cells)),
])
def test_one_released_attribute_gets_noise_c_times_smaller_than_one_of_two(
        monkeypatch, sampler, kwargs, ratio):
    """One attribute's insensitive cells are runs of its sorted values: its cell sums move by
    ``units`` in all (L1 and L2), not C * units (L1) or sqrt(C) * units (L2). Two attributes
    with twice the budget give each the same share: the scale drawn and reported for one is
    C (pure) or sqrt(C) (zCDP) times smaller."""
    frame = with_missing_income(2000, 3)
    k, cells = 20, 100
    scales = drawn_scales(monkeypatch, sampler)
    one = dp.release(frame, ONE, k=k, **kwargs)
    doubled = {name: 2 * value for name, value in kwargs.items()}
    two = dp.release(frame, TWO, k=k, **doubled)
    assert len(scales) == 3  # income alone, then income and age
    assert scales[1] / scales[0] == pytest.approx(ratio(cells))
    assert scales[2] == pytest.approx(scales[1])  # age: the same grid, the same cells
    reported = [r.report["attributes"]["income"] for r in (one, two)]
    assert reported[0]["telescoped"] is True and reported[1]["telescoped"] is False
    assert reported[1]["scale"] / reported[0]["scale"] == pytest.approx(ratio(cells))
    units = 2 ** 20
    width = 400_000  # twice the declared width: missing answers in the domain
    if sampler == "discrete_laplace":
        assert scales[0] == pytest.approx(units / 1.0)
        assert reported[0]["scale"] == pytest.approx(width / (k * 1.0))
    else:
        assert scales[0] == pytest.approx(units / np.sqrt(2 * 0.5))
        assert reported[0]["sigma"] == pytest.approx(width / (k * np.sqrt(2 * 0.5)))


def sum_change(frame: pd.DataFrame, other: pd.DataFrame, k: int) -> tuple[float, int]:
    """The L1 change of the income cell sums (grid units) between two data sets released
    with income alone, and the grid's units."""
    attrs = dp.attributes_of(ONE, ["income"])
    sums = []
    for data in (frame, other):
        codes = dp.encode(data, attrs)
        sums.append(dp.cell_sums(attrs[0], codes[:, 0], dp.insensitive_cells(codes, attrs, k)))
    return float(np.abs(sums[1] - sums[0]).sum()), dp.grid_of(attrs[0])[0]


@pytest.mark.parametrize("seed", range(30))
def test_one_attributes_cell_sums_move_by_at_most_its_width_between_neighbours(seed):
    """Changing one respondent's answer (to a random value, to either bound, to or from
    missing) moves the income cell sums by at most ``units`` in all: the telescoping sum the
    one-attribute noise relies on. A record moved from the lowest to the highest code
    reaches it."""
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(40, 400)), int(rng.integers(2, 12))
    frame = with_missing_income(n, seed)[["income"]]
    worst = 0.0
    for new in (rng.uniform(0, 200_000), 0.0, 200_000.0, np.nan):
        for row in (int(rng.integers(n)), int(frame["income"].fillna(-1).idxmin()),
                    int(frame["income"].fillna(-1).idxmax())):
            other = frame.copy()
            other.loc[row, "income"] = new
            change, units = sum_change(frame, other, k)
            assert change <= units
            worst = max(worst, change)
    # adversarial: a missing answer (the lowest code) becomes the top of the domain
    frame.loc[0, "income"] = np.nan
    other = frame.copy()
    other.loc[0, "income"] = 200_000.0
    change, units = sum_change(frame, other, k)
    assert worst <= units and change == units


# -- zCDP --------------------------------------------------------------------------------------

def test_zcdp_is_calibrated_from_epsilon_and_delta_or_given_as_rho():
    from streamanon import dp_zcdp

    budget = dp.budget_of(1.0, 1e-6)
    assert budget.rho == pytest.approx(dp_zcdp.rho_for(1.0, 1e-6))
    # OpenDP's conversion is tighter than Bun and Steinke's Proposition 1.3: more rho for
    # the same (epsilon, delta), and it converts back to epsilon
    assert budget.rho > dp_zcdp.bun_steinke_rho(1.0, 1e-6) == pytest.approx(
        (np.sqrt(np.log(1e6) + 1) - np.sqrt(np.log(1e6))) ** 2)
    assert dp_zcdp.epsilon_of(budget.rho, 1e-6) == pytest.approx(1.0, rel=1e-8)
    assert dp_zcdp.epsilon_of(budget.rho, 1e-6) <= 1.0
    given = dp.budget_of(rho=0.05)
    assert given.delta == dp.REPORTED_DELTA
    assert given.epsilon == pytest.approx(dp_zcdp.epsilon_of(0.05, dp.REPORTED_DELTA))
    # Bun and Steinke's bound is an upper bound on the tighter epsilon
    assert given.epsilon <= 0.05 + 2 * np.sqrt(0.05 * np.log(1 / dp.REPORTED_DELTA))
    assert dp.budget_of(2.0) == dp.Budget(2.0)  # epsilon alone: pure


@pytest.mark.parametrize("kwargs, message", [
    ({"epsilon": 1.0, "rho": 0.1}, "not both"),
    ({"epsilon": 1.0, "delta": 0.0}, "delta must be"),
    ({"epsilon": 1.0, "delta": 1.0}, "delta must be"),
    ({"rho": 0.1, "delta": -1e-6}, "delta must be"),
    ({"rho": 0.0}, "rho must be"),
    ({"rho": float("inf")}, "rho must be"),
    ({}, "needs epsilon"),
    ({"rho": 1e-300}, "too small"),
])
def test_zcdp_settings_are_checked(kwargs, message):
    with pytest.raises(ParameterError, match=message):
        dp.release(survey(50, 0), SCHEMA, k=5, **kwargs)


def test_zcdp_noise_is_gaussian_of_sigma_sqrt_c_w_over_k_sqrt_2_rho_a():
    """Constant tuples on the grid, one cell each (as in test_dp_guarantees): each cell's
    released-minus-true mean is discrete Gaussian noise on the sum over k. With two
    attributes the L2 sensitivity is sqrt(C) * units, sigma = sqrt(C) w / (k sqrt(2 rho / 2)).
    The N = 2 x 1000 standardised deviations' sum of squares is chi-square(N) to a relative
    1e-6 (the discrete Gaussian of scale sigma >> 1 has variance sigma^2 (1 - O(e^-sigma^2)));
    its 1e-7 and 1 - 1e-7 quantiles bound it (false failure 2e-7), within 18 % of N: a
    sigma 15 % off (sum 0.74 or 1.32 N) fails with probability below 1e-40. Means stay
    within the bounds: the scales are below 16 and the tuples 500 inside."""
    schema = parse_schema({
        "x": {"role": "quasi_identifier", "type": "float", "min": -1024, "max": 1024},
        "y": {"role": "quasi_identifier", "type": "float", "min": -1024, "max": 1024}})
    cells, k, rho = 1000, 10, 2e5
    rng = np.random.default_rng(1)
    tuples = rng.integers(-512, 513, (cells, 2)).astype(float)
    frame = pd.DataFrame(np.repeat(tuples, k, axis=0), columns=["x", "y"])
    out = dp.release(frame, schema, k=k, rho=rho)
    sigma = np.sqrt(cells) * 2048 / (k * np.sqrt(2 * rho / 2))
    assert sigma < 16
    deviations = []
    for name in ("x", "y"):
        info = out.report["attributes"][name]
        assert info["sigma"] == pytest.approx(sigma) and info["rho"] == pytest.approx(rho / 2)
        assert info["noise"] == "discrete gaussian on cell sums" and info["norm"] == "l2"
        released = out.table_in_input_order[name].to_numpy()[::k]
        deviations.append(released - frame[name].to_numpy()[::k])
    statistic = float(((np.concatenate(deviations) / sigma) ** 2).sum())
    n = 2 * cells
    assert stats.chi2.ppf(1e-7, n) <= statistic <= stats.chi2.isf(1e-7, n)
    assert stats.chi2.isf(1e-7, n) < 1.18 * n and stats.chi2.ppf(1e-7, n) > 0.82 * n
    assert out.report["privacy"] == "zcdp" and out.report["rho"] == rho


def test_zcdp_draws_a_cells_level_with_epsilon_sqrt_8_rho_a_over_c():
    """Bounded-range accounting: the exponential mechanism of epsilon_c is epsilon_c^2 / 8
    -zCDP, and the C cells compose, so epsilon_c = sqrt(8 rho_a / C). A cell of k answers
    "a" then draws "a" with odds exp(epsilon_c k / 2), 3 here (p = 3/4); 1000 cells x 4
    releases: the binomial 1e-7 quantiles bound the count (false failure 2e-7), p +- 0.037.
    Pure accounting's epsilon_c = epsilon_a / C at the same epsilon would give odds 1.001."""
    cells, k, releases = 1000, 10, 4
    per_cell = 2 * np.log(3.0) / k
    rho = cells * per_cell ** 2 / 8  # one attribute: rho_a = rho
    schema = parse_schema({"c": {"role": "quasi_identifier", "type": "category",
                                 "levels": ["a", "b"]}})
    frame = pd.DataFrame({"c": ["a"] * (cells // 2 * k) + ["b"] * (cells // 2 * k)})
    own = 0
    for _ in range(releases):
        out = dp.release(frame, schema, k=k, rho=rho)
        assert out.report["attributes"]["c"]["epsilon_per_cell"] == pytest.approx(per_cell)
        released = out.table_in_input_order["c"].to_numpy()
        own += int((released == frame["c"].to_numpy()).sum()) // k
    total = cells * releases
    assert stats.binom.ppf(1e-7, total, 0.75) <= own <= stats.binom.isf(1e-7, total, 0.75)


def test_zcdp_loses_less_than_the_pure_mechanism_at_the_same_epsilon():
    """epsilon = 1, delta = 1e-6 against pure epsilon = 1, six attributes, 100 cells: the
    Gaussian's sigma is 2 sqrt(C m rho) / epsilon ~ 7.6 times below the Laplace's standard
    deviation (sqrt(2) times its scale); reported, not drawn."""
    frame = survey(2000, 5)
    pure = dp.release(frame, SCHEMA, k=20, epsilon=1.0).report["attributes"]
    zcdp = dp.release(frame, SCHEMA, k=20, epsilon=1.0, delta=1e-6).report
    rho = zcdp["rho"]
    for name in ("age", "income", "q1"):
        ratio = np.sqrt(2) * pure[name]["scale"] / zcdp["attributes"][name]["sigma"]
        assert ratio == pytest.approx(2 * np.sqrt(100 * 6 * rho) / 1.0)
    for name in ("education", "region", "smoker"):
        assert zcdp["attributes"][name]["epsilon_per_cell"] == pytest.approx(
            np.sqrt(8 * rho / 6 / 100))
        assert pure[name]["epsilon_per_cell"] == pytest.approx(1 / 6 / 100)


# -- the guarantee names its neighbouring relation ---------------------------------------------

@pytest.mark.parametrize("mechanism", dp.MECHANISMS)
@pytest.mark.parametrize("kwargs", [{"epsilon": 1.0}, {"epsilon": 1.0, "delta": 1e-6},
                                    {"rho": 0.1}])
def test_the_guarantee_names_the_neighbouring_relation_and_never_protects_n(mechanism, kwargs):
    out = dp.release(survey(300, 2), SCHEMA, k=10, mechanism=mechanism, **kwargs)
    said = out.report["guarantee"]
    assert out.report["neighbours"] == dp.NEIGHBOURS
    assert "same size that differ in one respondent's answers" in said
    assert "number of respondents is public" in said
    if "rho" in kwargs or "delta" in kwargs:
        assert f"rho = {out.report['rho']:.4g}" in said
        assert f"delta = {out.report['delta']:g}" in said
    if mechanism == "insensitive":
        start = ("epsilon-differentially private" if "delta" not in out.report
                 else "rho-zero-concentrated differentially private")
        assert said.startswith(start)


def test_a_category_of_levels_0_and_1_is_released_as_0_and_1_not_as_booleans():
    schema = parse_schema({"female": {"role": "quasi_identifier", "type": "category",
                                      "levels": [0, 1]},
                           "age": {"role": "quasi_identifier", "type": "int", "min": 16,
                                   "max": 99}})
    frame = pd.DataFrame({"female": np.arange(200) % 2, "age": np.arange(200) % 80 + 16})
    table = dp.release(frame, schema, k=10, epsilon=1.0).table
    assert set(table["female"]) <= {0, 1}
    assert not any(isinstance(value, (bool, np.bool_)) for value in table["female"])


@pytest.mark.parametrize("kwargs", [{"epsilon": 2.0}, {"epsilon": 1.0, "delta": 1e-7},
                                    {"rho": 0.05}])
def test_a_release_is_drawn_again_as_its_report_describes(kwargs):
    frame = survey(300, 9)
    first = dp.release(frame, SCHEMA, k=10, mechanism="individual_ranking", **kwargs).report
    again = dp.release_as(frame, SCHEMA, first).report
    settings = ("privacy", "k", "mechanism", "scope")
    assert {key: again[key] for key in settings} == {key: first[key] for key in settings}
    for key in ("epsilon", "rho", "delta"):
        assert (key in again) == (key in first)
        if key in first:
            assert again[key] == pytest.approx(first[key])


@pytest.mark.parametrize("m", [1, 2, 8, 15, 70])
def test_the_z_order_key_is_monotone_in_every_attribute_and_fixed_by_the_domain(m):
    """The insensitive order needs a total order of the domain fixed before the data: the
    Z-order key of a record depends on its scaled values alone, and raising any one of them
    never lowers it (so one attribute's order is its sorted order)."""
    rng = np.random.default_rng(m)
    scaled = rng.random((500, m))
    scaled[:5] = 0.0
    scaled[5:10] = 1.0
    keys = dp.morton_keys(scaled)
    assert keys.dtype == np.uint64
    assert np.array_equal(dp.morton_keys(scaled[::-1]), keys[::-1])  # row by row
    j = rng.integers(min(m, 63), size=500)
    raised = scaled.copy()
    raised[np.arange(500), j] = np.minimum(1.0, raised[np.arange(500), j]
                                           + rng.random(500) * 0.5)
    assert (dp.morton_keys(raised) >= keys).all()
    if m == 1:
        assert np.array_equal(np.argsort(keys, kind="stable"),
                              np.argsort(np.floor(scaled[:, 0] * 2 ** dp.MORTON_BITS),
                                         kind="stable"))
