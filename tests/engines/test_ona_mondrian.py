"""MDAV*, ONA*, the Mondrian family and MONA (paper 004): published information loss, the
paper's claims, a plain reference for the Mondrian cuts, and the MONA end points."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from streamanon.engines import run_engine
from streamanon.engines.mondrian import mona, mona_2d, mondrian, mondrian_v, mondrian_v2d
from streamanon.engines.ona import mdav_star, ona_star
from streamanon.errors import ParameterError
from streamanon.metrics import information_loss, standardise

KS = (2, 3, 4, 5, 7, 10)
# Thaeter & Reischuk 2021 (paper 004), Table 1 (IL %), copied in docs/design/references.md.
PUBLISHED = {
    "mdav_star": {
        "census": (3.17, 5.78, 7.44, 8.81, 11.37, 14.01),
        "tarragona": (9.44, 16.14, 19.19, 22.25, 28.40, 34.75),
        "eia": (0.22, 0.45, 0.62, 0.91, 2.03, 2.63),
    },
    "ona_star": {
        "census": (3.06, 5.26, 6.81, 7.99, 10.07, 12.46),
        "tarragona": (9.06, 15.11, 17.79, 20.69, 26.34, 31.15),
        "eia": (0.20, 0.37, 0.52, 0.79, 1.63, 1.99),
    },
}


@pytest.fixture(scope="module")
def table1(benchmark_data):
    """IL of mdav, mdav_star and ona_star on the three benchmarks for every k of Table 1."""
    out = {}
    for dataset, raw in benchmark_data.items():
        Z = standardise(raw)
        for name in ("mdav", "mdav_star", "ona_star"):
            out[name, dataset] = [information_loss(Z, run_engine(name, Z, k)) for k in KS]
    return out


@pytest.mark.parametrize("dataset", ["census", "tarragona", "eia"])
def test_mdav_star_matches_table_1(table1, dataset):
    """Within 0.025 IL points (the table's rounding plus 0.02): the paper leaves MDAV*'s exact
    tie and cost conventions open (digest sec. 2.2)."""
    ours = np.array(table1["mdav_star", dataset])
    published = np.array(PUBLISHED["mdav_star"][dataset])
    assert np.all(np.abs(ours - published) <= 0.025), (ours, published)


@pytest.mark.parametrize("dataset", ["census", "tarragona", "eia"])
def test_ona_star_is_within_2_percent_of_table_1_or_better(table1, dataset):
    ours = np.array(table1["ona_star", dataset])
    published = np.array(PUBLISHED["ona_star"][dataset])
    assert np.all(ours <= published * 1.02), (ours, published)


@pytest.mark.parametrize("dataset", ["census", "tarragona", "eia"])
def test_ona_star_never_worse_than_mdav_or_mdav_star(table1, dataset):
    ona = np.array(table1["ona_star", dataset])
    assert np.all(ona <= np.array(table1["mdav", dataset]))
    assert np.all(ona <= np.array(table1["mdav_star", dataset]))


@pytest.mark.parametrize("seed", range(6))
def test_ona_star_improves_on_its_mdav_star_start(seed):
    rng = np.random.default_rng(seed)
    n, m, k = rng.integers(20, 300), rng.integers(1, 6), int(rng.integers(2, 8))
    X = standardise(rng.standard_normal((n, m)) * rng.uniform(0.1, 10, m))
    assert information_loss(X, ona_star(X, k)) <= information_loss(X, mdav_star(X, k)) + 1e-9


def test_ona_star_max_rounds_zero_is_the_post_split_start():
    X = standardise(np.random.default_rng(4).standard_normal((300, 3)))
    start = ona_star(X, 5, max_rounds=0)
    assert np.bincount(start).max() <= 9  # MDAV* cells of 2k or more were split
    assert information_loss(X, ona_star(X, 5)) < information_loss(X, start)
    with pytest.raises(ParameterError, match="max_rounds"):
        ona_star(X, 5, max_rounds=-1)


# -- Mondrian ------------------------------------------------------------------------------------


def reference_mondrian(X: np.ndarray, k: int, rule: str, limit: int | None = None) -> list:
    """Plain recursive Mondrian (paper 004 Alg. 4/5 with the documented tie rule): the parts
    as sorted index lists, depth-first, left first."""
    limit = 2 * k - 1 if limit is None else limit
    parts = []

    def project(rows):
        Y = X[rows]
        if rule == "range":
            return Y[:, int(np.argmax(Y.max(0) - Y.min(0)))]
        C = (Y - Y.mean(0)).T @ (Y - Y.mean(0))
        best, direction = -1.0, None
        for j in range(X.shape[1]):
            if C[j, j] > best:
                best, direction = C[j, j], (j, None, 1)
        if rule == "v2d":
            for a in range(X.shape[1]):
                for b in range(a + 1, X.shape[1]):
                    for o in (1, -1):
                        v = 0.5 * (C[a, a] + C[b, b]) + o * C[a, b]
                        if v > best:
                            best, direction = v, (a, b, o)
        a, b, o = direction
        return Y[:, a] if b is None else Y[:, a] + o * Y[:, b]

    def recurse(rows):
        if len(rows) <= limit or len(rows) < 2 * k:
            parts.append(sorted(rows.tolist()))
            return
        p = project(rows)
        left = p <= np.median(p)
        if left.sum() < k or (~left).sum() < k:
            order = np.lexsort((rows, p))
            left = np.zeros(len(rows), bool)
            left[order[: len(rows) // 2]] = True
        recurse(rows[left])
        recurse(rows[~left])

    recurse(np.arange(len(X)))
    return parts


def parts_of(labels: np.ndarray) -> list:
    return sorted(np.flatnonzero(labels == c).tolist() for c in np.unique(labels))


MONDRIANS = [(mondrian, "range"), (mondrian_v, "v"), (mondrian_v2d, "v2d")]


@pytest.mark.parametrize("engine,rule", MONDRIANS)
@pytest.mark.parametrize("n,m,k", [(1, 1, 1), (9, 2, 5), (10, 2, 5), (57, 3, 4), (500, 4, 6),
                                   (2000, 7, 10)])
def test_mondrian_equals_the_plain_reference(engine, rule, n, m, k):
    X = standardise(np.random.default_rng(n + m).standard_normal((n, m)) * [1, 3, 0.5, 2, 1,
                                                                            1, 1][:m])
    labels = engine(X, k)
    assert parts_of(labels) == sorted(reference_mondrian(X, k, rule))
    sizes = np.bincount(labels)
    assert sizes.min() >= k and (n < 2 * k or sizes.max() <= 2 * k - 1)


@pytest.mark.parametrize("engine,rule", MONDRIANS)
def test_mondrian_with_ties_at_the_median_cuts_by_rank(engine, rule):
    rng = np.random.default_rng(1)
    X = standardise(np.column_stack([rng.integers(0, 2, 300), rng.integers(0, 3, 300)])
                    .astype(float))
    labels = engine(X, 7)
    assert parts_of(labels) == sorted(reference_mondrian(X, 7, rule))
    assert np.bincount(labels).min() >= 7 and np.bincount(labels).max() <= 13


def test_mondrian_v2d_cuts_along_the_diagonal_of_correlated_data():
    rng = np.random.default_rng(2)
    t = rng.standard_normal(400)
    X = np.column_stack([t, t]) + 0.01 * rng.standard_normal((400, 2))
    labels = mondrian_v2d(X, 101)  # one cut (halves of 200 < 2k): along (e1 + e2) / sqrt(2)
    along = X.sum(axis=1)
    assert len(np.unique(labels)) == 2
    assert along[labels == labels[np.argmin(along)]].max() < along[labels != labels[
        np.argmin(along)]].min()


def test_mondrian_v_beats_mondrian_on_average(benchmark_data):
    """Paper 004: Mondrian-V has about 20 % lower IL than Mondrian on average (Table 6)."""
    ratios = []
    for raw in benchmark_data.values():
        Z = standardise(raw)
        ratios += [information_loss(Z, mondrian_v(Z, k)) / information_loss(Z, mondrian(Z, k))
                   for k in KS]
    assert np.mean(ratios) < 0.9


# -- MONA ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gaussian():
    return standardise(np.random.default_rng(7).standard_normal((1500, 4)))


def test_mona_end_points_are_mondrian_v_and_ona_star(gaussian):
    assert np.array_equal(mona(gaussian, 5, rho=0.0), mondrian_v(gaussian, 5))
    assert np.array_equal(mona_2d(gaussian, 5, rho=0.0), mondrian_v2d(gaussian, 5))
    assert np.array_equal(mona(gaussian, 5, rho=1.0), ona_star(gaussian, 5))
    assert np.array_equal(mona_2d(gaussian, 5, rho=1.0), ona_star(gaussian, 5))


def test_mona_parts_are_the_reference_cuts_and_each_part_is_ona_star(gaussian):
    rho, k = 0.6, 5
    labels = mona(gaussian, k, rho=rho, n_threads=1)
    limit = int(np.floor(len(gaussian) ** rho))
    for rows in reference_mondrian(gaussian, k, "v", limit):
        rows = np.array(rows)
        expected = ona_star(gaussian[rows], k) if len(rows) >= 2 * k else np.zeros(len(rows))
        assert parts_of(labels[rows]) == parts_of(expected)


def test_mona_result_does_not_depend_on_the_thread_count(gaussian):
    assert np.array_equal(mona(gaussian, 4, rho=0.7, n_threads=1),
                          mona(gaussian, 4, rho=0.7, n_threads=3))


def test_mona_information_loss_falls_as_rho_grows(gaussian):
    losses = [information_loss(gaussian, mona(gaussian, 5, rho=rho)) for rho in
              (0.0, 0.4, 0.7, 1.0)]
    assert all(a > b for a, b in itertools.pairwise(losses)), losses


@pytest.mark.parametrize("bad", [-0.1, 1.5, "half", True])
def test_mona_rejects_rho_outside_0_1(bad):
    with pytest.raises(ParameterError, match="rho"):
        run_engine("mona", np.zeros((10, 2)), 2, rho=bad)
