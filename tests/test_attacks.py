"""Attack-based risk (:mod:`streamanon.attacks`): anonymeter's singling out, linkability and
attribute inference against a held-out control, with intervals, on the report page; a release
that is the original itself is riskier than a 10-anonymous one; too few records and a missing
anonymeter are said on the page, not raised."""

from __future__ import annotations

import re
import sys

import pandas as pd
import pytest

from simulations.survey_data import SURVEY_SCHEMA, make_survey
from streamanon import Output, microaggregate
from streamanon.attacks import (
    HOLDOUT_SHARE,
    INSTALL,
    MIN_CONTROL,
    attack_risk,
    holdout_attack_risk,
)
from streamanon.risk import measure
from streamanon.risk_page import render
from streamanon.schema import parse_schema

N = 1500
SCHEMA = parse_schema({**SURVEY_SCHEMA, "q1": {**SURVEY_SCHEMA["q1"], "sensitive": True}})


def releaser(k: int):
    """A release of the records given: the records themselves for k = 1, else MDAV's."""
    def release(rest: pd.DataFrame) -> pd.DataFrame:
        if k == 1:
            return rest.drop(columns=["respondent_id", "email"])
        return microaggregate(rest, k, "mdav", schema=SCHEMA,
                              output=Output(risk=False, seed=0)).data
    return release


def page_of(attacks, n: int = 60) -> str:
    frame = make_survey(n, seed=2)
    release = microaggregate(frame, 3, schema=SCHEMA, output=Output(risk=False, seed=0)).data
    measures = measure(frame, release, SCHEMA, 3, aligned=False).to_json()
    measures["attacks"] = attacks.to_json()
    return render(measures, frame, release, SCHEMA, {"k": 3})


def attacks_section(page: str) -> str:
    return re.search(r'<section id="attacks".*?</section>', page, re.S).group(0)


@pytest.fixture(scope="module")
def survey() -> pd.DataFrame:
    return make_survey(N, seed=1)


@pytest.fixture(scope="module")
def by_k(survey) -> dict[int, object]:
    return {k: holdout_attack_risk(survey, SCHEMA, k, releaser(k)) for k in (1, 10)}


@pytest.mark.heavy
def test_the_risks_are_measured_with_intervals_and_shown(by_k):
    risks = by_k[10]
    assert risks.measured, risks.reason
    held = round(HOLDOUT_SHARE * N)
    assert (risks.n_control, risks.n_original, risks.n_attacks) == (held, N - held, held)
    shown = [risks.singling_out, risks.linkability, *risks.inference.values()]
    assert list(risks.inference) == ["q1"]
    for risk in shown:
        assert 0 <= risk.low <= risk.value <= risk.high <= 1
        assert risk.high > risk.low  # an interval, not a point
        assert risk.control_rate is not None
    section = attacks_section(page_of(risks))
    for label in ("singling out", "linkability", "inference of q1", "95 % interval",
                  "isolate exactly one respondent", "joins again through the release",
                  "guesses their answer"):
        assert label in section
    low, high = f"{100 * risks.linkability.low:.1f} %", f"{100 * risks.linkability.high:.1f} %"
    assert f"<td>{low} to {high}</td>" in section


@pytest.mark.heavy
def test_the_original_released_is_riskier_than_a_10_anonymous_release(by_k):
    raw, anonymous = by_k[1], by_k[10]
    assert raw.singling_out.value > anonymous.singling_out.value
    assert raw.linkability.value > anonymous.linkability.value
    # not a matter of chance: the intervals do not overlap
    assert raw.singling_out.low > anonymous.singling_out.high
    assert raw.linkability.low > anonymous.linkability.high


def test_too_few_records_are_not_measured_and_the_page_says_how_many_are_needed():
    needed = round(MIN_CONTROL / HOLDOUT_SHARE)
    frame = make_survey(needed - 1, seed=3)
    risks = holdout_attack_risk(frame, SCHEMA, 5, releaser(5))
    assert not risks.measured
    assert risks.reason == f"{needed - 1:,} records, at least {needed:,} needed"
    assert (f"Not measured: {needed - 1:,} records, at least {needed:,} needed."
            in attacks_section(page_of(risks)))
    small = attack_risk(frame, frame, frame.iloc[:MIN_CONTROL - 1], SCHEMA)
    assert small.reason == f"{MIN_CONTROL - 1:,} control records, at least {MIN_CONTROL:,} needed"


def test_without_anonymeter_the_page_says_how_to_install_it(monkeypatch):
    for name in [m for m in sys.modules if m == "anonymeter" or m.startswith("anonymeter.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "anonymeter", None)  # import anonymeter: ImportError
    frame = make_survey(1200, seed=4)
    risks = holdout_attack_risk(frame, SCHEMA, 5, releaser(5))
    assert not risks.measured and risks.reason == f"anonymeter is not installed ({INSTALL})"
    assert "pip install &#x27;streamanon[risk]&#x27;" in attacks_section(page_of(risks))
    direct = attack_risk(frame, frame, frame, SCHEMA)
    assert direct.reason == risks.reason
