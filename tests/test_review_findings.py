"""Reproductions of defects found in the review of issues 15 and 16 (3bf3742..HEAD).

Each test fails on the reviewed code and states the property that should hold.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from streamanon import microaggregate
from streamanon.cli import main
from streamanon.errors import StreamanonError


def _write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


# -- 1. report.json names a stratum value the release suppressed --------------------------------

def test_report_does_not_name_a_stratum_value_of_fewer_than_k_records():
    """A stratum of 2 < k records is merged into another; its records' region becomes the
    cell's modal level, so the release never shows "Atlantis". The report must not publish
    that value (and its count of 2) either: report.json carries no response value."""
    rng = np.random.default_rng(1)
    n = 60
    frame = pd.DataFrame({"age": rng.integers(18, 80, n),
                          "region": ["north"] * 30 + ["south"] * 28 + ["Atlantis"] * 2,
                          "q": rng.integers(1, 6, n)})
    schema = {"age": {"role": "quasi_identifier", "type": "int"},
              "region": {"role": "quasi_identifier", "type": "category"},
              "q": {"role": "confidential", "type": "int"}}
    result = microaggregate(frame, 5, schema=schema, strata="region", seed=0)
    assert "Atlantis" not in set(result.data["region"])  # the release hides it ...
    assert "Atlantis" not in json.dumps(result.report())  # ... so must the report


# -- 2. a declared level "NA" (or "None", "null", ...) is read from CSV as missing -------------

def test_a_declared_level_spelled_NA_is_not_read_as_missing(tmp_path):
    """``country`` has the declared level "NA" (Namibia). read_table uses pandas' default
    na_values, so the CLI reads every "NA" as a missing answer: a required field is refused
    with a misleading "missing values" error, and an optional one releases them as blanks."""
    rng = np.random.default_rng(0)
    n = 40
    survey = pd.DataFrame({"id": [f"R{i}" for i in range(n)], "age": rng.integers(18, 80, n),
                           "country": ["NA"] * 15 + ["ZA"] * 13 + ["BW"] * 12,
                           "q": rng.integers(1, 6, n)})
    survey.to_csv(tmp_path / "survey.csv", index=False)
    schema = _write(tmp_path / "schema.toml", """[schema]
id = {role = "identifier"}
age = {role = "quasi_identifier", type = "int"}
country = {role = "quasi_identifier", type = "category", levels = ["NA", "ZA", "BW"]}
q = {role = "confidential", type = "int"}
""")
    out = tmp_path / "release.parquet"
    assert main(["anonymize", str(tmp_path / "survey.csv"), "--schema", schema, "--k", "5",
                 "--out", str(out), "--seed", "1", "--no-progress"]) == 0
    released = pd.read_parquet(out)
    assert released["country"].notna().all()
    assert set(released["country"]) <= {"NA", "ZA", "BW"}


# -- 3. verify measures an ordinal sensitive answer with the wrong distance ---------------------

def test_verify_confirms_the_t_that_anonymize_guaranteed_on_an_ordinal_answer(tmp_path):
    """``sat`` is an ordinal sensitive answer: anonymize enforces t with the ordered distance
    (docs/guide/privacy.md: "Numbers and ordinals use the ordered distance") and reports
    t <= 0.15; verify, run as that page shows, reads the text levels with the equal distance
    and fails the same release (t = 0.49)."""
    rng = np.random.default_rng(0)
    n = 300
    age = rng.integers(18, 80, n)
    levels = np.array(["very low", "low", "medium", "high", "very high"])
    sat = levels[np.clip((age - 18) // 13 + rng.integers(-1, 2, n), 0, 4)]
    pd.DataFrame({"id": [f"R{i}" for i in range(n)], "age": age,
                  "h": rng.integers(1, 6, n), "sat": sat}).to_csv(tmp_path / "s.csv",
                                                                  index=False)
    schema = _write(tmp_path / "s.toml", """[schema]
id = {role = "identifier"}
age = {role = "quasi_identifier", type = "int"}
h = {role = "quasi_identifier", type = "int"}


[schema.sat]
role = "confidential"
type = "ordinal"
sensitive = true
levels = ["very low", "low", "medium", "high", "very high"]
""")
    out = str(tmp_path / "release.csv")
    assert main(["anonymize", str(tmp_path / "s.csv"), "--schema", schema, "--k", "5",
                 "--t", "0.15", "--out", out, "--seed", "1", "--no-progress"]) == 0
    assert main(["verify", out, "--k", "5", "--qi", "age,h", "--sensitive", "sat",
                 "--t", "0.15", "--schema", schema]) == 0


# -- 4. the service publishes a typed label as text and measures its t as nominal ---------------

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
    from tests.service.test_mixed_survey import ENV, answer, survey_config

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


# -- 5. duplicate column names: a traceback, not a StreamanonError ------------------------------

def test_duplicate_column_names_are_refused_with_a_streamanon_error():
    frame = pd.DataFrame(np.random.default_rng(0).normal(size=(20, 2)), columns=["a", "a"])
    with pytest.raises(StreamanonError):
        microaggregate(frame, 5, qi=["a"])


# -- 6. missing= is refused for a matrix although the API passes it on ---------------------------

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
