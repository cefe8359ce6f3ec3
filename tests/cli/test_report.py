"""``streamanon report`` and ``streamanon.risk_page``: the page a person reads about a
release. It says what the measures of ``streamanon.risk.measure`` say (in words and tables),
warns where a measure is bad, shows no record, escapes every name, and renders in a browser
(headless Debian Chromium driven by Playwright, ``tests/browser.py``)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simulations.survey_data import SURVEY_SCHEMA, make_survey, write_schema_toml
from streamanon.cli import main
from streamanon.io import read_table, write_table
from streamanon.risk import measure
from streamanon.risk_page import largest_change_text, render, verdict
from streamanon.schema import load_schema, parse_schema
from tests.cli.helpers import run

N = 400
K = 5
L = 2
T = 0.5
PLANTED_INCOME = 987654.321
PLANTED_COMMENT = "zebra-unicorn-7731"
SECTIONS = ["settings", "verdict", "risk", "sensitive", "utility", "distributions",
            "correlations"]




def without_images(page: str) -> str:
    return re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", page)


@pytest.fixture(scope="module")
def survey(tmp_path_factory) -> dict[str, Path]:
    """The raw survey with one planted respondent, its schema (q1 sensitive), the k = 5,
    l = 2 release through ``streamanon anonymize``, and the report on it."""
    folder = tmp_path_factory.mktemp("report")
    frame = make_survey(N, seed=3)
    frame.loc[17, "income"] = PLANTED_INCOME
    frame.loc[17, "comment"] = PLANTED_COMMENT
    paths = {"original": folder / "survey.csv", "schema": folder / "survey.schema.toml",
             "release": folder / "release.csv", "page": folder / "release.report.html"}
    write_table(frame, paths["original"])
    write_schema_toml(paths["schema"],
                      {**SURVEY_SCHEMA, "q1": {**SURVEY_SCHEMA["q1"], "sensitive": True}})
    with pytest.MonkeyPatch.context() as mp:  # the run's timing goes to a private cost model
        mp.setenv("STREAMANON_DATA_DIR", str(folder / "data"))
        status, _, stderr = run(["anonymize", str(paths["original"]), "--schema",
                                 str(paths["schema"]), "--k", str(K), "--l", str(L),
                                 "--out", str(paths["release"]), "--seed", "1"])
    assert status == 0, stderr
    return paths


@pytest.fixture(scope="module")
def reported(survey) -> dict[str, object]:
    """``streamanon report`` on the release (l from the release's report.json, t given)."""
    status, stdout, stderr = run(["report", str(survey["original"]), str(survey["release"]),
                                  "--schema", str(survey["schema"]), "--k", str(K),
                                  "--t", str(T)])
    original, release = read_table(survey["original"]), read_table(survey["release"])
    schema = load_schema(survey["schema"])
    return {"status": status, "stdout": stdout, "stderr": stderr,
            "page": survey["page"].read_text(encoding="utf-8"),
            "measures": measure(original, release, schema, K, aligned=False,
                                sensitive=["q1"]).to_json(),
            "original": original, "release": release, "schema": schema}


def test_the_report_is_written_next_to_the_release_without_warnings(survey, reported):
    assert reported["status"] == 0, reported["stderr"]
    assert reported["stdout"].startswith(f"wrote {survey['page']}: smallest group ")
    assert "0 warning(s)" in reported["stdout"] and reported["stderr"] == ""


def test_the_page_has_the_verdict_and_every_section(reported):
    page = reported["page"]
    for section in SECTIONS:
        assert f'<section id="{section}"' in page
    verdict_html = re.search(r'<section id="verdict".*?</section>', page, re.S).group(0)
    assert 'class="ok"' in verdict_html and "No warnings." in verdict_html
    assert "Every respondent is hidden among at least " in verdict_html
    assert "no respondent is unique (before: " in verdict_html
    assert "On the sensitive answer q1, every group holds at least " in verdict_html
    # a shuffled release, but anonymize measured the linkage before shuffling
    assert "links them to their own record with probability " in verdict_html
    assert "not measured" not in verdict_html
    # a picture per drawn attribute (the key, then the answers) and one of the correlations
    assert page.count('<img src="data:image/png;base64,') == 11
    assert page.count('<img class="wide" src="data:image/png;base64,') == 1


def test_the_numbers_are_those_of_measure(reported):
    page, m = reported["page"], reported["measures"]
    before, after = m["risk"]["before"], m["risk"]["after"]
    assert after["records_in_groups_below_k"] == 0 and after["smallest_group"] >= K

    def row(label: str, b: str, a: str) -> str:
        return f"<tr><th>{label}</th><td>{b}</td><td>{a}</td></tr>"

    pct = "{:.1f} %".format
    assert row("sample uniques", pct(100 * before["sample_uniques"]),
               pct(100 * after["sample_uniques"])) in page
    assert row("groups with the same key", f"{before['groups']:,}", f"{after['groups']:,}") \
        in page
    assert row("smallest group", before["smallest_group"], after["smallest_group"]) in page
    assert row(f"records in groups below k = {K}", f"{before['records_in_groups_below_k']:,}",
               "0") in page
    assert f"(before: {pct(100 * before['sample_uniques'])})" in page
    q1 = m["risk"]["sensitive"]["q1"]
    assert q1["l"] >= L and q1["t"] <= T
    assert re.search(rf"<th>q1</th><td[^>]*>[^<]*</td><td>{q1['l']}</td>"
                     rf"<td>{q1['t']:.3f}</td>", page)
    assert (f"every group holds at least {q1['l']} different answers and its distribution in "
            f"every group is within t = {T:g} of the whole release&#x27;s (largest "
            f"{q1['t']:.3f})") in page
    income = m["utility"]["attributes"]["income"]
    assert (f"<tr><th>income</th><td>float</td><td>{income['mean_before']:.4g}</td>"
            f"<td>{income['mean_after']:.4g}</td><td>{income['var_before']:.4g}</td>"
            f"<td>{income['var_after']:.4g}</td></tr>") in page
    assert largest_change_text(m["utility"]["largest_change"]) in page
    # settings: l and the engine (the default with l: tclose_kfirst) from the release's
    # report.json, t from the command line
    for label, value in (("k", K), ("l (asked)", L), ("t (asked)", T),
                         ("engine", "tclose_kfirst")):
        assert f"<tr><th>{label}</th><td>{value}</td></tr>" in page
    assert f"{N:,} original, {N:,} released" in page


def _pct(share: float) -> str:
    return f"{100 * share:.1f} %"


def test_the_linkage_anonymize_measured_is_shown_with_where_it_came_from(survey, reported):
    made = json.loads(survey["release"].with_name("release.report.json").read_text())
    linkage = made["risk"]["risk"]["record_linkage"]
    interval = made["risk"]["risk"]["interval_disclosure"]
    assert linkage is not None and interval is not None
    page = reported["page"]
    assert f"<tr><th>record linkage</th><td>{_pct(linkage)}</td>" in page
    assert f"<tr><th>interval disclosure</th><td>{_pct(interval)}</td>" in page
    assert f"links them to their own record with probability {_pct(linkage)}" in page
    source = "measured by anonymize before shuffling, from release.report.json"
    assert source in page
    assert f"record linkage {_pct(linkage)}, interval disclosure {_pct(interval)}" \
        in reported["stdout"] and source in reported["stdout"]


def _report(survey: dict[str, Path], release: Path) -> tuple[int, str, str, str]:
    status, stdout, stderr = run(["report", str(survey["original"]), str(release),
                                  "--schema", str(survey["schema"]), "--k", str(K)])
    page = release.with_name(release.stem + ".report.html").read_text(encoding="utf-8")
    return status, stdout, stderr, page


@pytest.mark.heavy
def test_without_the_releases_report_json_the_linkage_is_not_measured(survey, tmp_path):
    release = tmp_path / "copy.csv"
    shutil.copyfile(survey["release"], release)
    status, stdout, _, page = _report(survey, release)
    assert status == 0
    assert "Record linkage and interval disclosure were not measured" in page
    assert "<tr><th>record linkage</th><td>\u2013</td>" in page
    assert "not measured" in stdout and "copy.report.json" in stdout


@pytest.mark.heavy
def test_a_report_json_of_another_release_is_not_read(survey, tmp_path):
    release = tmp_path / "release.csv"
    write_table(read_table(survey["release"]).iloc[K:], release)  # not the release it measured
    shutil.copyfile(survey["release"].with_name("release.report.json"),
                    tmp_path / "release.report.json")
    _, stdout, _, page = _report(survey, release)
    assert "Record linkage and interval disclosure were not measured" in page
    assert "measured by anonymize" not in page
    assert f"{N:,} records" in stdout and f"this one has {N - K:,}" in stdout
    assert "not measured" in stdout and "release.report.json" in stdout


@pytest.mark.heavy
@pytest.mark.parametrize("reports", ["s1", "reports/s1"])
def test_a_service_releases_report_json_is_read(survey, tmp_path, reports):
    """In the default reports folder beside the releases (``reports/<survey>/``), or, as an
    earlier version wrote it, in the release's own folder."""
    made = json.loads(survey["release"].with_name("release.report.json").read_text())
    service = {"survey": "s1", "release_id": "s1-1", "n": made["n"], "k": K,
               "engine": made["engine"], "incremental": None, "privacy": made["privacy"],
               "risk": made["risk"]}
    folder = tmp_path / "releases" / "s1"
    folder.mkdir(parents=True)
    release = folder / "release.csv"
    shutil.copyfile(survey["release"], release)
    kept = tmp_path / ("releases" if reports == "s1" else "") / reports
    kept.mkdir(parents=True, exist_ok=True)
    (kept / "report.json").write_text(json.dumps(service), encoding="utf-8")
    status, stdout, _, page = _report(survey, release)
    assert status == 0
    linkage = made["risk"]["risk"]["record_linkage"]
    assert f"<tr><th>record linkage</th><td>{_pct(linkage)}</td>" in page
    assert "measured by the service before shuffling, from report.json" in page
    assert "measured by the service" in stdout


def test_no_original_record_value_is_in_the_page(reported):
    page = reported["page"]
    assert str(PLANTED_INCOME) not in page and "987654" not in without_images(page)
    assert PLANTED_COMMENT not in page
    assert "@example" not in page and not re.search(r"R0\d{4}", without_images(page))
    text = without_images(page)
    original = reported["original"]
    incomes = {repr(v) for v in original["income"].dropna()} | {
        f"{v:.4g}" for v in original["income"].dropna()}
    assert not [v for v in incomes if v in text]
    comments = [c for c in original["comment"].dropna() if len(str(c)) > 8]
    assert comments and not [c for c in comments if str(c) in page]
    submitted = original["submitted_at"].dropna()
    assert not [t for t in submitted if t in page]


def test_names_and_file_names_are_escaped():
    rng = np.random.default_rng(0)
    age, answer = "<b>age</b>", 'q&"1'
    frame = pd.DataFrame({age: rng.integers(18, 90, 60), "size": rng.integers(1, 6, 60),
                          answer: rng.integers(1, 6, 60)})
    schema = parse_schema({age: {"role": "quasi_identifier", "type": "int"},
                           "size": {"role": "quasi_identifier", "type": "int"},
                           answer: {"role": "confidential", "type": "int"}})
    from streamanon.api import Output, microaggregate

    release = microaggregate(frame, 3, schema=schema, output=Output(seed=0)).data
    m = measure(frame, release, schema, 3, aligned=False, sensitive=[answer]).to_json()
    page = render(m, frame, release, schema, {"k": 3, "release": "<script>x</script>.csv"})
    assert "<b>" not in page and "<script>" not in page and 'q&"1' not in page
    assert "&lt;b&gt;age&lt;/b&gt;" in page and "&lt;script&gt;x&lt;/script&gt;.csv" in page
    assert "q&amp;&quot;1" in page
    assert re.search(r"<th>q&amp;&quot;1</th><td[^>]*>[^<]*</td><td>\d+</td>", page)


@pytest.mark.heavy
def test_a_release_that_is_the_original_is_warned_about(survey, tmp_path):
    original = read_table(survey["original"])
    schema = load_schema(survey["schema"])
    release = original.drop(columns=["respondent_id", "email"])
    m = measure(original, release, schema, K, aligned=True, sensitive=["q1"]).to_json()
    assert m["risk"]["after"]["sample_uniques"] > 0 and m["risk"]["sensitive"]["q1"]["l"] == 1
    assert m["risk"]["record_linkage"] > 1 / K
    warned = [s.text for s in verdict(m, {"k": K, "l": L}) if s.warning]
    assert len(warned) == 4
    assert "the release is not 5-anonymous" in warned[0]
    alone = round(m["risk"]["after"]["sample_uniques"] * N)
    assert warned[1].startswith(f"{alone:,} respondents are unique on their key")
    assert "some group holds only one answer (l = 1)" in warned[2]
    assert f"probability {100 * m['risk']['record_linkage']:.1f} %" in warned[3]
    page = render(m, original, release, schema, {"k": K, "l": L})
    assert '<section id="verdict" class="bad">' in page
    assert "4 warnings: see the marked sentences." in page
    assert page.count('<span class="warning">') == 4
    assert '<tr class="warning"><th>q1</th>' in page

    # the command line says so with its exit status, and still writes the page
    raw = tmp_path / "raw.csv"
    write_table(release, raw)
    status, stdout, stderr = run(["report", str(survey["original"]), str(raw), "--schema",
                                  str(survey["schema"]), "--k", str(K)])
    assert status == 1 and (tmp_path / "raw.report.html").exists()
    assert "warning(s)" in stdout and "the release is not 5-anonymous" in stderr


@pytest.mark.parametrize("which", ["original", "release", "schema"])
def test_out_equal_to_an_input_is_refused(survey, which):
    before = survey[which].read_bytes()
    status, _, stderr = run(["report", str(survey["original"]), str(survey["release"]),
                             "--schema", str(survey["schema"]), "--k", str(K),
                             "--out", str(survey[which])])
    assert status == 2 and f"is the {which} file" in stderr and stderr.count("\n") == 1
    assert survey[which].read_bytes() == before


def test_a_sensitive_column_not_in_the_release_is_refused(survey):
    status, _, stderr = run(["report", str(survey["original"]), str(survey["release"]),
                             "--schema", str(survey["schema"]), "--k", str(K),
                             "--sensitive", "email", "--out", str(survey["page"]) + ".x.html"])
    assert status == 2 and "sensitive column(s) email are not in" in stderr


def test_help_explains_the_report(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["report", "--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for phrase in ("ORIGINAL RELEASE", "--schema FILE", "--sensitive COLS", "--out FILE",
                   "sensitive = true", "never a record", "Exit status 0"):
        assert phrase in text


def test_the_page_renders_in_a_browser_and_fetches_nothing(survey, reported, browser,
                                                            tmp_path):
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(survey["page"].as_uri())
    assert page.title() == "Disclosure risk and utility: release.csv"
    images = page.evaluate(
        "Array.from(document.images).map(i => [i.complete, i.naturalWidth])")
    assert len(images) == 12
    assert all(complete and width > 0 for complete, width in images)
    assert [r for r in requests if not r.startswith("data:")] == [survey["page"].as_uri()]
    assert "No warnings." in page.locator("#verdict").inner_text()
    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 50_000
