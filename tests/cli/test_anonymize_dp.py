"""``streamanon anonymize --epsilon``: a differentially private release of a file, its report,
and the options it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.cli.helpers import run

SCHEMA = """
[schema]
respondent_id = { role = "identifier", type = "str" }
age = { role = "quasi_identifier", type = "int", min = 18, max = 90 }
region = { role = "quasi_identifier", type = "category", levels = ["north", "south", "east"] }
education = { role = "quasi_identifier", type = "ordinal", levels = ["low", "mid", "high"] }
income = { role = "quasi_identifier", type = "float", min = 0, max = 250000, required = false }
q1 = { role = "confidential", type = "int", min = 1, max = 5 }
"""


@pytest.fixture
def survey(tmp_path: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    n = 500
    income = rng.lognormal(10, 0.5, n).round(2)
    income[rng.random(n) < 0.1] = np.nan  # missing answers, released as missing or not
    pd.DataFrame({
        "respondent_id": [f"R{i}" for i in range(n)],
        "age": rng.integers(18, 91, n),
        "region": rng.choice(["north", "south", "east"], n),
        "education": rng.choice(["low", "mid", "high"], n),
        "income": income,
        "q1": rng.integers(1, 6, n),
    }).to_csv(tmp_path / "survey.csv", index=False)
    (tmp_path / "schema.toml").write_text(SCHEMA)
    return tmp_path / "survey.csv", tmp_path / "schema.toml"


@pytest.mark.parametrize("mechanism, private", [("insensitive", True),
                                                ("individual_ranking", False)])
def test_an_epsilon_release_says_which_guarantee_holds(survey, tmp_path, mechanism, private):
    data, schema = survey
    out = tmp_path / "release.csv"
    status, stdout, stderr = run(["anonymize", str(data), "--schema", str(schema), "--k",
                                  "10", "--epsilon", "2", "--dp-mechanism", mechanism,
                                  "--out", str(out), "--no-progress"])
    assert status == 0
    release = pd.read_csv(out)
    assert list(release.columns) == ["age", "region", "education", "income", "q1"]
    assert len(release) == 500 and release["income"].dropna().between(0, 250000).all()
    report = json.loads((tmp_path / "release.report.json").read_text())
    got = report["differential_privacy"]
    assert got["differentially_private"] is private and report["budget"] == {"spent": 2.0}
    assert set(got["attributes"]) == {"age", "region", "education", "income", "q1"}
    assert got["attributes"]["income"]["scale"] > 0
    # what it prints comes from the report
    assert f"guarantee: {got['guarantee']}" in stdout
    assert f"IL = {got['information_loss']['il']:.2f}%" in stdout
    assert ("not differentially private" in stdout) is not private
    assert (f"10-anonymous: {'yes' if got['k_anonymous'] else 'no'} (smallest group of equal "
            f"keys: {got['smallest_group']:,})") in stdout
    assert got["k_anonymous"] or not private  # the private table is k-anonymous too
    # the attributes the noise drowns, named on standard error (500 records, cells of 10)
    assert [line.removeprefix("streamanon: warning: ") for line in stderr.splitlines()
            if line.startswith("streamanon: warning: ")] == got["warnings"]


@pytest.mark.parametrize("extra, message", [
    (["--seed", "3"], "--seed and --epsilon"),
    (["--l", "2"], "--l and --epsilon"),
    (["--engine", "mdav"], "--engine and --epsilon"),
    (["--out-of-bounds", "drop"], "change n"),
])
def test_options_an_epsilon_release_cannot_honour_are_refused(survey, tmp_path, extra, message):
    data, schema = survey
    out = tmp_path / "release.csv"
    status, _, stderr = run(["anonymize", str(data), "--schema", str(schema), "--k", "10",
                             "--epsilon", "1", "--out", str(out), *extra])
    assert status == 2 and message in stderr and not out.exists()


def test_an_epsilon_release_needs_a_schema_and_its_bounds(survey, tmp_path):
    data, schema = survey
    out = tmp_path / "release.csv"
    status, _, stderr = run(["anonymize", str(data), "--qi", "age", "--drop", "respondent_id",
                             "--k", "10", "--epsilon", "1", "--out", str(out)])
    assert status == 2 and "--epsilon needs --schema" in stderr
    schema.write_text(SCHEMA.replace("min = 0, max = 250000, ", "min = 0, "))
    status, _, stderr = run(["anonymize", str(data), "--schema", str(schema), "--k", "10",
                             "--epsilon", "1", "--out", str(out)])
    assert status == 2 and "income declares no max" in stderr and not out.exists()


def test_the_documented_commands_run(tmp_path, monkeypatch):
    """"Try it" in guide/differential-privacy.md, as written there: its schema, the synthetic
    survey, the two releases and the guarantee each prints."""
    from simulations.survey_data import main as survey_data
    from tests.docs_pages import block, commands, page, section

    shown = section(page("guide/differential-privacy.md"), "Try it")
    (tmp_path / "private.toml").write_text(block(shown, "toml"))
    lines = [line.split() for line in commands(block(shown, "sh"))]
    assert [words[:3] for words in lines] == [["python", "-m", "simulations.survey_data"]] + [
        ["streamanon", "anonymize", "survey.csv"]] * 2
    monkeypatch.chdir(tmp_path)
    assert survey_data(lines[0][3:]) in (0, None)
    printed = []
    for words in lines[1:]:
        status, stdout, stderr = run([*words[1:], "--no-progress"])
        assert status == 0, stderr
        printed.append(stdout)
    private = json.loads((tmp_path / "private.report.json").read_text())
    ranked = json.loads((tmp_path / "ranked.report.json").read_text())
    assert private["differential_privacy"]["differentially_private"] is True
    assert ranked["differential_privacy"]["differentially_private"] is False
    assert "guarantee: epsilon-differentially private" in printed[0]
    assert "guarantee: not differentially private as a table" in printed[1]
    assert private["outside_schema"]  # the two incomes top-coded, as the page says
    # the first command warns for every attribute, as the page says
    drowned = private["differential_privacy"]["warnings"]
    assert {w.split(":")[0] for w in drowned[:-1]} == set(
        private["differential_privacy"]["attributes"])
    assert len(pd.read_csv(tmp_path / "private.csv")) == 20_000
    # the zCDP section's two releases, on the same survey and schema
    zcdp = [line.split() for line in commands(block(section(
        page("guide/differential-privacy.md"), "zCDP: epsilon and delta with less noise"),
        "sh"))]
    assert [words[:3] for words in zcdp] == [["streamanon", "anonymize", "survey.csv"]] * 2
    for words in zcdp:
        status, stdout, stderr = run([*words[1:], "--no-progress"])
        assert status == 0, stderr
        assert "guarantee: rho-zero-concentrated differentially private" in stdout
    calibrated = json.loads((tmp_path / "zcdp.report.json").read_text())["differential_privacy"]
    given = json.loads((tmp_path / "rho.report.json").read_text())["differential_privacy"]
    assert (calibrated["privacy"], calibrated["epsilon"], calibrated["delta"]) == (
        "zcdp", 1.0, 1e-6)
    assert (given["privacy"], given["rho"], given["delta"]) == ("zcdp", 0.02, 1e-6)


def test_report_on_a_private_release_states_its_guarantee_and_attacks_one_drawn_alike(
        survey, tmp_path, monkeypatch):
    import html

    from streamanon import dp

    data, schema = survey
    frame = pd.concat([pd.read_csv(data)] * 3, ignore_index=True)  # the attacks need 1,000
    frame["respondent_id"] = [f"R{i}" for i in range(len(frame))]
    frame.to_csv(data, index=False)
    out = tmp_path / "release.csv"
    status, _, _ = run(["anonymize", str(data), "--schema", str(schema), "--k", "10",
                        "--epsilon", "2", "--dp-mechanism", "individual_ranking",
                        "--out", str(out), "--no-progress"])
    assert status == 0
    drawn = []
    release = dp.release

    def spy(*args, **kwargs):
        drawn.append(args[2:] + tuple(kwargs.values()))
        return release(*args, **kwargs)

    monkeypatch.setattr(dp, "release", spy)
    status, _, stderr = run(["report", str(data), str(out), "--schema", str(schema),
                                  "--k", "10", "--no-progress"])
    guarantee = json.loads((tmp_path / "release.report.json").read_text())[
        "differential_privacy"]["guarantee"]
    page = (tmp_path / "release.report.html").read_text()
    assert html.escape(guarantee[0].upper() + guarantee[1:]) in page
    assert "dp_individual_ranking" in page
    # not differential privacy as a table: a warning, and the exit status says so
    assert status == 1 and f"warning: {guarantee[0].upper()}" in stderr
    # the held-out release was drawn the same way: the mechanism, k, epsilon and scope
    assert drawn == [(10, 2.0, "individual_ranking", "all", None, None)]


def test_report_attacks_a_zcdp_release_drawn_with_its_own_rho_and_delta(survey, tmp_path,
                                                                        monkeypatch):
    """A zCDP release's held-out attacks are drawn under the same zCDP budget, not as a pure
    epsilon release (the test failed first: they were drawn with epsilon alone)."""
    from streamanon import dp

    data, schema = survey
    frame = pd.concat([pd.read_csv(data)] * 3, ignore_index=True)  # the attacks need 1,000
    frame["respondent_id"] = [f"R{i}" for i in range(len(frame))]
    frame.to_csv(data, index=False)
    out = tmp_path / "release.csv"
    assert run(["anonymize", str(data), "--schema", str(schema), "--k", "10", "--epsilon",
                "2", "--delta", "1e-6", "--out", str(out), "--no-progress"])[0] == 0
    made = json.loads((tmp_path / "release.report.json").read_text())["differential_privacy"]
    drawn = []
    release = dp.release

    def spy(*args, **kwargs):
        drawn.append((args[2:], kwargs))
        return release(*args, **kwargs)

    monkeypatch.setattr(dp, "release", spy)
    run(["report", str(data), str(out), "--schema", str(schema), "--k", "10", "--no-progress"])
    assert len(drawn) == 1
    args, kwargs = drawn[0]
    assert args[0] == 10 and args[2:] == ("insensitive", "all")
    assert kwargs == {"rho": made["rho"], "delta": 1e-6} and made["privacy"] == "zcdp"


@pytest.mark.parametrize("budget", [["--epsilon", "1", "--delta", "1e-6"],
                                    ["--rho", "0.05", "--delta", "1e-8"], ["--rho", "0.05"]])
def test_a_zcdp_release_reports_rho_the_epsilon_and_delta_it_implies_and_sigma(
        survey, tmp_path, budget):
    from streamanon import dp_zcdp

    data, schema = survey
    out = tmp_path / "release.csv"
    status, stdout, stderr = run(["anonymize", str(data), "--schema", str(schema), "--k",
                                  "50", *budget, "--out", str(out), "--no-progress"])
    assert status == 0, stderr
    report = json.loads((tmp_path / "release.report.json").read_text())
    got = report["differential_privacy"]
    assert got["privacy"] == "zcdp" and got["differentially_private"] is True
    if budget[0] == "--epsilon":
        assert got["epsilon"] == 1.0 and got["delta"] == 1e-6
        assert got["rho"] == pytest.approx(dp_zcdp.rho_for(1.0, 1e-6))
    else:
        delta = float(budget[3]) if len(budget) > 2 else 1e-6
        assert got["rho"] == 0.05 and got["delta"] == delta
        assert got["epsilon"] == pytest.approx(dp_zcdp.epsilon_of(0.05, delta))
    assert report["epsilon"] == got["epsilon"]
    assert report["budget"] == {"spent": got["epsilon"], "rho": got["rho"],
                                "delta": got["delta"]}
    assert got["attributes"]["income"]["noise"] == "discrete gaussian on cell sums"
    assert got["attributes"]["income"]["sigma"] > 0
    assert got["attributes"]["region"]["noise"] == "exponential"
    assert f"rho = {got['rho']:.4g}" in stdout
    assert f"guarantee: {got['guarantee']}" in stdout
    assert "guarantee: rho-zero-concentrated differentially private" in stdout
    assert "same size that differ in one respondent's answers" in stdout


@pytest.mark.parametrize("extra, message", [
    (["--epsilon", "1", "--rho", "0.1"], "argument --rho: not allowed with argument --epsilon"),
    (["--rho", "-1"], "argument --rho: must be a finite positive number"),
])
def test_rho_with_epsilon_or_not_positive_is_a_usage_error(survey, tmp_path, capsys, extra,
                                                            message):
    from streamanon.cli import main

    data, schema = survey
    with pytest.raises(SystemExit) as stopped:  # argparse's own usage error
        main(["anonymize", str(data), "--schema", str(schema), "--k", "10", "--out",
             str(tmp_path / "release.csv"), *extra])
    assert stopped.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("extra, message", [
    (["--epsilon", "1", "--delta", "0"], "delta must be a number in (0, 1)"),
    (["--epsilon", "1", "--delta", "1.5"], "delta must be a number in (0, 1)"),
    (["--rho", "0.1", "--budget-ledger", "ledger.json"], "keeps no delta"),
    (["--rho", "0.1", "--seed", "3"], "--seed and --epsilon"),
])
def test_zcdp_options_are_checked(survey, tmp_path, extra, message):
    data, schema = survey
    out = tmp_path / "release.csv"
    status, _, stderr = run(["anonymize", str(data), "--schema", str(schema), "--k", "10",
                             "--out", str(out), *extra])
    assert status == 2 and message in stderr and not out.exists()


@pytest.mark.parametrize("given", [["--delta", "1e-6"], ["--budget-ledger", "b.json"],
                                   ["--epsilon-budget", "2"],
                                   ["--dp-mechanism", "individual_ranking"],
                                   ["--dp-scope", "quasi-identifiers"]])
def test_a_private_releases_options_without_epsilon_are_refused(survey, tmp_path, given):
    """Silently ignored, they let a user believe a budget was kept or a mechanism used (the
    test failed first: the k-anonymous release was written)."""
    data, schema = survey
    out = tmp_path / "release.csv"
    status, _, stderr = run(["anonymize", str(data), "--schema", str(schema), "--k", "10",
                             *[str(tmp_path / g) if g == "b.json" else g for g in given],
                             "--out", str(out), "--no-progress"])
    assert status == 2 and f"{given[0]} without --epsilon or --rho" in stderr
    assert not out.exists() and not (tmp_path / "b.json").exists()
