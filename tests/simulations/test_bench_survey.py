"""simulations/bench_survey.py: the before/after table of docs/benchmarks/survey-data.md on a
tiny survey."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys

import pytest

from simulations import bench_survey
from simulations.common import ROOT

N = 400
K = 5


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


@pytest.fixture(scope="module")
def printed(subprocesses) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert bench_survey.main(["--n", str(N), "--k", str(K), "--repeats", "1"]) == 0
    return out.getvalue()


@pytest.fixture(scope="module")
def table(printed) -> dict[str, dict[str, str]]:
    lines = [line for line in printed.splitlines() if line.startswith("|")]
    header = cells(lines[0])
    assert header == bench_survey.COLUMNS
    assert set(lines[1]) <= set("|-:")
    rows = [dict(zip(header, cells(line), strict=True)) for line in lines[2:]]
    return {row["engine"]: row for row in rows}


def test_the_table_has_the_raw_file_both_engines_and_the_hurried_user(table):
    assert list(table) == ["raw file", "mdav", "ona_star", "mdav, hurried quick form"]
    assert all(row["n"] == str(N) for row in table.values())


def test_the_raw_file_is_mostly_sample_uniques(table):
    raw = table["raw file"]
    assert raw["sample uniques before %"] == raw["after %"]
    assert float(raw["after %"]) > 90
    assert raw["smallest group"] == "1"


@pytest.mark.parametrize("engine", ["mdav", "ona_star"])
def test_the_schema_release_has_no_sample_uniques(table, engine):
    row = table[engine]
    assert row["sample uniques before %"] == table["raw file"]["sample uniques before %"]
    assert row["after %"] == "0.0"
    assert int(row["smallest group"]) >= K
    for kind in ("numeric", "ordinal", "nominal"):
        assert 0 < float(row[f"IL {kind} %"]) < 100
    assert float(row["seconds"]) > 0


def test_the_hurried_release_leaves_most_respondents_unique(table):
    row = table["mdav, hurried quick form"]
    assert float(row["after %"]) > 50
    assert row["smallest group"] == "1"
    assert row["IL ordinal %"] == row["IL nominal %"] == "-"  # only numbers were aggregated
    assert float(row["IL numeric %"]) >= 0


def test_the_notes_say_what_the_rows_are(printed):
    assert "seed 0" in printed and f"k = {K}" in printed
    assert "--drop respondent_id,email,income" in printed


def test_a_release_over_the_time_limit_is_shown_as_skipped():
    text = bench_survey.markdown([{"engine": "ona_star", "n": 30000, "skipped": 120.0}])
    row = cells(text.splitlines()[2])
    assert row[:2] == ["ona_star", "30,000"]
    assert "skipped" in row[3] and "120" in row[3]
    notes = bench_survey.notes(5, 0, 3, 120.0, [{"engine": "ona_star", "n": 30000,
                                                 "skipped": 120.0}])
    assert "ona_star" in notes and "skipped" in notes


def test_runs_as_a_module_from_the_repository_root(subprocesses):
    out = subprocess.run([sys.executable, "-m", "simulations.bench_survey", "--help"],
                         capture_output=True, text=True, cwd=ROOT, timeout=60, check=True)
    assert "--repeats" in out.stdout and "sample unique" in out.stdout
