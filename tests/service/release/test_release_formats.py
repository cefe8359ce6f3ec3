"""``[output] formats``: which release files the service writes, written by its file writer
without a broker (``write_release_files`` at release, ``write_release_formats`` once the
records are out); SPSS and Stata files that read back whole, labelled and k-anonymous; the
topic's messages unchanged by the dictionary-encoded Parquet file they are sent from."""

from __future__ import annotations

import os
import stat

import numpy as np
import pandas as pd
import pyreadstat
import pytest

import streamanon.service.publisher as publisher
from streamanon.api import Output, microaggregate
from streamanon.metrics import check_table_k_anonymity
from streamanon.service.config import ConfigError, parse_config
from streamanon.service.publisher import (
    FileModes,
    read_written_release,
    record_messages,
    write_release_files,
    write_release_formats,
)

ENV = {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32}
LEVELS = ["primary", "secondary", "tertiary"]
SCHEMA = {
    "rid": {"role": "identifier"},
    "age": {"role": "quasi_identifier", "type": "int"},
    "education": {"role": "quasi_identifier", "type": "ordinal", "levels": LEVELS,
                  "description": "Highest completed level of education"},
    "region": {"role": "quasi_identifier", "type": "category",
               "levels": ["north", "south", "east", "west"]},
    "party": {"role": "quasi_identifier", "type": "category", "levels": ["a", "b", "c"],
              "required": False},
    "answer": {"role": "confidential", "type": "int", "required": False},
}
K = 4


def config(env: dict[str, str] | None = None, schema: dict | None = None, **output):
    return parse_config({"output": output, "surveys": [{"id": "s1", "k": K, "engine": "mdav",
                                                        "schema": schema or SCHEMA}]},
                        {**ENV, **(env or {})})


def test_the_default_formats_are_parquet_and_csv():
    assert config().output.formats == ["parquet", "csv"]


def test_formats_from_the_file_or_the_environment():
    assert config(formats=["parquet", "sav", "dta"]).output.formats == ["parquet", "sav", "dta"]
    env = {"STREAMANON_OUTPUT_FORMATS": "parquet, dta"}
    assert config(env).output.formats == ["parquet", "dta"]


@pytest.mark.parametrize(("formats", "reason"), [
    (["csv", "sav"], "the formats include \"parquet\""),
    (["parquet", "xlsx"], "output.formats"),
    (["parquet", "csv", "csv"], "a format is listed twice"),
])
def test_bad_formats_are_refused(formats, reason):
    with pytest.raises(ConfigError, match=reason):
        config(formats=formats)


def test_fields_that_share_a_stata_name_are_refused_at_start():
    schema = {**SCHEMA, "household.size": {"role": "confidential", "type": "int"},
              "household_size": {"role": "confidential", "type": "int"}}
    config(schema=schema)  # no SPSS or Stata file: the names stay as they are
    with pytest.raises(ConfigError, match=r"surveys\[0\]\(s1\)\.schema: columns "
                                          r"'household.size' and 'household_size' both "
                                          r"become the Stata variable"):
        config(schema=schema, formats=["parquet", "dta"])


@pytest.fixture
def release() -> pd.DataFrame:
    """A k-anonymous release of the survey's fields (the identifier dropped), some answers
    missing."""
    rng = np.random.default_rng(5)
    n = 60
    raw = pd.DataFrame({
        "rid": [f"r{i}" for i in range(n)],
        "age": rng.integers(18, 90, n),
        "education": rng.choice(LEVELS, n),
        "region": rng.choice(["north", "south", "east", "west"], n),
        "party": pd.Series(rng.choice(["a", "b", "c"], n)).where(rng.random(n) > 0.2, None),
        "answer": pd.array(np.where(rng.random(n) > 0.3, rng.integers(1, 6, n), -1),
                           dtype="Int64"),
    })
    raw["answer"] = raw["answer"].mask(raw["answer"] < 0)
    return microaggregate(raw, K, schema=config().surveys[0].schema, output=Output(seed=1)).data


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_service_writes_each_format_labelled_private_and_k_anonymous(release, tmp_path):
    cfg = config(formats=["parquet", "csv", "sav", "dta"])
    survey = cfg.surveys[0]
    modes = FileModes(file=0o600, directory=0o700)
    files = write_release_files(release, tmp_path, "s1", cfg.output.formats,
                                schema=survey.schema, later=True, modes=modes)
    assert sorted(p.name for p in (tmp_path / "s1").iterdir()) == ["release.parquet"]
    files = write_release_formats(release, files, survey.schema, modes)
    written = sorted(p.name for p in (tmp_path / "s1").iterdir())
    assert written == ["release.csv", "release.dta", "release.parquet", "release.sav"]
    assert {name: oct(mode(tmp_path / "s1" / name)) for name in written} == {
        name: "0o600" for name in written}
    assert all(files[f"sha256_{fmt}"] for fmt in ("csv", "sav", "dta"))
    qi = survey.quasi_identifiers
    for fmt, read in (("sav", pyreadstat.read_sav), ("dta", pyreadstat.read_dta)):
        back, meta = read(files[fmt], apply_value_formats=True)
        assert len(back) == len(release)
        assert meta.column_names_to_labels["education"] == SCHEMA["education"]["description"]
        assert meta.column_names_to_labels["party"] == "party"
        assert meta.variable_value_labels["education"] == dict(enumerate(LEVELS, start=1))
        assert meta.variable_value_labels["party"] == {1: "a", 2: "b", 3: "c"}
        assert [None if pd.isna(v) else v for v in back["party"]] == [
            None if pd.isna(v) else v for v in release["party"]]
        assert check_table_k_anonymity(back, qi, K).ok


def test_a_restart_writes_only_the_files_not_written_yet(release, tmp_path, monkeypatch):
    schema = config().surveys[0].schema
    files = write_release_files(release, tmp_path, "s1", ["parquet", "csv", "dta"],
                                schema=schema)
    assert {"sha256_csv", "sha256_dta"} <= set(files)
    written: list[str] = []
    real = publisher.write_table
    monkeypatch.setattr(publisher, "write_table",
                        lambda frame, path, *a, **kw: (written.append(path.name),
                                                       real(frame, path, *a, **kw)))
    assert write_release_formats(release, files, schema) == files
    assert written == []
    lost = {key: value for key, value in files.items() if key != "sha256_dta"}
    assert write_release_formats(release, lost, schema)["sha256_dta"] == files["sha256_dta"]
    assert written == ["release.dta"]


def test_messages_sent_from_the_dictionary_encoded_file_are_those_of_the_release(
        release, tmp_path):
    """A publish resumed after a restart sends the messages of the written Parquet file: its
    categorical columns (a missing answer among them) give the very same bytes."""
    files = write_release_files(release, tmp_path, "s1", ["parquet"],
                                schema=config().surveys[0].schema)
    table = read_written_release(files)
    assert isinstance(table["party"].dtype, pd.CategoricalDtype) and table["party"].hasnans
    assert record_messages(table) == record_messages(release)
