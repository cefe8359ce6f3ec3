"""A survey with a sensitive answer, ``l = 2`` and ``t = 0.2``: its configuration, and its
release from the service on the embedded broker, two-stage, checked by the independent oracle
(``tests/privacy_oracle.py``) on what is published (the Parquet file and the release topic)."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from streamanon import Output, microaggregate
from streamanon.service.config import ConfigError, parse_config
from tests import privacy_oracle as oracle
from tests.service.kafka_helpers import base_run, produce, read_release, toml_schema

ENV = {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32}
K, L, T = 5, 2, 0.2
QI = ["age", "income", "height"]
SLACK = 1e-9
SCHEMA: dict[str, dict[str, Any]] = {
    "respondent_id": {"role": "identifier", "type": "str"},
    "age": {"role": "quasi_identifier", "type": "int", "min": 16, "max": 110},
    "income": {"role": "quasi_identifier", "type": "float", "min": 0},
    "height": {"role": "quasi_identifier", "type": "float"},
    "satisfaction": {"role": "confidential", "type": "int", "min": 1, "max": 5,
                     "sensitive": True},
}


SERVICE_SCHEMA = f"l = {L}\nt = {T}\n" + toml_schema(SCHEMA)


def survey_config(schema: dict[str, dict[str, Any]] = SCHEMA, **survey: Any) -> dict[str, Any]:
    return {"surveys": [{"id": "s1", "k": K, "schema": schema, **survey}]}


# -- configuration ---------------------------------------------------------------------------


def test_l_and_t_are_read_with_the_sensitive_field():
    sc = parse_config(survey_config(l=L, t=T), ENV).surveys[0]
    assert (sc.l, sc.t) == (L, T)
    assert sc.schema.sensitive == ["satisfaction"]


@pytest.mark.parametrize("asked", [{"t": T}, {"l": L}, {"t": T, "l": L}])
def test_t_or_l_without_a_sensitive_field_is_refused(asked):
    plain = {**SCHEMA, "satisfaction": {**SCHEMA["satisfaction"], "sensitive": False}}
    with pytest.raises(ConfigError) as exc:
        parse_config(survey_config(plain, **asked), ENV)
    assert "surveys[0](s1): l and t are about sensitive answers" in str(exc.value)
    assert "sensitive = true" in str(exc.value)


@pytest.mark.parametrize("t", [-0.1, 1.5])
def test_t_outside_zero_to_one_is_refused(t):
    with pytest.raises(ConfigError) as exc:
        parse_config(survey_config(t=t), ENV)
    assert "surveys[0](s1).t" in str(exc.value)


def test_only_a_confidential_answer_can_be_sensitive():
    schema = {**SCHEMA, "age": {**SCHEMA["age"], "sensitive": True}}
    with pytest.raises(ConfigError) as exc:
        parse_config(survey_config(schema, t=T), ENV)
    assert "age.sensitive: only a confidential answer is sensitive" in str(exc.value)


def test_the_t_closeness_engines_are_refused_since_the_service_merges_cells_itself():
    with pytest.raises(ConfigError) as exc:
        parse_config(survey_config(t=T, engine="tclose_kfirst"), ENV)
    assert "tclose_kfirst needs per-record parameter(s) S" in str(exc.value)


# -- the service -----------------------------------------------------------------------------


def responses(n: int, seed: int = 11) -> list[dict[str, Any]]:
    """``n`` responses whose satisfaction is told by age (six in ten follow the age band), so
    that cells of similar respondents hold one answer: plain microaggregation discloses it."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        age = int(rng.integers(18, 81))
        band = min(4, (age - 18) // 13)
        satisfaction = 1 + (band if rng.random() < 0.6 else int(rng.integers(5)))
        out.append({"respondent_id": f"S{i:05d}", "age": age,
                    "income": round(900.0 * age + float(rng.normal(0, 3000)), 2),
                    "height": round(float(rng.normal(172, 9)), 1),
                    "satisfaction": satisfaction})
    return out


def assert_private(release: pd.DataFrame) -> tuple[int, float]:
    """k, l and t of ``release`` by the oracle; returns the achieved l and t."""
    assert oracle.k_of(release, QI) >= K
    l_got = oracle.l_of(release, QI, "satisfaction")
    t_got = oracle.t_of(release, QI, "satisfaction", "ordered")
    assert l_got >= L
    assert t_got <= T + SLACK
    return l_got, t_got


def test_plain_microaggregation_of_these_answers_is_not_t_close():
    """The premise of the service test below: without the merging, the cells give the
    answers away."""
    frame = pd.DataFrame(responses(400))
    plain = microaggregate(frame, K, "mdav", qi=QI, confidential=["satisfaction"],
                           drop=["respondent_id"], output=Output(risk=False))
    assert oracle.k_of(plain.data, QI) >= K
    assert oracle.t_of(plain.data, QI, "satisfaction", "ordered") > T
    assert oracle.l_of(plain.data, QI, "satisfaction") < L


def test_a_t_close_survey_is_released_two_stage_l_diverse_and_t_close(
        service_factory, broker, tmp_path):
    n_first, n = 200, 400
    svc = service_factory(survey="tclose", k=K, incremental="nn_split_end",
                          schema=SERVICE_SCHEMA)
    svc.start()
    topic = f"{svc.prefix}.tclose.responses"
    sent = responses(n)
    msgs = [(b["respondent_id"].encode(), json.dumps(b).encode()) for b in sent]

    base_run(svc, broker.bootstrap, "tclose", msgs[:n_first])
    produce(broker.bootstrap, topic, msgs[n_first:])
    svc.wait_for("tclose", lambda s: s["stored"] == n, what="ingest")
    assert svc.post("/api/surveys/tclose/close")[0] == 202
    status = svc.wait_for("tclose", lambda s: s["state"] == "RELEASED", what="the release")
    assert status["release"]["n"] == n

    directory = Path(tmp_path / "releases" / "tclose")
    reports = Path(tmp_path / "reports" / "tclose")  # the data holder's, apart
    report = json.loads((reports / "report.json").read_text())
    assert report["mode"] == "two-stage" and report["n_base"] == n_first
    parquet = pd.read_parquet(directory / "release.parquet")
    _, rows, _ = read_release(broker.bootstrap, f"{svc.prefix}.tclose.release")
    topic_frame = pd.DataFrame(rows)
    assert len(parquet) == len(topic_frame) == n
    assert list(parquet.columns) == list(topic_frame.columns) == [*QI, "satisfaction"]
    assert sorted(parquet["satisfaction"]) == sorted(b["satisfaction"] for b in sent)

    # the oracle on what was published: k-anonymous, 2-diverse, 0.2-close
    l_got, t_got = assert_private(parquet)
    assert len(oracle.group_rows(parquet, QI)) > 1  # merged, not collapsed into one group
    assert assert_private(topic_frame) == pytest.approx((l_got, t_got), abs=SLACK)

    # the report gives what was asked and what was achieved, as the oracle finds it
    privacy = report["privacy"]
    assert (privacy["l"], privacy["t"]) == (L, T)
    achieved = privacy["sensitive"]["satisfaction"]
    assert achieved["kind"] == "ordered" and achieved["l"] == l_got
    assert achieved["t"] == pytest.approx(t_got, abs=SLACK)
    risk = report["risk"]
    assert risk is not None
    assert risk["risk"]["after"]["smallest_group"] == oracle.k_of(parquet, QI)
    assert 0 <= risk["risk"]["record_linkage"] <= 1
    assert risk["risk"]["sensitive"]["satisfaction"]["l"] == l_got
    assert risk["risk"]["sensitive"]["satisfaction"]["t"] == pytest.approx(t_got, abs=SLACK)

    # report.html beside report.json, with the verdict on the sensitive answer
    page = (reports / "report.html").read_text(encoding="utf-8")
    assert report["files"]["html"] == str(reports / "report.html")
    assert '<section id="verdict"' in page
    sentence = html.escape(
        f"On the sensitive answer satisfaction, every group holds at least {l_got} different "
        f"answers and its distribution in every group is within t = {T:g} of the whole "
        f"release's (largest {t_got:.3f}).", quote=True)
    assert sentence in page
    assert f'<span class="warning">{sentence}' not in page
