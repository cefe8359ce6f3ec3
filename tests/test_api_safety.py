"""``microaggregate`` on DataFrames does the safe thing by default: no index, no unnamed
column, no input order in the output; one column name is one column; every schema form."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simulations.survey_data import SURVEY_SCHEMA, SURVEY_STRATA, make_survey, write_schema_toml
from streamanon import Output, microaggregate
from streamanon.errors import InputError, ParameterError, StreamanonError
from streamanon.metrics import check_table_k_anonymity
from streamanon.schema import Schema, load_schema

K = 3
IDS = [f"R{i:06d}" for i in range(1, 61)]


@pytest.fixture
def indexed() -> pd.DataFrame:
    """Numeric answers indexed by respondent id, as ``read_csv(..., index_col=0)`` gives."""
    rng = np.random.default_rng(0)
    n = len(IDS)
    return pd.DataFrame({"age": rng.integers(18, 90, n).astype(float),
                         "income": rng.lognormal(10, 0.5, n).round(2),
                         "answer": np.arange(n)},  # distinct: shows where each row went
                        index=pd.Index(IDS, name="respondent_id"))


@pytest.fixture(scope="module")
def survey() -> pd.DataFrame:
    return make_survey(300, seed=0)


def _values(frame: pd.DataFrame) -> set[str]:
    return {str(v) for v in frame.to_numpy().ravel()} | {str(c) for c in frame.columns}


# -- the index ---------------------------------------------------------------------------------


def test_the_index_is_dropped_by_default(indexed):
    data = microaggregate(indexed, K, qi=["age", "income"], confidential="answer",
                          output=Output(seed=1)).data
    assert isinstance(data.index, pd.RangeIndex)
    assert list(data.index) == list(range(len(indexed)))
    assert data.index.name is None
    assert not set(IDS) & (_values(data) | {str(i) for i in data.index})


def test_the_index_is_dropped_with_a_schema_too(survey):
    frame = survey.set_index("respondent_id")
    schema = {name: spec for name, spec in SURVEY_SCHEMA.items() if name != "respondent_id"}
    data = microaggregate(frame, K, schema=schema, output=Output(seed=1)).data
    assert isinstance(data.index, pd.RangeIndex) and data.index.name is None
    assert not set(frame.index) & {str(i) for i in data.index}


def test_keep_index_keeps_it_and_it_moves_with_its_row(indexed):
    data = microaggregate(indexed, K, qi=["age", "income"], confidential="answer",
                          output=Output(seed=1, keep_index=True)).data
    assert data.index.name == "respondent_id"
    assert sorted(data.index) == IDS
    assert list(data.index) != IDS  # still shuffled
    # Each id stays on its own respondent's row.
    assert (data["answer"] == indexed.loc[data.index, "answer"].to_numpy()).all()


def test_keep_index_without_shuffle_is_the_input_index(indexed):
    data = microaggregate(indexed, K, qi=["age", "income"], confidential="answer",
                          output=Output(shuffle=False, keep_index=True)).data
    assert list(data.index) == IDS
    assert list(data["answer"]) == list(indexed["answer"])


# -- roles -------------------------------------------------------------------------------------


def test_quick_form_refuses_a_column_without_a_role(indexed):
    frame = indexed.reset_index()
    with pytest.raises(InputError, match=r"respondent_id.*no role"):
        microaggregate(frame, K, qi=["age", "income"], confidential="answer")


def test_schema_refuses_a_column_without_a_role(survey):
    schema = {name: spec for name, spec in SURVEY_SCHEMA.items() if name != "email"}
    with pytest.raises(InputError, match=r"email.*no role"):
        microaggregate(survey, K, schema=schema)


def test_an_identifier_named_in_drop_is_removed(indexed):
    frame = indexed.reset_index()
    data = microaggregate(frame, K, qi=["age", "income"], confidential="answer",
                          drop="respondent_id", output=Output(seed=1)).data
    assert list(data.columns) == ["age", "income", "answer"]
    assert not set(IDS) & _values(data)


# -- row order ---------------------------------------------------------------------------------


def test_a_dataframe_is_shuffled_by_default(indexed):
    data = microaggregate(indexed, K, qi=["age", "income"], confidential="answer",
                          output=Output(seed=1)).data
    assert sorted(data["answer"]) == list(indexed["answer"])
    assert list(data["answer"]) != list(indexed["answer"])


def test_the_same_seed_gives_the_same_order_and_another_seed_another(indexed):
    def order(seed: int) -> list[int]:
        return list(microaggregate(indexed, K, qi=["age", "income"], confidential="answer",
                                   output=Output(seed=seed)).data["answer"])

    assert order(7) == order(7)
    assert order(7) != order(8)


def test_shuffle_false_keeps_the_input_order_and_labels_follow_the_input(indexed):
    shuffled = microaggregate(indexed, K, qi=["age", "income"], confidential="answer",
                              output=Output(seed=1))
    kept = microaggregate(indexed, K, qi=["age", "income"], confidential="answer",
                          output=Output(shuffle=False))
    assert list(kept.data["answer"]) == list(indexed["answer"])
    np.testing.assert_array_equal(shuffled.labels, kept.labels)
    # Row i of the unshuffled release is record i, so it carries the mean of record i's cell.
    for cell in np.unique(kept.labels):
        rows = kept.labels == cell
        assert kept.data.loc[rows, "age"].nunique() == 1
        assert kept.data.loc[rows, "age"].iloc[0] == pytest.approx(
            indexed["age"].to_numpy()[rows].mean())


def test_a_matrix_is_not_shuffled(indexed):
    X = indexed[["age", "income"]].to_numpy()
    result = microaggregate(X, K)
    for cell in np.unique(result.labels):
        rows = result.labels == cell
        np.testing.assert_allclose(result.data[rows], np.broadcast_to(X[rows].mean(axis=0),
                                                                      (rows.sum(), 2)))


# -- one name is one column --------------------------------------------------------------------


def test_a_single_qi_name_is_one_column_not_its_letters(indexed):
    frame = indexed.reset_index()
    result = microaggregate(frame, K, qi="age", confidential=["income", "answer"],
                            drop="respondent_id", output=Output(seed=1))
    assert result.qi == ["age"]
    assert result.m == 1
    assert result.report()["quasi_identifiers"] == ["age"]
    assert sorted(result.data["income"]) == sorted(frame["income"])  # published unchanged
    assert check_table_k_anonymity(result.data, ["age"], K).ok


# -- the schema's forms ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def schema_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("schema") / "survey.schema.toml"
    write_schema_toml(path)
    return path


@pytest.fixture(scope="module")
def reference(survey) -> pd.DataFrame:
    return microaggregate(survey, K, schema={"schema": SURVEY_SCHEMA, "strata": SURVEY_STRATA},
                          output=Output(seed=2)).data


@pytest.mark.parametrize("form", ["dict", "dict with strata=", "str path", "Path",
                                  "Schema"])
def test_schema_accepts_a_dict_a_path_and_a_schema(survey, schema_file, reference, form):
    given: dict = {
        "dict": {"schema": {"schema": SURVEY_SCHEMA, "strata": SURVEY_STRATA}},
        "dict with strata=": {"schema": SURVEY_SCHEMA, "strata": SURVEY_STRATA},
        "str path": {"schema": str(schema_file)},
        "Path": {"schema": schema_file},
        "Schema": {"schema": load_schema(schema_file)},
    }[form]
    if form == "Schema":
        assert isinstance(given["schema"], Schema)
    result = microaggregate(survey, K, output=Output(seed=2), **given)
    assert result.strata == SURVEY_STRATA
    assert result.qi == [n for n, s in SURVEY_SCHEMA.items() if s["role"] == "quasi_identifier"]
    pd.testing.assert_frame_equal(result.data, reference)


def test_the_field_mapping_alone_is_a_schema_without_strata(survey):
    result = microaggregate(survey, K, schema=SURVEY_SCHEMA, output=Output(seed=2))
    assert result.strata == []
    assert check_table_k_anonymity(result.data, result.qi, K).ok


def test_schema_with_the_quick_form_is_refused(survey):
    with pytest.raises(ParameterError, match="schema="):
        microaggregate(survey, K, schema=SURVEY_SCHEMA, qi="age")


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
    result = microaggregate(frame, 5, schema=schema, strata="region", output=Output(seed=0))
    assert "Atlantis" not in set(result.data["region"])  # the release hides it ...
    assert "Atlantis" not in json.dumps(result.report())  # ... so must the report



def test_duplicate_column_names_are_refused_with_a_streamanon_error():
    frame = pd.DataFrame(np.random.default_rng(0).normal(size=(20, 2)), columns=["a", "a"])
    with pytest.raises(StreamanonError):
        microaggregate(frame, 5, qi=["a"])
