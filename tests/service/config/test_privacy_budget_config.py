"""``epsilon_budget`` is a bound on what differentially private releases tell together: a
survey whose release is not differentially private (``dp_mechanism = "individual_ranking"``,
``dp_scope = "quasi_identifiers"``) is refused one at start, since no epsilon bounds it."""

from __future__ import annotations

import pytest

from streamanon.service.config import ConfigError, parse_config

ENV = {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32}


def survey(**over):
    base = {"id": "s1", "k": 5, "close": "on-command", "epsilon": 1.0, "schema": {
        "rid": {"role": "identifier"},
        "age": {"role": "quasi_identifier", "type": "int", "min": 0, "max": 120},
        "answer": {"role": "confidential", "type": "int", "min": 0, "max": 10}}}
    base.update(over)
    return base


@pytest.mark.parametrize("setting", [{"dp_mechanism": "individual_ranking"},
                                     {"dp_scope": "quasi_identifiers"}])
def test_a_budget_for_a_release_that_is_not_differentially_private_is_refused(setting):
    with pytest.raises(ConfigError) as exc:
        parse_config({"surveys": [survey(epsilon_budget=2.0, **setting)]}, ENV)
    text = str(exc.value)
    assert "surveys[0](s1)" in text and "epsilon_budget" in text
    assert "not differentially private" in text and "remove epsilon_budget" in text


@pytest.mark.parametrize("setting", [{"dp_mechanism": "individual_ranking"},
                                     {"dp_scope": "quasi_identifiers"}])
def test_a_release_that_is_not_differentially_private_has_no_budget(setting):
    sc = parse_config({"surveys": [survey(**setting)]}, ENV).surveys[0]
    assert sc.epsilon == 1.0 and sc.privacy_budget is None


def test_a_differentially_private_release_keeps_its_budget():
    sc = parse_config({"surveys": [survey(epsilon_budget=2.0)]}, ENV).surveys[0]
    assert sc.privacy_budget == 2.0
    assert parse_config({"surveys": [survey()]}, ENV).surveys[0].privacy_budget == 1.0
