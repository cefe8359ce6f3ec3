"""Validation, de-duplication and storage of a batch, without a broker."""

from __future__ import annotations

import json

import numpy as np
import orjson
import pytest

from streamanon.service.config import parse_config
from streamanon.service.ingest import process_batch
from streamanon.service.store import open_store
from streamanon.service.validation import Invalid, Message, Validated, Validator

# the compatibility subset: each test on Apache Kafka and on the embedded broker
pytestmark = pytest.mark.both_brokers

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
    # a later, different answer of the same respondent is a duplicate; the same answer
    # again is a redelivery wherever it was read
    later = process_batch(msgs([body(rid="B", age=60), body(rid="B")], start=10), validator,
                          store, None)
    assert [r.reason for r in later.rejected] == ["duplicate_respondent"]
    assert later.redelivered == 1
    assert store.count("s") == 2
    recs = store.load_records("s", 2)
    assert np.array_equal(recs.qi, [[40.0, 1000.5], [40.0, 1000.5]])


def test_duplicates_allowed_policy(tmp_path):
    _, validator = make("allow")
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    store.ensure_survey("s")
    result = process_batch(msgs([body(), body(age=41), body(age=42)]), validator, store, None)
    assert result.stored == 3 and not result.rejected
    # an identical answer is the same record: stored once (see test_identity_dedup.py)
    again = process_batch(msgs([body(age=41)], start=3), validator, store, None)
    assert again.stored == 0 and again.redelivered == 1 and not again.rejected


def test_messages_after_close_are_rejected_as_closed(tmp_path):
    _, validator = make()
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    store.ensure_survey("s")
    early = Message("t", 0, 0, None, body(rid="A"), 99.0)
    late = Message("t", 0, 1, None, body(rid="B"), 101.0)
    result = process_batch([early, late], validator, store, closed_at=100.0)
    assert result.stored == 1 and [r.reason for r in result.rejected] == ["closed"]


@pytest.mark.parametrize("duplicates,seed", [("reject", 0), ("allow", 1), ("reject", 2)])
def test_batch_validation_gives_the_same_outcome_as_one_by_one(duplicates, seed):
    """The column-wise fast path must agree with the per-message checks on every message:
    it may send a valid message to the closer look, never let a bad one through."""
    _, validator = make(duplicates)
    rng = np.random.default_rng(seed)
    bodies = []
    for i in range(400):
        # every field present (the column path), except where a case removes one
        b = {"rid": f"R{i}", "age": int(rng.integers(10, 120)),
             "income": float(rng.normal(1000, 800)), "vote": "yes", "group": "a", "note": "n"}
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
            del b["note"]
        elif r < 0.16:
            b["income"] = [1]
        elif r < 0.18:
            b["age"] = True
        elif r < 0.20:
            b["age"] = 2**70
        elif r < 0.22:
            del b["income"]
        elif r < 0.24:
            b["income"] = "1"
        elif r < 0.26:
            b["rid"] = 18  # an untyped identifier may be an integer
        elif r < 0.28:
            b["age"] = 15
        elif r < 0.30:
            b["vote"] = {"a": 1}
        elif r < 0.32:
            b["income"] = 1e300
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


# -- every message gets an answer (issue 13) ------------------------------------------------


def outcome_both_ways(validator, raw, good=None):
    """The reason (None: valid) from ``validate`` and from ``validate_batch``, where ``raw``
    sits between two valid responses (``good(rid)``) that take the column-wise path."""
    good = good or (lambda rid: body(rid=rid, note="x"))
    try:
        validator.validate(raw)
        one = None
    except Invalid as exc:
        one = exc.reason
    batch = validator.validate_batch([good("A"), raw, good("B")])
    assert not isinstance(batch[0], Invalid) and not isinstance(batch[2], Invalid)
    return one, batch[1].reason if isinstance(batch[1], Invalid) else None


DEEP = b"[" * 5000 + b"]" * 5000


@pytest.mark.parametrize("raw", [
    DEEP,
    body(note="DEEP").replace(b'"DEEP"', DEEP),
    b'{"a": ' * 5000 + b"1" + b"}" * 5000,
    body(income=1.0).replace(b"1.0", b"NaN, " + b'"x": [' * 3000),  # deep and broken
], ids=["arrays", "in-a-field", "objects", "broken"])
def test_deeply_nested_json_is_dead_lettered_not_raised(raw):
    _, validator = make()
    one, batch = outcome_both_ways(validator, raw)
    assert one in ("invalid_json", "wrong_type", "not_finite") and batch == one


def test_an_unexpected_error_for_one_message_dead_letters_only_that_message(tmp_path,
                                                                             monkeypatch):
    from streamanon.service.validation import REASONS

    _, validator = make()
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    store.ensure_survey("s")
    real = Validator.pseudonym

    def flaky(self, respondent_id):  # on the fast (column) path and the per-message one
        if respondent_id == "BOOM":
            raise RuntimeError("a bug that quotes the value BOOM")
        return real(self, respondent_id)

    monkeypatch.setattr(Validator, "pseudonym", flaky)
    batch = msgs([body(rid="A"), body(rid="BOOM"), body(rid="B", note="x")])
    result = process_batch(batch, validator, store, closed_at=None)
    assert result.stored == 2
    assert [(r.message.offset, r.reason) for r in result.rejected] == [(1, "unprocessable")]
    assert "unprocessable" in REASONS
    assert "BOOM" not in result.rejected[0].detail  # the exception text may carry values


def test_a_record_that_cannot_be_stored_is_dead_lettered_not_raised(tmp_path, monkeypatch):
    _, validator = make()
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    store.ensure_survey("s")
    real_batch, real_one = Validator.validate_batch, Validator.validate

    def spoil(self, rec):
        if isinstance(rec, Validated) and rec.rid_hash == self.pseudonym("BAD"):
            rec.confidential = {"vote": object()}
        return rec

    monkeypatch.setattr(Validator, "validate_batch",
                        lambda self, raws: [spoil(self, r) for r in real_batch(self, raws)])
    monkeypatch.setattr(Validator, "validate", lambda self, raw: spoil(self, real_one(self, raw)))
    result = process_batch(msgs([body(rid="A"), body(rid="BAD"), body(rid="B")]), validator,
                           store, closed_at=None)
    assert result.stored == 2 and store.count("s") == 2
    assert [(r.message.offset, r.reason) for r in result.rejected] == [(1, "unprocessable")]


def typed_identifier(kind):
    schema = {**SCHEMA, "rid": {"role": "identifier", "type": kind}}
    cfg = parse_config({"surveys": [{"id": "s", "k": 3, "schema": schema}]}, ENV)
    return Validator(cfg.surveys[0], cfg.hmac_key)


def test_identifier_of_the_declared_type_only():
    as_str = typed_identifier("str")
    assert outcome_both_ways(as_str, body(rid=18)) == ("wrong_type", "wrong_type")
    assert outcome_both_ways(as_str, body(rid="18")) == (None, None)
    as_int = typed_identifier("int")
    good = lambda rid: body(rid=ord(rid), note="x")  # noqa: E731
    assert outcome_both_ways(as_int, body(rid="R1"), good) == ("wrong_type", "wrong_type")
    assert outcome_both_ways(as_int, body(rid=18), good) == (None, None)
    assert outcome_both_ways(as_int, body(rid=True), good) == ("wrong_type", "wrong_type")


def wide():
    schema = {**SCHEMA, "rooms": {"role": "quasi_identifier", "type": "int"},
              "count": {"role": "confidential", "type": "int", "required": False},
              "share": {"role": "confidential", "type": "float", "required": False}}
    cfg = parse_config({"surveys": [{"id": "s", "k": 3, "schema": schema}]}, ENV)
    return Validator(cfg.surveys[0], cfg.hmac_key)


def wide_body(field, literal, rid="R1"):
    b = {"rid": rid, "age": 40, "income": 1000.5, "vote": "yes", "group": "a", "note": "x",
         "rooms": 3, "count": 1, "share": 0.5}
    return json.dumps({**b, field: "PLACEHOLDER"}).encode().replace(b'"PLACEHOLDER"',
                                                                    literal.encode())


@pytest.mark.parametrize("field,literal,reason", [
    ("income", "1e999", "not_finite"),
    ("income", "-1e999", "not_finite"),
    ("share", "1e999", "not_finite"),
    ("note", "1E400", "not_finite"),
    ("income", "9" * 400, "out_of_bounds"),
    ("share", "-" + "9" * 400, "out_of_bounds"),
    ("note", "9" * 5000, "out_of_bounds"),
    ("count", str(2**63), "out_of_bounds"),
    ("count", str(-(2**63) - 1), "out_of_bounds"),
    ("count", str(2**64 - 1), "out_of_bounds"),  # orjson: still an int
    ("count", str(2**64), "out_of_bounds"),  # orjson: a float
    ("count", "1e19", "out_of_bounds"),
    ("rooms", str(2**63), "out_of_bounds"),
    ("rooms", str(2**70), "out_of_bounds"),
    ("count", str(2**63 - 1), None),
    ("count", str(-(2**63)), None),
    ("share", str(2**64), None),  # a float field holds it
    # a quasi-identifier's square must stay finite, or standardisation yields inf and the
    # release fails at close (one income of 1e200 blocks it)
    ("income", "1e200", "out_of_bounds"),
    ("income", "1" + "0" * 120, "out_of_bounds"),
    ("income", "1e100", None),
    ("share", "1e200", None),  # published unchanged: no arithmetic on it
])
def test_overflowing_numbers_get_their_own_reason(field, literal, reason):
    validator = wide()
    good = lambda rid: wide_body("count", "7", rid)  # noqa: E731
    assert outcome_both_ways(validator, wide_body(field, literal), good) == (reason, reason)


def test_tombstones_and_empty_messages_say_so():
    _, validator = make()
    for raw, word in ((None, "tombstone"), (b"", "empty")):
        with pytest.raises(Invalid) as exc:
            validator.validate(raw)
        assert exc.value.reason == "invalid_json" and word in exc.value.detail
        [got] = validator.validate_batch([raw])
        assert got.reason == "invalid_json" and word in got.detail


def test_detail_escapes_and_bounds_sender_field_names():
    _, validator = make()
    hostile = ["\u202egnp.exe", "x" * 10_000, "tab\there", "nul\x00", "\u2066z\u2069"]
    for names, more in ((hostile, None), (hostile + [f"extra{i}" for i in range(60_000)],
                                          "and 60000 more")):
        raw = orjson.dumps({**json.loads(body()), **dict.fromkeys(names, 1)})
        for outcome in (validator.validate_batch([raw])[0], _raised(validator, raw)):
            assert outcome.reason == "unexpected_field"
            detail = outcome.detail
            assert len(detail) <= 1024
            assert detail.isascii() and detail.isprintable(), detail
            if more is None:  # each name escaped and cut to 64 characters
                assert "x" * 64 in detail and "x" * 65 not in detail
                assert "\\u202e" in detail and "\\u0000" in detail and "\\t" in detail
            else:  # five names shown, then how many more
                assert detail.endswith(more)


def _raised(validator, raw):
    with pytest.raises(Invalid) as exc:
        validator.validate(raw)
    return exc.value


def test_a_message_larger_than_max_message_bytes_is_too_large():
    from streamanon.service.validation import REASONS

    cfg = parse_config({"kafka": {"max_message_bytes": 2048},
                        "surveys": [{"id": "s", "k": 3, "schema": SCHEMA}]}, ENV)
    assert parse_config({"surveys": [{"id": "s", "k": 3, "schema": SCHEMA}]},
                        ENV).kafka.max_message_bytes == 1024 * 1024
    validator = Validator(cfg.surveys[0], cfg.hmac_key,
                          max_message_bytes=cfg.kafka.max_message_bytes)
    big = body(note="n" * 3000)
    assert "too_large" in REASONS
    assert outcome_both_ways(validator, big) == ("too_large", "too_large")
    assert outcome_both_ways(validator, body(note="n" * 1000)) == (None, None)


def test_responses_that_leave_out_an_optional_field_take_the_column_path(monkeypatch):
    """A survey with optional fields gets many responses without them; they are checked
    column-wise like complete ones (before: each went through the per-message checks), with
    the same records as the per-message path gives."""
    _, validator = make()
    raws = [body(rid=f"R{i}") for i in range(50)]  # no "note" (optional)
    expected = [validator.validate(raw) for raw in raws]
    calls = []
    real = Validator._diagnose
    monkeypatch.setattr(Validator, "_diagnose",
                        lambda self, obj: calls.append(obj) or real(self, obj))
    got = validator.validate_batch(raws)
    assert calls == []
    assert [(r.rid_hash, r.qi.tolist(), r.confidential, r.label) for r in got] \
        == [(r.rid_hash, r.qi.tolist(), r.confidential, r.label) for r in expected]


# -- the ingest worker's column path (issue 17: no object per message) ------------------------


def mixed_batch():
    """Valid, invalid, repeated, duplicate-respondent and late messages over two partitions,
    as messages and as the worker's columns; offsets 100 and up are past the close mark."""
    bodies = [body(rid="A"), b"{", body(rid="B"), body(rid="A", age=50), body(rid="C"),
              body(rid="B"), body(age=15, rid="D"), body(rid="E"), body(rid="F")]
    messages = [Message("t", i % 2, (100 if i >= 7 else 0) + i, None, b, None)
                for i, b in enumerate(bodies)]
    columns = ([m.partition for m in messages], [m.offset for m in messages],
               [m.value for m in messages], [m.timestamp for m in messages])
    return messages, columns


def test_the_worker_column_path_gives_what_process_batch_gives(tmp_path, monkeypatch):
    from streamanon.service import ingest
    from streamanon.service.validation import Closure

    _, validator = make()
    closure = Closure(50.0, {0: 100, 1: 100})
    messages, columns = mixed_batch()
    by_messages = open_store(f"sqlite:///{tmp_path / 'a.db'}")
    by_columns = open_store(f"sqlite:///{tmp_path / 'b.db'}")
    for store in (by_messages, by_columns):
        store.ensure_survey("s")
    expected = process_batch(messages, validator, by_messages, closure)
    monkeypatch.setattr(ingest, "_WORKER", {"validators": {"s": validator},
                                            "store": by_columns})
    [got] = ingest._worker_ingest([("s", columns, closure)])
    assert got.stored == expected.stored == 3  # A, B, C
    assert got.redelivered == expected.redelivered == 1  # B again
    assert sorted(got.rejections) == sorted(
        (r.message.partition, r.message.offset, r.reason, r.detail) for r in expected.rejected)
    assert {reason for *_, reason, _ in got.rejections} == {
        "invalid_json", "duplicate_respondent", "out_of_bounds", "closed"}
    a, b = (s.load_records("s", 2) for s in (by_messages, by_columns))
    assert np.array_equal(a.qi, b.qi) and a.confidential == b.confidential
    assert by_columns._q("SELECT kafka_partition, kafka_offset FROM records ORDER BY seq") == [
        (0, 0), (0, 2), (0, 4)]  # A, B, C in the batch's order


def test_check_columns_names_rejections_by_index_late_ones_first():
    from streamanon.service.validation import Closure, check_batch, check_columns

    _, validator = make()
    messages, columns = mixed_batch()
    closure = Closure(50.0, {0: 100, 1: 100})
    rejected, valid, records = check_columns(*columns, validator, closure)
    assert [(i, reason) for i, reason, _ in rejected] == [
        (7, "closed"), (8, "closed"), (1, "invalid_json"), (6, "out_of_bounds")]
    assert valid == [0, 2, 3, 4, 5]
    by_messages, candidates = check_batch(messages, validator, closure)
    assert [(r.message.offset, r.reason) for r in by_messages] == [
        (messages[i].offset, reason) for i, reason, _ in rejected]
    assert [m.offset for m, _ in candidates] == [messages[i].offset for i in valid]
    assert [v.rid_hash for _, v in candidates] == [v.rid_hash for v in records]


def test_consumer_records_become_columns_with_the_broker_time_only():
    from streamanon.service.ingest import LOG_APPEND_TIME, _columns, message_of
    from tests.service.collector.test_collector_faults import Record

    records = [Record("t", 1, 5, None, b"x", 1_500, LOG_APPEND_TIME),
               Record("t", 2, 9, b"k", None, 2_500, 0)]
    assert _columns(records) == ([1, 2], [5, 9], [b"x", None], [1.5, None])
    assert message_of(records[1]) == Message("t", 2, 9, b"k", None, None)
    assert message_of(message_of(records[0])) == Message("t", 1, 5, None, b"x", 1.5)


def test_a_job_in_chunks_is_one_transaction_that_sees_its_earlier_chunks(tmp_path,
                                                                           monkeypatch):
    """The worker validates a chunk while the store thread writes the one before; a
    respondent's second answer or a repeat in a later chunk is still caught."""
    from streamanon.service import ingest

    _, validator = make()
    monkeypatch.setattr(ingest, "WORKER_CHUNK", 3)
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    store.ensure_survey("s")
    bodies = [body(rid=f"R{i}", age=20 + i) for i in range(7)]
    bodies += [body(rid="R1", age=60), body(rid="R2", age=22), b"[]"]  # duplicate, repeat
    columns = ([0] * 10, list(range(10)), bodies, [None] * 10)
    stored, redelivered, rejections = ingest._ingest(validator, store, columns, None)
    assert (stored, redelivered) == (7, 1)
    assert sorted((o, reason) for _, o, reason, _ in rejections) == [
        (7, "duplicate_respondent"), (9, "not_an_object")]
    assert store.load_records("s", 2).qi[:, 0].tolist() == [20.0 + i for i in range(7)]


@pytest.mark.parametrize("where", ["store", "validation"])
def test_a_job_that_fails_in_a_later_chunk_stores_none_of_its_chunks(tmp_path, monkeypatch,
                                                                      where):
    from streamanon.service import ingest
    from streamanon.service.store import StoreUnavailable

    _, validator = make()
    monkeypatch.setattr(ingest, "WORKER_CHUNK", 2)
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    store.ensure_survey("s")
    calls = []
    if where == "store":
        real = type(store).insert_records

        def insert(self, survey, rows):
            calls.append(len(rows))
            if len(calls) == 2:
                raise StoreUnavailable("the disk is full (test)")
            return real(self, survey, rows)

        monkeypatch.setattr(type(store), "insert_records", insert)
        expected = StoreUnavailable
    else:
        real = ingest.prepare_records

        def prepare(survey, records):
            calls.append(len(records))
            if len(calls) == 2:
                raise RuntimeError("a bug in the worker")
            return real(survey, records)

        monkeypatch.setattr(ingest, "prepare_records", prepare)
        expected = RuntimeError
    bodies = [body(rid=f"R{i}", age=20 + i) for i in range(5)]
    with pytest.raises(expected):
        ingest._ingest(validator, store, ([0] * 5, list(range(5)), bodies, [None] * 5), None)
    assert store.count("s") == 0  # the first chunk's rows were rolled back with the rest
    monkeypatch.undo()
    assert ingest._ingest(validator, store, ([0] * 5, list(range(5)), bodies, [None] * 5),
                          None)[0] == 5
