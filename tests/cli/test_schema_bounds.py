"""``streamanon anonymize --schema`` keeps the schema's promises as the service does: a value
outside a field's ``min``/``max``, its levels or its type is refused (one line naming the
column, the count and the first rows), or with ``--out-of-bounds drop|clip`` removed or moved
to the bound and counted in the release's report.json. Never released as it is."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from streamanon.service.config import parse_config
from streamanon.service.validation import Invalid, Validator
from tests.cli.helpers import run
from tests.conftest import REPO

SURVEY = REPO / "streamanon" / "data" / "example_survey.csv"
EXIT_USAGE = 2
K = 5
MAX_AGE = 80
SCHEMA: dict[str, dict[str, Any]] = {
    "respondent_id": {"role": "identifier", "type": "str"},
    "email": {"role": "ignore"},
    "age": {"role": "quasi_identifier", "type": "int", "min": 16, "max": MAX_AGE},
    "household_size": {"role": "quasi_identifier", "type": "int", "min": 1},
    "income": {"role": "quasi_identifier", "type": "float", "min": 0},
    "commute_km": {"role": "quasi_identifier", "type": "float"},
    "years_at_address": {"role": "quasi_identifier", "type": "int"},
    "satisfaction": {"role": "confidential", "type": "int", "min": 1, "max": 5},
    "health_score": {"role": "confidential", "type": "int", "min": 0, "max": 100},
    "votes_next_election": {"role": "confidential", "type": "category",
                            "levels": ["yes", "no", "undecided"]},
}




def toml_value(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(map(toml_value, value)) + "]"
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value)


def write_schema(path: Path, schema: dict[str, dict[str, Any]]) -> Path:
    lines = ["[schema]"] + [
        f"{name} = {{ " + ", ".join(f"{key} = {toml_value(v)}" for key, v in spec.items())
        + " }" for name, spec in schema.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture()
def survey() -> pd.DataFrame:
    return pd.read_csv(SURVEY)


def anonymize(tmp_path: Path, frame: pd.DataFrame, *extra: str,
              schema: dict[str, dict[str, Any]] = SCHEMA) -> tuple[int, str, str, Path]:
    data = tmp_path / "survey.csv"
    frame.to_csv(data, index=False)
    out = tmp_path / "release.csv"
    status, stdout, stderr = run(["anonymize", str(data), "--schema",
                                  str(write_schema(tmp_path / "schema.toml", schema)),
                                  "--k", str(K), "--out", str(out), "--seed", "1", *extra])
    return status, stdout, stderr, out


def row_numbers(message: str, column: str) -> list[int]:
    """The data-row numbers the error gives for ``column`` (1 = the first row after the
    header)."""
    part = re.search(rf"\b{column}: [^;]*", message).group(0)
    rows = re.search(r"rows? ([\d, ]+)", part).group(1)
    return [int(r) for r in rows.replace(" ", "").strip(",").split(",")]


def assert_refused(status: int, stderr: str, out: Path) -> None:
    assert status == EXIT_USAGE
    assert stderr.startswith("streamanon: error: ") and stderr.count("\n") == 1, stderr
    assert "Traceback" not in stderr
    assert not out.exists() and not out.with_name("release.report.json").exists()


def test_ages_above_the_declared_maximum_are_refused_naming_column_count_and_rows(
        tmp_path, survey):
    above = np.flatnonzero(survey["age"].to_numpy() > MAX_AGE)
    assert len(above) > 5  # the packaged survey has respondents over 80
    status, _, stderr, out = anonymize(tmp_path, survey)
    assert_refused(status, stderr, out)
    assert re.search(rf"\bage: {len(above)} value", stderr), stderr
    shown = row_numbers(stderr, "age")
    assert shown == [int(i) + 1 for i in above[:len(shown)]] and 1 <= len(shown) <= 5
    assert "--out-of-bounds" in stderr


@pytest.mark.parametrize("column, value", [
    ("satisfaction", 7),  # above max = 5, a confidential answer
    ("household_size", 0),  # below min = 1, a quasi-identifier
    ("votes_next_election", "maybe"),  # not one of its levels
    ("health_score", 80.5),  # not an integer
    ("satisfaction", "n/a"),  # not a number
    ("income", "inf"),  # not finite
])
def test_a_value_outside_its_fields_declaration_is_refused(tmp_path, survey, column, value):
    survey = survey[survey["age"] <= MAX_AGE].reset_index(drop=True)
    survey[column] = survey[column].astype(object)
    survey.loc[[3, 41], column] = value
    status, _, stderr, out = anonymize(tmp_path, survey)
    assert_refused(status, stderr, out)
    assert re.search(rf"\b{column}: 2 value", stderr), stderr
    assert row_numbers(stderr, column) == [4, 42]


def test_missing_answers_of_an_optional_field_are_not_violations(tmp_path, survey):
    survey = survey[survey["age"] <= MAX_AGE].reset_index(drop=True)
    survey["satisfaction"] = survey["satisfaction"].astype(float)
    survey.loc[[3, 41], "satisfaction"] = np.nan
    schema = {**SCHEMA, "satisfaction": {**SCHEMA["satisfaction"], "required": False}}
    status, _, stderr, out = anonymize(tmp_path, survey, schema=schema)
    assert status == 0, stderr
    assert len(pd.read_csv(out)) == len(survey)


def _service_accepts(frame: pd.DataFrame) -> np.ndarray:
    """Which rows the service's validation stores (the others it dead-letters)."""
    # the service takes a confidential answer as text, not as a category with levels
    schema = {**SCHEMA, "votes_next_election": {"role": "confidential", "type": "str"}}
    config = parse_config({"surveys": [{"id": "s1", "k": K, "schema": schema}]},
                          {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32})
    validator = Validator(config.surveys[0], config.hmac_key)
    messages = [line.encode() for line in
                frame.to_json(orient="records", lines=True).splitlines()]
    return np.array([not isinstance(outcome, Invalid)
                     for outcome in validator.validate_batch(messages)])


def test_drop_releases_exactly_the_records_the_service_would_store(tmp_path, survey):
    stored = _service_accepts(survey)
    assert 0 < stored.sum() < len(survey)
    status, _, stderr, out = anonymize(tmp_path, survey, "--out-of-bounds", "drop")
    assert status == 0, stderr
    release = pd.read_csv(out)
    assert len(release) == stored.sum()
    assert release["age"].max() <= MAX_AGE
    report = json.loads(out.with_name("release.report.json").read_text())
    assert report["n"] == stored.sum()
    outside = report["outside_schema"]
    assert outside["policy"] == "drop"
    assert outside["rows_dropped"] == len(survey) - stored.sum()
    assert outside["columns"] == {"age": {"out_of_bounds": int((survey["age"] > MAX_AGE).sum())}}
    assert "dropped" in stderr and "age" in stderr  # said, not only written


def test_clip_moves_out_of_bound_values_to_the_bound_and_reports_them(tmp_path, survey):
    status, _, stderr, out = anonymize(tmp_path, survey, "--out-of-bounds", "clip")
    assert status == 0, stderr
    release = pd.read_csv(out)
    assert len(release) == len(survey)
    assert release["age"].max() <= MAX_AGE and release["age"].min() >= 16
    outside = json.loads(out.with_name("release.report.json").read_text())["outside_schema"]
    assert outside["policy"] == "clip"
    assert outside["values_clipped"] == int((survey["age"] > MAX_AGE).sum())
    assert outside["rows_dropped"] == 0
    assert outside["columns"] == {"age": {"out_of_bounds": int((survey["age"] > MAX_AGE).sum())}}


def test_clip_does_not_invent_a_level_it_refuses_instead(tmp_path, survey):
    survey["votes_next_election"] = survey["votes_next_election"].astype(object)
    survey.loc[[9], "votes_next_election"] = "maybe"
    status, _, stderr, out = anonymize(tmp_path, survey, "--out-of-bounds", "clip")
    assert_refused(status, stderr, out)
    assert row_numbers(stderr, "votes_next_election") == [10]
    assert "drop" in stderr


def test_a_release_within_the_schema_reports_nothing_outside_it(tmp_path, survey):
    survey = survey[survey["age"] <= MAX_AGE].reset_index(drop=True)
    status, _, stderr, out = anonymize(tmp_path, survey)
    assert status == 0, stderr
    outside = json.loads(out.with_name("release.report.json").read_text())["outside_schema"]
    assert outside == {"policy": "refuse", "rows_dropped": 0, "values_clipped": 0,
                       "columns": {}}


def test_the_option_needs_a_schema(tmp_path, survey):
    data = tmp_path / "survey.csv"
    survey.to_csv(data, index=False)
    status, _, stderr = run(["anonymize", str(data), "--k", str(K), "--qi", "age,income",
                             "--confidential", "household_size,commute_km,years_at_address,"
                             "satisfaction,health_score,votes_next_election",
                             "--drop", "respondent_id,email", "--out-of-bounds", "drop",
                             "--out", str(tmp_path / "release.csv")])
    assert status == EXIT_USAGE and "--schema" in stderr and stderr.count("\n") == 1


def test_levels_are_checked_per_distinct_value_as_value_by_value():
    """The level check looks at each distinct value once; it flags exactly the rows a check of
    every value finds, with numbers, booleans as text, missing values and an unhashable value
    in one column."""
    from streamanon.schema import parse_schema, violations

    values = ["a", "b", None, "c", 1, 1.0, True, "true", float("nan"), "a", ["a"], "B"] * 50
    frame = pd.DataFrame({"level": pd.Series(values, dtype=object),
                          "flag": pd.Series(["true", "False", "yes", None, True, 0] * 100,
                                            dtype=object)})
    schema = parse_schema({"level": {"role": "quasi_identifier", "type": "category",
                                     "levels": ["a", "b", 1]},
                           "flag": {"role": "quasi_identifier", "type": "bool"}})

    def value_by_value(column: str, known: set, boolean: bool) -> list[int]:
        out = []
        for i, value in enumerate(frame[column]):
            if value is None or (isinstance(value, float) and np.isnan(value)):
                continue
            if boolean and isinstance(value, str):
                value = {"true": True, "false": False}.get(value.strip().lower(), value)
            try:
                if value not in known:
                    out.append(i)
            except TypeError:
                out.append(i)
        return out

    found = {v.column: v.rows.tolist() for v in violations(frame, schema)}
    assert found["level"] == value_by_value("level", {"a", "b", 1}, False)
    assert found["flag"] == value_by_value("flag", {False, True}, True)
    hashable = frame.drop(index=[i for i, v in enumerate(values) if isinstance(v, list)])
    found = {v.column: v.rows.tolist()
             for v in violations(hashable.reset_index(drop=True), schema)}
    assert len(found["level"]) == len(value_by_value("level", {"a", "b", 1}, False)) - 50
