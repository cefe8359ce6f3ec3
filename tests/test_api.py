from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from streamanon import InputError, microaggregate, shuffle_rows
from streamanon.metrics import check_k_anonymity


def _frame(n=60, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "id": [f"p{i}" for i in range(n)],
        "age": rng.integers(18, 90, n),
        "income": rng.normal(40000, 9000, n),
        "answer": rng.choice(["a", "b"], n),
    })


def test_dataframe_release_keeps_confidential_and_drops_identifiers():
    frame = _frame()
    result = microaggregate(frame, 5, qi=["age", "income"], confidential="answer", drop=["id"],
                            shuffle=False)
    out = result.data
    assert list(out.columns) == ["age", "income", "answer"]
    assert (out["answer"] == frame["answer"]).all()  # same row order, unchanged
    assert check_k_anonymity(out[["age", "income"]].to_numpy(), 5).ok
    # centroids are in original units: the QI means are preserved exactly per cell
    assert out["income"].mean() == pytest.approx(frame["income"].mean())


def test_numpy_release_is_cell_means():
    X = np.random.default_rng(1).normal(size=(40, 3)) * [1, 100, 0.01]
    result = microaggregate(X, 4)
    assert result.data.shape == X.shape
    for label in np.unique(result.labels):
        rows = result.labels == label
        assert np.allclose(result.data[rows], X[rows].mean(axis=0))
    assert 0 < result.distortion < 1
    assert result.report()["information_loss"] == pytest.approx(100 * result.distortion)


def test_report_holds_no_data_values():
    frame = _frame()
    report = microaggregate(frame, 5, qi=["age", "income"], confidential=["answer"],
                            drop=["id"]).report()
    text = repr(report)
    assert "p1" not in text and "income" in text
    assert report["n"] == 60 and report["k"] == 5 and report["engine"] == "mdav"


def test_unknown_column():
    with pytest.raises(InputError, match="unknown column"):
        microaggregate(_frame(), 5, qi=["agee"], drop=["id"])


def test_non_numeric_qi():
    with pytest.raises(InputError, match="column answer is not numeric; declare it as "
                                         "category or ordinal"):
        microaggregate(_frame(), 5, qi=["age", "answer"], confidential="income", drop=["id"])


def test_missing_value_in_qi_names_the_column():
    frame = _frame()
    frame.loc[7, "income"] = np.nan
    with pytest.raises(InputError, match="column\\(s\\) income \\(first at row 8\\)"):
        microaggregate(frame, 5, qi=["age", "income"], confidential="answer", drop=["id"])


def test_shuffle_rows_permutes_and_is_seeded():
    frame = _frame()
    a = shuffle_rows(frame, 3)
    assert sorted(a["id"]) == sorted(frame["id"])
    assert not (a["id"] == frame["id"]).all()
    assert (shuffle_rows(frame, 3)["id"] == a["id"]).all()


def test_openmp_threads_wait_passively_unless_the_user_says_otherwise(subprocesses):
    import subprocess
    import sys

    code = ("import os, streamanon; print(os.environ['OMP_WAIT_POLICY'])")
    env = {k: v for k, v in __import__("os").environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True)
    assert out.stdout.strip() == "PASSIVE"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**env, "OMP_WAIT_POLICY": "ACTIVE"}, check=True)
    assert out.stdout.strip() == "ACTIVE"


@pytest.mark.parametrize("policy", ["group", "impute"])
def test_a_matrix_with_missing_values_is_released_under_missing_policy(policy):
    """``missing=`` is documented as the quick form's policy and ``microaggregate`` builds the
    matrix's schema with it, but ``validate_input`` refuses the NaN first: every respondent
    with a gap is lost to an error instead of being grouped or imputed."""
    X = np.random.default_rng(0).normal(size=(30, 2))
    X[::4, 1] = np.nan
    result = microaggregate(X, 5, missing=policy)
    assert result.data.shape == (30, 2)
    if policy == "impute":
        assert not np.isnan(result.data).any()
