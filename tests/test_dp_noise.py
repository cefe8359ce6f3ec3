"""The exact samplers (streamanon.dp_noise): each draws the distribution its docstring names,
as integers, unseeded, and OpenDP's privacy maps agree with the accounting of streamanon.dp.

The draws cannot be replayed, so every check is statistical. Each goodness-of-fit test rejects
a correct sampler with probability TAIL = 1e-7 (its p-value is uniform under the null); each
also checks that the same test rejects the distribution 15 % off, and asserts, from the
non-central chi-square distribution of the statistic under that alternative, that it misses
it with probability below 1e-6: a test too weak to notice the wrong scale fails on its own
arithmetic, never at random.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from streamanon import dp_noise

TAIL = 1e-7


def chi_square_p(counts: np.ndarray, probabilities: np.ndarray) -> float:
    return float(stats.chisquare(counts, probabilities * counts.sum()).pvalue)


def assert_fits_and_rejects(counts: np.ndarray, right: np.ndarray, wrong: np.ndarray) -> None:
    """``counts`` fit ``right`` (p > TAIL), and the chi-square test tells ``wrong`` apart:
    its statistic under ``right`` is non-central chi-square with non-centrality
    ``N sum (right - wrong)**2 / wrong``, above the TAIL critical value with probability
    above 1 - 1e-6 (asserted), and it is above it on these counts."""
    n, df = counts.sum(), len(counts) - 1
    assert chi_square_p(counts, right) > TAIL
    critical = stats.chi2.isf(TAIL, df)
    shift = n * ((right - wrong) ** 2 / wrong).sum()
    assert stats.ncx2.cdf(critical, df, shift) < 1e-6, "the test is too weak for 15 % off"
    assert chi_square_p(counts, wrong) < TAIL


def binned(draws: np.ndarray, cut: int) -> np.ndarray:
    """Counts of -cut..cut, the two tails (beyond +-cut) in the first and last bins."""
    return np.bincount(np.clip(draws, -cut - 1, cut + 1) + cut + 1, minlength=2 * cut + 3)


def binned_pmf(pmf: np.ndarray, support: np.ndarray, cut: int) -> np.ndarray:
    """A pmf over ``support`` (0-centred integers) folded into :func:`binned`'s bins."""
    return np.bincount(np.clip(support, -cut - 1, cut + 1) + cut + 1, weights=pmf,
                       minlength=2 * cut + 3)


def discrete_laplace_pmf(scale: float, support: np.ndarray) -> np.ndarray:
    q = math.exp(-1 / scale)
    return (1 - q) / (1 + q) * q ** np.abs(support)


def discrete_gaussian_pmf(sigma: float, support: np.ndarray) -> np.ndarray:
    weights = np.exp(-support.astype(float) ** 2 / (2 * sigma ** 2))
    return weights / weights.sum()


def test_discrete_laplace_draws_integers_with_probability_proportional_to_exp_minus_z_over_b():
    scale, n, cut = 3.0, 200_000, 15
    draws = dp_noise.discrete_laplace(np.zeros(n, dtype=np.int64), scale)
    assert draws.dtype == np.int64 and len(draws) == n
    support = np.arange(-2000, 2001)  # the mass beyond is below 1e-280
    assert_fits_and_rejects(binned(draws, cut),
                            binned_pmf(discrete_laplace_pmf(scale, support), support, cut),
                            binned_pmf(discrete_laplace_pmf(1.15 * scale, support), support,
                                       cut))


def test_discrete_laplace_is_added_to_the_values_given():
    values = np.array([10**12, -5, 0, 7] * 50_000, dtype=np.int64)
    noise = dp_noise.discrete_laplace(values, 2.0) - values
    # the noise is the same distribution whatever it is added to: median 0, mean |z| as above
    q = math.exp(-1 / 2.0)
    mean_abs = 2 * q / (1 - q ** 2)
    # mean |z| of 200,000 draws: sd of |z| below 2.2, so 6 standard errors are 0.03 (a
    # normal tail of 2e-9 per side)
    assert abs(np.abs(noise).mean() - mean_abs) < 0.03
    assert abs(noise.mean()) < 0.03


def test_discrete_gaussian_draws_integers_with_probability_proportional_to_exp_of_minus_z2():
    sigma, n, cut = 4.0, 200_000, 14
    draws = dp_noise.discrete_gaussian(np.zeros(n, dtype=np.int64), sigma)
    assert draws.dtype == np.int64
    support = np.arange(-400, 401)  # 100 sigmas: the mass beyond is nil
    assert_fits_and_rejects(binned(draws, cut),
                            binned_pmf(discrete_gaussian_pmf(sigma, support), support, cut),
                            binned_pmf(discrete_gaussian_pmf(1.15 * sigma, support), support,
                                       cut))


@pytest.mark.heavy  # seconds of computation: make test runs it, make check leaves it out
@pytest.mark.parametrize("sensitivity", [1, 2])
def test_the_exponential_mechanism_draws_in_proportion_to_exp_of_epsilon_u_over_2_delta(
        sensitivity):
    """Utilities (0, 1, 3) times the sensitivity (an ordinal's L - 1 for 2), epsilon 1:
    probabilities proportional to exp((0, 1, 3) / 2)."""
    rows, epsilon = 30_000, 1.0
    utility = np.array([[0, 1, 3]] * rows) * sensitivity
    drawn = dp_noise.exponential_mechanism(utility, epsilon, sensitivity)
    assert drawn.dtype == np.int64 and set(np.unique(drawn)) <= {0, 1, 2}

    def weights(eps: float) -> np.ndarray:
        w = np.exp(eps * np.array([0.0, 1.0, 3.0]) / 2)
        return w / w.sum()

    assert_fits_and_rejects(np.bincount(drawn, minlength=3), weights(1.0), weights(1.15))


def test_the_exponential_mechanism_with_one_level_or_a_huge_epsilon_draws_the_best():
    assert dp_noise.exponential_mechanism(np.array([[5], [0]]), 1.0).tolist() == [0, 0]
    assert dp_noise.exponential_mechanism(np.array([[0, 150, 200]]), 1e308).tolist() == [2]


def test_the_draws_are_fresh_each_time():
    """Nothing is seeded: two draws of 1,000 discrete Laplace values of scale 100 coincide
    with probability below (1/50)^1000."""
    zeros = np.zeros(1000, dtype=np.int64)
    assert not np.array_equal(dp_noise.discrete_laplace(zeros, 100.0),
                              dp_noise.discrete_laplace(zeros, 100.0))


def test_opendps_privacy_maps_are_the_accounting_of_streamanon_dp():
    """streamanon.dp calibrates: Laplace scale = L1 / epsilon, Gaussian sigma = L2 /
    sqrt(2 rho), exponential mechanism of epsilon per cell (scale 2 delta_u / epsilon), rho
    epsilon^2 / 8 per cell under zCDP. OpenDP's own maps say the same."""
    l1, epsilon = 3 * 2 ** 20, 0.25
    assert dp_noise.laplace_measurement(l1 / epsilon).map(l1) == pytest.approx(epsilon)
    l2, rho = math.sqrt(7) * 2 ** 20, 0.01
    sigma = l2 / math.sqrt(2 * rho)
    assert dp_noise.gaussian_measurement(sigma).map(l2) == pytest.approx(rho)
    for delta_u in (1, 4):
        scale = 2 * delta_u / epsilon
        assert dp_noise.exponential_measurement(scale).map(delta_u) == pytest.approx(
            epsilon ** 2 / 8)
