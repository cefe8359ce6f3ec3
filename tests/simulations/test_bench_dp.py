"""simulations/bench_dp.py: the quick look of docs/benchmarks/differential-privacy.md on the
census data set (privlib's side environment included when it is there and imports), and the
coding of records to and from privlib."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from simulations import bench_dp
from simulations.bench_dp import GSS_SCHEMA, METHODS, PRIVLIB_METHOD, SIDE_ENV
from simulations.common import ROOT
from streamanon.schema import parse_schema

QUICK = ["--datasets", "census", "--epsilons", "1", "--repeats", "1", "--no-attacks"]


def privlib_usable() -> bool:
    python = SIDE_ENV / "bin" / "python"
    check = [str(python), "-c",
             "import privlib.anonymization.src.algorithms.differential_privacy"]
    return python.exists() and subprocess.run(check, capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def run(subprocesses, tmp_path_factory) -> tuple[dict, str, bool]:
    with_privlib = privlib_usable()
    out = tmp_path_factory.mktemp("bench") / "dp.json"
    done = subprocess.run([sys.executable, "-m", "simulations.bench_dp", *QUICK,
                           *([] if with_privlib else ["--skip-privlib"]), "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text()), done.stdout, with_privlib


def test_every_method_has_a_row_with_a_positive_finite_loss(run):
    report, printed, with_privlib = run
    rows = report["results"]["census"]
    expected = [m.label for m in METHODS if with_privlib or m is not PRIVLIB_METHOD]
    assert [r["method"] for r in rows] == expected
    for row in rows:
        assert row["epsilon"] == 1 and row["repeats"] == 1 and row["seconds"] > 0
        assert math.isfinite(row["il"]) and row["il"] > 0
        assert "categories_changed" not in row  # census has no category
        assert f"| {row['method']} | 1 | {row['guarantee']} | {row['il']:.2f} % |" in printed
    assert {"date", "commit", "machine", "command"} <= set(report)
    assert report["command"].startswith("python -m simulations.bench_dp " + " ".join(QUICK))


def test_only_the_insensitive_rows_are_the_epsilon_dp_table(run):
    for row in run[0]["results"]["census"]:
        insensitive = row["method"] == "streamanon insensitive, all"
        assert (row["guarantee"] == "epsilon-DP table") == insensitive
        assert row["differentially_private"] == insensitive and row["zcdp"] is False


def test_delta_adds_the_zcdp_row_an_epsilon_delta_dp_table(subprocesses, tmp_path):
    out = tmp_path / "dp.json"
    done = subprocess.run([sys.executable, "-m", "simulations.bench_dp", *QUICK,
                           "--skip-privlib", "--delta", "1e-6", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    rows = {r["method"]: r for r in report["results"]["census"]}
    zcdp = rows[bench_dp.ZCDP_METHOD.label]
    assert zcdp["zcdp"] is True and zcdp["differentially_private"] is True
    assert zcdp["guarantee"] == "(epsilon, delta)-DP table (zCDP)"
    assert math.isfinite(zcdp["il"]) and report["delta"] == 1e-6
    assert rows["streamanon insensitive, all"]["zcdp"] is False


def test_help_describes_the_options(subprocesses):
    done = subprocess.run([sys.executable, "-m", "simulations.bench_dp", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for option in ("--epsilons", "--k", "--datasets", "--n", "--repeats", "--skip-privlib",
                   "--no-attacks", "--side-env", "--json", "--delta"):
        assert option in done.stdout


def test_privlib_is_given_every_declared_bound_and_its_table_reads_back():
    # a published table equal to privlib's input reads back as the coded records: no loss
    frame, schema = bench_dp.load("census", 200, seed=1)
    data, xml = bench_dp.privlib_input(frame, schema)
    assert xml.count('min_value="') == xml.count('max_value="') == len(frame.columns)
    back = bench_dp.privlib_release(data, frame, schema)
    assert bench_dp.loss_on_qis(frame, back, schema) == {"il": 0.0}


def test_a_gss_record_goes_to_privlib_coded_with_its_missing_answers():
    schema = parse_schema(GSS_SCHEMA)
    frame = pd.DataFrame({
        "rownames": [1, 2], "year": [1990, 2000], "age": [30.0, np.nan],
        "gender": ["Male", "Female"], "educcat": ["Graduate", None],
        "maritalcat": [None, "Widowed"], "childs": [2.0, 0.0],
        "realrinc": [20_000.0, np.nan], "prestg10": [40.0, 50.0],
        "occ10": [1.0, 2.0], "occrecode": ["a", "b"], "wrkstat": ["x", "y"]})
    data, xml = bench_dp.privlib_input(frame, schema)
    assert list(data.columns) == ["year", "age", "gender", "educcat", "maritalcat", "childs",
                                  "realrinc", "prestg10"]
    assert data["age"].tolist() == [30, 18 - 71]  # missing: one width (89 - 18) below the min
    assert 'name="age" sensitivity_type="quasi_identifier" attribute_type=' \
           '"numerical_discrete" min_value="-53" max_value="89"' in xml
    assert data["educcat"].tolist() == [5, 0] and data["maritalcat"].tolist() == [
        bench_dp.MISSING, "Widowed"]  # missing: the ordinal's level before the first
    assert 'name="educcat" sensitivity_type="quasi_identifier" attribute_type=' \
           '"numerical_discrete" min_value="0" max_value="5"' in xml
    assert 'name="realrinc" sensitivity_type="confidential"' in xml
    back = bench_dp.privlib_release(data, frame, schema)
    assert back["age"].isna().tolist() == [False, True]
    assert back["educcat"].iloc[0] == "Graduate" and pd.isna(back["educcat"].iloc[1])
    assert back["maritalcat"].isna().tolist() == [True, False]
    assert back["realrinc"].isna().tolist() == [False, True]
