from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from streamanon.errors import InputError, KAnonymityError
from streamanon.metrics import (
    aggregate,
    cell_means,
    check_k_anonymity,
    check_partition,
    check_table_k_anonymity,
    distortion,
    fit_and_standardise,
    fit_standardisation,
    information_loss,
    relative_distortion_increase,
    require_k_anonymous,
    require_k_anonymous_table,
    sample_unique_share,
    sse,
    sst,
    standardise,
)


def test_standardise_gives_mean_zero_and_population_std_one():
    X = np.random.default_rng(0).normal(5, 3, (1000, 4))
    Z = standardise(X)
    assert np.allclose(Z.mean(axis=0), 0, atol=1e-12)
    assert np.allclose(Z.std(axis=0, ddof=0), 1, atol=1e-12)


def test_standardise_uses_population_not_sample_std():
    Z = standardise(np.array([[0.0], [2.0]]))
    assert Z.ravel().tolist() == [-1.0, 1.0]  # population std 1; the sample std would give 0.707


def test_constant_column_becomes_zero():
    X = np.column_stack([np.arange(5.0), np.full(5, 0.1)])
    Z = standardise(X)
    assert (Z[:, 1] == 0).all()
    assert np.isfinite(Z).all()


def test_standardisation_inverts():
    X = np.random.default_rng(1).normal(size=(50, 3)) * [1, 10, 100]
    s = fit_standardisation(X)
    assert np.allclose(s.invert(s.apply(X)), X)


def test_sst_of_standardised_data_is_n_times_m():
    Z = standardise(np.random.default_rng(2).normal(size=(300, 5)))
    assert sst(Z) == pytest.approx(300 * 5)


def test_sse_and_distortion_on_a_hand_example():
    Z = np.array([[0.0], [2.0], [10.0], [12.0]])
    labels = np.array([0, 0, 1, 1])
    assert sse(Z, labels) == pytest.approx(4.0)  # each record 1 from its cell mean
    assert sst(Z) == pytest.approx(104.0)  # mean 6: 36 + 16 + 16 + 36
    assert distortion(Z, labels) == pytest.approx(4 / 104)
    assert information_loss(Z, labels) == pytest.approx(400 / 104)


def test_one_cell_has_distortion_one_and_singletons_zero():
    Z = standardise(np.random.default_rng(3).normal(size=(20, 2)))
    assert distortion(Z, np.zeros(20, dtype=int)) == pytest.approx(1.0)
    assert distortion(Z, np.arange(20)) == 0.0


def test_aggregate_replaces_each_record_with_its_cell_mean():
    X = np.array([[1.0, 10.0], [3.0, 20.0], [5.0, 0.0]])
    out = aggregate(X, np.array([0, 0, 1]))
    assert out.tolist() == [[2.0, 15.0], [2.0, 15.0], [5.0, 0.0]]


@pytest.mark.parametrize("seed", range(5))
def test_cell_means_are_the_per_column_bincount_sums_over_the_sizes(seed):
    """The one-pass kernel against the definition, bit for bit: labels of any integer type
    with empty cells among them, a matrix that is a strided view."""
    rng = np.random.default_rng(seed)
    wide = rng.normal(size=(500, 9)) * 10.0 ** rng.integers(-3, 4, size=9)
    X = wide[:, ::2]  # not contiguous
    labels = rng.integers(0, 80, size=500).astype([np.int32, np.int64, np.uint16][seed % 3])
    means, sizes = cell_means(X, labels)
    expected_sizes = np.bincount(labels, minlength=int(labels.max()) + 1)
    assert np.array_equal(sizes, expected_sizes)
    seen = expected_sizes > 0
    for j in range(X.shape[1]):
        sums = np.bincount(labels, weights=X[:, j], minlength=len(expected_sizes))
        assert np.array_equal(means[seen, j], sums[seen] / expected_sizes[seen])
    assert np.isnan(means[~seen]).all()


@pytest.mark.parametrize("seed", range(5))
def test_sse_and_sst_are_the_sums_of_squares_of_their_definition(seed):
    """The compiled sums against the numpy expressions of the definition, to rounding, on
    data of mixed scales and a strided view."""
    rng = np.random.default_rng(seed)
    Z = (rng.normal(size=(700, 8)) * 10.0 ** rng.integers(-2, 3, size=8))[:, ::2]
    labels = rng.integers(0, 60, size=700)
    means = np.stack([Z[labels == c].mean(axis=0) if (labels == c).any() else np.zeros(4)
                      for c in range(60)])
    assert sse(Z, labels) == pytest.approx(np.sum((Z - means[labels]) ** 2), rel=1e-13)
    assert sst(Z) == pytest.approx(np.sum((Z - Z.mean(axis=0)) ** 2), rel=1e-13)
    assert sse(Z, np.zeros(700, dtype=np.int32)) == pytest.approx(sst(Z), rel=1e-13)


def test_sse_refuses_labels_of_another_length():
    with pytest.raises(ValueError, match="3 labels for 2 records"):
        sse(np.zeros((2, 1)), np.array([0, 0, 1]))


def test_cell_means_of_no_records_and_no_columns():
    means, sizes = cell_means(np.zeros((0, 3)), np.zeros(0, dtype=np.int64))
    assert means.shape == (0, 3) and sizes.shape == (0,)
    means, sizes = cell_means(np.zeros((4, 0)), np.array([0, 1, 1, 0]))
    assert means.shape == (2, 0) and sizes.tolist() == [2, 2]


def test_cell_means_refuse_labels_of_another_length_or_kind():
    """The compiled sums index by label without bounds checks: labels shorter than the
    records crashed the process (found by review)."""
    X = np.zeros((200_000, 2))
    for labels in (np.array([0, 1, 1]), np.zeros(200_001, dtype=np.int64)):
        with pytest.raises(ValueError, match="labels for 200000 records"):
            cell_means(X, labels)
    with pytest.raises(ValueError, match="integer"):
        cell_means(np.zeros((2, 1)), np.array([0.0, 0.7]))


def test_sse_refuses_a_scalar_label():
    with pytest.raises(ValueError, match="labels for 2 records"):
        sse(np.zeros((2, 1)), np.array(0))


def test_cell_means_refuse_a_negative_label():
    with pytest.raises(ValueError, match="non-negative"):
        cell_means(np.zeros((2, 1)), np.array([0, -1]))


@pytest.mark.parametrize("n, m", [(1, 2), (5, 2), (3001, 3), (20_000, 7), (4097, 15),
                                  (1000, 20)])
def test_the_compiled_standardisation_is_numpys_bit_for_bit(n, m):
    rng = np.random.default_rng(n + m)
    X = rng.normal(size=(n, m)) * 10.0 ** rng.integers(-4, 5, size=m) + rng.normal(size=m)
    X[:, 0] = 2.5  # a constant column
    if m > 3:
        X[:, 3] = np.round(X[:, 3])  # ties
    fitted = fit_and_standardise(X)
    assert fitted is not None
    scaling, Z = fitted
    expected = fit_standardisation(X)
    assert np.array_equal(scaling.mean, expected.mean)
    assert np.array_equal(scaling.scale, expected.scale)
    assert np.array_equal(Z, expected.apply(X))


def test_the_compiled_standardisation_leaves_the_other_cases_to_the_general_way():
    X = np.random.default_rng(0).normal(size=(50, 3))
    assert fit_and_standardise(X[:, :1]) is None  # one column: numpy sums it pairwise
    assert fit_and_standardise(np.zeros((0, 3))) is None
    for bad in (np.nan, np.inf):
        Y = X.copy()
        Y[7, 2] = bad
        assert fit_and_standardise(Y) is None
    fitted = fit_and_standardise(np.asfortranarray(X))  # another layout: the same values
    assert fitted is not None and np.array_equal(fitted[1], fit_standardisation(X).apply(X))


def test_delta():
    assert relative_distortion_increase(0.11, 0.10) == pytest.approx(0.1)
    assert relative_distortion_increase(0.0, 0.0) == 0.0


def test_check_partition_rejects_small_cells_and_bad_labels():
    check_partition(np.array([0, 0, 1, 1, 1]), 5, 2)
    with pytest.raises(KAnonymityError, match="fewer than k = 3"):
        check_partition(np.array([0, 0, 1, 1, 1]), 5, 3)
    with pytest.raises(KAnonymityError):
        check_partition(np.array([0, 0, 2, 2]), 4, 2)  # label 1 unused
    with pytest.raises(KAnonymityError):
        check_partition(np.array([0, 0, 0]), 4, 1)  # a record without a cell


def test_k_anonymity_check_counts_groups():
    released = np.array([[1.0, 2.0]] * 3 + [[5.0, 5.0]] * 2 + [[7.0, 7.0]] * 3)
    report = check_k_anonymity(released, 3)
    assert not report.ok
    assert (report.n_groups, report.smallest_group, report.groups_below_k) == (3, 2, 1)
    assert report.records_below_k == 2
    assert check_k_anonymity(released, 2).ok


def test_k_anonymity_gate_raises():
    with pytest.raises(KAnonymityError, match="not 4-anonymous"):
        require_k_anonymous(np.array([[1.0]] * 3 + [[2.0]] * 4), 4)


def test_fewer_records_than_k_is_not_k_anonymous():
    assert not check_k_anonymity(np.array([[1.0], [1.0]]), 3).ok


def test_table_check_counts_groups_of_text_and_numbers():
    frame = pd.DataFrame({"region": ["n", "n", "n", "s", "s", "s", "s"],
                          "age": [30.0, 30.0, 30.0, 30.0, 30.0, 41.0, 41.0]})
    report = check_table_k_anonymity(frame, ["region", "age"], 3)
    assert (report.n_records, report.n_groups, report.smallest_group) == (7, 3, 2)
    assert (report.groups_below_k, report.records_below_k) == (2, 4)
    assert check_table_k_anonymity(frame, ["region", "age"], 2).ok
    assert check_table_k_anonymity(frame, ["region"], 3).ok


def test_nan_equals_nan_when_grouping():
    frame = pd.DataFrame({"a": [np.nan, np.nan, 1.0, 1.0], "b": [2.0, 2.0, np.nan, np.nan]})
    report = check_table_k_anonymity(frame, ["a", "b"], 2)
    assert report.ok and report.n_groups == 2


def test_missing_value_differs_from_every_value():
    frame = pd.DataFrame({"a": [np.nan, np.nan, 0.0, 0.0], "b": ["", "", None, None]})
    assert check_table_k_anonymity(frame, ["a"], 1).n_groups == 2
    assert check_table_k_anonymity(frame, ["b"], 1).n_groups == 2


def test_none_nan_and_pd_na_in_an_object_column_are_one_missing_value():
    frame = pd.DataFrame({"job": pd.Series(["a", None, np.nan, pd.NA, "a"], dtype=object)})
    report = check_table_k_anonymity(frame, ["job"], 2)
    assert report.n_groups == 2 and report.smallest_group == 2 and report.ok


def test_floats_are_compared_exactly():
    frame = pd.DataFrame({"a": [1.0, 1.0000000001]})
    assert check_table_k_anonymity(frame, ["a"], 1).n_groups == 2


def test_categorical_columns_group_by_category_and_missing():
    frame = pd.DataFrame({"sex": pd.Categorical(["f", None, "f", None], categories=["f", "m"])})
    report = check_table_k_anonymity(frame, ["sex"], 2)
    assert report.ok and report.n_groups == 2


def test_table_check_agrees_with_the_array_check_on_numeric_data():
    rng = np.random.default_rng(7)
    for _ in range(50):
        n, m, k = int(rng.integers(1, 300)), int(rng.integers(1, 4)), int(rng.integers(1, 6))
        X = rng.integers(0, 4, (n, m)) + rng.choice([0.0, 0.5, 1e-9], (n, m))
        cols = [f"q{j}" for j in range(m)]
        assert check_table_k_anonymity(pd.DataFrame(X, columns=cols), cols, k) == \
            check_k_anonymity(X, k)


def test_table_check_of_an_empty_table():
    report = check_table_k_anonymity(pd.DataFrame({"a": []}), ["a"], 2)
    assert report.n_records == 0 and not report.ok


def test_table_gate_raises():
    frame = pd.DataFrame({"a": ["x"] * 3 + [None] * 4})
    with pytest.raises(KAnonymityError, match=r"not 4-anonymous: 1 quasi-identifier groups "
                                              r"\(3 records\)"):
        require_k_anonymous_table(frame, ["a"], 4)
    assert require_k_anonymous_table(frame, ["a"], 3).n_groups == 2


def test_table_check_rejects_unknown_columns():
    with pytest.raises(InputError, match=r"unknown column\(s\): b"):
        check_table_k_anonymity(pd.DataFrame({"a": [1]}), ["a", "b"], 1)


def test_sample_unique_share():
    frame = pd.DataFrame({"a": [1.0, 1.0, 2.0, np.nan, np.nan, 3.0],
                          "b": ["x", "x", "x", None, None, "y"]})
    assert sample_unique_share(frame, ["a", "b"]) == pytest.approx(2 / 6)
    assert sample_unique_share(frame, ["b"]) == pytest.approx(1 / 6)
    assert sample_unique_share(frame.iloc[:0], ["a"]) == 0.0
