"""simulations/survey_data.py: the synthetic survey export, its schema and the TOML it writes."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from simulations.common import ROOT
from simulations.survey_data import (
    EDUCATION,
    GENDERS,
    LIKERT,
    REGIONS,
    SURVEY_SCHEMA,
    SURVEY_STRATA,
    main,
    make_survey,
    write_schema_toml,
)
from streamanon.io import read_table

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROLES = {"identifier", "quasi_identifier", "confidential", "weight", "ignore"}
TYPES = {"int", "float", "str", "bool", "category", "ordinal", "timestamp", "text"}


@pytest.fixture(scope="module")
def survey() -> pd.DataFrame:
    return make_survey(3000, seed=0)


def test_the_same_seed_gives_the_same_table_and_another_seed_another(survey):
    pd.testing.assert_frame_equal(make_survey(3000, seed=0), survey)
    assert not make_survey(3000, seed=1).equals(survey)
    assert len(make_survey(17, seed=5)) == 17


def test_columns_and_dtypes_follow_the_schema(survey):
    assert list(survey.columns) == list(SURVEY_SCHEMA)
    for name, spec in SURVEY_SCHEMA.items():
        column = survey[name]
        if spec["type"] == "int" and spec["role"] == "quasi_identifier":
            assert column.dtype == np.int64, name
        elif spec["type"] == "int":
            assert column.dtype == "Int64", name
        elif spec["type"] == "float":
            assert column.dtype == np.float64, name
        else:  # text: every answer given is a string (pandas 2.3 calls an object column
            # holding None "not a string dtype", earlier versions did not)
            assert column.dtype == object or pd.api.types.is_string_dtype(column), name
            assert all(isinstance(v, str) for v in column.dropna()), name
        if spec.get("required", True):
            assert column.notna().all(), name
        if "levels" in spec:
            assert set(column) <= set(spec["levels"]), name
        if "min" in spec:
            assert column.min() >= spec["min"], name
        if "max" in spec:
            assert column.max() <= spec["max"], name


def test_ids_and_emails_are_unique(survey):
    assert survey["respondent_id"].is_unique
    assert survey["email"].is_unique
    assert survey["respondent_id"].iloc[0] == "R000001"
    assert survey["email"].str.fullmatch(r"r\d{6}@example\.org").all()


def test_submissions_fall_in_two_weeks_and_mostly_increase(survey):
    times = pd.to_datetime(survey["submitted_at"], format="%Y-%m-%dT%H:%M:%SZ", utc=True)
    assert (times.max() - times.min()) <= pd.Timedelta(days=14)
    assert times.dt.normalize().nunique() >= 10
    steps = times.diff().dt.total_seconds().dropna()
    assert steps.min() > -3 * 3600
    rank = times.rank(method="first").to_numpy()
    assert np.corrcoef(np.arange(len(times)), rank)[0, 1] > 0.99


def test_income_is_missing_for_about_twelve_percent_and_not_at_random(survey):
    missing = survey["income"].isna()
    assert 0.10 <= missing.mean() <= 0.14
    withheld = survey["gender"] == "prefer not to say"
    assert missing[withheld].mean() > missing[~withheld].mean()
    assert (survey["income"].dropna() > 0).all()


def test_income_rises_with_education(survey):
    medians = survey.groupby("education")["income"].median()
    assert medians["primary"] < medians["secondary"] < medians["tertiary"]
    assert set(survey["education"]) == set(EDUCATION)


def test_rare_genders_are_present_but_rare(survey):
    shares = survey["gender"].value_counts(normalize=True)
    assert set(shares.index) == set(GENDERS)
    for rare in ("non-binary", "prefer not to say"):
        assert 0.003 <= shares[rare] <= 0.03, rare
    assert shares["female"] > 0.4 and shares["male"] > 0.4


def test_regions_differ_in_size_and_weight(survey):
    sizes = survey["region"].value_counts()
    assert set(sizes.index) == set(REGIONS)
    assert sizes.max() > 2.5 * sizes.min()
    weights = survey.groupby("region")["weight"].mean()
    assert weights.max() > 2 * weights.min()
    assert survey["weight"].between(0.5, 3.0).all()


def test_likert_answers_are_one_to_five_with_a_few_missing(survey):
    for q in LIKERT:
        answers = survey[q]
        assert set(answers.dropna()) <= {1, 2, 3, 4, 5}, q
        assert answers.dropna().nunique() == 5, q
        assert 0.005 <= answers.isna().mean() <= 0.08, q


def test_comments_are_mostly_unique_text_some_empty_or_missing(survey):
    comment = survey["comment"]
    assert comment.isna().any()
    assert (comment == "").any()
    assert comment.dropna().nunique() > 500


def test_schema_uses_only_the_agreed_vocabulary():
    for name, spec in SURVEY_SCHEMA.items():
        assert spec["role"] in ROLES, name
        assert spec["type"] in TYPES, name
        assert ("levels" in spec) == (spec["type"] in ("category", "ordinal")), name
    assert SURVEY_SCHEMA["education"]["levels"] == ["primary", "secondary", "tertiary"]
    assert SURVEY_SCHEMA["income"]["missing"] == "group"
    assert SURVEY_STRATA == ["region"]


def test_schema_toml_round_trips(tmp_path):
    path = tmp_path / "schema.toml"
    write_schema_toml(path)
    with open(path, "rb") as fh:
        assert tomllib.load(fh) == {"strata": SURVEY_STRATA, "schema": SURVEY_SCHEMA}


def test_schema_toml_escapes_awkward_strings_and_keys(tmp_path):
    awkward = ['say "no"', "back\\slash", "line\nbreak\ttab", "bell\x07 del\x7f", "é 😀", ""]
    schema = {"a.b": {"role": "quasi_identifier", "type": "category", "levels": awkward},
              "with space": {"role": "ignore", "type": "float", "min": -1e-05, "max": 1e300,
                             "required": False},
              "x": {"role": "confidential", "type": "int", "min": np.int64(1)}}
    path = tmp_path / "awkward.toml"
    write_schema_toml(path, schema, ["a.b", "with space"])
    with open(path, "rb") as fh:
        loaded = tomllib.load(fh)
    assert loaded == {"strata": ["a.b", "with space"], "schema": schema}


def test_main_writes_the_table_and_the_schema(tmp_path, capsys):
    out, schema = tmp_path / "survey.csv", tmp_path / "schema.toml"
    assert main(["--n", "200", "--seed", "3", "--out", str(out), "--schema", str(schema)]) == 0
    table = read_table(out)
    assert len(table) == 200
    assert list(table.columns) == list(SURVEY_SCHEMA)
    assert table["respondent_id"].tolist() == make_survey(200, seed=3)["respondent_id"].tolist()
    with open(schema, "rb") as fh:
        assert tomllib.load(fh)["schema"] == SURVEY_SCHEMA
    assert "wrote" in capsys.readouterr().out


def test_main_writes_parquet_and_puts_the_schema_beside_it_by_default(tmp_path):
    out = tmp_path / "sub" / "survey.parquet"
    assert main(["--n", "50", "--out", str(out)]) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(out), make_survey(50, seed=0),
                                  check_dtype=False)
    assert (tmp_path / "sub" / "survey.schema.toml").is_file()


def test_main_refuses_an_unknown_suffix_and_a_bad_n(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--out", str(tmp_path / "survey.xlsx")])
    assert exit_info.value.code == 2
    assert "unsupported file type '.xlsx'; use .csv, .parquet" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--n", "0", "--out", str(tmp_path / "survey.csv")])


def test_help_explains_the_script(subprocesses):
    result = subprocess.run([sys.executable, "-m", "simulations.survey_data", "--help"],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "--schema" in result.stdout and "synthetic e-survey" in result.stdout
