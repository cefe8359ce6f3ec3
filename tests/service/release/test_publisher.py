"""The release table and the column roles its report gives, without a broker."""

from __future__ import annotations

import numpy as np
import pytest

from streamanon.errors import KAnonymityError
from streamanon.release import prepare_stored, release_prepared
from streamanon.service.config import parse_config
from streamanon.service.publisher import records_frame, release_columns
from streamanon.service.store import Records

ENV = {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32}
K = 3


@pytest.fixture
def survey():
    return parse_config({"surveys": [{"id": "s1", "k": K, "schema": {
        "age": {"role": "quasi_identifier", "type": "int"},
        "rid": {"role": "identifier"},
        "answer": {"role": "confidential", "type": "int"},
        "note": {"role": "ignore", "type": "str", "required": False},
        "group": {"role": "label", "type": "str"},
        "weight": {"role": "quasi_identifier", "type": "float"}}}]}, ENV).surveys[0]


def records(n: int) -> Records:
    rng = np.random.default_rng(0)
    return Records(seq=np.arange(n), arrived_at=np.zeros(n), qi=rng.normal(size=(n, 2)),
                   confidential=[{"answer": i % 5} for i in range(n)],
                   labels=["a" if i % 2 else "b" for i in range(n)])


def release_of(records: Records, labels: np.ndarray, survey, seed: int):
    frame = records_frame(records, survey)
    return release_prepared(frame, prepare_stored(frame, survey.schema, survey.k), labels,
                            survey.k, seed=seed)


def test_release_columns_give_every_field_in_schema_order_with_its_role(survey):
    assert release_columns(survey) == [
        {"name": "age", "role": "quasi_identifier", "type": "int",
         "treatment": "microaggregated"},
        {"name": "rid", "role": "identifier", "type": None, "treatment": "dropped"},
        {"name": "answer", "role": "confidential", "type": "int", "treatment": "unchanged"},
        {"name": "note", "role": "ignore", "type": "str", "treatment": "dropped"},
        {"name": "group", "role": "label", "type": "str", "treatment": "unchanged"},
        {"name": "weight", "role": "quasi_identifier", "type": "float",
         "treatment": "microaggregated"},
    ]


def test_the_release_holds_exactly_the_columns_not_dropped(survey):
    frame = release_of(records(12), np.repeat(np.arange(4), 3), survey, seed=1).table
    assert sorted(frame.columns) == sorted(
        c["name"] for c in release_columns(survey) if c["treatment"] != "dropped")


def test_the_gate_refuses_a_cell_under_k(survey):
    labels = np.repeat(np.arange(4), 3)
    labels[-1] = 4  # a cell of one record, and one of two
    with pytest.raises(KAnonymityError, match=f"not {K}-anonymous"):
        release_of(records(12), labels, survey, seed=1)
