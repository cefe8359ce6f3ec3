"""``streamanon anonymize --schema`` on the synthetic e-survey (simulations/survey_data.py):
what the written release keeps, what it removes, and the guards around it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simulations.survey_data import SURVEY_SCHEMA, make_survey, write_schema_toml
from streamanon.cli import main
from streamanon.io import read_table, write_table
from streamanon.metrics import check_table_k_anonymity, sample_unique_share
from tests.cli.helpers import run

N = 3000
K = 5
KEY = ["age", "household_size", "gender", "region", "education", "income"]
IDENTIFIERS = ["respondent_id", "email"]
CONFIDENTIAL = ["submitted_at", "q1", "q2", "q3", "q4", "q5", "comment", "weight"]
EXIT_USAGE = 2




@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """The raw survey (CSV and Parquet) and its schema file."""
    folder = tmp_path_factory.mktemp("survey")
    frame = make_survey(N, seed=0)
    paths = {"csv": folder / "survey.csv", "parquet": folder / "survey.parquet",
             "schema": folder / "survey.schema.toml"}
    write_table(frame, paths["csv"])
    write_table(frame, paths["parquet"])
    write_schema_toml(paths["schema"])
    return paths


@pytest.fixture(scope="module")
def released(files, tmp_path_factory) -> dict[str, object]:
    """The k = 5 release of the CSV export through the command line, with what it printed."""
    folder = tmp_path_factory.mktemp("release")
    out = folder / "release.csv"
    with pytest.MonkeyPatch.context() as mp:  # the run's timing goes to a private cost model
        mp.setenv("STREAMANON_DATA_DIR", str(folder / "data"))
        status, stdout, stderr = run(["anonymize", str(files["csv"]), "--schema",
                                      str(files["schema"]), "--k", str(K), "--out", str(out),
                                      "--seed", "1"])
    return {"status": status, "stdout": stdout, "stderr": stderr, "out": out,
            "release": pd.read_csv(out),
            "original": pd.read_csv(files["csv"]),
            "report": json.loads((folder / "release.report.json").read_text())}


def test_the_run_succeeds_and_every_respondent_is_released(released):
    assert released["status"] == 0, released["stderr"]
    assert f"{N} records" in released["stdout"]
    assert len(released["release"]) == N


def test_identifiers_are_not_in_the_release(released):
    release = released["release"]
    assert not set(IDENTIFIERS) & set(release.columns)
    text = released["out"].read_text(encoding="utf-8")
    assert "R000001" not in text and "@example.org" not in text


def test_the_full_key_is_k_anonymous_with_missing_as_a_value(released):
    report = check_table_k_anonymity(released["release"], KEY, K)
    assert report.ok, report
    assert report.smallest_group >= K
    assert released["release"]["income"].isna().any()  # the missing income is part of the key


def test_integer_fields_stay_integral_and_within_their_bounds(released):
    release = released["release"]
    for name in ("age", "household_size"):
        column = release[name]
        assert pd.api.types.is_integer_dtype(column), column.dtype
        assert column.between(SURVEY_SCHEMA[name]["min"], SURVEY_SCHEMA[name]["max"]).all()


@pytest.mark.parametrize("name", ["gender", "region", "education"])
def test_categories_and_levels_come_from_the_original_vocabulary(released, name):
    release, original = released["release"], released["original"]
    assert release[name].notna().all()
    assert set(release[name]) <= set(original[name])
    assert set(release[name]) <= set(SURVEY_SCHEMA[name]["levels"])


def test_the_weights_are_published_as_a_multiset(released):
    np.testing.assert_array_equal(np.sort(released["release"]["weight"].to_numpy()),
                                  np.sort(released["original"]["weight"].to_numpy()))


def test_confidential_answers_stay_together_row_by_row(released):
    def rows(frame: pd.DataFrame) -> list[tuple]:
        part = frame[CONFIDENTIAL].astype(object)
        return sorted(map(tuple, part.where(part.notna(), None).to_numpy()), key=repr)

    assert rows(released["release"]) == rows(released["original"])


def test_the_income_missing_share_is_preserved(released):
    release, original = released["release"], released["original"]
    assert original["income"].isna().sum() == round(0.12 * N)
    assert release["income"].isna().sum() == original["income"].isna().sum()
    assert released["report"]["values_withheld"] == 0
    assert released["report"]["values_imputed"] == 0


def test_report_lists_each_columns_role_and_type(released):
    report = released["report"]
    assert report["columns"] == {name: {"role": spec["role"], "type": spec["type"]}
                                 for name, spec in SURVEY_SCHEMA.items()}
    assert report["quasi_identifiers"] == [n for n, s in SURVEY_SCHEMA.items()
                                           if s["role"] == "quasi_identifier"]
    assert sorted(report["dropped"]) == sorted(IDENTIFIERS)
    assert report["weight"] == "weight"
    assert report["strata"] == ["region"]
    assert (report["n"], report["k"]) == (N, K)
    assert report["smallest_cell"] >= K


def test_report_has_information_loss_by_type(released):
    by_type = released["report"]["information_loss_by_type"]
    assert set(by_type) == {"numeric", "ordinal", "nominal"}
    for kind, value in by_type.items():
        assert value is not None and 0 < value < 100, (kind, value)


def test_a_parquet_export_gives_the_same_release_as_the_csv(files, released, tmp_path,
                                                             monkeypatch):
    monkeypatch.setenv("STREAMANON_DATA_DIR", str(tmp_path / "data"))
    out = tmp_path / "release.parquet"
    status, _, stderr = run(["anonymize", str(files["parquet"]), "--schema",
                             str(files["schema"]), "--k", str(K), "--out", str(out),
                             "--seed", "1"])
    assert status == 0, stderr
    release = pd.read_parquet(out)
    assert len(release) == N
    assert not set(IDENTIFIERS) & set(release.columns)
    assert check_table_k_anonymity(release, KEY, K).ok
    assert pd.api.types.is_integer_dtype(release["age"])
    assert pd.api.types.is_integer_dtype(release["household_size"])
    assert release["income"].isna().sum() == round(0.12 * N)
    # Same data, schema and seed: the same values in the same rows, whatever the file format
    # (pandas reads an empty comment in a CSV as missing, Parquet keeps it empty).
    from_csv = released["release"]
    assert list(release.columns) == list(from_csv.columns)
    for name in release.columns:
        got = [None if v == "" else v for v in
               release[name].astype(object).where(release[name].notna(), None)]
        want = from_csv[name].astype(object).where(from_csv[name].notna(), None).tolist()
        if name in ("income", "weight"):
            np.testing.assert_allclose(np.array(got, dtype=float), np.array(want, dtype=float),
                                       rtol=0, atol=0)
        else:
            assert got == want, name


def test_verify_with_the_original_prints_the_sample_unique_shares(files, released, capsys):
    status = main(["verify", str(released["out"]), "--k", str(K), "--qi", ",".join(KEY),
                   "--original", str(files["csv"])])
    out = capsys.readouterr().out
    assert status == 0
    before = 100 * sample_unique_share(released["original"], KEY)
    assert before > 90  # nearly every respondent is unique on the raw key
    assert f"sample uniques: {before:.1f} % before, 0.0 % after" in out
    assert f"{K}-anonymous ({N} records" in out


# -- safety ------------------------------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["same", "dotdot"])
def test_out_equal_to_the_input_is_refused_and_the_input_is_untouched(files, tmp_path,
                                                                      spelling):
    raw = tmp_path / "survey.csv"
    raw.write_bytes(files["csv"].read_bytes())
    before = raw.read_bytes()
    (tmp_path / "sub").mkdir()
    out = raw if spelling == "same" else tmp_path / "sub" / ".." / "survey.csv"
    status, _, stderr = run(["anonymize", str(raw), "--schema", str(files["schema"]),
                                  "--k", str(K), "--out", str(out), "--seed", "1"])
    assert status == EXIT_USAGE
    assert "input file" in stderr and stderr.count("\n") == 1
    assert raw.read_bytes() == before
    assert not (tmp_path / "survey.report.json").exists()


def test_confidential_timestamp_and_free_text_are_named_in_warnings(released):
    warnings = [line for line in released["stderr"].splitlines() if "warning" in line]
    assert any("submitted_at" in line and "timestamp" in line for line in warnings), warnings
    assert any("comment" in line and "free text" in line for line in warnings), warnings
    assert not any(name in line for line in warnings for name in ("q1", "weight", "age"))


def test_schema_together_with_qi_is_refused(files, tmp_path):
    out = tmp_path / "release.csv"
    status, _, stderr = run(["anonymize", str(files["csv"]), "--schema",
                                  str(files["schema"]), "--qi", "age", "--k", str(K),
                                  "--out", str(out)])
    assert status == EXIT_USAGE
    assert "--qi" in stderr and "--schema" in stderr and stderr.count("\n") == 1
    assert not out.exists()


@pytest.fixture
def one_missing(tmp_path) -> Path:
    """A small numeric export with one respondent who skipped the income question."""
    rng = np.random.default_rng(3)
    n = 40
    frame = pd.DataFrame({"respondent_id": [f"R{i:03d}" for i in range(n)],
                          "age": rng.integers(18, 80, n),
                          "income": rng.lognormal(10, 0.4, n).round(-1),
                          "answer": rng.integers(1, 6, n)})
    frame.loc[7, "income"] = np.nan
    path = tmp_path / "small.csv"
    frame.to_csv(path, index=False)
    return path


QUICK = ["--qi", "age,income", "--confidential", "answer", "--drop", "respondent_id"]


def test_quick_form_with_a_missing_value_and_no_policy_is_a_one_line_error(one_missing,
                                                                          tmp_path):
    out = tmp_path / "release.csv"
    status, _, stderr = run(["anonymize", str(one_missing), *QUICK, "--k", str(K),
                                  "--out", str(out)])
    assert status == EXIT_USAGE
    assert stderr.startswith("streamanon: error: ") and stderr.count("\n") == 1
    assert "income" in stderr and "--missing" in stderr
    assert "Traceback" not in stderr
    assert not out.exists()


def test_quick_form_with_missing_group_keeps_the_respondent(one_missing, tmp_path,
                                                           monkeypatch):
    monkeypatch.setenv("STREAMANON_DATA_DIR", str(tmp_path / "data"))
    out = tmp_path / "release.csv"
    status, _, stderr = run(["anonymize", str(one_missing), *QUICK, "--missing", "group",
                             "--k", str(K), "--out", str(out), "--seed", "1"])
    assert status == 0, stderr
    release, original = read_table(out), read_table(one_missing)
    assert len(release) == len(original)
    assert sorted(release["answer"]) == sorted(original["answer"])
    assert check_table_k_anonymity(release, ["age", "income"], K).ok


def test_an_optional_confidential_field_absent_from_the_export_is_not_a_crash(files,
                                                                             tmp_path,
                                                                             monkeypatch):
    """``comment`` is ``required = false`` in the schema: an export without it is valid."""
    monkeypatch.setenv("STREAMANON_DATA_DIR", str(tmp_path / "data"))
    raw = tmp_path / "no_comment.csv"
    read_table(files["csv"]).drop(columns=["comment"]).to_csv(raw, index=False)
    out = tmp_path / "release.csv"
    status, _, stderr = run(["anonymize", str(raw), "--schema", str(files["schema"]),
                             "--k", str(K), "--out", str(out), "--seed", "1"])
    assert status == 0, stderr
    assert len(read_table(out)) == N
