"""simulations/bench_tcloseness.py: the side-by-side table of docs/benchmarks/tcloseness.md on
a tiny survey, privlib's side environment included, and the release check it measures with."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from simulations.bench_tcloseness import COLUMNS, ENGINES, check_release, ordered_emds
from simulations.common import ROOT

ROWS, K, T = 2003, 5, 0.2  # 2003 = 5 x 400 + 3: leftovers for privlib's strata


@pytest.fixture(scope="module")
def run(subprocesses, tmp_path_factory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("bench") / "tc.json"
    done = subprocess.run([sys.executable, "-m", "simulations.bench_tcloseness", "--rows",
                           str(ROWS), "--repeats", "1", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text()), done.stdout


def test_every_method_has_a_row_with_every_column(run):
    report, printed = run
    methods = [r["method"] for r in report["results"]]
    assert methods == [f"streamanon {e}" for e in ENGINES] + ["privlib T_closeness"]
    for row in report["results"]:
        assert list(row) == COLUMNS and row["rows"] == ROWS
        assert row["seconds"] > 0 and 0 <= row["il"] <= 100
    assert {"date", "commit", "machine", "side_env_seconds"} <= set(report)
    assert printed.count("| 2,003 | streamanon tclose_kfirst |") == 2  # as it runs, and at the end


def test_every_streamanon_release_is_k_anonymous_and_t_close_by_the_check(run):
    report, _ = run
    for row in report["results"][:len(ENGINES)]:
        assert row["k_violations"] == 0 and row["smallest"] >= K
        assert row["t_violations"] == 0 and row["largest_emd"] <= T + 1e-12


def test_the_default_engine_loses_less_than_privlib(run):
    rows = {r["method"]: r for r in run[0]["results"]}
    assert rows["streamanon tclose_kfirst"]["il"] < rows["privlib T_closeness"]["il"]


def test_privlib_publishes_leftover_records_unchanged(run):
    # what docs/benchmarks/tcloseness.md says of privlib when k' does not divide n
    privlib = run[0]["results"][-1]
    assert privlib["unchanged"] == 2 and privlib["smallest"] == 1
    assert privlib["k_violations"] == 2 and privlib["largest_emd"] > T


def test_ordered_emd_hand_computed():
    # class 0 = {1, 2} of {1, 2, 3, 4}: cumulative gaps 1/4, 1/2, 1/4 over m - 1 = 3
    # class 1 = {3, 4}: the mirror image, also 1/3
    emds = ordered_emds(np.array([0, 0, 1, 1]), np.array([1.0, 2.0, 3.0, 4.0]))
    assert emds == pytest.approx([1 / 3, 1 / 3])
    # both classes hold one low and one high value: gaps 1/4, 0, 1/4 -> 1/6
    assert ordered_emds(np.array([0, 1, 1, 0]), np.array([1.0, 2.0, 3.0, 4.0])) == \
        pytest.approx([1 / 6, 1 / 6])


def test_check_release_sees_small_classes_far_classes_and_unchanged_records():
    original = np.array([[0.0], [1.0], [2.0], [3.0], [10.0], [11.0]])
    sensitive = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    # one class of the four first records (their mean), two records published as they were
    published = np.array([[1.5], [1.5], [1.5], [1.5], [10.0], [11.0]])
    found = check_release(published, original, sensitive, k=2, t=0.1)  # EMDs 0.2, 11/30, 0.5
    assert found["classes"] == 3 and found["smallest"] == 1
    assert found["k_violations"] == 2 and found["unchanged"] == 2
    assert found["t_violations"] == 3 and found["largest_emd"] == pytest.approx(0.5)
    assert 0 < found["il"] == pytest.approx(found["il_cells"])
    whole = check_release(np.full((6, 1), 4.5), original, sensitive, k=2, t=0.2)
    assert whole["il"] == pytest.approx(100.0) and whole["largest_emd"] == 0.0
