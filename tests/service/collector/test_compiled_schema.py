"""The compiled schema (msgspec) against the per-field checks: on every message, the same
outcome, the same reason and the same stored bytes; a schema it cannot express goes the
per-field way."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson
import pytest

from streamanon.service.compiled_schema import compiled_schema
from streamanon.service.config import parse_config
from streamanon.service.validation import QI_MAX_MAGNITUDE, Invalid, Validated, Validator

ENV = {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32}
SCHEMA: dict[str, dict[str, Any]] = {
    "rid": {"role": "identifier"},
    "age": {"role": "quasi_identifier", "type": "int", "min": 16, "max": 99.5},
    "income": {"role": "quasi_identifier", "type": "float", "required": False, "min": -10},
    "x": {"role": "quasi_identifier"},
    "gender": {"role": "quasi_identifier", "type": "category", "levels": ["f", "m", 3]},
    "smoker": {"role": "quasi_identifier", "type": "bool", "required": False},
    "score": {"role": "confidential", "type": "float", "max": 10},
    "count": {"role": "confidential", "type": "int", "required": False},
    "note": {"role": "confidential", "type": "text", "required": False},
    "flag": {"role": "confidential", "type": "bool", "required": False},
    "weight": {"role": "weight", "type": "float"},
    "site": {"role": "label", "type": "int"},
    "skip": {"role": "ignore", "required": False},
}
# values of each field, valid and not, that a sender might send
CASES: dict[str, list[Any]] = {
    "rid": ["R1", "", 7, -3, 2**63, 2**64 + 1, 1.5, True, None, "\u00e9\u4e2d", ["R"]],
    "age": [16, 99, 15, 100, 40.0, 40.5, True, None, 2**63, -(2**63) - 1, "40"],
    "income": [0, 1.5, -10, -10.5, 1e100, 1.5e100, None, 2**70, 123456789012345678901, "x"],
    "x": [0.1, -0.0, 1e-320, 1e100, -1e101, 5, True, None, {"a": 1}],
    "gender": ["f", "m", 3, "3", 3.0, "x", True, None, ["f"]],
    "smoker": [True, False, 1, 0, None, "true"],
    "score": [1, 1.0, 10, 10.0, 10.5, -1e308, 1.7e308, 2**63, None, "1"],
    "count": [0, -5, 2**63 - 1, 2**63, 1.0, True, None],
    "note": ["", "a\nb", "\ud7ff", 1, None],
    "flag": [True, False, 0, None],
    "weight": [1, 0.5, 0, 0.0, -1, 1e308, 2**64, True, None],
    "site": [1, -1, 2**63, 1.5, "a", None],
    "skip": [1, "a", 1.5, True, None, [1], 2**70],
}


def validator(schema: dict[str, Any] = SCHEMA, duplicates: str = "reject") -> Validator:
    cfg = parse_config({"surveys": [{"id": "s", "k": 3, "duplicates": duplicates,
                                     "schema": schema}]}, ENV)
    return Validator(cfg.surveys[0], cfg.hmac_key)


def stored(outcome: Validated | Invalid) -> tuple[Any, ...]:
    """What is stored of an outcome (or its reason): the bytes the store keeps."""
    if isinstance(outcome, Invalid):
        return ("invalid", outcome.reason)
    return ("valid", outcome.rid_hash, outcome.qi.tobytes(),
            orjson.dumps(outcome.confidential), outcome.label)


def messages(seed: int, n: int) -> list[bytes | None]:
    """Valid responses with, in most, one or two fields changed to an edge case, left out,
    or an unknown field or a raw-text corruption added."""
    rng = np.random.default_rng(seed)
    good = {"rid": "R", "age": 40, "income": 1.5, "x": 0.25, "gender": "m", "smoker": False,
            "score": 2, "count": 3, "note": "n", "flag": True, "weight": 1.5, "site": 2,
            "skip": "s"}
    out: list[bytes | None] = []
    for i in range(n):
        body: dict[str, Any] = {**good, "rid": f"R{i}", "x": float(rng.normal())}
        for _ in range(int(rng.integers(0, 3))):
            name = list(CASES)[int(rng.integers(len(CASES)))]
            choice = int(rng.integers(len(CASES[name]) + 1))
            if choice == len(CASES[name]):
                body.pop(name, None)
            else:
                body[name] = CASES[name][choice]
        if rng.random() < 0.03:
            body["unknown"] = 1
        raw = json.dumps(body, ensure_ascii=bool(rng.integers(2))).encode("utf-8",
                                                                         "surrogatepass")
        corrupt = rng.random()
        if corrupt < 0.02:
            raw = raw.replace(b'"x": ', b'"x": NaN, "y": ', 1)
        elif corrupt < 0.04:
            raw = raw.replace(b'"age": ', b'"age": 1, "age": ', 1)  # a repeated key: the last
        elif corrupt < 0.05:
            raw = b"\xef\xbb\xbf" + raw
        elif corrupt < 0.06:
            raw = raw[:-1] + b"\xff}"
        elif corrupt < 0.07:
            raw = raw + b" x"
        out.append(raw)
    return [*out, None, b"", b"[]", b"1", b"{", b" \n" + json.dumps(good).encode() + b"\n"]


def test_the_schemas_of_the_service_compile():
    assert compiled_schema(validator().survey, QI_MAX_MAGNITUDE) is not None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_compiled_path_gives_the_per_field_outcome_and_bytes_of_every_message(seed):
    v = validator()
    raws = messages(seed, 600)
    compiled = v.validate_batch(raws)
    by_field = v._validate_dicts(raws)
    outcomes = [stored(o) for o in compiled]
    assert outcomes == [stored(o) for o in by_field]
    assert outcomes == [stored(v._alone(raw)) for raw in raws]
    decoded = 0  # the messages the compiled schema took itself: most of the valid ones
    for raw in raws:
        try:
            v._decode(raw)
        except Exception:  # what msgspec refuses
            continue
        decoded += 1
    assert decoded >= 0.9 * sum(o[0] == "valid" for o in outcomes)
    kinds = {o[0] if o[0] == "valid" else o[1] for o in outcomes}
    # the cases reach every outcome the schema can give
    assert kinds >= {"valid", "invalid_json", "not_an_object", "missing_field",
                     "unexpected_field", "wrong_type", "out_of_bounds", "out_of_levels"}


def test_a_response_the_compiled_schema_refuses_but_the_checks_take_is_stored():
    """Integers beyond 64 bits are refused by the compiled schema: the per-field checks
    take an identifier of 2**63 (orjson reads it as an integer) and store its pseudonym."""
    v = validator()
    raw = json.dumps({"rid": 2**63, "age": 40, "x": 0.5, "gender": "f", "score": 1,
                      "weight": 1, "site": 1}).encode()
    [got] = v.validate_batch([raw])
    assert isinstance(got, Validated) and got.rid_hash == v.pseudonym(str(2**63))


def test_a_schema_with_float_levels_is_checked_field_by_field():
    schema = {"rid": {"role": "identifier"},
              "dose": {"role": "quasi_identifier", "type": "ordinal", "levels": [0.5, 1.0]}}
    v = validator(schema)
    assert compiled_schema(v.survey, QI_MAX_MAGNITUDE) is None
    raws = [b'{"rid": "a", "dose": 0.5}', b'{"rid": "b", "dose": 2.0}']
    assert [stored(o) for o in v.validate_batch(raws)] == [stored(v._alone(r)) for r in raws]
    assert stored(v.validate_batch(raws)[1]) == ("invalid", "out_of_levels")
