"""``streamanon anonymize --out release.sav / release.dta``: SPSS and Stata releases that read
back with pyreadstat whole (every record, every value the Parquet release of the same run has),
labelled, and k-anonymous."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyreadstat
import pytest

from simulations.survey_data import SURVEY_SCHEMA, make_survey, write_schema_toml
from streamanon.io import write_table
from streamanon.metrics import check_table_k_anonymity
from tests.cli.helpers import run
from tests.docs_pages import block, commands, page, section

N = 400
K = 5
#: A field named by its group path, as KoboToolbox sends it: "household_size" in the files.
PATH_NAME = "household/size"
KEY = ["age", PATH_NAME, "gender", "region", "education", "income"]
GENDER_LABEL = "Which gender do you identify with?"




@pytest.fixture(scope="module")
def releases(tmp_path_factory) -> dict[str, object]:
    """The survey released with one seed as Parquet, SPSS and Stata."""
    folder = tmp_path_factory.mktemp("formats")
    frame = make_survey(N, seed=3).rename(columns={"household_size": PATH_NAME})
    schema = {(PATH_NAME if name == "household_size" else name): dict(spec)
              for name, spec in SURVEY_SCHEMA.items()}
    schema["gender"]["description"] = GENDER_LABEL
    write_table(frame, folder / "survey.csv")
    write_schema_toml(folder / "schema.toml", schema)
    out: dict[str, object] = {"folder": folder, "schema": schema}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STREAMANON_DATA_DIR", str(folder / "data"))
        for fmt in ("parquet", "sav", "dta"):
            status, _, stderr = run([
                "anonymize", str(folder / "survey.csv"), "--schema", str(folder / "schema.toml"),
                "--k", str(K), "--out", str(folder / f"release.{fmt}"), "--seed", "7",
                "--no-progress"])
            assert status == 0, stderr
            out[fmt] = folder / f"release.{fmt}"
    return out


def _read(path: Path) -> tuple[pd.DataFrame, object]:
    read = pyreadstat.read_sav if path.suffix == ".sav" else pyreadstat.read_dta
    return read(path, apply_value_formats=True)


def _same(a: pd.Series, b: pd.Series) -> bool:
    """Equal values, a missing value (None, NaN, or SPSS and Stata's empty text) as missing."""
    def norm(s: pd.Series) -> list[object]:
        if pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s):
            return [None if v != v else float(v) for v in s.astype(float)]
        return [None if (v is None or v != v or v == "") else str(v)
                for v in s.astype(object)]
    return norm(a) == norm(b)


@pytest.mark.parametrize("fmt", ["sav", "dta"])
def test_every_record_reads_back_as_the_parquet_release_has_it(releases, fmt):
    back, _ = _read(releases[fmt])
    parquet = pd.read_parquet(releases["parquet"])
    assert len(back) == len(parquet) == N
    assert list(back.columns) == [c.replace("/", "_") for c in parquet.columns]
    for column in parquet.columns:
        assert _same(back[column.replace("/", "_")], parquet[column]), column


@pytest.mark.parametrize("fmt", ["sav", "dta"])
def test_variables_and_values_are_labelled(releases, fmt):
    _, meta = _read(releases[fmt])
    labels = meta.column_names_to_labels
    assert labels["gender"] == GENDER_LABEL  # the schema's description
    assert labels["household_size"] == PATH_NAME  # the field's name, where it was changed
    assert labels["income"] == "income"
    schema = releases["schema"]
    for column in ("gender", "region", "education"):
        levels = schema[column]["levels"]
        assert meta.variable_value_labels[column] == {
            i + 1: level for i, level in enumerate(levels)}, column
    if fmt == "sav":
        assert meta.variable_measure["education"] == "ordinal"
        assert meta.variable_measure["gender"] == "nominal"
        assert meta.variable_measure["age"] == "scale"


@pytest.mark.parametrize("fmt", ["sav", "dta"])
def test_the_read_back_release_is_k_anonymous(releases, fmt):
    back, _ = _read(releases[fmt])
    key = [c.replace("/", "_") for c in KEY]
    assert check_table_k_anonymity(back, key, K).ok
    status, stdout, stderr = run(["verify", str(releases[fmt]), "--qi", ",".join(key),
                                  "--k", str(K)])
    assert status == 0, stderr
    assert f"{K}-anonymous ({N} records" in stdout


def test_the_ordinal_codes_keep_the_order_of_its_levels(releases):
    codes, _ = pyreadstat.read_dta(releases["dta"])  # no labels applied: the codes
    levels, _ = _read(releases["dta"])
    ranks = {level: i + 1 for i, level in enumerate(releases["schema"]["education"]["levels"])}
    expected = [ranks[v] if isinstance(v, str) else np.nan for v in levels["education"]]
    np.testing.assert_array_equal(codes["education"].to_numpy(dtype=float), expected)


def test_columns_that_would_share_a_name_are_refused_before_the_run(tmp_path):
    frame = pd.DataFrame({"a b": np.arange(10.0), "a_b": np.arange(10.0)})
    write_table(frame, tmp_path / "in.csv")
    status, _, stderr = run(["anonymize", str(tmp_path / "in.csv"), "--qi", "a b,a_b",
                             "--k", "2", "--out", str(tmp_path / "out.dta")])
    assert status == 2
    assert "'a b' and 'a_b' both become the Stata variable 'a_b'" in stderr
    assert len(stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


def test_the_documented_commands_run(tmp_path, monkeypatch):
    """The commands of "Releases for SPSS, Stata, R and pandas" in guide/survey-data.md, as
    written there, on the synthetic survey and schema that ``simulations.survey_data`` writes."""
    shown = section(page("guide/survey-data.md"), "Releases for SPSS, Stata, R and pandas")
    lines = [line.split() for line in commands(block(shown, "sh"))]
    assert [words[:2] for words in lines] == [["streamanon", "anonymize"]] * 2 + [
        ["streamanon", "verify"]]
    write_table(make_survey(500, seed=0), tmp_path / "survey.csv")
    write_schema_toml(tmp_path / "schema.toml")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STREAMANON_DATA_DIR", str(tmp_path / "data"))
    outputs = []
    for words in lines:
        status, stdout, stderr = run(words[1:])
        assert status == 0, stderr
        outputs.append(stdout)
    assert "5-anonymous (500 records" in outputs[2]
    for name in ("release.sav", "release.dta"):
        assert len(_read(tmp_path / name)[0]) == 500


def test_an_spss_or_stata_file_is_also_an_input(releases, tmp_path):
    """``anonymize`` reads a labelled file as its values: the Stata release, released again."""
    folder = releases["folder"]
    schema = {name: spec for name, spec in releases["schema"].items()
              if spec["role"] not in ("identifier", "ignore")}
    schema["household_size"] = schema.pop(PATH_NAME)
    write_schema_toml(tmp_path / "schema.toml", schema)
    status, _, stderr = run([
        "anonymize", str(folder / "release.dta"), "--schema", str(tmp_path / "schema.toml"),
        "--k", str(K), "--out", str(tmp_path / "again.parquet"), "--no-progress"])
    assert status == 0, stderr
    again = pd.read_parquet(tmp_path / "again.parquet")
    assert len(again) == N
    assert set(again["education"].dropna()) <= set(schema["education"]["levels"])
