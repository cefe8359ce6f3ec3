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


def test_the_noise_is_an_integer_with_the_laplace_distribution_of_its_scale():
    rng = np.random.default_rng(7)
    noise = dp.discrete_laplace(1000.0, 20_000, rng)
    assert noise.dtype == np.int64  # integers: no floating-point bits to read the data from
    assert stats.kstest(noise / 1000.0, stats.laplace(scale=1.0).cdf).pvalue > 0.01
    # and not that of another scale: the test can tell them apart
    assert stats.kstest(noise / 1000.0, stats.laplace(scale=0.85).cdf).pvalue < 1e-6


def test_released_means_are_noisy_integer_sums_on_the_grid_never_raw_floating_point():
    """A cell's released mean is (floor + step * (integer sum + integer noise) / size): the
    low-order bits of a float Laplace draw would tell which true mean it was added to
    (Mironov, CCS 2012); an integer sum on a fixed grid has none."""
    frame = survey(500, 3)
    attrs = dp.attributes_of(SCHEMA, ["income"])
    out = dp.release(frame, SCHEMA, k=10, epsilon=50.0, rng=np.random.default_rng(4))
    released = out.table_in_input_order["income"].to_numpy()
    inside = (released > 0) & (released < 200_000)
    assert inside.any()
    step = attrs[0].width / dp.GRID_STEPS
    released_attrs = dp.attributes_of(SCHEMA, dp.released_columns(SCHEMA, "all"))
    cells = dp.insensitive_cells(dp.encode(frame, released_attrs), released_attrs, 10)
    sizes = np.empty(len(frame))
    for rows in cells:
        sizes[rows] = len(rows)
    units = (released[inside] - attrs[0].floor) * sizes[inside] / step
    assert np.abs(units - np.rint(units)).max() < 1e-3


def test_the_exponential_mechanism_draws_in_proportion_to_exp_of_half_epsilon_times_utility():
    rng = np.random.default_rng(3)
    utility = np.array([[0.0, 1.0, 3.0]] * 60_000)
    drawn = dp.exponential(utility, epsilon=1.0, rng=rng)
    want = np.exp(0.5 * utility[0]) / np.exp(0.5 * utility[0]).sum()
    got = np.bincount(drawn, minlength=3) / len(drawn)
    assert stats.chisquare(np.bincount(drawn, minlength=3), want * len(drawn)).pvalue > 0.01
    assert np.abs(got - want).max() < 0.01


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
    out = dp.release(frame, SCHEMA, k=10, epsilon=1.0, mechanism=mechanism,
                     rng=np.random.default_rng(5))
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
    out = dp.release(frame, SCHEMA, k=20, epsilon=6.0, mechanism="individual_ranking",
                     rng=np.random.default_rng(0))
    income = out.report["attributes"]["income"]
    assert income["epsilon"] == pytest.approx(1.0)  # six attributes
    assert income["scale"] == pytest.approx(200_000 / (20 * 1.0))
    # isotonic post-processing: the released values, in the order of the true ones, never go
    # down (ties among equal true values aside)
    order = np.argsort(frame["income"].to_numpy(), kind="stable")
    released = out.table_in_input_order["income"].to_numpy()[order]
    assert (np.diff(released) >= -1e-9).all()
    # a level's index is a number of width L - 1 to individual ranking: a Laplace mean, made
    # monotone and rounded (far fewer values changed than the exponential mechanism per cell)
    attrs = dp.attributes_of(SCHEMA, ["education", "region"])
    codes = dp.encode(frame, attrs)
    released = dp.encode(out.table_in_input_order, attrs)
    for j, name in enumerate(["education", "region"]):
        levels = len(attrs[j].levels)
        assert out.report["attributes"][name]["scale"] == pytest.approx((levels - 1) / 20)
        order = np.argsort(codes[:, j], kind="stable")
        assert (np.diff(released[order, j]) >= 0).all()
        assert (released[:, j] != codes[:, j]).mean() < 0.05


def test_protecting_only_the_quasi_identifiers_is_never_called_differentially_private():
    frame = survey(300, 4)
    out = dp.release(frame, SCHEMA, k=10, epsilon=1.0, mechanism="individual_ranking",
                     scope="quasi_identifiers", rng=np.random.default_rng(1))
    assert out.report["differentially_private"] is False
    assert "not differentially private" in out.report["guarantee"]
    assert set(out.report["attributes"]) == {"age", "income", "education", "region"}
    # the confidential answers are published as they are
    assert (out.table_in_input_order["q1"].to_numpy() == frame["q1"].to_numpy()).all()


def test_the_same_generator_gives_the_same_release_and_a_fresh_one_another():
    frame = survey(400, 6)
    one = dp.release(frame, SCHEMA, k=5, epsilon=2.0, rng=np.random.default_rng(9)).table
    two = dp.release(frame, SCHEMA, k=5, epsilon=2.0, rng=np.random.default_rng(9)).table
    pd.testing.assert_frame_equal(one, two)
    fresh = dp.release(frame, SCHEMA, k=5, epsilon=2.0).table  # cryptographically seeded
    assert not one.equals(fresh)


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
    # the order is still by distance to the corner: age, the one that varies
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
    out = dp.release(frame[["income", "education"]], schema, k=10, epsilon=1e6,
                     mechanism=mechanism, rng=np.random.default_rng(2))
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
        for seed in range(20):  # the single level is released whatever the noise
            table = dp.release(frame, schema, k=5, epsilon=0.5, mechanism=mechanism,
                               rng=np.random.default_rng(seed)).table
            assert str(table["smoker"].dtype) == "boolean"
            assert str(table["visits"].dtype) == "Int64"
            assert set(table["country"]) == {"fr"}


def test_a_huge_epsilon_draws_the_best_level_and_a_tiny_one_is_refused():
    utility = np.array([[0.0, 150.0, 200.0]])
    assert dp.exponential(utility, 1e308, np.random.default_rng(0)).tolist() == [2]
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
