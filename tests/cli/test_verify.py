"""``streamanon verify`` on text, categorical and missing quasi-identifiers."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from streamanon.cli import main
from streamanon.cli.verify import EXIT_CHECK_FAILED, cmd_verify, register
from streamanon.errors import InputError


def verify(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["verify", *argv])
    return args.handler(args)


def write(frame: pd.DataFrame, path: Path) -> str:
    if path.suffix == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path, index=False)
    return str(path)


def test_text_quasi_identifier_is_grouped_as_text(tmp_path, capsys):
    frame = pd.DataFrame({"region": ["north"] * 3 + ["south"] * 3, "age": [30.5] * 6})
    path = write(frame, tmp_path / "release.csv")
    assert verify(path, "--k", "3", "--qi", "region,age") == 0
    assert capsys.readouterr().out.strip() == (
        f"{path}: 3-anonymous (6 records, 2 quasi-identifier groups, smallest 3)"
    )


def test_categorical_column_in_parquet(tmp_path, capsys):
    frame = pd.DataFrame({
        "sex": pd.Categorical(["f", "f", "m", "m", "m"], categories=["f", "m", "x"]),
        "band": pd.Categorical(["a", "a", "b", "b", "b"]),
    })
    path = write(frame, tmp_path / "release.parquet")
    assert pd.read_parquet(path)["sex"].dtype == "category"
    assert verify(path, "--k", "2", "--qi", "sex,band") == 0
    assert "2 quasi-identifier groups, smallest 2" in capsys.readouterr().out
    assert verify(path, "--k", "3", "--qi", "sex,band") == EXIT_CHECK_FAILED


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_rows_missing_the_same_value_form_one_group(tmp_path, capsys, suffix):
    frame = pd.DataFrame({
        "region": ["north", "north", None, None],
        "income": [np.nan, np.nan, 10.0, 10.0],
    })
    path = write(frame, tmp_path / f"release{suffix}")
    assert verify(path, "--k", "2", "--qi", "region,income") == 0
    assert "(4 records, 2 quasi-identifier groups, smallest 2)" in capsys.readouterr().out


def test_file_that_is_not_k_anonymous_exits_1_and_names_the_counts(tmp_path, capsys):
    frame = pd.DataFrame({"region": ["a"] * 3 + ["b"] * 2 + ["c"] + [None] * 3})
    path = write(frame, tmp_path / "release.csv")
    assert verify(path, "--k", "3", "--qi", "region") == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == (
        f"{path}: NOT 3-anonymous: 2 of 4 quasi-identifier groups (3 of 9 records) occur "
        "fewer than 3 times, smallest 1"
    )


def test_fewer_records_than_k(tmp_path, capsys):
    path = write(pd.DataFrame({"a": ["x", "x"]}), tmp_path / "release.csv")
    assert verify(path, "--k", "3", "--qi", "a") == 1
    assert "NOT 3-anonymous: only 2 records" in capsys.readouterr().err


def test_original_reports_sample_uniques_before_and_after(tmp_path, capsys):
    # Original: (30, a) x2, (31, a), (32, b), (NaN, b), (NaN, b), (33, None), (34, None):
    # 4 of 8 rows are sample uniques, 50.0 %.  The release has 2 groups of 4: 0.0 %.
    original = pd.DataFrame({
        "age": [30, 30, 31, 32, np.nan, np.nan, 33, 34],
        "job": ["a", "a", "a", "b", "b", "b", None, None],
    })
    release = pd.DataFrame({"age": [30.75] * 4 + [33.0] * 4, "job": ["a"] * 4 + [None] * 4})
    raw = write(original, tmp_path / "raw.csv")
    out = write(release, tmp_path / "release.parquet")
    assert verify(out, "--k", "4", "--qi", "age,job", "--original", raw) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "sample uniques: 50.0 % before, 0.0 % after"


def test_original_uniques_are_reported_when_the_check_fails(tmp_path, capsys):
    raw = write(pd.DataFrame({"a": ["x", "y", "z"]}), tmp_path / "raw.csv")
    out = write(pd.DataFrame({"a": ["x", "x", "z"]}), tmp_path / "release.csv")
    assert verify(out, "--k", "2", "--qi", "a", "--original", raw) == 1
    # 1 of 3 release rows is unique: 33.3 %
    assert capsys.readouterr().out.strip() == "sample uniques: 100.0 % before, 33.3 % after"


def test_unknown_column_is_named_with_the_columns_of_the_file(tmp_path):
    path = write(pd.DataFrame({"age": [1], "job": ["a"]}), tmp_path / "release.csv")
    with pytest.raises(InputError, match=r"unknown column\(s\): salary; .* has: age, job"):
        verify(path, "--k", "1", "--qi", "age,salary")


def test_unknown_column_in_the_original_names_that_file(tmp_path):
    out = write(pd.DataFrame({"age": [1, 1]}), tmp_path / "release.csv")
    raw = write(pd.DataFrame({"years": [1, 2]}), tmp_path / "raw.csv")
    with pytest.raises(InputError, match=r"unknown column\(s\): age; .*raw\.csv has: years"):
        verify(out, "--k", "1", "--qi", "age", "--original", raw)


def test_cmd_verify_takes_a_namespace(tmp_path, capsys):
    path = write(pd.DataFrame({"a": [1.0, 1.0]}), tmp_path / "release.csv")
    args = argparse.Namespace(file=path, k=2, qi=["a"], original=None, sensitive=[],
                              l=None, t=None, schema=None)
    assert cmd_verify(args) == 0
    assert "2-anonymous" in capsys.readouterr().out


def test_verify_reports_l_and_t_of_sensitive_columns_and_checks_them(tmp_path, capsys):
    """Two groups of the key: (1: answers a, a, b) and (2: answers c, c, c). The whole file's
    answers are a 2/6, b 1/6, c 3/6 (equal distance); group 1 is a 2/3, b 1/3: half the L1
    difference from the whole is (1/3 + 1/6 + 1/2) / 2 = 1/2; group 2 is all c: 1/2 too.
    Distinct answers: 2 and 1, so l = 1."""
    path = tmp_path / "release.csv"
    pd.DataFrame({"age": [1, 1, 1, 2, 2, 2],
                  "answer": ["a", "a", "b", "c", "c", "c"]}).to_csv(path, index=False)
    assert main(["verify", str(path), "--k", "3", "--qi", "age",
                 "--sensitive", "answer"]) == 0
    out = capsys.readouterr().out
    assert "answer: l = 1, t = 0.500 (equal distance)" in out
    assert main(["verify", str(path), "--k", "3", "--qi", "age", "--sensitive", "answer",
                 "--l", "2"]) == 1
    assert "answer: l = 1 < 2" in capsys.readouterr().err
    assert main(["verify", str(path), "--k", "3", "--qi", "age", "--sensitive", "answer",
                 "--t", "0.5"]) == 0
    assert main(["verify", str(path), "--k", "3", "--qi", "age", "--t", "0.5"]) == 2


# -- the key from the schema (--schema without --qi) ------------------------------------------

SCHEMA_TOML = """[schema]
respondent_id = { role = "identifier" }
email = { role = "identifier" }
age = { role = "quasi_identifier", type = "int", min = 16, max = 99 }
household_size = { role = "quasi_identifier", type = "int" }
income = { role = "quasi_identifier", type = "float" }
commute_km = { role = "confidential", type = "float" }
years_at_address = { role = "confidential", type = "int" }
satisfaction = { role = "confidential", type = "int", sensitive = true }
health_score = { role = "confidential", type = "int" }
votes_next_election = { role = "confidential", type = "str" }
"""
SCHEMA_KEY = ["age", "household_size", "income"]
SURVEY = Path(__file__).resolve().parents[2] / "streamanon" / "data" / "example_survey.csv"


@pytest.fixture(scope="module")
def schema_release(tmp_path_factory) -> dict[str, str]:
    """The packaged survey released with k = 5, l = 2 on the schema's sensitive answer."""
    folder = tmp_path_factory.mktemp("verify_schema")
    schema = folder / "schema.toml"
    schema.write_text(SCHEMA_TOML, encoding="utf-8")
    release = folder / "release.csv"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STREAMANON_DATA_DIR", str(folder / "data"))
        assert main(["anonymize", str(SURVEY), "--schema", str(schema), "--k", "5",
                     "--l", "2", "--out", str(release), "--seed", "1", "--no-progress"]) == 0
    return {"schema": str(schema), "release": str(release), "original": str(SURVEY)}


def test_the_key_comes_from_the_schema_when_qi_is_not_given(schema_release, capsys):
    capsys.readouterr()
    release = pd.read_csv(schema_release["release"])
    groups = release.groupby(SCHEMA_KEY, dropna=False).size()
    assert main(["verify", schema_release["release"], "--schema", schema_release["schema"],
                 "--k", "5"]) == 0
    out = capsys.readouterr().out
    assert (f"5-anonymous ({len(release)} records, {len(groups)} quasi-identifier groups, "
            f"smallest {groups.min()})") in out


def test_a_file_that_is_not_k_anonymous_on_the_schemas_key_fails(schema_release, capsys):
    original = pd.read_csv(schema_release["original"])
    groups = original.groupby(SCHEMA_KEY, dropna=False).size()
    assert groups.min() < 5
    assert main(["verify", schema_release["original"], "--schema", schema_release["schema"],
                 "--k", "5"]) == EXIT_CHECK_FAILED
    err = capsys.readouterr().err
    assert f"NOT 5-anonymous: {int((groups < 5).sum())} of {len(groups)}" in err
    assert err.count("\n") == 1


def test_without_schema_the_key_is_still_required(tmp_path, capsys):
    path = write(pd.DataFrame({"a": [1.0, 1.0]}), tmp_path / "release.csv")
    assert main(["verify", path, "--k", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("streamanon: error: ") and err.count("\n") == 1
    assert "--qi" in err and "--schema" in err


def test_l_and_t_are_checked_on_the_schemas_sensitive_answers(schema_release, capsys):
    release = pd.read_csv(schema_release["release"])
    achieved = int(release.groupby(SCHEMA_KEY, dropna=False)["satisfaction"].nunique().min())
    assert achieved >= 2
    base = ["verify", schema_release["release"], "--schema", schema_release["schema"],
            "--k", "5"]
    capsys.readouterr()
    assert main([*base, "--l", str(achieved)]) == 0
    assert f"satisfaction: l = {achieved}, t = " in capsys.readouterr().out
    assert main([*base, "--l", str(achieved + 1)]) == EXIT_CHECK_FAILED
    err = capsys.readouterr().err
    assert f"satisfaction: l = {achieved} < {achieved + 1}" in err and err.count("\n") == 1
    assert main([*base, "--t", "1"]) == 0  # no distribution is further than 1 from another
    capsys.readouterr()
    assert main([*base, "--t", "0"]) == EXIT_CHECK_FAILED  # the groups' answers differ
    err = capsys.readouterr().err
    assert "satisfaction: t = " in err and err.count("\n") == 1


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
    schema = str(tmp_path / "s.toml")
    Path(schema).write_text("""[schema]
id = {role = "identifier"}
age = {role = "quasi_identifier", type = "int"}
h = {role = "quasi_identifier", type = "int"}


[schema.sat]
role = "confidential"
type = "ordinal"
sensitive = true
levels = ["very low", "low", "medium", "high", "very high"]
""", encoding="utf-8")
    out = str(tmp_path / "release.csv")
    assert main(["anonymize", str(tmp_path / "s.csv"), "--schema", schema, "--k", "5",
                 "--t", "0.15", "--out", out, "--seed", "1", "--no-progress"]) == 0
    assert main(["verify", out, "--k", "5", "--qi", "age,h", "--sensitive", "sat",
                 "--t", "0.15", "--schema", schema]) == 0
