"""SPSS and Stata files and categorical Parquet columns (streamanon/spss_stata.py): names
valid in each program, collisions refused, labels written, categories dictionary-encoded."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pyreadstat
import pytest

from streamanon.errors import InputError
from streamanon.io import read_table, write_table
from streamanon.schema import parse_schema
from streamanon.spss_stata import RULES, variable_name, variable_names

AWKWARD = ["age", "household/size", "1st_visit", "_n", "in", "long", "str12", "strL", "by",
           "ALL", "with", "âge moyen", "年龄", "q-1.a", "x" * 80, "é" * 40, "", "v", "Q1",
           "meta/instanceID"]


@pytest.mark.parametrize("fmt", [".sav", ".dta"])
def test_every_name_becomes_a_valid_variable_name(fmt):
    rules = RULES[fmt]
    for column in AWKWARD:
        name = variable_name(column, fmt)
        assert re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name), (column, name)
        assert len(name.encode()) <= rules.max_name + 1  # + the "_" after a reserved word
        assert len(name) <= rules.max_name or name.endswith("_")
        word = name.upper() if rules.case_insensitive else name
        assert word not in rules.reserved
        assert not (fmt == ".dta" and re.fullmatch(r"str[0-9]+", name))
        assert variable_name(column, fmt) == name  # deterministic


@pytest.mark.parametrize("fmt", [".sav", ".dta"])
def test_a_valid_name_is_kept(fmt):
    for column in ("age", "household_size", "Q1", "income_2024", "v"):
        assert variable_name(column, fmt) == column


def test_the_reserved_words_are_those_each_program_refuses(tmp_path):
    """pyreadstat (ReadStat) refuses Stata's reserved words: each renamed one is accepted."""
    frame = pd.DataFrame({name: [1.0, 2.0] for name in ("long", "in", "str12", "byte")})
    with pytest.raises(Exception, match="reserved"):
        pyreadstat.write_dta(frame[["long"]], tmp_path / "raw.dta")
    write_table(frame, tmp_path / "ok.dta")
    back, meta = pyreadstat.read_dta(tmp_path / "ok.dta")
    assert list(back.columns) == ["long_", "in_", "str12_", "byte_"]
    assert meta.column_names_to_labels == {"long_": "long", "in_": "in", "str12_": "str12",
                                           "byte_": "byte"}


def test_names_that_collide_are_refused_naming_both():
    with pytest.raises(InputError, match=r"'a b' and 'a_b' both become the Stata variable "
                                         r"'a_b'"):
        variable_names(["a b", "a_b"], ".dta")
    # SPSS names ignore case, Stata's do not
    assert variable_names(["Age", "age"], ".dta") == {"Age": "Age", "age": "age"}
    with pytest.raises(InputError, match="whatever the case"):
        variable_names(["Age", "age"], ".sav")
    long_a, long_b = "a" * 40 + "1", "a" * 40 + "2"  # the same first 32 characters
    with pytest.raises(InputError, match="both become"):
        variable_names([long_a, long_b], ".dta")
    assert len(set(variable_names([long_a, long_b], ".sav").values())) == 2


SCHEMA = parse_schema({
    "rid": {"role": "identifier"},
    "education": {"role": "quasi_identifier", "type": "ordinal",
                  "levels": ["primary", "secondary", "tertiary", "doctorate"]},
    "region": {"role": "quasi_identifier", "type": "category",
               "levels": ["north", "south", "east"], "description": "Region of residence"},
    "colour": {"role": "confidential", "type": "category", "required": False},
    "smoker": {"role": "confidential", "type": "bool"},
    "income": {"role": "confidential", "type": "float", "required": False},
})


@pytest.fixture
def frame() -> pd.DataFrame:
    return pd.DataFrame({
        "education": ["tertiary", "primary", "secondary", "primary", None, "tertiary"],
        "region": ["south", "north", "south", "east", "east", "north"],
        "colour": ["red", None, "blue", "red", "green", "blue"],
        "smoker": [True, False, False, True, True, False],
        "income": [1.5, np.nan, 3.25, 4.0, 5.0, 6.5],
    })


def test_parquet_keeps_categories_dictionary_encoded(frame, tmp_path):
    path = tmp_path / "release.parquet"
    write_table(frame, path, schema=SCHEMA)
    types = pq.read_schema(path)
    for column in ("education", "region", "colour"):
        assert pa.types.is_dictionary(types.field(column).type), types.field(column)
    assert types.field("education").type.ordered
    assert not types.field("region").type.ordered
    back = pd.read_parquet(path)
    # every declared level, the unseen "doctorate" too, in the declared order
    assert list(back["education"].cat.categories) == SCHEMA.fields["education"].levels
    assert list(back["colour"].cat.categories) == ["blue", "green", "red"]  # seen, sorted
    for column in frame.columns:
        assert back[column].astype(object).where(back[column].notna(), None).tolist() == \
            frame[column].astype(object).where(frame[column].notna(), None).tolist()


@pytest.mark.parametrize("fmt", [".sav", ".dta"])
def test_labels_and_codes(frame, tmp_path, fmt):
    path = tmp_path / f"release{fmt}"
    write_table(frame, path, schema=SCHEMA)
    read = pyreadstat.read_sav if fmt == ".sav" else pyreadstat.read_dta
    codes, meta = read(path)
    labels = meta.variable_value_labels
    assert labels["education"] == {1: "primary", 2: "secondary", 3: "tertiary",
                                   4: "doctorate"}
    assert labels["region"] == {1: "north", 2: "south", 3: "east"}
    assert labels["colour"] == {1: "blue", 2: "green", 3: "red"}
    assert labels["smoker"] == {0: "false", 1: "true"}
    assert "income" not in labels
    assert meta.column_names_to_labels["region"] == "Region of residence"
    assert meta.column_names_to_labels["income"] == "income"
    # an ordinal's codes keep its order: a statistician may compare them
    ranks = {level: i + 1 for i, level in enumerate(SCHEMA.fields["education"].levels)}
    expected = [ranks.get(v, np.nan) for v in frame["education"]]
    np.testing.assert_array_equal(codes["education"].to_numpy(dtype=float), expected)
    if fmt == ".sav":
        assert meta.variable_measure["education"] == "ordinal"
        assert meta.variable_measure["region"] == "nominal"
        assert meta.variable_measure["income"] == "scale"
    back = read_table(path)
    for column in ("education", "region", "colour"):
        assert back[column].astype(object).where(back[column].notna(), None).tolist() == \
            frame[column].astype(object).where(frame[column].notna(), None).tolist()
    np.testing.assert_array_equal(back["income"].to_numpy(), frame["income"].to_numpy())


@pytest.mark.parametrize("fmt", [".sav", ".dta"])
def test_a_value_outside_the_levels_is_refused_not_lost(frame, tmp_path, fmt):
    frame.loc[2, "region"] = "west"
    with pytest.raises(InputError, match=r"column 'region': 1 value\(s\) not among its 3 levels"):
        write_table(frame, tmp_path / f"release{fmt}", schema=SCHEMA)
    assert not list(tmp_path.iterdir())  # atomic: nothing left behind


def test_long_labels_are_cut_to_what_each_program_keeps(frame, tmp_path):
    schema = parse_schema({**SCHEMA.fields, "income": {
        "role": "confidential", "type": "float", "description": "Ü" * 200}})
    for fmt, limit in ((".dta", 80), (".sav", 256)):
        write_table(frame, tmp_path / f"r{fmt}", schema=schema)
        read = pyreadstat.read_sav if fmt == ".sav" else pyreadstat.read_dta
        _, meta = read(tmp_path / f"r{fmt}", metadataonly=True)
        assert meta.column_names_to_labels["income"] == "Ü" * (limit // 2)
