"""A mixed survey (category, ordinal, bool and integer quasi-identifiers, a missing income, a
sampling weight) from the response to the release: its validation, its configuration, and the
service on the embedded broker, two-stage."""

from __future__ import annotations

import collections
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyreadstat
import pytest

from streamanon.metrics import check_table_k_anonymity
from streamanon.mixed import mixed_engines
from streamanon.release import prepare_stored, release_prepared
from streamanon.service.config import ConfigError, parse_config
from streamanon.service.publisher import record_messages, records_frame
from streamanon.service.store import Records
from streamanon.service.validation import Invalid, Validated, Validator
from tests.service.kafka_helpers import (
    base_run,
    headers,
    produce,
    read_release,
    read_topic,
    release_kind,
    release_meta,
    toml_schema,
)

ENV = {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32}
GENDERS = ["female", "male", "non-binary", "prefer not to say"]
EDUCATION = ["primary", "secondary", "tertiary"]
SCHEMA: dict[str, dict[str, Any]] = {
    "respondent_id": {"role": "identifier", "type": "str"},
    "age": {"role": "quasi_identifier", "type": "int"},
    "gender": {"role": "quasi_identifier", "type": "category", "levels": GENDERS},
    "education": {"role": "quasi_identifier", "type": "ordinal", "levels": EDUCATION},
    "smoker": {"role": "quasi_identifier", "type": "bool"},
    "income": {"role": "quasi_identifier", "type": "float", "required": False,
               "missing": "group"},
    "satisfaction": {"role": "confidential", "type": "int", "required": False},
    "weight": {"role": "weight", "type": "float"},
}
QI = ["age", "gender", "education", "smoker", "income"]
_DROP = object()


def survey_config(engine: str = "mdav", **fields: Any) -> dict[str, Any]:
    schema = {**SCHEMA, **fields}
    return {"surveys": [{"id": "s1", "k": 5, "engine": engine,
                         "schema": {n: s for n, s in schema.items() if s is not _DROP}}]}


def validator() -> Validator:
    cfg = parse_config(survey_config(), ENV)
    return Validator(cfg.surveys[0], cfg.hmac_key)


def answer(rid: str = "R1", **override: Any) -> bytes:
    """A response with every field of the schema (``_DROP``: the field left out)."""
    body = {"respondent_id": rid, "age": 41, "gender": "non-binary", "education": "secondary",
            "smoker": True, "income": 31500.5, "satisfaction": 4, "weight": 1.25}
    body.update(override)
    return json.dumps({k: v for k, v in body.items() if v is not _DROP}).encode()


# -- validation ------------------------------------------------------------------------------

def test_a_valid_response_is_stored_as_level_numbers_bools_and_nan():
    v = validator()
    rec = v.validate(answer())
    assert rec.qi.tolist() == [41.0, 2.0, 1.0, 1.0, 31500.5]
    assert rec.confidential == {"satisfaction": 4, "weight": 1.25}
    for missing in (answer(income=None), answer(income=_DROP)):
        rec = v.validate(missing)
        assert rec.qi[:4].tolist() == [41.0, 2.0, 1.0, 1.0] and math.isnan(rec.qi[4])
    rec = v.validate(answer(gender="female", education="tertiary", smoker=False,
                            satisfaction=None))
    assert rec.qi.tolist() == [41.0, 0.0, 2.0, 0.0, 31500.5]
    assert rec.confidential == {"satisfaction": None, "weight": 1.25}


@pytest.mark.parametrize("override,reason", [
    ({"gender": "other"}, "out_of_levels"),
    ({"gender": "Female"}, "out_of_levels"),  # levels are matched exactly
    ({"education": "doctorate"}, "out_of_levels"),
    # a level given with another JSON type is not that level: out_of_levels, not wrong_type
    # (JSON 1 is neither "male", the level numbered 1, nor a level "1")
    ({"gender": 1}, "out_of_levels"),
    ({"gender": True}, "out_of_levels"),
    ({"education": 2.0}, "out_of_levels"),
    # a container is no level at all
    ({"gender": ["female"]}, "wrong_type"),
    ({"smoker": "yes"}, "wrong_type"),
    ({"smoker": 1}, "wrong_type"),
    ({"age": 41.5}, "wrong_type"),
    ({"income": "high"}, "wrong_type"),
    ({"weight": 0}, "out_of_bounds"),
    ({"weight": 0.0}, "out_of_bounds"),
    ({"weight": -1.5}, "out_of_bounds"),
    ({"weight": _DROP}, "missing_field"),
    ({"age": _DROP}, "missing_field"),
    ({"gender": _DROP}, "missing_field"),
    ({"gender": None}, "missing_field"),
    ({"smoker": None}, "missing_field"),
])
def test_each_bad_mixed_response_gets_its_reason(override, reason):
    with pytest.raises(Invalid) as exc:
        validator().validate(answer(**override))
    assert exc.value.reason == reason
    assert "R1" not in exc.value.detail


def outcome(result: Validated | Invalid) -> tuple:
    """A comparable form of a validation outcome (NaN equal to NaN)."""
    if isinstance(result, Invalid):
        return ("invalid", result.reason, result.detail)
    qi = tuple("nan" if math.isnan(x) else float(x) for x in result.qi)
    return ("valid", result.rid_hash, qi, tuple(sorted(result.confidential.items())),
            result.label)


def one_by_one(v: Validator, raws: list[bytes]) -> list[tuple]:
    out = []
    for raw in raws:
        try:
            out.append(outcome(v.validate(raw)))
        except Invalid as exc:
            out.append(outcome(exc))
    return out


def mixed_batch() -> list[bytes]:
    rng = np.random.default_rng(7)
    bad = [{"gender": "other"}, {"gender": 1}, {"gender": True}, {"education": "doctorate"},
           {"smoker": "no"}, {"weight": 0}, {"weight": -2.0}, {"age": _DROP},
           {"gender": None}, {"income": "n/a"}, {"gender": ["male"]}]
    raws = []
    for i in range(120):
        over: dict[str, Any] = {
            "age": int(rng.integers(18, 90)), "gender": GENDERS[int(rng.integers(4))],
            "education": EDUCATION[int(rng.integers(3))], "smoker": bool(rng.integers(2)),
            "income": [None, _DROP, float(rng.integers(10_000, 90_000))][i % 3],
            "weight": float(rng.uniform(0.5, 3.0))}
        if i % 4 == 3:
            over.update(bad[(i // 4) % len(bad)])
        raws.append(answer(f"R{i}", **over))
    return raws


def test_validate_batch_gives_validate_s_outcome_for_every_message_of_a_mixed_batch():
    v = validator()
    raws = mixed_batch()
    expected = one_by_one(v, raws)
    assert collections.Counter(o[0] for o in expected) == {"valid": 90, "invalid": 30}
    assert {o[1] for o in expected if o[0] == "invalid"} == {
        "out_of_levels", "wrong_type", "out_of_bounds", "missing_field"}
    assert [outcome(r) for r in v.validate_batch(raws)] == expected
    # the column-wise fast path alone: every message has every field, all valid
    full = [r for r, o in zip(raws, expected, strict=True)
            if o[0] == "valid" and b'"income"' in r]
    assert [outcome(r) for r in v.validate_batch(full)] == one_by_one(v, full)
    # one bad message in an otherwise uniform column is named, the others stored
    batch = [answer("A"), answer("B", gender="other"), answer("C", gender=2),
             answer("D", smoker=0), answer("E", weight=0.0), answer("F", income=None)]
    assert [outcome(r) for r in v.validate_batch(batch)] == one_by_one(v, batch)
    assert [o[1] for o in one_by_one(v, batch)] == [
        v.pseudonym("A"), "out_of_levels", "out_of_levels", "wrong_type", "out_of_bounds",
        v.pseudonym("F")]


# -- configuration ---------------------------------------------------------------------------

def test_a_category_quasi_identifier_needs_its_levels():
    with pytest.raises(ConfigError) as exc:
        parse_config(survey_config(gender={"role": "quasi_identifier", "type": "category"}), ENV)
    assert "surveys[0](s1).schema.gender.levels" in str(exc.value)
    assert "category quasi-identifier" in str(exc.value)


def test_an_engine_for_numeric_data_refuses_categorical_quasi_identifiers():
    with pytest.raises(ConfigError) as exc:
        parse_config(survey_config(engine="mondrian"), ENV)
    text = str(exc.value)
    assert "surveys[0](s1).engine: mondrian" in text
    assert "gender, smoker" in text  # bool is nominal too
    assert f"engines for mixed data: {', '.join(sorted(mixed_engines()))}" in text
    # ordinal and numeric quasi-identifiers alone are fine for it
    parse_config(survey_config(engine="mondrian", gender=_DROP, smoker=_DROP), ENV)
    for engine in sorted(e for e in mixed_engines() if not e.startswith("tclose")):
        parse_config(survey_config(engine=engine), ENV)  # (t-closeness engines: per-record S)


def test_a_weight_is_required():
    with pytest.raises(ConfigError) as exc:
        parse_config(survey_config(weight={"role": "weight", "type": "float",
                                           "required": False}), ENV)
    assert "surveys[0](s1).schema.weight.required: a weight is required" in str(exc.value)


# -- the release table, without a broker -------------------------------------------------

def test_an_optional_int_answer_is_released_as_an_int():
    """``satisfaction`` is ``int``, ``required = false``: the release keeps it an integer column
    (nullable where an answer is missing), and its messages say 4, not 4.0."""
    cfg = parse_config(survey_config(), ENV)
    sc, v = cfg.surveys[0], Validator(cfg.surveys[0], cfg.hmac_key)
    stored = [v.validate(answer(f"R{i}", age=20 + i, satisfaction=None if i % 4 == 0
                                else 1 + i % 5)) for i in range(20)]
    records = Records(seq=np.arange(20), arrived_at=np.zeros(20),
                      qi=np.array([r.qi for r in stored]),
                      confidential=[r.confidential for r in stored], labels=[None] * 20)
    frame = records_frame(records, sc)
    release = release_prepared(frame, prepare_stored(frame, sc.schema, sc.k),
                               np.arange(20) // 5, sc.k, seed=1)
    messages = [json.loads(m) for m in record_messages(release.table)]
    assert collections.Counter(m["satisfaction"] for m in messages) == collections.Counter(
        r.confidential["satisfaction"] for r in stored)
    assert all(m["satisfaction"] is None or type(m["satisfaction"]) is int for m in messages)
    assert pd.api.types.is_integer_dtype(release.table["satisfaction"])


# -- the service -----------------------------------------------------------------------------

SERVICE_SCHEMA = toml_schema(SCHEMA)  # engine = "mdav": write_config's default


def responses(n: int, seed: int = 2024) -> list[dict[str, Any]]:
    """``n`` seeded responses: 15 % without income (half left out, half null), about 2 %
    non-binary, some without satisfaction, a positive weight each."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        body: dict[str, Any] = {
            "respondent_id": f"M{i:05d}", "age": int(rng.integers(18, 80)),
            "gender": GENDERS[int(rng.choice(4, p=[0.49, 0.46, 0.02, 0.03]))],
            "education": EDUCATION[int(rng.choice(3, p=[0.2, 0.5, 0.3]))],
            "smoker": bool(rng.random() < 0.25),
            "income": round(float(rng.lognormal(10.3, 0.5)), 2),
            "satisfaction": int(rng.integers(1, 6)),
            "weight": round(float(rng.uniform(0.4, 3.0)), 3)}
        if rng.random() < 0.15:
            if i % 2:
                body["income"] = None
            else:
                del body["income"]
        if rng.random() < 0.1:
            del body["satisfaction"]
        out.append(body)
    return out


def test_a_mixed_survey_is_released_two_stage_typed_and_k_anonymous(
        service_factory, broker, tmp_path):
    k, n_first, n = 5, 200, 400
    svc = service_factory(survey="mixed", k=k, incremental="nn_split_end",
                          schema=SERVICE_SCHEMA, formats=("parquet", "csv", "sav", "dta"))
    svc.start()
    topic = f"{svc.prefix}.mixed.responses"
    sent = responses(n)
    msgs = [(b["respondent_id"].encode(), json.dumps(b).encode()) for b in sent]
    unknown = [dict(sent[i], respondent_id=f"X{i:05d}", gender=level, weight=999.0 + i)
               for i, level in enumerate(["other", "Female", "diverse", "x"])]

    base_run(svc, broker.bootstrap, "mixed", msgs[:n_first])
    produce(broker.bootstrap, topic, msgs[n_first:n_first + 100]
            + [(None, json.dumps(b).encode()) for b in unknown] + msgs[n_first + 100:])
    svc.wait_for("mixed", lambda s: s["stored"] == n
                 and s["dead_lettered"].get("out_of_levels") == len(unknown), what="ingest")
    assert sum(svc.survey("mixed")["dead_lettered"].values()) == len(unknown)
    assert svc.post("/api/surveys/mixed/close")[0] == 202
    status = svc.wait_for("mixed", lambda s: s["state"] == "RELEASED", what="the release")
    assert status["release"]["n"] == n

    directory = Path(tmp_path / "releases" / "mixed")
    report = json.loads((tmp_path / "reports" / "mixed" / "report.json").read_text())
    assert report["mode"] == "two-stage" and report["n_base"] == n_first
    assert report["n_increment"] == n - n_first
    assert report["columns"] == [
        {"name": name, "role": spec["role"], "type": spec["type"],
         "treatment": {"identifier": "dropped", "quasi_identifier": "microaggregated"}.get(
             spec["role"], "unchanged")}
        for name, spec in SCHEMA.items()]
    parquet = pd.read_parquet(directory / "release.parquet")
    records, rows, manifest = read_release(broker.bootstrap, f"{svc.prefix}.mixed.release")
    assert manifest["count"] == len(rows) == len(parquet) == n
    topic_frame = pd.DataFrame(rows)
    assert list(parquet.columns) == list(topic_frame.columns) == [
        "age", "gender", "education", "smoker", "income", "satisfaction", "weight"]

    # the release file: typed columns
    assert pd.api.types.is_integer_dtype(parquet["age"])
    assert pd.api.types.is_bool_dtype(parquet["smoker"])
    assert all(type(g) is str for g in parquet["gender"])
    assert set(parquet["gender"]) <= set(GENDERS)
    assert all(type(e) is str for e in parquet["education"])
    assert set(parquet["education"]) <= set(EDUCATION)
    # the release topic: the same, as JSON
    assert all(type(r["age"]) is int for r in rows)
    assert all(type(r["smoker"]) is bool for r in rows)
    assert all(r["gender"] in GENDERS and r["education"] in EDUCATION for r in rows)
    assert all(r["income"] is None or type(r["income"]) is float for r in rows)
    satisfaction = collections.Counter(b.get("satisfaction") for b in sent)
    assert collections.Counter(r["satisfaction"] for r in rows) == satisfaction
    # each message is its row of the file (the index in its key)
    by_index = {release_meta(r).index: json.loads(r.value) for r in records
                if release_kind(r) == "record"}
    assert [by_index[i] for i in range(n)] == [
        {c: None if pd.isna(v) else v.item() if isinstance(v, np.generic) else v
         for c, v in row.items()} for row in parquet.to_dict("records")]

    # every valid respondent once, none of the dead-lettered ones: the weights as sent
    weights = sorted(b["weight"] for b in sent)
    assert sorted(parquet["weight"].tolist()) == weights
    assert sorted(r["weight"] for r in rows) == weights
    assert not set(parquet["gender"]) - set(GENDERS)
    # group policy: the no-income pattern has >= k records, so it keeps its missing values
    n_missing = sum(b.get("income") is None for b in sent)
    assert k <= n_missing <= n - k
    assert int(parquet["income"].isna().sum()) == n_missing
    assert sum(r["income"] is None for r in rows) == n_missing
    # the full key is k-anonymous, a missing income a value of its own
    assert check_table_k_anonymity(parquet, QI, k).ok
    assert check_table_k_anonymity(topic_frame, QI, k).ok
    assert parquet.groupby(QI, dropna=False).size().min() >= k

    dead = read_topic(broker.bootstrap, f"{svc.prefix}.mixed.deadletter",
                      expected=len(unknown))
    assert [headers(r)["streamanon-reason"] for r in dead] == ["out_of_levels"] * len(unknown)
    assert sorted(json.loads(r.value)["gender"] for r in dead) == sorted(
        b["gender"] for b in unknown)
    # a confidential int with missing answers stays an int column (nullable), as declared
    # (see test_an_optional_int_answer_is_released_as_an_int)
    assert pd.api.types.is_integer_dtype(parquet["satisfaction"])
    assert all(r["satisfaction"] is None or type(r["satisfaction"]) is int for r in rows)

    # [output] formats: categories dictionary-encoded in Parquet (factors in R), and SPSS
    # and Stata files, labelled, that read back whole and k-anonymous, as private as the rest
    assert isinstance(parquet["gender"].dtype, pd.CategoricalDtype)
    assert parquet["education"].cat.ordered
    assert list(parquet["education"].cat.categories) == EDUCATION
    for fmt, read in (("sav", pyreadstat.read_sav), ("dta", pyreadstat.read_dta)):
        path = directory / f"release.{fmt}"
        assert oct(os.stat(path).st_mode & 0o777) == "0o640"
        assert report["files"][f"sha256_{fmt}"]
        back, meta = read(path, apply_value_formats=True)
        assert len(back) == n and list(back.columns) == list(parquet.columns)
        assert meta.variable_value_labels["gender"] == dict(enumerate(GENDERS, start=1))
        assert meta.variable_value_labels["education"] == dict(enumerate(EDUCATION, start=1))
        assert meta.column_names_to_labels["age"] == "age"
        assert back["gender"].astype(str).tolist() == parquet["gender"].astype(str).tolist()
        assert check_table_k_anonymity(back, QI, k).ok


def _service_label_release():
    from streamanon.release import prepare_stored, release_prepared
    from streamanon.service.config import parse_config
    from streamanon.service.publisher import (
        record_messages,
        records_frame,
        survey_privacy,
    )
    from streamanon.service.store import Records
    from streamanon.service.validation import Validator

    raw = survey_config(satisfaction={"role": "label", "type": "int", "sensitive": True})
    raw["surveys"][0]["t"] = 0.5
    cfg = parse_config(raw, ENV)
    sc = cfg.surveys[0]
    v = Validator(sc, cfg.hmac_key)
    stored = [v.validate(answer(f"R{i}", age=20 + i, satisfaction=1 + i % 5))
              for i in range(20)]
    records = Records(seq=np.arange(20), arrived_at=np.zeros(20),
                      qi=np.array([r.qi for r in stored]),
                      confidential=[r.confidential for r in stored],
                      labels=[r.label for r in stored])
    frame = records_frame(records, sc)
    privacy = survey_privacy(frame, sc)
    release = release_prepared(frame, prepare_stored(frame, sc.schema, sc.k),
                               np.arange(20) // 5, sc.k, seed=1, privacy=privacy)
    return privacy, [json.loads(m) for m in record_messages(release.table)]


def test_service_measures_an_int_sensitive_label_with_the_ordered_distance():
    """The same int sensitive label gets the ordered distance in the API and the CLI
    (``sensitive_codes`` of an int column) but the equal one in the service, whose stored
    labels are strings: the service and the API check different t on the same data."""
    privacy, _ = _service_label_release()
    assert privacy.kinds == ("ordered",)


def test_service_releases_an_int_label_as_an_int():
    """A ``label`` of type int goes out on the release topic (and in the files) as the
    string "2", not the integer 2 that the response held and that the CLI/API publish."""
    _, messages = _service_label_release()
    assert all(type(m["satisfaction"]) is int for m in messages)
