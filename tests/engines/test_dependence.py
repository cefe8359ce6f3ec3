"""Dependence-preserving microaggregation (paper 002): partition invariants, the end points and
the extended-point equivalence, the D_X / D_Y trade-off in lambda, the distortion measures, the
digest's independent Census numbers, and parameter errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from streamanon.engines import run_engine
from streamanon.engines.dependence import (
    confidential_distortion,
    dependence,
    dependence_beta,
    quasi_identifier_distortion,
)
from streamanon.errors import InputError, ParameterError
from streamanon.metrics import distortion, sse, standardise

# (n, m_X, m_Y, k): n = k, n < 2k, 2k <= n < 3k, k = 1 and 2, and ordinary cases.
SHAPES = [
    (1, 1, 1, 1),
    (5, 2, 1, 5),
    (7, 2, 1, 1),
    (9, 2, 3, 5),
    (12, 3, 2, 5),
    (14, 3, 2, 5),
    (5, 4, 2, 2),
    (31, 3, 1, 2),
    (100, 5, 3, 10),
    (300, 4, 7, 7),
]
LAMS = [0.0, 0.3, 1.0]
SWEEP = [round(0.1 * i, 1) for i in range(11)]


def _data(n: int, m_x: int, m_y: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Standardised X and raw-unit Y whose first column depends on X (so lambda matters)."""
    rng = np.random.default_rng(seed)
    X = standardise(rng.standard_normal((n, m_x)))
    Y = 50.0 + 10.0 * rng.standard_normal((n, m_y))
    Y[:, 0] += 10.0 * X[:, 0] ** 2
    return X, Y


def _beta(lam: float, m_x: int, m_y: int) -> float:
    """Paper 002 section IV.A, written out here rather than imported."""
    return math.sqrt(lam / (1.0 - lam) * m_x / m_y)


def _sweep(X: np.ndarray, Y: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, list]:
    cells = [run_engine("dependence", X, k, Y=Y, lam=lam) for lam in SWEEP]
    d_x = np.array([quasi_identifier_distortion(X, c) for c in cells])
    d_y = np.array([confidential_distortion(Y, c) for c in cells])
    return d_x, d_y, cells


@pytest.fixture(scope="module")
def tradeoff() -> tuple[np.ndarray, np.ndarray]:
    """D_X and D_Y over lambda = 0, 0.1, ..., 1 on a seeded dataset, k = 5."""
    X, Y = _data(400, 3, 2, seed=2)
    d_x, d_y, _ = _sweep(X, Y, 5)
    return d_x, d_y


@pytest.mark.parametrize("n,m_x,m_y,k", SHAPES)
@pytest.mark.parametrize("lam", LAMS)
@pytest.mark.parametrize("engine", ["mdav", "mdav_star"])
def test_every_cell_has_at_least_k_and_every_record_one_cell(n, m_x, m_y, k, lam, engine):
    X, Y = _data(n, m_x, m_y, n * 100 + m_x * 10 + k)
    cells = dependence(X, k, Y=Y, lam=lam, engine=engine)
    assert cells.shape == (n,) and cells.dtype == np.int64
    assert cells.min() >= 0
    sizes = np.bincount(cells)
    assert sizes.sum() == n and sizes.min() >= k  # labels 0..c-1, all used, each >= k
    if n < 2 * k:
        assert len(sizes) == 1
    if k == 1 and engine == "mdav":
        assert len(sizes) == n


@pytest.mark.parametrize("lam", [0.0, 0.3, 0.7, 1.0])
def test_partition_is_deterministic(lam):
    X, Y = _data(250, 3, 2, seed=11)
    first = run_engine("dependence", X, 6, Y=Y, lam=lam)
    second = run_engine("dependence", X.copy(), 6, Y=Y.copy(), lam=lam)
    assert np.array_equal(first, second)


@pytest.mark.parametrize("engine", ["mdav", "mdav_star"])
def test_lambda_zero_is_the_wrapped_engine_on_x(engine):
    X, Y = _data(300, 4, 3, seed=5)
    expected = run_engine(engine, X, 7)
    assert np.array_equal(run_engine("dependence", X, 7, Y=Y, lam=0.0, engine=engine),
                          expected)


@pytest.mark.parametrize("engine", ["mdav", "mdav_star"])
def test_lambda_one_is_the_wrapped_engine_on_standardised_y(engine):
    X, Y = _data(300, 4, 3, seed=6)
    expected = run_engine(engine, standardise(Y), 7)
    assert np.array_equal(run_engine("dependence", X, 7, Y=Y, lam=1.0, engine=engine),
                          expected)
    assert not np.array_equal(expected, run_engine(engine, X, 7))  # the case is not vacuous


@pytest.mark.parametrize("engine", ["mdav", "mdav_star"])
@pytest.mark.parametrize("lam", [0.1, 0.5, 0.9])
def test_interior_lambda_is_the_wrapped_engine_on_extended_points(engine, lam):
    X, Y = _data(300, 4, 3, seed=7)
    extended = np.hstack([X, _beta(lam, 4, 3) * standardise(Y)])
    expected = run_engine(engine, extended, 7)
    assert np.array_equal(run_engine("dependence", X, 7, Y=Y, lam=lam, engine=engine),
                          expected)


def test_wrapped_engine_parameters_are_passed_on():
    X, Y = _data(200, 3, 2, seed=8)
    extended = np.hstack([X, _beta(0.4, 3, 2) * standardise(Y)])
    expected = run_engine("ona_star", extended, 5, max_rounds=1)
    cells = run_engine("dependence", X, 5, Y=Y, lam=0.4, engine="ona_star",
                       engine_params={"max_rounds": 1})
    assert np.array_equal(cells, expected)


def test_partition_does_not_depend_on_the_units_of_y():
    X, Y = _data(200, 3, 2, seed=9)
    rescaled = Y * np.array([1000.0, 0.01]) - 7.0
    for lam in (0.3, 1.0):
        assert np.array_equal(dependence(X, 5, Y=Y, lam=lam), dependence(X, 5, Y=rescaled,
                                                                          lam=lam))


def test_beta_matches_the_digest_table():
    """Digest section 2.4: beta for m_X = 6, m_Y = 7 (Census, Tarragona) and m_X = m_Y = 1."""
    census = {0.1: 0.3086, 0.2: 0.4629, 0.5: 0.9258, 0.7: 1.4142, 0.9: 2.7775}
    for lam, beta in census.items():
        assert dependence_beta(lam, 6, 7) == pytest.approx(beta, abs=5e-5)
    assert dependence_beta(0.9, 1, 1) == pytest.approx(3.0)
    assert dependence_beta(0.0, 6, 7) == 0.0
    assert dependence_beta(1.0, 6, 7) == math.inf


@pytest.mark.parametrize("lam", [0.2, 0.5, 0.8])
def test_extended_error_is_proportional_to_the_lagrangian(lam):
    """Paper 002 section IV.A: for any partition, the SSE of the points (x, beta y) is
    n m_X / (1 - lam) * ((1 - lam) D_X + lam D_Y); this is why any engine minimises D."""
    X, Y = _data(120, 3, 2, seed=10)
    cells = np.random.default_rng(0).permutation(np.arange(120) % 17)
    lagrangian = ((1 - lam) * quasi_identifier_distortion(X, cells)
                  + lam * confidential_distortion(Y, cells))
    extended = np.hstack([X, _beta(lam, 3, 2) * standardise(Y)])
    assert sse(extended, cells) == pytest.approx(120 * 3 / (1 - lam) * lagrangian, rel=1e-12)


def test_confidential_distortion_falls_and_quasi_identifier_distortion_rises_with_lambda(
        tradeoff):
    """Minimisers of (1 - lam) D_X + lam D_Y have D_Y non-increasing and D_X non-decreasing in
    lam. MDAV is a heuristic, and the paper's curves are only "roughly" monotone (digest
    section 5.2, Fig. 9), so a step against the direction may be up to 2 % of the curve's
    span; the end points must still differ by far more."""
    d_x, d_y = tradeoff
    span_x, span_y = d_x.max() - d_x.min(), d_y.max() - d_y.min()
    assert np.all(np.diff(d_x) >= -0.02 * span_x)
    assert np.all(np.diff(d_y) <= 0.02 * span_y)
    assert d_x[-1] > 3 * d_x[0] and d_y[-1] < d_y[0] / 3


def test_small_lambda_buys_more_dependence_than_it_costs_in_distortion(tradeoff):
    """Paper 002 section V: at low lambda the relative fall of D_Y exceeds the relative rise
    of D_X (below the dotted line of Figs. 9(b)-12(b))."""
    d_x, d_y = tradeoff
    rise_x = d_x[1] / d_x[0] - 1
    fall_y = 1 - d_y[1] / d_y[0]
    assert fall_y > rise_x > 0


def test_chosen_partition_minimises_its_own_lagrangian_better_than_the_others():
    """The partition designed at lam has a lower (1 - lam) D_X + lam D_Y than the partitions
    designed at other lambdas: below their mean at every lam, and at most 2 % above the best
    of all eleven on average (MDAV is a heuristic, so not always the best)."""
    X, Y = _data(400, 3, 2, seed=3)
    d_x, d_y, _ = _sweep(X, Y, 5)
    lams = np.array(SWEEP)[:, None]
    lagrangian = (1 - lams) * d_x[None, :] + lams * d_y[None, :]  # [designed-for, used-at]
    own = np.diag(lagrangian)
    others = (lagrangian.sum(axis=1) - own) / (len(SWEEP) - 1)
    assert np.all(own < others)
    assert np.mean(own / lagrangian.min(axis=1) - 1) <= 0.02


def test_quasi_identifier_distortion_is_the_standard_distortion():
    X, Y = _data(150, 4, 2, seed=12)
    cells = run_engine("dependence", X, 6, Y=Y, lam=0.5)
    random_cells = np.random.default_rng(1).permutation(np.arange(150) % 20)
    for c in (cells, random_cells):
        assert quasi_identifier_distortion(X, c) == pytest.approx(distortion(X, c), rel=1e-12)
        # raw units: D_X standardises first
        assert quasi_identifier_distortion(3.0 * X + 1.0, c) == pytest.approx(distortion(X, c),
                                                                             rel=1e-12)
        assert confidential_distortion(Y, c) == pytest.approx(distortion(standardise(Y), c),
                                                              rel=1e-12)


def test_confidential_distortion_end_values():
    y = np.array([2.0, 2.0, 2.0, 9.0, 9.0, 9.0])
    assert confidential_distortion(y, np.array([0, 0, 0, 1, 1, 1])) == 0.0
    assert confidential_distortion(y, np.zeros(6, dtype=np.int64)) == pytest.approx(1.0)


# Digest 002, Appendix A.3: independent MDAV on Census (first 6 columns X, last 7 Y).
CENSUS_ANCHORS = [(5, 0.0, 0.0635, 0.2998), (5, 0.1, 0.0738, 0.1628), (10, 0.5, 0.1638, 0.1226),
                  (20, 1.0, 0.3970, 0.1221)]


@pytest.mark.parametrize("k,lam,d_x,d_y", CENSUS_ANCHORS)
def test_census_distortions_match_the_digest_reproduction(benchmark_data, k, lam, d_x, d_y):
    census = benchmark_data["census"]
    X, Y = standardise(census[:, :6]), census[:, 6:]
    cells = run_engine("dependence", X, k, Y=Y, lam=lam)
    assert quasi_identifier_distortion(X, cells) == pytest.approx(d_x, abs=5e-5)
    assert confidential_distortion(Y, cells) == pytest.approx(d_y, abs=5e-5)


def test_missing_y_is_a_parameter_error():
    X, _ = _data(20, 2, 1, seed=0)
    with pytest.raises(ParameterError, match="needs Y="):
        run_engine("dependence", X, 3)


@pytest.mark.parametrize("rows", [19, 21])
def test_y_with_wrong_number_of_rows_is_an_input_error(rows):
    X, _ = _data(20, 2, 1, seed=0)
    with pytest.raises(InputError, match=f"Y has {rows} rows for 20 records"):
        run_engine("dependence", X, 3, Y=np.ones((rows, 2)))


@pytest.mark.parametrize("Y", [np.full((20, 2), np.nan), np.array([["a"]] * 20),
                               np.ones((20, 0))])
def test_unusable_y_is_an_input_error(Y):
    X, _ = _data(20, 2, 1, seed=0)
    with pytest.raises(InputError, match="Y"):
        run_engine("dependence", X, 3, Y=Y)


@pytest.mark.parametrize("lam", [-0.1, 1.5, float("nan"), "0.5", True, None])
def test_lambda_outside_the_unit_interval_is_a_parameter_error(lam):
    X, Y = _data(20, 2, 1, seed=0)
    with pytest.raises(ParameterError, match="lam must be"):
        run_engine("dependence", X, 3, Y=Y, lam=lam)


def test_wrapping_itself_is_a_parameter_error():
    X, Y = _data(20, 2, 1, seed=0)
    with pytest.raises(ParameterError, match="cannot wrap itself"):
        run_engine("dependence", X, 3, Y=Y, engine="dependence")


def test_unknown_engine_is_a_parameter_error_listing_the_engines():
    X, Y = _data(20, 2, 1, seed=0)
    with pytest.raises(ParameterError, match=r"unknown engine 'nope'.*mdav"):
        run_engine("dependence", X, 3, Y=Y, engine="nope")


def test_bad_engine_params_are_parameter_errors():
    X, Y = _data(20, 2, 1, seed=0)
    with pytest.raises(ParameterError, match="engine_params must be a dict"):
        run_engine("dependence", X, 3, Y=Y, engine_params=[("screen", False)])
    with pytest.raises(ParameterError, match="'mdav' has no parameter alpha"):
        run_engine("dependence", X, 3, Y=Y, engine_params={"alpha": 2})
