from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from streamanon import (
    BeyondK,
    InputError,
    Output,
    ParameterError,
    TwoStage,
    microaggregate,
    shuffle_rows,
)
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
                            output=Output(shuffle=False))
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


@pytest.mark.parametrize("given,place", [
    ({"seed": 1}, r"seed= is output=Output\(seed=\.\.\.\)"),
    ({"shuffle": False, "risk": False}, r"shuffle= is output=Output\(shuffle=\.\.\.\); "
                                        r"risk= is output=Output\(risk=\.\.\.\)"),
    ({"sensitive": "x0", "t": 0.2}, r"sensitive= is privacy=BeyondK\(sensitive=\.\.\.\)"),
    ({"incremental": "nn", "nu": 0.5}, r"incremental= is two_stage=TwoStage\(incremental="),
])
def test_an_option_given_outside_its_value_is_refused_with_its_place(given, place):
    """An option of a grouped value given to ``microaggregate`` itself would otherwise pass
    for an engine parameter (``t`` and ``l`` are the ``tclose_*`` engines' own): refused,
    naming the value it belongs to."""
    X = np.random.default_rng(0).normal(size=(20, 2))
    with pytest.raises(ParameterError, match=place):
        microaggregate(X, 5, **given)
    with pytest.raises(ParameterError, match="t= is privacy=BeyondK"):
        microaggregate(X, 5, "tclose_kfirst", t=0.2)


def test_an_option_value_of_the_wrong_kind_or_with_an_unknown_option_is_refused():
    X = np.random.default_rng(0).normal(size=(20, 2))
    with pytest.raises(ParameterError, match=r"output= takes Output\(\.\.\.\).*'seed': 1"):
        microaggregate(X, 5, output={"seed": 1})
    with pytest.raises(ParameterError, match=r"privacy= takes BeyondK\(\.\.\.\)"):
        microaggregate(X, 5, privacy=Output(seed=1))
    with pytest.raises(ParameterError, match=r"two_stage= takes TwoStage\(\.\.\.\)"):
        microaggregate(X, 5, two_stage="nn")
    with pytest.raises(TypeError, match="'sed'"):
        Output(sed=1)
    with pytest.raises(TypeError, match="'l'"):
        Output(l=2)  # an option of BeyondK
    with pytest.raises(TypeError):
        Output(False)  # by name only: which option a bare value is is not guessed
    with pytest.raises(TypeError, match="incremental"):
        TwoStage(nu=0.2)  # the stage is what makes it two-stage


def test_the_grouped_options_release_what_the_keywords_did():
    """The options reach the release: the seed and the shuffle, the risk measures, the
    two-stage split and the l and t of the sensitive answers."""
    frame = pd.DataFrame({"a": np.arange(40.0), "b": np.arange(40.0) % 7,
                          "s": np.arange(40) % 4})
    shuffled = [microaggregate(frame, 5, qi=["a", "b"], confidential="s",
                               output=Output(seed=3, risk=False)) for _ in range(2)]
    assert shuffled[0].data.equals(shuffled[1].data) and shuffled[0].risk is None
    kept = microaggregate(frame, 5, qi=["a", "b"], confidential="s",
                          output=Output(shuffle=False, keep_index=True))
    assert list(kept.data.index) == list(frame.index) and kept.risk is not None
    staged = microaggregate(frame, 5, qi=["a", "b"], confidential="s",
                            two_stage=TwoStage(incremental="nn", nu=0.25))
    assert staged.incremental == "nn" and staged.report()["n_plus"] == 10
    private = microaggregate(frame, 5, qi=["a", "b"], confidential="s",
                             privacy=BeyondK(sensitive="s", l=2))
    assert private.engine == "tclose_kfirst" and private.report()["privacy"]["l"] == 2
