"""An epsilon survey's answer outside its declared domain (``[surveys] out_of_domain``).

Under ``clamp`` (the default) no answer's value decides whether it is stored: a number is put at
its nearest bound, a level that is not declared is coded missing (a level field's domain then
has the missing level, from the settings alone), so two neighbouring surveys store as many
records. Under ``refuse`` such an answer is dead-lettered with its reason and the survey's
release is refused, never drawn without it. A k-anonymous survey dead-letters it, as always.
Both validation paths (one message, and a batch) give the same outcome."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from streamanon.errors import DomainRefusedError
from streamanon.service.config import ConfigError, parse_config
from streamanon.service.private_release import write_private
from streamanon.service.publisher import PRIVATE
from streamanon.service.validation import Invalid, Validated, Validator

ENV = {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32}
SCHEMA = {
    "rid": {"role": "identifier"},
    "age": {"role": "quasi_identifier", "type": "int", "min": 16, "max": 90},
    "income": {"role": "quasi_identifier", "type": "float", "min": 0, "max": 300000},
    "region": {"role": "quasi_identifier", "type": "category",
               "levels": ["north", "south"]},
    "answer": {"role": "confidential", "type": "int", "min": 0, "max": 10},
    "smoker": {"role": "confidential", "type": "bool"},
}


def config(tmp_path: Path | None = None, **survey: Any) -> Any:
    spec = {"id": "s1", "k": 5, "close": "on-command", "schema": SCHEMA, **survey}
    extra = {} if tmp_path is None else {
        "output": {"directory": str(tmp_path / "out")},
        "store": {"url": f"sqlite:///{tmp_path / 'store.db'}"}}
    return parse_config({"surveys": [spec], **extra}, ENV)


def message(**override: Any) -> bytes:
    body = {"rid": "R1", "age": 40, "income": 52000.0, "region": "north", "answer": 3,
            "smoker": False, **override}
    return json.dumps(body).encode()


def both_paths(validator: Validator, raw: bytes) -> Validated | Invalid:
    """The outcome of one message, checked to be the same on both validation paths."""
    try:
        alone: Validated | Invalid = validator.validate(raw)
    except Invalid as exc:
        alone = exc
    batch = validator.validate_batch([raw])[0]
    assert type(alone) is type(batch)
    if isinstance(alone, Invalid):
        assert alone.reason == batch.reason
    else:
        assert np.array_equal(alone.qi, batch.qi, equal_nan=True)
        assert alone.confidential == batch.confidential
    return alone


@pytest.mark.parametrize("override, qi, confidential", [
    ({"income": 350000.0}, [40, 300000.0, 0], {"answer": 3, "smoker": False}),
    ({"income": -5}, [40, 0, 0], {"answer": 3, "smoker": False}),
    ({"age": 130}, [90, 52000.0, 0], {"answer": 3, "smoker": False}),
    ({"answer": 99}, [40, 52000.0, 0], {"answer": 10, "smoker": False}),
    ({"region": "atlantis"}, [40, 52000.0, np.nan], {"answer": 3, "smoker": False}),
    ({"smoker": "yes"}, [40, 52000.0, 0], {"answer": 3, "smoker": None}),
])
def test_an_epsilon_survey_puts_an_answer_outside_its_domain_in_it(override, qi,
                                                                    confidential):
    validator = Validator(config(epsilon=1.0).surveys[0], b"k" * 32)
    got = both_paths(validator, message(**override))
    assert isinstance(got, Validated), got
    assert np.array_equal(got.qi, np.array(qi, dtype=float), equal_nan=True)
    assert got.confidential == confidential
    assert type(got.confidential["answer"]) is int  # a clamped int stays an int


def test_a_clamped_level_fields_domain_has_the_missing_level_from_the_settings():
    sc = config(epsilon=1.0).surveys[0]
    assert sc.clamps and sc.fields["region"].required  # as declared
    assert not sc.schema.fields["region"].required  # as the release reads it
    assert not sc.schema.fields["smoker"].required and sc.schema.fields["age"].required


@pytest.mark.parametrize("survey", [{}, {"epsilon": 1.0, "out_of_domain": "refuse"}])
def test_otherwise_an_answer_outside_its_domain_is_dead_lettered(survey):
    validator = Validator(config(**survey).surveys[0], b"k" * 32)
    assert both_paths(validator, message(income=350000.0)).reason == "out_of_bounds"
    assert both_paths(validator, message(region="atlantis")).reason == "out_of_levels"


@pytest.mark.parametrize("survey", [{"epsilon": 1.0}, {}])
def test_a_message_of_another_shape_is_dead_lettered_either_way(survey):
    validator = Validator(config(**survey).surveys[0], b"k" * 32)
    assert both_paths(validator, message(age="forty")).reason == "wrong_type"
    assert both_paths(validator, b"{not json").reason == "invalid_json"


def test_out_of_domain_needs_epsilon():
    with pytest.raises(ConfigError, match="out_of_domain without epsilon"):
        config(out_of_domain="clamp")


def test_refuse_refuses_the_release_when_an_answer_was_dead_lettered_for_its_domain(tmp_path):
    cfg = config(tmp_path, epsilon=1.0, out_of_domain="refuse")
    sc = cfg.surveys[0]

    async def in_thread(fn: Any, *args: Any) -> Any:
        raise AssertionError("nothing is drawn, charged or written")

    releaser = SimpleNamespace(store=None, config=cfg, modes=PRIVATE, _in_thread=in_thread,
                               _in_store=in_thread)
    rt = SimpleNamespace(config=sc, record=lambda *_: None,
                         ingest=SimpleNamespace(rejected={"out_of_bounds": 1, "closed": 2}))
    with pytest.raises(DomainRefusedError, match="1 answer"):
        asyncio.run(write_private(releaser, rt, pd.DataFrame(), 0))
    assert not (tmp_path / "out").exists()
