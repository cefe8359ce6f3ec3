"""The paper 000 reproduction: the quick report's tables, and the census-like generator."""

from __future__ import annotations

import numpy as np

from simulations.repro.paper000 import QUICK_K_VALUES, census_like, report
from streamanon.engines.pca_mdav import fit_principal_components
from streamanon.metrics import standardise


def _tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every Markdown table of ``text`` as (header cells, body rows of cells)."""
    tables, block = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            block.append([cell.strip() for cell in line.strip("|").split("|")])
        elif block:
            tables.append((block[0], block[2:]))
            block = []
    return tables


def test_quick_report_has_the_tables_with_every_engine_and_numbers():
    text = report(quick=True)
    assert text.startswith("### Paper 000")
    assert "`python -m simulations.repro.paper000 --quick`" in text
    assert "multivariate normal" in text
    (time_header, times), (d_header, distortions), (_, absolute) = _tables(text)
    for header in (time_header, d_header):
        for engine in ("mdav", "pca_mdav", "pca_mdav_proximal", "paper"):
            assert any(cell.startswith(f"{engine} ") for cell in header), (engine, header)
    for body, width in ((times, 12), (distortions, 13), (absolute, 6)):
        assert [int(row[0]) for row in body] == list(QUICK_K_VALUES)
        for row in body:
            assert len(row) == width
            if body is times:
                assert row.pop() == "—"  # no run-to-run spread from a single run
            values = [float(cell) for cell in row]  # every cell numeric: paper has k = 10, 50
            assert all(np.isfinite(values))
    for row in times:
        t_mdav, t_pca, tau_pca = (float(cell) for cell in row[1:4])
        assert t_mdav > 0 and t_pca > 0 and tau_pca > 0
    for row in distortions:
        d_mdav, d_pca, delta_pca = (float(cell) for cell in row[1:4])
        assert 0 < d_mdav < 1 and 0 < d_pca < 1
        # the report derives ΔD from the unrounded D: allow for the 4-decimal rounding
        assert abs(delta_pca - 100 * (d_pca / d_mdav - 1)) < 0.15
    assert "measured to hold at" in text
    for k in QUICK_K_VALUES:
        line = next(line for line in text.splitlines() if line.startswith(f"- k = {k}:"))
        assert line.count(": yes") + line.count(": no") == 3


def test_census_like_reproduces_the_census_moments_within_sampling_error(benchmark_data):
    census = benchmark_data["census"]
    mean, covariance = census.mean(axis=0), np.cov(census, rowvar=False)
    n = 40_000
    X = census_like(n, seed=1)
    assert X.shape == (n, 13)
    # Standard errors of a Gaussian sample mean and covariance: Var(S_ij) = (s_ij^2 + s_ii s_jj)/n.
    variances = np.diag(covariance)
    assert np.all(np.abs(X.mean(axis=0) - mean) < 5 * np.sqrt(variances / n))
    standard_error = np.sqrt((covariance**2 + np.outer(variances, variances)) / n)
    assert np.all(np.abs(np.cov(X, rowvar=False) - covariance) < 5 * standard_error)


def test_census_like_keeps_the_census_energy_spectrum(benchmark_data):
    """What paper 000 uses: the cumulative energy of the standardised data, hence m_tilde."""
    real = fit_principal_components(standardise(benchmark_data["census"]), energy=0.1)
    fake = fit_principal_components(standardise(census_like(20_000, seed=2)), energy=0.1)
    assert fake.n_components == real.n_components
    np.testing.assert_allclose(np.cumsum(fake.eigenvalues) / 13,
                               np.cumsum(real.eigenvalues) / 13, atol=0.01)


def test_census_like_is_seeded():
    assert np.array_equal(census_like(50, seed=3), census_like(50, seed=3))
    assert not np.array_equal(census_like(50, seed=3), census_like(50, seed=4))


def test_a_run_of_a_few_milliseconds_is_not_printed_as_no_time():
    """The quick report's runs take milliseconds: a fixed two decimals printed a 4 ms PCA-MDAV
    run as 0.00 s (and its ratio to MDAV as 0.00), and the report's own check that every time
    is positive failed on a fast machine (a full suite, once)."""
    from simulations.repro.paper000 import ENGINES, _time_table

    t = {label: 0.004 for label in ENGINES}
    t[ENGINES[0]] = 0.012
    (row,) = _time_table([{"k": 3, "t": t, "spread": None}])[2:]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "0.012" and cells[2] == "0.004" and float(cells[3]) > 0
