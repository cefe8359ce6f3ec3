"""The paper 002 reproduction: the quick report runs, and the k = 5 table it prints shows the
trade-off the paper describes (section V.B and the Fig. 8 and 11 discussion in the digest)."""

from __future__ import annotations

import pytest

from simulations.repro import paper002


def _table(report: str, heading: str) -> dict[float, dict[str, str]]:
    """The Markdown table under ``heading``, as lambda -> {column: cell}."""
    lines = report.splitlines()
    start = lines.index(heading)
    header_at = next(i for i in range(start, len(lines)) if lines[i].startswith("| λ |"))
    columns = [c.strip() for c in lines[header_at].strip("|").split("|")]
    rows = {}
    for line in lines[header_at + 2:]:
        if not line.startswith("|"):
            break
        cells = dict(zip(columns, (c.strip() for c in line.strip("|").split("|")), strict=True))
        rows[float(cells["λ"])] = cells
    return rows


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> tuple[str, object]:
    figure = tmp_path_factory.mktemp("figures") / "tradeoff.png"
    return paper002.report(quick=True, figure=figure), figure


@pytest.fixture(scope="module")
def k5(quick) -> dict[float, dict[str, float]]:
    rows = _table(quick[0], "#### k = 5 (216 cells)")  # floor(1080 / 5) cells, digest §3.2
    return {lam: {"D_X": float(r["D_X"]), "D_Y": float(r["D_Y"])} for lam, r in rows.items()}


def test_quick_report_has_heading_command_and_figure(quick):
    report, figure = quick
    assert report.startswith("### Paper 002")
    assert "`python -m simulations.repro.paper002`" in report
    assert "#### Verdict" in report and "#### Agreement with the digest" in report
    assert figure.stat().st_size > 10_000


def test_quick_report_sweeps_the_quick_lambdas(k5):
    assert sorted(k5) == [0.0, 0.1, 1.0]


def test_small_lambda_lowers_confidential_distortion_for_some_quasi_identifier_distortion(k5):
    """Paper section V.B: at low k the curve starts steeply descending at lambda = 0, at a
    small price in D_X."""
    assert k5[0.1]["D_Y"] < k5[0.0]["D_Y"]
    assert k5[0.1]["D_X"] >= k5[0.0]["D_X"]


def test_relative_gain_in_dependence_beats_the_relative_loss_at_low_lambda(k5):
    """Figs. 11(b): for low lambda and low k the points lie below the parity line
    dD_Y = -dD_X, a "clear advantage" over plain microaggregation."""
    rise_x = k5[0.1]["D_X"] / k5[0.0]["D_X"] - 1
    fall_y = 1 - k5[0.1]["D_Y"] / k5[0.0]["D_Y"]
    assert fall_y > rise_x


def test_end_points_swap_the_objective(k5):
    """Fig. 8 discussion: D_X <= D_Y at lambda = 0 and the reverse at lambda = 1; and lambda = 1
    is the far end of the trade-off."""
    assert k5[0.0]["D_X"] < k5[0.0]["D_Y"]
    assert k5[1.0]["D_Y"] < k5[1.0]["D_X"]
    assert k5[1.0]["D_Y"] < k5[0.1]["D_Y"] and k5[1.0]["D_X"] > k5[0.1]["D_X"]


def test_plain_mdav_matches_the_digest_reproduction(k5):
    """Digest Appendix A.3, k = 5, lambda = 0 (an independent MDAV on the same file)."""
    assert k5[0.0]["D_X"] == pytest.approx(0.0635, abs=1e-4)
    assert k5[0.0]["D_Y"] == pytest.approx(0.2998, abs=1e-4)


def test_data_check_reproduces_the_paper_category_range(quick):
    """Paper section V.B: 93 to 196 distinct values per confidential attribute."""
    assert "range 93 to 196: matches the paper" in quick[0]


def test_verdict_follows_the_table(quick, k5):
    rise_x = k5[0.1]["D_X"] / k5[0.0]["D_X"] - 1
    fall_y = 1 - k5[0.1]["D_Y"] / k5[0.0]["D_Y"]
    holds = rise_x >= 0 and fall_y >= paper002.CLAIM_RATIO * rise_x
    verdict = "HOLDS" if holds else "DOES NOT HOLD"
    assert f"D_Y drops sharply for a small D_X rise. {verdict} on our numbers" in quick[0]


def test_main_passes_quick_and_prints_the_report(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(paper002, "report",
                        lambda quick=False, figure=None: calls.append((quick, figure)) or "R")
    assert paper002.main(["--quick"]) == 0
    assert calls == [(True, None)]
    assert capsys.readouterr().out == "R\n"
