"""Validation, de-duplication and storage of a batch, without a broker."""

from __future__ import annotations

import json

import numpy as np
import pytest

from streamanon.collector import Invalid, Message, Validator, process_batch
from streamanon.config import parse_config
from streamanon.store import open_store

ENV = {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32}
SCHEMA = {
    "rid": {"role": "identifier"},
    "age": {"role": "quasi_identifier", "type": "int", "min": 16, "max": 110},
    "income": {"role": "quasi_identifier", "type": "float", "min": 0},
    "vote": {"role": "confidential", "type": "str"},
    "group": {"role": "label", "type": "str"},
    "note": {"role": "ignore", "required": False},
}


def make(duplicates="reject"):
    cfg = parse_config({"surveys": [{"id": "s", "k": 3, "duplicates": duplicates,
                                     "schema": SCHEMA}]}, ENV)
    return cfg.surveys[0], Validator(cfg.surveys[0], cfg.hmac_key)


def body(**over):
    b = {"rid": "R1", "age": 40, "income": 1000.5, "vote": "yes", "group": "a"}
    b.update(over)
    return json.dumps(b).encode()


@pytest.mark.parametrize("raw,reason", [
    (b"{", "invalid_json"),
    (b"\xff\xfe", "invalid_json"),
    (b'"text"', "not_an_object"),
    (body(age=None), "missing_field"),
    (json.dumps({"rid": "R1", "income": 1.0, "vote": "y", "group": "a"}).encode(),
     "missing_field"),
    (body(extra=1), "unexpected_field"),
    (body(age=40.5), "wrong_type"),
    (body(age=True), "wrong_type"),
    (body(income="1"), "wrong_type"),
    (body(vote=3), "wrong_type"),
    (body(rid=""), "wrong_type"),
    (body(income=1.0).replace(b"1.0", b"NaN"), "not_finite"),
    (body(income=1.0).replace(b"1.0", b"-Infinity"), "not_finite"),
    (body(age=15), "out_of_bounds"),
    (body(income=-0.01), "out_of_bounds"),
])
def test_each_bad_response_gets_its_reason(raw, reason):
    _, validator = make()
    with pytest.raises(Invalid) as exc:
        validator.validate(raw)
    assert exc.value.reason == reason
    assert "R1" not in exc.value.detail and "40" not in exc.value.detail  # no values


def test_valid_response_keeps_no_identifier():
    _, validator = make()
    rec = validator.validate(body(note="free text"))
    assert rec.qi.tolist() == [40.0, 1000.5]
    assert rec.confidential == {"vote": "yes"} and rec.label == "a"
    assert len(rec.rid_hash) == 16 and b"R1" not in rec.rid_hash
    assert rec.rid_hash == validator.pseudonym("R1")
    assert make()[1].pseudonym("R1") == rec.rid_hash  # same key, same pseudonym


def msgs(bodies, start=0):
    return [Message("t", 0, start + i, None, b, 100.0) for i, b in enumerate(bodies)]


def test_batch_stores_valid_rejects_invalid_and_duplicates(tmp_path):
    _, validator = make()
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    store.ensure_survey("s")
    batch = msgs([body(rid="A"), b"{", body(rid="B"), body(rid="A", age=50)])
    result = process_batch(batch, validator, store, closed_at=None, now=5.0)
    assert result.stored == 2
    assert [(r.message.offset, r.reason) for r in result.rejected] == [
        (1, "invalid_json"), (3, "duplicate_respondent")]
    # redelivery of the same messages stores nothing twice, and is not a duplicate
    again = process_batch(batch, validator, store, closed_at=None, now=6.0)
    assert again.stored == 0 and again.redelivered == 2
    assert [r.reason for r in again.rejected] == ["invalid_json", "duplicate_respondent"]
    # a later answer of the same respondent is a duplicate
    later = process_batch(msgs([body(rid="B")], start=10), validator, store, None)
    assert [r.reason for r in later.rejected] == ["duplicate_respondent"]
    assert store.count("s") == 2
    recs = store.load_records("s", 2)
    assert np.array_equal(recs.qi, [[40.0, 1000.5], [40.0, 1000.5]])


def test_duplicates_allowed_policy(tmp_path):
    _, validator = make("allow")
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    store.ensure_survey("s")
    result = process_batch(msgs([body(), body(), body()]), validator, store, None)
    assert result.stored == 3 and not result.rejected


def test_messages_after_close_are_rejected_as_closed(tmp_path):
    _, validator = make()
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    store.ensure_survey("s")
    early = Message("t", 0, 0, None, body(rid="A"), 99.0)
    late = Message("t", 0, 1, None, body(rid="B"), 101.0)
    result = process_batch([early, late], validator, store, closed_at=100.0)
    assert result.stored == 1 and [r.reason for r in result.rejected] == ["closed"]


@pytest.mark.parametrize("duplicates", ["reject", "allow"])
def test_batch_validation_gives_the_same_outcome_as_one_by_one(duplicates):
    """The column-wise fast path must agree with the per-message checks on every message."""
    _, validator = make(duplicates)
    rng = np.random.default_rng(0)
    bodies = []
    for i in range(400):
        b = {"rid": f"R{i}", "age": int(rng.integers(10, 120)),
             "income": float(rng.normal(1000, 800)), "vote": "yes", "group": "a"}
        r = rng.random()
        if r < 0.05:
            b["age"] = float(b["age"]) + 0.5
        elif r < 0.08:
            b["vote"] = 3
        elif r < 0.1:
            b["rid"] = ""
        elif r < 0.12:
            b["group"] = None
        elif r < 0.14:
            b["note"] = "x"
        elif r < 0.16:
            b["income"] = [1]
        raw = json.dumps(b).encode()
        if rng.random() < 0.03:
            raw = raw.replace(b'"income": ', b'"income": NaN, "_": ')
        bodies.append(raw)
    bodies += [b"{", b"[]", b"", None]
    batch = validator.validate_batch(bodies)
    for raw, got in zip(bodies, batch, strict=True):
        try:
            expected = validator.validate(raw)
        except Invalid as exc:
            assert isinstance(got, Invalid) and got.reason == exc.reason, raw
            continue
        assert not isinstance(got, Invalid), (raw, got)
        assert got.rid_hash == expected.rid_hash and np.array_equal(got.qi, expected.qi)
        assert got.confidential == expected.confidential and got.label == expected.label


def test_pseudonym_is_standard_hmac_sha256_truncated():
    import hashlib
    import hmac

    for key in (b"k" * 32, b"x" * 100):
        cfg = parse_config({"surveys": [{"id": "s", "k": 3, "schema": SCHEMA}]},
                           {**ENV, "STREAMANON_HMAC_KEY": key.decode()})
        validator = Validator(cfg.surveys[0], cfg.hmac_key)
        for rid in ("R1", "é-ü", "12345"):
            expected = hmac.new(key, rid.encode(), hashlib.sha256).digest()[:16]
            assert validator.pseudonym(rid) == expected
