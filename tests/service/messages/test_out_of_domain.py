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
from streamanon.service.ingest import process_batch
from streamanon.service.private_release import write_private
from streamanon.service.publisher import PRIVATE
from streamanon.service.store import SQLiteStore
from streamanon.service.validation import Invalid, Message, Validated, Validator

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
    """The refusal is noted in the store by the intake that dead-lettered the answer, so the
    release refuses whatever restarted since or whichever instance took the answer (the
    review found it counted in memory only, and a restart published without the answer)."""
    cfg = config(tmp_path, epsilon=1.0, out_of_domain="refuse")
    sc = cfg.surveys[0]
    store = SQLiteStore(tmp_path / "store.db")
    store.ensure_survey(sc.id)
    try:
        validator = Validator(sc, b"k" * 32)
        in_domain = [Message("t", 0, i, None, message(rid=f"R{i}"), None) for i in range(6)]
        process_batch(in_domain, validator, store, None)
        assert not store.refused(sc.id)  # answers in the domain refuse nothing
        process_batch([Message("t", 0, 9, None, message(rid="R9", income=350000.0), None)],
                      validator, store, None)
        assert store.refused(sc.id)

        async def in_thread(fn: Any, *args: Any) -> Any:
            if fn != store.refused:
                raise AssertionError("nothing is drawn, charged or written")
            return fn(*args)

        releaser = SimpleNamespace(store=store, config=cfg, modes=PRIVATE,
                                   in_thread=in_thread, in_store=in_thread)
        restarted = SimpleNamespace(config=sc, record=lambda *_: None,
                                    ingest=SimpleNamespace(rejected={}))  # counts lost
        with pytest.raises(DomainRefusedError, match="outside the declared domain") as refused:
            asyncio.run(write_private(releaser, restarted, pd.DataFrame(), 0))
        assert not any(c.isdigit() for c in str(refused.value))  # the error is public
        assert not (tmp_path / "out").exists()
    finally:
        store.close()


def test_clamp_notes_no_refusal(tmp_path):
    cfg = config(tmp_path, epsilon=1.0)
    store = SQLiteStore(tmp_path / "store.db")
    try:
        store.ensure_survey("s1")
        validator = Validator(cfg.surveys[0], b"k" * 32)
        process_batch([Message("t", 0, 1, None, message(income=350000.0), None)], validator,
                      store, None)
        assert not store.refused("s1")
    finally:
        store.close()


def test_clamping_keeps_each_fields_type_and_takes_infinite_and_huge_numbers():
    """A float field with fractional bounds takes a JSON integer below them as its bound (it
    was cut to int(0.5) = 0 and dead-lettered); an integer beyond 64 bits (a float to JSON's
    parser) is a number outside the domain like any other (it was dead-lettered wrong_type).
    A number no 64-bit float holds (1e400) is dead-lettered not_finite, its value unread."""
    schema = {**SCHEMA, "score": {"role": "confidential", "type": "float", "min": 0.5,
                                  "max": 9.5}}
    validator = Validator(config(epsilon=1.0, schema=schema).surveys[0], b"k" * 32)
    for raw, answer, score in ((message(score=0), 3, 0.5), (message(score=-3), 3, 0.5),
                               (message(answer=2 ** 64, score=12), 10, 9.5)):
        got = both_paths(validator, raw)
        assert isinstance(got, Validated), (raw, got)
        assert got.confidential["score"] == score and type(got.confidential["score"]) is float
        assert got.confidential["answer"] == answer and type(got.confidential["answer"]) is int
    got = both_paths(validator, message(age=2 ** 64, score=1))
    assert isinstance(got, Validated) and got.qi[0] == 90
    raw = message(score=1).replace(b'"score": 1', b'"score": 1e400')
    assert both_paths(validator, raw).reason == "not_finite"


def test_a_level_field_left_out_of_the_release_is_checked_as_declared():
    """An ignored category of an epsilon survey (the compiled fast path is off there) was
    dead-lettered for every message, unprocessable (found in review): it is checked as
    declared, and not clamped, since it is not released."""
    schema = {**SCHEMA, "channel": {"role": "ignore", "type": "category",
                                    "levels": ["web", "phone"]}}
    for survey in ({"epsilon": 1.0}, {}):
        validator = Validator(config(schema=schema, **survey).surveys[0], b"k" * 32)
        assert isinstance(both_paths(validator, message(channel="web")), Validated)
        assert both_paths(validator, message(channel="fax")).reason == "out_of_levels"
